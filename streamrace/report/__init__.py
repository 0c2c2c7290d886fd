"""Reporters: turn analysis results into text for people, JSON or SARIF for machines, and
pictures (an HTML timeline, a Perfetto trace) of where the findings are in the trace.

Each reporter is a module with a ``render(traces, options) -> str`` function and one entry in
``REPORTER_MODULES``; the CLI offers exactly the keys of that table as ``--format`` choices, so
a new reporter is a module plus one line here. The visual reporters (``DRAWN``) draw the
trace's events too: their results carry its ``Timeline`` (streamrace/report/timeline.py).

This package's own module is light on purpose: the command line builds its parser (and
prints ``--help``) from the format names and ``STACK_DEPTH`` alone. A reporter module is
imported when its format is first used, and ``TraceResult`` (results.py), ``ReportOptions``
and ``DEFAULT`` (options.py) when they are first named.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/performance.md, start-up)
if TYPE_CHECKING:  # reporters only read results: no need to import the engine at run time
    from streamrace.analysis import AnalysisResult
    from streamrace.report.options import ReportOptions
    from streamrace.report.results import TraceResult
    from streamrace.trace import Trace

STACK_DEPTH = 3  # frames shown per stack in the text report, the source line's own included

Reporter = Callable[["Sequence[TraceResult]", "ReportOptions"], str]

REPORTER_MODULES: dict[str, str] = {
    "text": "streamrace.report.text",
    "json": "streamrace.report.json_report",
    "sarif": "streamrace.report.sarif",
    "html": "streamrace.report.html",
    "perfetto": "streamrace.report.perfetto",
}
DRAWN = frozenset({"html", "perfetto"})  # formats that need the trace's timeline, not only its findings


class _Reporters(Mapping[str, Reporter]):
    """format -> its module's ``render``, the module imported on first use."""

    def __getitem__(self, format: str) -> Reporter:
        return importlib.import_module(REPORTER_MODULES[format]).render

    def __iter__(self) -> Iterator[str]:
        return iter(REPORTER_MODULES)

    def __len__(self) -> int:
        return len(REPORTER_MODULES)


REPORTERS: Mapping[str, Reporter] = _Reporters()


_LAZY = {
    "TraceResult": "streamrace.report.results",
    "ReportOptions": "streamrace.report.options",
    "DEFAULT": "streamrace.report.options",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamrace.report' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def render(
    result: AnalysisResult, format: str = "text", trace: Trace | None = None, options: ReportOptions | None = None
) -> str:
    """One analysed trace, reported as ``streamrace analyze --format FORMAT`` would.

    For callers that hold a result rather than a file (``streamrace.watch()`` sessions);
    ``trace`` supplies the path the report names and, for ``html`` and ``perfetto``, the
    events they draw (required there); ``options`` defaults to ``DEFAULT``.
    """
    from streamrace.report.options import DEFAULT
    from streamrace.report.results import TraceResult, recorded_workdir

    reporter = REPORTERS.get(format)
    if reporter is None:
        raise ValueError(f"unknown report format {format!r}; choose from {', '.join(REPORTERS)}")
    path = trace.path if trace is not None else "<memory>"
    timeline = None
    if format in DRAWN:
        if trace is None:
            raise ValueError(f"the {format} report draws the trace's events: pass trace=")
        from streamrace.report.timeline import build_timeline

        timeline = build_timeline(trace.events, trace.stacks)
    workdir = recorded_workdir(trace.header) if trace is not None else None
    return reporter([TraceResult(path, result, workdir=workdir, timeline=timeline)], options or DEFAULT)


__all__ = [
    "DEFAULT",
    "DRAWN",
    "REPORTERS",
    "REPORTER_MODULES",
    "STACK_DEPTH",
    "ReportOptions",
    "Reporter",
    "TraceResult",
    "render",
]
