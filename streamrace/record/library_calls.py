"""Library calls: which of torch's own entry points the recorded work happened inside.

Some of torch's entry points do GPU work of their own on the program's streams, as part of a
protocol the program never sees (docs/library-protocols.md). ``CUDAGraph.capture_begin`` runs
each registered generator state's capture prologue: it allocates the state's seed and offset
tensors at its first graph and fills them on the capture stream, before the capture starts.
``CUDAGraph.replay`` runs the replay prologue, the same fills on the replay stream.
``register_generator_state`` registers (and may allocate) a state; ``reset`` frees a state's
tensors once its last graph is gone. A finding about that work is about torch's protocol, not
the program's code: the analysis sets it aside by the shipped list of library protocols.

So those methods are wrapped while recording, and each call that recorded anything is a
``library_call`` event after it: ``call`` names the entry point, and the events from seq
``first`` up to the library_call's own were made inside it. A call that recorded nothing (a
replay of a graph that draws no random numbers: the common case) writes no event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamrace.record.installation import MethodPatch, active

if TYPE_CHECKING:
    from streamrace.record.recorder import Recorder

# (method of CUDAGraph, the name the trace gives the call); the last two only when the whole
# program is recorded (they do their work outside captures).
_ALWAYS = (("capture_begin", "CUDAGraph.capture_begin"), ("register_generator_state", "CUDAGraph.register_generator_state"))
_PROGRAM = (("replay", "CUDAGraph.replay"), ("reset", "CUDAGraph.reset"))


class LibraryCalls:
    """The recorder's part that marks the work done inside torch's own entry points."""

    def __init__(self, recorder: Recorder) -> None:
        self._rec = recorder

    def patches(self) -> list[MethodPatch]:
        """Installed after the other parts' patches, so each wrapper is outermost and the range
        covers the events those parts emit for the same call."""
        graph_class = self._rec.runtime.graph_class
        calls = _ALWAYS if self._rec.capture_only else _ALWAYS + _PROGRAM
        return [MethodPatch(graph_class, method, _wrap(name)) for method, name in calls if hasattr(graph_class, method)]

    def ended(self, name: str, first: int) -> None:
        rec = self._rec
        if rec.position() > first:
            rec.log.emit("library_call", call=name, first=first)


def _wrap(name: str) -> Any:
    def wrap(original: Any) -> Any:
        def library_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec = active()
            first = None
            if rec is not None:
                try:
                    first = rec.position()
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
