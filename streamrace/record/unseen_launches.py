"""Catching up: graph nodes that no recorded launch created.

Something the dispatcher never saw (Triton through its own launchers, CuPy, a custom
extension, a library call) launched them. The hooks notice when a capturing stream's frontier
moved with no recorded launch and catch up, in program order: each new node that reads or
writes memory gets a ``kernel`` event, on the stream whose frontier holds it. The native hooks
make those events themselves, in C++; the Python hooks ask for them here (``catch_up``, called
in the hook, and once more at the capture's end). After the capture, once allocations are
known, the events of either get their accesses from the nodes' parameters and custom ops are
cross-checked (``finish``; capture_nodes.py says how).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from streamrace.record.capture_nodes import ACCESS_NODE_TYPES, KernelStats
from streamrace.record.captures import Capture
from streamrace.record.kernel_params import LiveBlocks
from streamrace.record.seams import RecordingSeam

if TYPE_CHECKING:
    from streamrace.record.allocations import AllocatorHistory
    from streamrace.record.captures import CaptureLifecycle
    from streamrace.record.hooks import PythonHooks


class UnseenSeam(RecordingSeam, Protocol):
    """What catching up uses of the recording (seams.py)."""

    @property
    def captures(self) -> CaptureLifecycle: ...

    @property
    def allocations(self) -> AllocatorHistory: ...

    def resolve_allocations(self) -> None: ...


CaptureState = Callable[[int], tuple[int | None, tuple[int, ...]]]  # GraphReadback.capture_state


def _launching_frontiers(
    capture_state: CaptureState, brought_by_wait: tuple[int, frozenset[int]] | None
) -> CaptureState:
    """The streams' frontiers as a catch-up places launches by them: without the nodes a wait
    being checked brought into its stream (PythonHooks.brought_by_wait), no launch of its."""
    if brought_by_wait is None:
        return capture_state
    waiting, brought = brought_by_wait

    def without_brought(stream: int) -> tuple[int | None, tuple[int, ...]]:
        graph, frontier = capture_state(stream)
        return graph, frontier if stream != waiting else tuple(n for n in frontier if n not in brought)

    return without_brought


class UnseenLaunches:
    """The recorder's half of catching up: the Python hooks' kernel events, and every kernel
    event's accesses once the capture is over."""

    def __init__(self, recorder: UnseenSeam) -> None:
        self._rec = recorder
        self._unfinished: list[Capture] = []  # captures whose nodes still need their accesses
        self.stats = KernelStats()

    def guarded_catch_up(self, hooks: PythonHooks) -> None:
        """A catch-up a hook asks for: a failure is the recorder's, never the program's."""
        try:
            self.catch_up(hooks)
        except Exception as exc:  # the user's program must go on
            self._rec.log.fail("invisible launches", exc)

    def catch_up(self, hooks: PythonHooks) -> None:
        """Give each node that appeared where no recorded launch was a kernel event here, in
        program order, on its stream: for the Python hooks, which ask for it (the native hooks
        do it themselves, the same way)."""
        rec = self._rec
        for graph in hooks.open_graphs():
            capture = rec.captures.get(graph)
            if capture is None or capture.nodes is None:
                continue
            assert capture.handle is not None  # a capture has nodes only where its graph was read
            new = rec.runtime.graphs.nodes_since(capture.handle, hooks.last_claim(graph), capture.nodes.floor())
            streams = hooks.capture_streams(graph) if new else []
            capture_state = _launching_frontiers(rec.runtime.graphs.capture_state, hooks.brought_by_wait)
            for index, kind, stream in capture.nodes.launching_streams(new, streams, capture_state):
                if kind not in ACCESS_NODE_TYPES:
                    continue
                event = rec.log.emit(
                    "kernel",
                    graph=capture.graph,
                    node=index,
                    name=kind,
                    stream=stream if stream is not None else capture.stream,
                    device=rec.runtime.current_device(),
                    reads=[],
                    writes=[],
                    inferred=True,
                    stack=rec.log.stack(),
                )
                capture.nodes.claim_kernel(event, index)
            hooks.refresh_frontiers(graph)

    def finish_later(self, capture: Capture) -> None:
        """A capture whose graph was read back: its nodes' accesses come once allocations are known."""
        self._unfinished.append(capture)

    @property
    def waiting(self) -> bool:
        """Whether a capture read back waits for ``finish`` (which reads its op events)."""
        return bool(self._unfinished)

    def finish(self) -> None:
        """Kernel events' accesses and custom ops' cross-checks, once allocations are known."""
        if not self._unfinished:
            return
        rec = self._rec
        events = {e["seq"]: e for e in rec.log.events if e["ev"] == "op"}
        live: list[LiveBlocks] = []

        def blocks() -> LiveBlocks:
            if not live:
                rec.resolve_allocations()
                live.append(rec.allocations.live_blocks())
            return live[0]

        for capture in self._unfinished:
            assert capture.nodes is not None  # only captures whose graph was read wait here
            capture.nodes.finish(blocks, events, self.stats)
        self._unfinished.clear()
