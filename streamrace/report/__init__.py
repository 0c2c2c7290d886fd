"""Reporters: turn analysis results into text for people, JSON or SARIF for machines.

Each reporter is a module with a ``render(traces, options) -> str`` function and one entry in
``REPORTERS``; the CLI offers exactly the keys of that table as ``--format`` choices, so a new
reporter (HTML) is a module plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamrace.report import json_report, sarif, text
from streamrace.report.options import DEFAULT, ReportOptions

if TYPE_CHECKING:  # reporters only read results: no need to import the engine at run time
    from streamrace.analysis import AnalysisResult
    from streamrace.suppressions import Suppressed
    from streamrace.trace import Trace


@dataclass(frozen=True)
class TraceResult:
    """The analysis of one trace file, with the path the user named it by.

    ``suppressed``: findings a CI gate accepted (suppressions, a baseline); they are no
    longer in ``result.findings`` (``streamrace.suppressions.Gate.apply``).
    """

    path: str
    result: AnalysisResult
    suppressed: tuple[Suppressed, ...] = ()


Reporter = Callable[[Sequence[TraceResult], ReportOptions], str]

REPORTERS: dict[str, Reporter] = {"text": text.render, "json": json_report.render, "sarif": sarif.render}


def render(
    result: AnalysisResult, format: str = "text", trace: Trace | None = None, options: ReportOptions = DEFAULT
) -> str:
    """One analysed trace, reported as ``streamrace analyze --format FORMAT`` would.

    For callers that hold a result rather than a file (``streamrace.watch()`` sessions);
    ``trace`` only supplies the path the report names.
    """
    reporter = REPORTERS.get(format)
    if reporter is None:
        raise ValueError(f"unknown report format {format!r}; choose from {', '.join(REPORTERS)}")
    path = trace.path if trace is not None else "<memory>"
    return reporter([TraceResult(path, result)], options)


__all__ = ["REPORTERS", "ReportOptions", "Reporter", "TraceResult", "render"]
