"""The recorder: turns what a PyTorch program does on its CUDA streams into trace events.

Four sources, one sequence counter (host program order):

* the hooks (streamrace/record/hooks.py: native C++ ones, or the Python reference): each op's
  read and write byte ranges and its stream; allocations, frees, CUDA event create, record,
  wait and delete, and synchronizations (``torch.cuda._gpu_trace``);
* wrappers around ``CUDAGraph.capture_begin/capture_end`` (used by ``torch.cuda.graph`` and
  ``make_graphed_callables``): capture boundaries, pools, and the captured graph read back;
* Triton's ``JITFunction.run`` and the capture graph itself, for launches the dispatcher
  never sees;
* the allocator's memory history, read once at the end, for each block's size and stream.

The hooks keep their events until the Recorder drains them (at each capture's end and when it
stops); what does not need the moment it happened (pools, the owners of freed blocks, sizes,
stream names, which event created which node) is settled then, off the hot path.

Non-perturbation is the first rule: hooks keep integers only (no tensor references past an
op), never allocate CUDA memory, launch work or synchronize, and swallow their own failures
into ``recorder_error`` events so the user's capture always completes.
"""

from __future__ import annotations

import itertools
import operator
import sys
import threading
from typing import Any

import torch

from streamrace.record import graph_readback
from streamrace.record.capture_nodes import ACCESS_NODE_TYPES, CaptureNodes, KernelStats
from streamrace.record.hooks import GPU_TRACE_REGISTRIES, HookOptions, Hooks, make_hooks
from streamrace.record.kernel_params import LiveBlocks
from streamrace.record.native import hooks_choice
from streamrace.record.op_accesses import tensor_range
from streamrace.record.stacks import UserCode
from streamrace.record.triton_launches import pointer_directions, tensor_arguments

_ACTIVE: Recorder | None = None
_LOCK = threading.Lock()
_STREAM_NAMES: dict[int, str] = {}
_MAX_WALK = 48  # frames a stack walk looks at, user or not: deep framework stacks stop there


def name_stream(stream: Any, name: str) -> None:
    """Give a stream a name for reports (``torch.cuda.Stream`` or a raw handle)."""
    _STREAM_NAMES[int(getattr(stream, "cuda_stream", stream))] = name


def _is_cuda_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_cuda


class _Capture:
    """What the recorder knows about one capture."""

    __slots__ = ("allocs", "begin", "graph", "handle", "nodes", "pool", "stream")

    def __init__(self, graph: int, stream: int, handle: int | None, begin: dict[str, Any]) -> None:
        self.graph = graph
        self.stream = stream
        self.handle = handle
        self.begin = begin  # the capture_begin event, completed with the pool at the end
        self.allocs: list[dict[str, Any]] = []  # alloc events from this capture's pool
        self.nodes = CaptureNodes(handle, graph_readback.node_count(handle)) if handle is not None else None
        self.pool: list[int] | None = None  # known once the capture ends


def _live_allocator_blocks() -> dict[int, tuple[int, int]]:
    """The allocator's live blocks right now: address -> (requested size, owning stream)."""
    live = {}
    for segment in torch.cuda.memory.memory_snapshot() if torch.cuda.is_initialized() else []:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live[block["address"]] = (block.get("requested_size") or block["size"], segment["stream"])
    return live


