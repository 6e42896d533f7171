"""User-facing errors: one line naming the file/line/field and what was expected."""


class WorkbenchError(Exception):
    """Any error caused by the user's input; the CLI prints it on one line and exits 2."""


class InputError(WorkbenchError):
    """Bad input in a file: says where (file, line, column) and what was expected."""

    def __init__(self, what: str, *, file: str | None = None, line: int | None = None,
                 column: str | None = None) -> None:
        self.file, self.line, self.column, self.what = file, line, column, what
        where = ":".join(str(p) for p in (file, line) if p is not None)
        col = f"column '{column}': " if column else ""
        super().__init__(f"{where + ': ' if where else ''}{col}{what}")


class ConfigError(WorkbenchError):
    """A bad option or configuration value."""
