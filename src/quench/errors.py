"""Errors that name the input and what is wrong with it; the CLI turns them into exit code 2."""


class QuenchError(Exception):
    """A user-facing error: bad input, a missing file or package, an invalid configuration."""


class InputFileError(QuenchError):
    """A malformed input file, reported as `file:line: reason`."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason
