"""Reporters: turn analysis results into text for people or JSON for machines.

Each reporter is a module with a ``render(traces) -> str`` function and one entry in
``REPORTERS``; the CLI offers exactly the keys of that table as ``--format`` choices, so a new
reporter (SARIF, HTML) is a module plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamrace.report import json_report, text

if TYPE_CHECKING:  # reporters only read results: no need to import the engine at run time
    from streamrace.analysis import AnalysisResult
    from streamrace.trace import Trace


@dataclass(frozen=True)
class TraceResult:
    """The analysis of one trace file, with the path the user named it by."""

    path: str
    result: AnalysisResult


Reporter = Callable[[Sequence[TraceResult]], str]

REPORTERS: dict[str, Reporter] = {"text": text.render, "json": json_report.render}


def render(result: AnalysisResult, format: str = "text", trace: Trace | None = None) -> str:
    """One analysed trace, reported as ``streamrace analyze --format FORMAT`` would.

    For callers that hold a result rather than a file (``streamrace.watch()`` sessions);
    ``trace`` only supplies the path the report names.
    """
    reporter = REPORTERS.get(format)
    if reporter is None:
        raise ValueError(f"unknown report format {format!r}; choose from {', '.join(REPORTERS)}")
    path = trace.path if trace is not None else "<memory>"
    return reporter([TraceResult(path, result)])


__all__ = ["REPORTERS", "Reporter", "TraceResult", "render"]
