"""The seams between the recorder's parts: what each part may ask of the recording it is part of.

A part (captures.py, replays.py, trace_output.py, unseen_launches.py, triton_launches.py) is
handed a weak proxy of the Recorder (so that no part keeps its recording alive: a reference
cycle would keep every event of it until the cyclic GC ran), typed as the narrow protocol it
declares on top of ``RecordingSeam`` here, so the type checker holds it to what it uses and no
part imports recorder.py: the parts of ``record/`` import no circle
(tests/test_record_layers.py). Everything here is a protocol the Recorder meets as it is. A
proxy is not the Recorder: a part tells recordings apart by what they own (their ``log``),
never by identity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from streamrace.record.cuda_runtime import CudaRuntime
    from streamrace.record.event_log import EventLog
    from streamrace.record.hooks import Hooks


class RecordingSeam(Protocol):
    """What every part may use: the event sink, the CUDA runtime, the hooks once recording has
    started, and a device's current stream (which the hooks then know)."""

    @property
    def log(self) -> EventLog: ...

    @property
    def runtime(self) -> CudaRuntime: ...

    @property
    def started_hooks(self) -> Hooks: ...

    def current_stream(self, device: int) -> int: ...


class EventFlush(Protocol):
    """The trace output's side of an event the recorder controls (a replay, a capture's end)."""

    def after_event(self, seq: int) -> None: ...
