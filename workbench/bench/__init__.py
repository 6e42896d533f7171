"""`workbench bench NAME`: each module has `register(subparsers)`; all accept `--json`."""
