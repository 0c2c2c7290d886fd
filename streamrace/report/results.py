"""What a reporter is given: one analysed trace, with the path the user named it by."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/performance.md, start-up)
if TYPE_CHECKING:
    from streamrace.analysis import AnalysisResult
    from streamrace.suppressions import Suppressed


@dataclass(frozen=True)
class TraceResult:
    """The analysis of one trace file, with the path the user named it by.

    ``suppressed``: findings a CI gate accepted (suppressions, a baseline); they are no
    longer in ``result.findings`` (``streamrace.suppressions.Gate.apply``).
    """

    path: str
    result: AnalysisResult
    suppressed: tuple[Suppressed, ...] = ()
