"""User-facing errors: one line naming file, line and key."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in a suite, threshold file or option; printed as one line, never as a traceback."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.key = key

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        key = f"{self.key}: " if self.key else ""
        text = f"{where}{key}{self.message}"
        return text.replace("\r", "\\r").replace("\n", "\\n")  # always one line, whatever a key holds
