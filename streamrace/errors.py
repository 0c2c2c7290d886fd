"""Errors that reach the user as one clear line (and exit code 2), never a traceback."""

from __future__ import annotations


class StreamraceError(Exception):
    """Base of every error streamrace reports to the user as a single line."""


class TraceError(StreamraceError):
    """A trace file that cannot be read: names the file, the line and the problem."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[type[TraceError], tuple[str, int | None, str]]:
        # pickled by its fields, not its message: a worker of analyze --jobs raises it
        return (TraceError, (self.path, self.line, self.problem))


class UsageError(StreamraceError):
    """A wrong flag, a missing file, a bad combination of options."""


class TraceLimitError(StreamraceError):
    """A trace that loads but holds what no recording can: a byte range or an allocation
    outside the address space the analysis covers (docs/analysis.md §3)."""
