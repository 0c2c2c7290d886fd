"""Library calls: which of torch's own entry points the recorded work happened inside.

Some of torch's entry points do GPU work of their own on the program's streams, as part of a
protocol the program never sees (docs/library-protocols.md). ``CUDAGraph.capture_begin`` runs
each registered generator state's capture prologue: it allocates the state's seed and offset
tensors at its first graph and fills them on the capture stream, before the capture starts.
``CUDAGraph.replay`` runs the replay prologue, the same fills on the replay stream.
``register_generator_state`` registers (and may allocate) a state; ``reset`` frees a state's
tensors once its last graph is gone. A finding about that work is about torch's protocol, not
the program's code: the analysis sets it aside by the shipped list of library protocols.

Inductor's cudagraph trees own the graphs they record (``CUDAGraphNode._record``): before
every replay they check each static input's address against the recorded one and re-record
or fall back to eager when it moved, so a recorded input the generated code frees during
the capture is never read through a stale address.

So those methods are wrapped while recording, and each call that recorded anything is a
``library_call`` event after it: ``call`` names the entry point, and the events from seq
``first`` up to the library_call's own were made inside it. A call that recorded nothing (a
replay of a graph that draws no random numbers: the common case) writes no event.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from streamrace.record import installation
from streamrace.record.installation import MethodPatch, active

if TYPE_CHECKING:
    from streamrace.record.cuda_runtime import CudaRuntime
    from streamrace.record.event_log import EventLog

# (method of CUDAGraph, the name the trace gives the call); the last two only when the whole
# program is recorded (they do their work outside captures).
_ALWAYS = (
    ("capture_begin", "CUDAGraph.capture_begin"),
    ("register_generator_state", "CUDAGraph.register_generator_state"),
)
_PROGRAM = (("replay", "CUDAGraph.replay"), ("reset", "CUDAGraph.reset"))
# (module, class, method, name): wrapped when recording starts, or at a later capture's begin,
# once the program imported them (importing inductor here would cost the program seconds); a
# call that is running when its wrapper goes in is not marked.
_LATER = (("torch._inductor.cudagraph_trees", "CUDAGraphNode", "_record", "cudagraph_trees.CUDAGraphNode._record"),)


class LibraryCalls:
    """The recorder's part that marks the work done inside torch's own entry points: it needs
    the event log (the seqs, and the events it writes), the runtime's CUDAGraph class, and
    whether replays are recorded at all."""

    def __init__(self, log: EventLog, runtime: CudaRuntime, capture_only: bool) -> None:
        self._log = log
        self._runtime = runtime
        self._capture_only = capture_only

    def patches(self) -> list[MethodPatch]:
        """Installed before the other parts' patches: each wrapper is innermost, around torch's
        own method alone, so a call's range holds only what the call did."""
        graph_class = self._runtime.graph_class
        calls = _ALWAYS if self._capture_only else _ALWAYS + _PROGRAM
        return [MethodPatch(graph_class, method, _wrap(name)) for method, name in calls if hasattr(graph_class, method)]

    @staticmethod
    def install_later() -> None:
        """Wrap the library methods of modules the program has imported by now (a capture is
        beginning), until the recording ends."""
        for module_name, class_name, method, name in _LATER:
            owner = getattr(sys.modules.get(module_name), class_name, None)
            if owner is not None and hasattr(owner, method) and not installation.patched(owner, method):
                installation.patch(MethodPatch(owner, method, _wrap(name)))

    def position(self) -> int:
        return self._log.position()

    def ended(self, name: str, first: int) -> None:
        if self._log.position() > first:
            self._log.emit("library_call", call=name, first=first)


def _wrap(name: str) -> Any:
    def wrap(original: Any) -> Any:
        def library_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = active()
            first = None
            if rec is not None:
                try:
                    first = rec.library_calls.position()
                except Exception as exc:
                    rec.log.fail("library call", exc)
            try:
                return original(self, *args, **kwargs)
            finally:
                if rec is not None and first is not None:
                    try:
                        rec.library_calls.ended(name, first)
                    except Exception as exc:
                        rec.log.fail("library call", exc)

        library_call.__name__ = original.__name__
        library_call.__qualname__ = getattr(original, "__qualname__", original.__name__)
        library_call.__doc__ = original.__doc__
        return library_call

    return wrap
