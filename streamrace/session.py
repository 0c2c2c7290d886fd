"""``streamrace.watch()``: record the program inside a ``with`` block, then analyse it.

It stands beside the command line, above the recorder, the analysis and the reporters, which
it joins: the recorder (streamrace/record/) makes the trace and knows nothing of what reads it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streamrace.analysis import AnalysisResult, analyze
from streamrace.analysis.findings import Finding
from streamrace.record.recorder import Recorder
from streamrace.record.traces import build_trace, finish_trace
from streamrace.trace.io import Trace, iter_trace, load_trace, write_trace


class Session:
    """What one ``watch()`` recorded; the analysis runs when the block ends."""

    def __init__(self, recorder: Recorder, path: str | None, since: int = 0, owned: bool = True) -> None:
        self.recorder = recorder
        self.path = path
        self._since = since  # a nested session sees the process recorder's events from here
        self._owned = owned
        # A view of a recording that flushes its events keeps them in memory from its start.
        self._hold = recorder.output.hold(since) if not owned else None
        self._trace: Trace | None = None
        self._in_file = False  # the trace is in the file only (written as the program ran)
        self.result: AnalysisResult | None = None

    @property
    def trace(self) -> Trace | None:
        """The recorded trace, once the block has ended. A recording written to its file as
        the program ran is read back from it on first use (the whole trace, in memory)."""
        if self._trace is None and self._in_file and self.path is not None:
            self._trace = load_trace(self.path)
        return self._trace

    @trace.setter
    def trace(self, trace: Trace | None) -> None:
        self._trace = trace

    @property
    def findings(self) -> list[Finding]:
        return self.result.findings if self.result is not None else []

    @property
    def errors(self) -> list[str]:
        """Failures of the recorder itself (the user's program was not affected)."""
        return list(self.recorder.errors)

    def report(self, format: str = "text") -> str:
        """The report as ``analyze`` prints it (``format``: "text", "json", "sarif", "html"
        or "perfetto")."""
        if self.result is None:
            raise RuntimeError("the watch() block has not ended yet")
        from streamrace.report import DRAWN, REPORTERS, ReportOptions, TraceResult, render

        if format in DRAWN:  # these draw the trace's events too (a file's is read back for them)
            trace = self.trace
            if trace is not None:
                return render(self.result, format, trace)
        return REPORTERS[format]([TraceResult(self.path or "<watch>", self.result)], ReportOptions())

    def _finish(self) -> None:
        from streamrace.report.sources import source_reader

        if self._owned:
            self.recorder.stop()
        if self._owned and self.recorder.output.incremental:
            path = finish_trace(self.recorder)
            self._in_file = True
            events = iter_trace(path)  # streaming: never the whole trace
            header = next(events)
            self.result = analyze(header, events, sources=source_reader(header))
            return
        try:
            trace = self._trace = build_trace(self.recorder, self._since)
        finally:
            if self._hold is not None:
                self.recorder.output.release(self._hold)
        if self.path:
            write_trace(self.path, trace.header, trace.events)
            trace.path = self.path
        self.result = analyze(trace, sources=source_reader(trace.header))


@contextmanager
def watch(
    trace: str | os.PathLike[str] | None = None,
    *,
    capture_only: bool = False,
    eager_ops: bool | None = None,
    **options: Any,
) -> Iterator[Session]:
    """Record the program inside the block (its captures, replays and eager work) and analyse
    it at the block's end.

    ``trace``: also write the trace there (``.gz`` compresses), as the program runs, so a long
    block keeps bounded memory (docs/recording.md). ``capture_only``: record the captures
    alone, as streamrace did before it recorded the whole program. ``eager_ops`` is accepted
    and ignored (eager ops are recorded by default). The block's own exceptions propagate
    unchanged, after recording.
    """
    del eager_ops  # it asked for eager ops, which are now recorded unless capture_only
    path = os.fspath(trace) if trace is not None else None
    running = Recorder.active()
    if running is not None:
        # The whole process is being recorded (STREAMRACE=1, `streamrace run`): this block
        # gets its own view of that recording instead of a second set of hooks.
        session = Session(running, path, since=running.position(), owned=False)
    else:
        recorder = Recorder(capture_only=capture_only, trace=path, **options)
        session = Session(recorder, path)
        recorder.start()
    try:
        yield session
    finally:
        session._finish()
