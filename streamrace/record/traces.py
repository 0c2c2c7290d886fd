"""A recording as a trace: its header, its events in memory, or its file finished.

What ``streamrace.watch()`` (streamrace/session.py), the process-wide recording
(autostart.py) and the tests make of a Recorder; the recorder imports neither the analysis
nor the reporters."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from streamrace.record.facts import process_facts
from streamrace.record.recorder import Recorder
from streamrace.trace.io import Trace, make_header


def trace_header(recorder: Recorder) -> dict[str, Any]:
    """The header of the recorder's trace: this process and machine, and what the recording
    saw of itself (its errors, the allocations it left out, replays it could not record). The
    recorder's events must have been settled (``Recorder.settle``), since that can fail too."""
    from streamrace import __version__

    header = make_header(streamrace=__version__, **process_facts())
    header["recording"] = recorder.recording
    header["recorder_errors"] = list(recorder.errors)
    header["hooks"] = recorder.hooks_kind
    if recorder.native_unavailable is not None:
        header["native_hooks_unavailable"] = recorder.native_unavailable
    if recorder.no_cuda is not None:
        header["no_cuda"] = recorder.no_cuda
    header["allocations_dropped"] = recorder.dropped_allocations
    header["kernel_nodes"] = asdict(recorder.kernel_stats)
    header["app_pools"] = recorder.app_pools.count
    # 1.5: pinned host memory recorded (the Python hooks, the whole program); false: not looked at
    header["host_memory"] = recorder.host_memory is not None
    header["index_ops"] = recorder.log.index_ops
    header["views"] = recorder.log.views
    header["host_events"] = recorder.log.host_events
    if not recorder.capture_only:
        header["replays_unrecorded"] = recorder.replays.unrecorded
        header["replays_in_capture"] = recorder.replays.in_capture
    return header


def build_trace(recorder: Recorder, since: int = 0) -> Trace:
    """The recorder's events in memory (from seq ``since``) as a trace, with its header."""
    events = recorder.trace_events(since)
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    return Trace(header=trace_header(recorder), events=events, stacks=stacks)


def finish_trace(recorder: Recorder) -> str:
    """Finish the trace file of a recorder that writes it as the program runs (a stopped one,
    with a ``trace`` path): the final header, then every event. Its path."""
    recorder.output.landed()  # the last chunk's failure, if any, is in the header's errors
    recorder.settle()
    recorder.output.finish(trace_header(recorder))
    assert recorder.output.path is not None
    return recorder.output.path
