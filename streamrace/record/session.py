"""``streamrace.watch()``: record every capture inside a ``with`` block, then analyse it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from streamrace.analysis import AnalysisResult, analyze
from streamrace.analysis.findings import Finding
from streamrace.record.facts import process_facts
from streamrace.record.recorder import Recorder
from streamrace.trace.io import Trace, make_header, write_trace


def build_trace(recorder: Recorder, since: int = 0) -> Trace:
    """The recorder's events (from seq ``since``) as a trace, with a header describing this
    process and machine."""
    from streamrace import __version__

    header = make_header(streamrace=__version__, **process_facts())
    events = recorder.trace_events(since)
    header["recorder_errors"] = list(recorder.errors)
    header["hooks"] = recorder.hooks_kind
    if recorder.native_unavailable is not None:
        header["native_hooks_unavailable"] = recorder.native_unavailable
    header["allocations_dropped"] = recorder.dropped_allocations
    header["kernel_nodes"] = asdict(recorder.kernel_stats)
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    return Trace(header=header, events=events, stacks=stacks)


class Session:
    """What one ``watch()`` recorded; the analysis runs when the block ends."""

    def __init__(self, recorder: Recorder, path: str | None, since: int = 0, owned: bool = True) -> None:
        self.recorder = recorder
        self.path = path
        self._since = since  # a nested session sees the process recorder's events from here
        self._owned = owned
        self.trace: Trace | None = None
        self.result: AnalysisResult | None = None

    @property
    def findings(self) -> list[Finding]:
        return self.result.findings if self.result is not None else []

    @property
    def errors(self) -> list[str]:
        """Failures of the recorder itself (the user's program was not affected)."""
        return list(self.recorder.errors)

    def report(self, format: str = "text") -> str:
        """The report as ``analyze`` prints it (``format``: "text" or "json")."""
        if self.result is None or self.trace is None:
            raise RuntimeError("the watch() block has not ended yet")
        from streamrace.report import REPORTERS, ReportOptions, TraceResult

        return REPORTERS[format]([TraceResult(self.path or "<watch>", self.result)], ReportOptions())

    def _finish(self) -> None:
        if self._owned:
            self.recorder.stop()
        self.trace = build_trace(self.recorder, self._since)
        if self.path:
            write_trace(self.path, self.trace.header, self.trace.events)
            self.trace.path = self.path
        from streamrace.report.sources import source_reader

        self.result = analyze(self.trace, sources=source_reader(self.trace.header))


@contextmanager
def watch(trace: str | os.PathLike[str] | None = None, *, eager_ops: bool = False, **options: Any) -> Iterator[Session]:
    """Record the CUDA graph captures made inside the block and analyse them at its end.

    ``trace``: also write the trace there (``.gz`` compresses). ``eager_ops``: record ops
    outside captures too. The block's own exceptions propagate unchanged, after recording.
    """
    path = os.fspath(trace) if trace is not None else None
    running = Recorder.active()
    if running is not None:
        # The whole process is being recorded (STREAMRACE=1, `streamrace run`): this block
        # gets its own view of that recording instead of a second set of hooks.
        session = Session(running, path, since=running.position(), owned=False)
    else:
        recorder = Recorder(eager_ops=eager_ops, **options)
        session = Session(recorder, path)
        recorder.start()
    try:
        yield session
    finally:
        session._finish()
