"""Reporters: turn analysis results into text for people, JSON or SARIF for machines.

Each reporter is a module with a ``render(traces, options) -> str`` function and one entry in
``REPORTER_MODULES``; the CLI offers exactly the keys of that table as ``--format`` choices, so
a new reporter (HTML) is a module plus one line here. A reporter module is imported when its
format is first used: ``streamrace --help`` and the parser need only the names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

REPORTER_MODULES: dict[str, str] = {
    "text": "streamrace.report.text",
    "json": "streamrace.report.json_report",
    "sarif": "streamrace.report.sarif",
}


class _Reporters(Mapping[str, Reporter]):
    """format -> its module's ``render``, the module imported on first use."""

    def __getitem__(self, format: str) -> Reporter:
        return importlib.import_module(REPORTER_MODULES[format]).render

    def __iter__(self) -> Iterator[str]:
        return iter(REPORTER_MODULES)

    def __len__(self) -> int:
        return len(REPORTER_MODULES)


REPORTERS: Mapping[str, Reporter] = _Reporters()


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


__all__ = ["REPORTERS", "REPORTER_MODULES", "ReportOptions", "Reporter", "TraceResult", "render"]
