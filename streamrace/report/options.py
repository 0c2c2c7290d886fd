"""What a reporter may be asked besides the results: styling, width, stack depth and source roots.

Machine formats (JSON, SARIF) take the same options and ignore them: their output never
depends on the terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streamrace.report import STACK_DEPTH

Style = Callable[[str, str], str]
"""``style(text, role) -> text``. Roles: heading, error, warning, kind, hazard, op, stream,
location, source, label, text, fix, code, dim, note."""


def plain(text: str, role: str) -> str:
    """No styling: the text as it is, whatever its role."""
    return text


WIDTH = 100  # prose (messages, fixes) wraps here when the terminal does not say otherwise


@dataclass(frozen=True)
class ReportOptions:
    style: Style = plain
    width: int = WIDTH
    stack_depth: int | None = STACK_DEPTH  # None: every frame
    # where the text report may read source lines (streamrace/report/sources.py); () means
    # the current directory
    source_roots: tuple[str, ...] = ()
    # findings about a library's own protocol (analysis/library_protocols.py): "hide" (a note
    # says how many), "show" (listed apart), "fail" (counted with the program's, by the front end)
    library: str = "hide"


DEFAULT = ReportOptions()
