"""Graph replays and lifetimes: ``CUDAGraph.replay()``, ``reset()``, and the object's collection.

While the whole program is recorded (not ``capture_only``), ``CUDAGraph.replay`` and ``reset``
are wrapped (``patches``; a recording of the captures alone wraps ``reset`` only: lifetimes,
no replays), and ``capture_end`` once more, around the capture lifecycle's own
wrapper, to learn which recorder graph id a CUDAGraph object holds once its capture has ended
(``CaptureLifecycle.of_graph``). ``replay`` is how PyTorch launches every captured graph:
``torch.cuda.graph``'s, the forward and backward graphs of ``make_graphed_callables`` (its
autograd function calls ``replay``), cudagraph trees (``CUDAGraphNode.run_graph`` and the first
run after recording), dynamo's ``cudagraphs`` backend and inductor's ``cudagraphify``. A graph
launched by its raw handle (``raw_cuda_graph_exec()`` given to the driver) is not seen.

* A **replay** is one ``replay`` event: the graph, the current stream of the current device
  (declared by a ``stream`` event first, as every stream is), the device and the user's stack,
  made by the hooks (``replay``: in C++ with the native hooks, since a serving loop makes one
  every step), so that it sits in program order among the ops. It is emitted once the launch
  has returned: a replay that raised launched nothing.
* A **reset** is a ``graph_reset``; the object may then capture again, under a new graph id.
* The object's **collection** is a ``graph_destroy``, emitted from a ``weakref.finalize``
  callback at that moment (detached: it may run inside a garbage collection). Objects are
  tracked by ``id`` with one finalizer each, so the recorder never keeps a graph, or its
  private pool, alive; the finalizers are detached when recording stops.

Replays the trace cannot hold are counted, not recorded: those of a graph this recording did
not capture (captured before it started: ``unrecorded``), and those into a stream that is
capturing (``in_capture``; CUDA refuses them or nests the graph as a child of the capture,
whose node the capture's read-back then holds).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Protocol

from streamrace.record.installation import MethodPatch, active
from streamrace.record.seams import RecordingSeam

if TYPE_CHECKING:
    from streamrace.record.captures import CaptureLifecycle
    from streamrace.record.seams import EventFlush


class ReplaySeam(RecordingSeam, Protocol):
    """What the replays part uses of the recording (seams.py)."""

    @property
    def captures(self) -> CaptureLifecycle: ...

    @property
    def output(self) -> EventFlush: ...


class _Tracked:
    """One CUDAGraph object's recorded graph (None after a reset), and its finalizer."""

    __slots__ = ("finalizer", "graph")

    def __init__(self) -> None:
        self.graph: int | None = None
        self.finalizer: weakref.finalize | None = None


class GraphReplays:
    """Which graph each CUDAGraph object holds, and what happens to it after its capture."""

    def __init__(self, recorder: ReplaySeam) -> None:
        self._rec = recorder
        self._objects: dict[int, _Tracked] = {}  # id(CUDAGraph) -> what it holds
        self.unrecorded = 0  # replays of graphs this recording did not capture
        self.in_capture = 0  # replays into a capturing stream

    def patches(self, replays: bool = True) -> list[MethodPatch]:
        """The wrappers to install; without ``replays`` (a recording of the captures alone) the
        graphs' lifetimes still are: a free is judged against the life of the graphs that
        captured its block, and without their ends every input freed later would look freed
        under a live graph."""
        graph_class = self._rec.runtime.graph_class
        lifetimes = [
            MethodPatch(graph_class, "capture_end", _wrap_capture_end),
            MethodPatch(graph_class, "reset", _wrap_reset),
        ]
        return [*lifetimes, MethodPatch(graph_class, "replay", _wrap_replay)] if replays else lifetimes

    def graph_of(self, cuda_graph: Any) -> int | None:
        """The recorder's graph id of what a CUDAGraph object holds, if this recording captured it."""
        tracked = self._objects.get(id(cuda_graph))
        return tracked.graph if tracked is not None else None

    def captured(self, cuda_graph: Any, graph: int) -> None:
        """``cuda_graph``'s capture of ``graph`` has ended: its replays are ``graph``'s."""
        key = id(cuda_graph)
        tracked = self._objects.get(key)
        if tracked is None:
            tracked = _Tracked()
            tracked.finalizer = weakref.finalize(cuda_graph, self._collected, key, tracked)
            tracked.finalizer.atexit = False  # a graph alive at exit was not destroyed by the program
            self._objects[key] = tracked
        tracked.graph = graph

    def on_replay(self, cuda_graph: Any) -> None:
        tracked = self._objects.get(id(cuda_graph))
        if tracked is None or tracked.graph is None:
            self.unrecorded += 1
            return
        rec = self._rec
        if rec.captures.running() and rec.captures.capturing(rec.current_stream(rec.runtime.current_device())):
            self.in_capture += 1
            return
        rec.output.after_event(rec.started_hooks.state.replay(tracked.graph))

    def on_reset(self, cuda_graph: Any) -> None:
        tracked = self._objects.get(id(cuda_graph))
        if tracked is None or tracked.graph is None:
            return
        rec = self._rec
        event = rec.log.emit("graph_reset", graph=tracked.graph, stack=rec.log.stack())
        tracked.graph = None
        rec.output.after_event(event["seq"])

    def _collected(self, key: int, tracked: _Tracked) -> None:
        """The weakref callback: the object is being collected (any thread, any moment)."""
        if self._objects.get(key) is tracked:
            del self._objects[key]
        rec, running = self._rec, active()
        # The part holds a proxy of its recorder (recorder.py), so the two are told apart by
        # what each owns: another recording, or none, is running now.
        if tracked.graph is None or running is None or running.log is not rec.log:
            return
        try:
            rec.log.emit_detached("graph_destroy", graph=tracked.graph)
        except Exception as exc:  # the user's program must go on
            rec.log.fail("graph destruction", exc)

    def stop(self) -> None:
        """Recording ends: no finalizer outlives it (nor keeps the recorder alive)."""
        for tracked in self._objects.values():
            if tracked.finalizer is not None:
                tracked.finalizer.detach()
        self._objects.clear()


def _wrap_capture_end(original: Any) -> Any:
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> None:
        rec = active()
        capture = None
        if rec is not None:
            try:
                capture = rec.captures.of_graph(self)
            except Exception as exc:
                rec.log.fail("capture end", exc)
        original(self, *args, **kwargs)
        if rec is not None and capture is not None:
            try:
                rec.replays.captured(self, capture.graph)
            except Exception as exc:
                rec.log.fail("capture end", exc)

    return capture_end


def _wrap_replay(original: Any) -> Any:
    def replay(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        rec = active()
        if rec is not None:
            try:
                rec.replays.on_replay(self)
            except Exception as exc:
                # A replay on another thread that the recording's stop overtook (the hooks let
                # their Python go) is after the recording, not a failure of it.
                if active() is rec:
                    rec.log.fail("graph replay", exc)

    return replay


def _wrap_reset(original: Any) -> Any:
    def reset(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        rec = active()
        if rec is not None:
            try:
                rec.replays.on_reset(self)
            except Exception as exc:
                rec.log.fail("graph reset", exc)

    return reset
