"""The capture lifecycle: capture_begin and capture_end, a capture's pool, its graph read back.

``CUDAGraph.capture_begin/capture_end`` (which ``torch.cuda.graph``, ``make_graphed_callables``
and cudagraph trees call) are wrapped while recording (``patches``). A capture's begin is an
event with its stream, mode and pool (an implicit pool's id is known only at the end); just
before it ends, the graph is read back while it is still live and every node tied to the
launch that created it (capture_nodes.py); at its end come the pool, the capture_end event
(marked aborted if the capture failed, so what it recorded can still be analysed) and the
graph. Allocations made in a capture take its pool when the hooks' events are settled.

A part that follows graphs further (replays.py: replays, resets, destruction) wraps more
CUDAGraph methods the same way and finds a graph's capture with ``of_graph``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Protocol

from streamrace.record.capture_nodes import CaptureNodes
from streamrace.record.event_log import Event
from streamrace.record.graph_readback import GraphRead
from streamrace.record.installation import MethodPatch, active
from streamrace.record.kernel_params import NodeAccess
from streamrace.record.seams import RecordingSeam

if TYPE_CHECKING:
    from streamrace.record.seams import EventFlush

GraphData = tuple[list[dict[str, Any]], list[list[Any]]]  # (nodes, edges) as the graph event has them


class Capture:
    """What the recorder knows about one capture."""

    __slots__ = ("allocs", "begin", "graph", "handle", "nodes", "pool", "stream")

    def __init__(self, graph: int, stream: int, handle: int | None, begin: Event, nodes: CaptureNodes | None) -> None:
        self.graph = graph
        self.stream = stream
        self.handle = handle
        self.begin = begin  # the capture_begin event, completed with the pool at the end
        self.allocs: list[Event] = []  # alloc events from this capture's pool
        self.nodes = nodes  # None where the graph cannot be read
        self.pool: list[int] | None = None  # known once the capture ends


class LaunchCatchUp(Protocol):
    """Catching up on launches the dispatcher never saw (unseen_launches.py), as a capture
    ends."""

    def catch_up(self) -> None: ...

    def finish_later(self, capture: Capture) -> None: ...


class CaptureSeam(RecordingSeam, Protocol):
    """What the capture lifecycle uses of the recording (seams.py)."""

    @property
    def read_graphs(self) -> bool: ...

    @property
    def unseen(self) -> LaunchCatchUp: ...

    @property
    def output(self) -> EventFlush: ...

    def position(self) -> int: ...

    def pinned_blocks(self) -> list[tuple[int, int]]: ...


class CaptureLifecycle:
    """Every capture of the recording, by graph id and by CUDAGraph object while it runs."""

    def __init__(self, recorder: CaptureSeam) -> None:
        self._rec = recorder
        self._ids = itertools.count(1)
        self._running: dict[int, Capture] = {}  # id(CUDAGraph) -> capture in progress
        self._captures: dict[int, Capture] = {}  # graph id -> capture

    def get(self, graph: int | None) -> Capture | None:
        """The capture with this graph id."""
        return self._captures.get(graph) if graph is not None else None

    def of_graph(self, cuda_graph: Any) -> Capture | None:
        """The capture a CUDAGraph object is making now."""
        return self._running.get(id(cuda_graph))

    def running(self) -> bool:
        """Whether a capture is in progress (its events are not settled yet)."""
        return bool(self._running)

    def capturing(self, stream: int) -> bool:
        """Whether ``stream`` captures now (the capture's own stream, or one that joined it)."""
        if not self._running:
            return False
        state = self._rec.started_hooks.state
        return any(stream in state.capture_streams(capture.graph) for capture in self._running.values())

    def patches(self) -> list[MethodPatch]:
        graph_class = self._rec.runtime.graph_class
        return [
            MethodPatch(graph_class, "capture_begin", _wrap_capture_begin),
            MethodPatch(graph_class, "capture_end", _wrap_capture_end),
        ]

    def settle_kernel(self, event: Event) -> Event:
        """A node the native hooks caught up is its capture's (EventLog.settle)."""
        capture = self._captures.get(event["graph"])
        if capture is not None and capture.nodes is not None:
            capture.nodes.claim_caught(event)
        return event

    def settle_alloc(self, event: Event) -> Event:
        """An allocation inside a capture is from its pool (EventLog.settle)."""
        capture = self._captures.get(event.pop("_graph", None))
        if capture is not None:
            capture.allocs.append(event)
            if capture.pool is not None:
                event["pool"] = capture.pool
        return event

    def on_begin(self, cuda_graph: Any, capture_error_mode: str, pool: Any) -> None:
        rec = self._rec
        runtime = rec.runtime
        device = runtime.current_device()
        stream = rec.current_stream(device)
        graph = next(self._ids)
        handle = runtime.graphs.capture_graph(stream) if rec.read_graphs else None
        begin = rec.log.emit(
            "capture_begin",
            graph=graph,
            stream=stream,
            device=device,
            # An implicit pool's id is known only once the capture ends (CUDAGraph.pool()).
            pool=list(pool) if pool else None,
            mode=capture_error_mode,
            stack=rec.log.stack(),
        )
        nodes = None
        if handle is not None:
            nodes = CaptureNodes(handle, runtime.graphs.node_count(handle), self._node_access)
        capture = Capture(graph, stream, handle, begin, nodes)
        self._running[id(cuda_graph)] = capture
        self._captures[graph] = capture
        rec.started_hooks.state.begin_capture(graph, stream, handle or 0)

    def _node_access(self, node: int, type_name: str) -> NodeAccess:
        """What a node touches: a kernel's parameters from the hooks where they read them (the
        native hooks, in C++), else from the runtime."""
        if type_name == "kernel":
            read = self._rec.started_hooks.kernel_access(node)
            if read is not None:
                name, params = read
                return NodeAccess("kernel", name, params=params)
        return self._rec.runtime.node_access(node, type_name)

    def before_end(self, cuda_graph: Any) -> GraphData | None:
        """Read what only the live graph can tell; the rest waits until after the capture."""
        capture = self._running.get(id(cuda_graph))
        if capture is None or capture.nodes is None:
            return None
        assert capture.handle is not None  # a capture has nodes only where its graph was read
        rec = self._rec
        caught, graph, claims = rec.started_hooks.read_capture(capture.graph, capture.handle)
        # Finished later even if reading a node's parameters fails: the launches' nodes are
        # still worked out then.
        rec.unseen.finish_later(capture)
        capture.nodes.snapshot(GraphRead(*graph), claims, caught)
        capture.nodes.pinned = rec.pinned_blocks()
        # Filled once the capture's events are all in (CaptureNodes.finish, before any output).
        return capture.nodes.event_nodes, capture.nodes.event_edges

    def on_end(self, cuda_graph: Any, graph_data: GraphData | None, aborted: bool = False) -> None:
        capture = self._running.pop(id(cuda_graph), None)
        if capture is not None:
            self._end(capture, None if aborted else list(cuda_graph.pool()), graph_data, aborted)
            self._rec.output.after_event(self._rec.position())

    def abort_running(self) -> None:
        """End the captures the program never ended (it raised), at the recording's stop."""
        for capture in list(self._running.values()):
            if capture.nodes is not None and not capture.nodes.numbered:
                capture.nodes.number(self._open_graph_nodes(capture))
            self._end(capture, None, None, aborted=True)
        self._running.clear()

    def _open_graph_nodes(self, capture: Capture) -> list[int] | None:
        """The nodes of a capture the program never ended, where its stream still captures
        into its graph: read only then, since an ended capture's graph may be gone."""
        graphs = self._rec.runtime.graphs
        try:
            if capture.handle is None or graphs.capture_state(capture.stream)[0] != capture.handle:
                return None
            return graphs.node_handles(capture.handle)
        except Exception as exc:
            self._rec.log.fail("graph read-back", exc)
            return None

    def _end(self, capture: Capture, pool: list[int] | None, graph_data: GraphData | None, aborted: bool) -> None:
        rec = self._rec
        if capture.nodes is not None and not capture.nodes.numbered:
            capture.nodes.number(None)  # its read-back failed: the graph is not read now
        rec.started_hooks.state.end_capture(capture.graph)
        if pool is not None:
            capture.pool = pool
            for event in [capture.begin, *capture.allocs]:
                event["pool"] = pool
        # A capture that failed still ends in the trace, so what it recorded can be analysed.
        rec.log.emit("capture_end", graph=capture.graph, stack=rec.log.stack(), aborted=aborted or None)
        if graph_data is not None:
            nodes, edges = graph_data
            rec.log.emit("graph", graph=capture.graph, nodes=nodes, edges=edges)


def _wrap_capture_begin(original: Any) -> Any:
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> None:
        rec = active()
        if rec is not None:
            try:
                rec.before_capture_begin()
            except Exception as exc:
                rec.log.fail("capture begin", exc)
        original(self, *args, **kwargs)
        if rec is not None:
            try:
                pool = kwargs.get("pool", args[0] if args else None)
                mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
                rec.captures.on_begin(self, mode, pool)
            except Exception as exc:
                rec.log.fail("capture begin", exc)

    return capture_begin


def _wrap_capture_end(original: Any) -> Any:
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> None:
        rec = active()
        graph_data = None
        if rec is not None:
            try:
                graph_data = rec.captures.before_end(self)
            except Exception as exc:
                rec.log.fail("graph read-back", exc)
        try:
            original(self, *args, **kwargs)
        except BaseException:
            if rec is not None:
                try:
                    rec.captures.on_end(self, graph_data, aborted=True)
                except Exception as exc:
                    rec.log.fail("capture end", exc)
            raise
        if rec is not None:
            try:
                rec.captures.on_end(self, graph_data)
            except Exception as exc:
                rec.log.fail("capture end", exc)

    return capture_end
