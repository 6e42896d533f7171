"""`workbench` subcommands: each module has `register(subparsers)` setting `func`."""