class Recorder:
    """Collects trace events in memory; ``start``/``stop`` install and remove the hooks.

    ``eager_ops``: also record ops outside captures (the eager domain); by default only
    captured ops are recorded, which is what graph races need and what keeps eager runs fast.
    ``hooks``: "native", "python" or "auto" (default: ``STREAMRACE_HOOKS``, else auto).
    """

    def __init__(
        self, *, eager_ops: bool = False, stack_depth: int = 6, read_graphs: bool = True, hooks: str | None = None
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.eager_ops = eager_ops
        self.read_graphs = read_graphs and graph_readback.AVAILABLE
        self.stack_depth = stack_depth
        self.hooks_choice = hooks or hooks_choice()
        self.hooks: Hooks | None = None
        self.native_unavailable: str | None = None  # why the native hooks were not used
        self._sorted = True
        self._graph_ids = itertools.count(1)
        self._graph_of: dict[int, _Capture] = {}  # id(CUDAGraph) -> capture in progress
        self._captures: dict[int, _Capture] = {}  # graph id -> capture
        self._block_owner: dict[int, tuple[int, int, int]] = {}  # addr -> (stream, device, alloc seq)
        self._allocs: list[dict[str, Any]] = []
        self._resolved = 0  # self._allocs[:_resolved] have their size and stream
        self._unknown_allocs: set[int] = set()  # seqs of allocs whose size nothing recorded
        self._history_start = 0
        self._history_pos = 0
        self._history_on = False
        self._free_seq: dict[int, int] = {}  # alloc seq -> free seq
        self._unfinished: list[_Capture] = []  # captures whose nodes still need their accesses
        self.kernel_stats = KernelStats()

    @property
    def hooks_kind(self) -> str | None:
        """ "native" or "python": the hooks this recording runs on."""
        return self.hooks.kind if self.hooks is not None else None

    # -- event emission --------------------------------------------------------------------
    def emit(self, ev: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": self.hooks.next_seq(), "ev": ev}
        event.update((k, v) for k, v in fields.items() if v is not None)
        self.events.append(event)
        self._sorted = False
        return event

    def stack(self) -> int | None:
        stack = self.hooks.stack()
        return None if stack < 0 else stack

    def position(self) -> int:
        """The seq the next event will have: a session started now sees from here."""
        return self.hooks.peek_seq() if self.hooks is not None else 0

    def fail(self, where: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if len(self.errors) < 100:
            self.errors.append(f"{where}: {message}")
            self.emit("recorder_error", message=message, where=where)

    def _current_stream(self, device: int) -> int:
        stream = torch._C._cuda_getCurrentRawStream(device)
        self.hooks.see_stream(stream, device)
        return stream

    # -- lifecycle ---------------------------------------------------------------------------
    @staticmethod
    def active() -> Recorder | None:
        """The recorder running in this process, if any (``STREAMRACE=1`` starts one)."""
        return _ACTIVE

    def start(self) -> None:
        global _ACTIVE
        shown_path = UserCode().shown_path
        options = HookOptions(self.eager_ops, self.stack_depth, _MAX_WALK, shown_path, self._guarded_catch_up)
        hooks, self.native_unavailable = make_hooks(self.hooks_choice, options)
        with _LOCK:
            if _ACTIVE is not None:
                raise RuntimeError("a streamrace recorder is already active in this process")
            self.hooks = hooks
            _install_hooks(hooks)
            _ACTIVE = self
        if torch.cuda.is_initialized():
            self._enable_history()
        hooks.start()

    def stop(self) -> None:
        global _ACTIVE
        for capture in list(self._graph_of.values()):  # captures the program never ended (it raised)
            self._end_capture(capture, None, None, aborted=True)
        self._graph_of.clear()
        self.hooks.stop()
        with _LOCK:
            _ACTIVE = None
            _uninstall_hooks(self.hooks)
        try:
            self._ingest()
            self._resolve_allocations()
            self._finish_captures()
        except Exception as exc:
            self.fail("finalize", exc)
        self.hooks.release_python()
        if self._history_on:
            torch.cuda.memory._record_memory_history(enabled=None)
            self._history_on = False

    def _enable_history(self) -> None:
        """Size and stream of every block come from the allocator's own history (CPU only)."""
        if self._history_on:
            return
        self._ingest()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        self._history_on = True
        self._history_start = len(self._allocs)

    def _ingest(self) -> None:
        """Take the hooks' events: settle what they leave for later (stream names, the owners
        of freed blocks, pools) and keep them."""
        if self.hooks is None:
            return
        for event in self.hooks.drain():
            ev = event["ev"]
            if ev == "alloc":
                self._ingest_alloc(event)
            elif ev == "free":
                event = self._ingest_free(event)
            elif ev == "stream":
                name = _STREAM_NAMES.get(event["stream"]) or ("default" if event["stream"] == 0 else None)
                if name is not None:
                    event["name"] = name
            elif ev == "recorder_error" and len(self.errors) < 100:
                self.errors.append(f"{event['where']}: {event['message']}")
            self.events.append(event)
            self._sorted = False

    def _ingest_alloc(self, event: dict[str, Any]) -> None:
        self._block_owner[event["addr"]] = (event["stream"], event["device"], event["seq"])
        self._allocs.append(event)
        capture = self._captures.get(event.pop("_graph", None))
        if capture is not None:
            capture.allocs.append(event)
            if capture.pool is not None:
                event["pool"] = capture.pool

    def _ingest_free(self, event: dict[str, Any]) -> dict[str, Any]:
        owner = self._block_owner.pop(event["addr"], None)
        if owner is None:
            return event
        stream, device, alloc_seq = owner
        self._free_seq[alloc_seq] = event["seq"]
        free = {"seq": event["seq"], "ev": "free", "addr": event["addr"], "stream": stream, "device": device}
        if "stack" in event:
            free["stack"] = event["stack"]
        return free

    def _resolve_allocations(self) -> None:
        """Give each new alloc event its size and stream from the allocator's history entries
        (same order, same address), or from the live blocks; the rest stay unknown."""
        end = len(self._allocs)
        if self._resolved == end:
            return
        entries: list[dict[str, Any]] = []
        if self._history_on:
            traces = torch.cuda.memory._snapshot()["device_traces"]
            entries = [e for dev in traces for e in dev if e["action"] == "alloc"]
        live = _live_allocator_blocks()
        for i in range(self._resolved, end):
            event = self._allocs[i]
            fact = None
            if i >= self._history_start:
                for k in range(self._history_pos, min(self._history_pos + 64, len(entries))):
                    if entries[k]["addr"] == event["addr"]:
                        fact = (entries[k]["size"], entries[k]["stream"])
                        self._history_pos = k + 1
                        break
            fact = fact or live.get(event["addr"])
            if fact is None:
                self._unknown_allocs.add(event["seq"])
                continue
            event["size"], event["stream"] = fact
            self.hooks.see_stream(event["stream"], event.get("device", 0))
        self._resolved = end
        self._ingest()  # the streams seen only now

    def trace_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The events from seq ``since`` on, ready for a trace: stacks and streams defined
        earlier are kept, and allocations of unknown size (allocated and freed before the
        history was on) are left out, since they cannot take part in lifetime checks."""
        self._ingest()
        self._resolve_allocations()
        self._finish_captures()
        if not self._sorted:
            self.events.sort(key=operator.itemgetter("seq"))
            self._sorted = True
        return [
            e
            for e in self.events
            if e["seq"] not in self._unknown_allocs and (e["seq"] >= since or e["ev"] in ("stack", "stream"))
        ]

    @property
    def dropped_allocations(self) -> int:
        return len(self._unknown_allocs)

    # -- captures ------------------------------------------------------------------------
    def before_capture_begin(self) -> None:
        self._enable_history()
        _install_triton_hook()

    def on_capture_begin(self, cuda_graph: Any, capture_error_mode: str, pool: Any) -> None:
        device = torch.cuda.current_device()
        stream = self._current_stream(device)
        graph = next(self._graph_ids)
        handle = graph_readback.capture_graph(stream) if self.read_graphs else None
        begin = self.emit(
            "capture_begin",
            graph=graph,
            stream=stream,
            device=device,
            # An implicit pool's id is known only once the capture ends (CUDAGraph.pool()).
            pool=list(pool) if pool else None,
            mode=capture_error_mode,
            stack=self.stack(),
        )
        capture = _Capture(graph, stream, handle, begin)
        self._graph_of[id(cuda_graph)] = capture
        self._captures[graph] = capture
        self.hooks.begin_capture(graph, stream, handle or 0)

    def before_capture_end(self, cuda_graph: Any) -> tuple[list[dict[str, Any]], list[list[Any]]] | None:
        """Read what only the live graph can tell; the rest waits until after the capture."""
        capture = self._graph_of.get(id(cuda_graph))
        if capture is None or capture.nodes is None:
            return None
        self._catch_up()
        handles = self.hooks.node_handles(capture.handle)
        nodes, edges = graph_readback.read_graph(capture.handle, handles, self.hooks.describe_nodes)
        capture.nodes.snapshot(handles, nodes, self.hooks.claims(capture.graph))
        self._unfinished.append(capture)
        return nodes, edges

    def _finish_captures(self) -> None:
        """Kernel events' accesses and custom ops' cross-checks, once allocations are known."""
        if not self._unfinished:
            return
        events = {e["seq"]: e for e in self.events if e["ev"] == "op"}
        live: list[LiveBlocks] = []

        def blocks() -> LiveBlocks:
            if not live:
                live.append(self._live_blocks())
            return live[0]

        for capture in self._unfinished:
            capture.nodes.finish(blocks, events, self.kernel_stats)
        self._unfinished.clear()

    def _guarded_catch_up(self) -> None:
        try:
            self._catch_up()
        except Exception as exc:  # the user's program must go on
            self.fail("invisible launches", exc)

    def _catch_up(self) -> None:
        """Nodes that appeared where no recorded launch was were launched by something the
        dispatcher never saw: give each a kernel event here, in program order, on its stream."""
        for graph in self.hooks.open_graphs():
            capture = self._captures.get(graph)
            if capture is None or capture.nodes is None:
                continue
            new = self.hooks.nodes_since(capture.handle, self.hooks.last_claim(graph), capture.nodes.floor())
            streams = self.hooks.capture_streams(graph) if new else []
            for index, kind, stream in capture.nodes.launching_streams(new, streams):
                if kind not in ACCESS_NODE_TYPES:
                    continue
                event = self.emit(
                    "kernel",
                    graph=capture.graph,
                    node=index,
                    name=kind,
                    stream=stream if stream is not None else capture.stream,
                    device=torch.cuda.current_device(),
                    reads=[],
                    writes=[],
                    inferred=True,
                    stack=self.stack(),
                )
                capture.nodes.claim_kernel(event, index)
            self.hooks.refresh_frontiers(graph)

    def on_triton_launch(
        self, jit_function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kernel: Any, mark: tuple[int, Any, int]
    ) -> None:
        stack, graph, before = mark
        capture = self._captures.get(graph) if graph is not None else None
        if capture is None or capture.nodes is None:
            return
        tensors = tensor_arguments(jit_function, args, kwargs, _is_cuda_tensor)
        written = pointer_directions(kernel)
        inferred = written is None or len(written) != len(tensors)
        reads, writes = [], []
        for i, tensor in enumerate(tensors):
            rng = tensor_range(tensor)
            if rng is not None:
                (writes if inferred or written[i] else reads).append(rng)
        device = tensors[0].device.index if tensors else torch.cuda.current_device()
        stream = self._current_stream(device)
        event = self.emit(
            "kernel",
            graph=capture.graph,
            node=capture.nodes.base,  # its first node, set when the capture ends (CaptureNodes.snapshot)
            name=f"triton:{getattr(jit_function, '__name__', None) or jit_function.fn.__name__}",
            stream=stream,
            device=device,
            reads=reads,
            writes=writes,
            inferred=inferred,
            stack=None if stack < 0 else stack,
        )
        frontier = graph_readback.capture_state(stream)[1]
        if frontier and frontier[-1] != before:
            self.hooks.claim(graph, event["seq"], frontier[-1], True)
            capture.nodes.launches[event["seq"]] = event
        self.hooks.refresh_frontiers(graph)

    def _live_blocks(self) -> LiveBlocks:
        """Every recorded lifetime, plus the blocks that were live before recording began."""
        self._resolve_allocations()
        blocks = [
            (a["addr"], a["size"], a["seq"], self._free_seq.get(a["seq"]))
            for a in self._allocs
            if a["seq"] not in self._unknown_allocs
        ]
        recorded = {a["addr"] for a in self._allocs}
        before_recording = _live_allocator_blocks().items()
        blocks += [(addr, size, -1, None) for addr, (size, _stream) in before_recording if addr not in recorded]
        return LiveBlocks(blocks)

    def on_capture_end(
        self, cuda_graph: Any, graph_data: tuple[list[Any], list[Any]] | None, aborted: bool = False
    ) -> None:
        capture = self._graph_of.pop(id(cuda_graph), None)
        if capture is not None:
            self._end_capture(capture, None if aborted else list(cuda_graph.pool()), graph_data, aborted)

    def _end_capture(
        self, capture: _Capture, pool: list[int] | None, graph_data: tuple[list[Any], list[Any]] | None, aborted: bool
    ) -> None:
        self.hooks.end_capture(capture.graph)
        if pool is not None:
            capture.pool = pool
            for event in [capture.begin, *capture.allocs]:
                event["pool"] = pool
        # A capture that failed still ends in the trace, so what it recorded can be analysed.
        self.emit("capture_end", graph=capture.graph, stack=self.stack(), aborted=aborted or None)
        if graph_data is not None:
            nodes, edges = graph_data
            self.emit("graph", graph=capture.graph, nodes=nodes, edges=edges)


# -- global hook installation -------------------------------------------------------------
_HOOKS_INSTALLED = False
_ORIGINALS: dict[str, Any] = {}


def _patched_capture_begin(self: Any, *args: Any, **kwargs: Any) -> None:
    rec = _ACTIVE
    if rec is not None:
        try:
            rec.before_capture_begin()
        except Exception as exc:
            rec.fail("capture begin", exc)
    _ORIGINALS["capture_begin"](self, *args, **kwargs)
    if rec is not None:
        try:
            pool = kwargs.get("pool", args[0] if args else None)
            mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
            rec.on_capture_begin(self, mode, pool)
        except Exception as exc:
            rec.fail("capture begin", exc)


def _patched_capture_end(self: Any, *args: Any, **kwargs: Any) -> None:
    rec = _ACTIVE
    graph_data = None
    if rec is not None:
        try:
            graph_data = rec.before_capture_end(self)
        except Exception as exc:
            rec.fail("graph read-back", exc)
    try:
        _ORIGINALS["capture_end"](self, *args, **kwargs)
    except BaseException:
        if rec is not None:
            try:
                rec.on_capture_end(self, graph_data, aborted=True)
            except Exception as exc:
                rec.fail("capture end", exc)
        raise
    if rec is not None:
        try:
            rec.on_capture_end(self, graph_data)
        except Exception as exc:
            rec.fail("capture end", exc)


def _patched_triton_run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
    rec = _ACTIVE
    run = _ORIGINALS["triton_run"]
    if rec is None or warmup or not rec.hooks.open_graphs():
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)
    mark = None
    try:
        mark = rec.hooks.begin_launch()
    except Exception as exc:
        rec.fail("triton launch", exc)
    try:
        kernel = run(self, *args, grid=grid, warmup=warmup, **kwargs)
    finally:
        rec.hooks.end_launch()
    if mark is not None:
        try:
            rec.on_triton_launch(self, args, kwargs, kernel, mark)
        except Exception as exc:
            rec.fail("triton launch", exc)
    return kernel


def _install_triton_hook() -> None:
    """Only if the program uses Triton: importing it here would cost the program a second."""
    jit = sys.modules.get("triton.runtime.jit")
    if jit is None or "triton_run" in _ORIGINALS:
        return
    _ORIGINALS["triton_run"] = jit.JITFunction.run
    jit.JITFunction.run = _patched_triton_run


def _install_hooks(hooks: Hooks) -> None:
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    from torch.cuda import _gpu_trace

    torch._C._activate_gpu_trace()
    overrides = hooks.fire_overrides(_gpu_trace)
    for registry in GPU_TRACE_REGISTRIES:
        if registry in overrides:
            getattr(_gpu_trace, registry).fire_callbacks = overrides[registry]
        else:
            getattr(_gpu_trace, registry).add_callback(hooks.callbacks[registry])
    _ORIGINALS["fire_overrides"] = overrides
    graph_cls = torch.cuda.graphs.CUDAGraph
    _ORIGINALS["capture_begin"] = graph_cls.capture_begin
    _ORIGINALS["capture_end"] = graph_cls.capture_end
    graph_cls.capture_begin = _patched_capture_begin
    graph_cls.capture_end = _patched_capture_end
    _HOOKS_INSTALLED = True


def _uninstall_hooks(hooks: Hooks) -> None:
    """Put the program back as it was (gpu-trace activation itself is one-way in torch)."""
    global _HOOKS_INSTALLED
    if not _HOOKS_INSTALLED:
        return
    from torch.cuda import _gpu_trace

    overrides = _ORIGINALS.pop("fire_overrides", {})
    for registry in GPU_TRACE_REGISTRIES:
        target = getattr(_gpu_trace, registry)
        if registry in overrides:
            if vars(target).get("fire_callbacks") is overrides[registry]:
                del target.fire_callbacks  # the class's own again
        elif hooks.callbacks[registry] in target.callback_list:
            target.callback_list.remove(hooks.callbacks[registry])
    graph_cls = torch.cuda.graphs.CUDAGraph
    graph_cls.capture_begin = _ORIGINALS.pop("capture_begin")
    graph_cls.capture_end = _ORIGINALS.pop("capture_end")
    if "triton_run" in _ORIGINALS:
        sys.modules["triton.runtime.jit"].JITFunction.run = _ORIGINALS.pop("triton_run")
    _HOOKS_INSTALLED = False
