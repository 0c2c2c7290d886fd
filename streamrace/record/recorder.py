"""The recorder: turns what a PyTorch program does on its CUDA streams into trace events.

Four sources, one sequence counter (host program order):

* ``torch.cuda._gpu_trace`` callbacks: allocations, frees, event create/record/wait/delete and
  synchronizations, fired synchronously where they happen;
* a ``TorchDispatchMode``: each aten op's read and write byte ranges and its stream;
* wrappers around ``CUDAGraph.capture_begin/capture_end`` (used by ``torch.cuda.graph`` and
  ``make_graphed_callables``): capture boundaries, pools, and the captured graph read back;
* the allocator's memory history, read once at the end, for each block's size and stream.

Non-perturbation is the first rule: hooks keep integers only (no tensor references), never
allocate CUDA memory, launch work or synchronize, and swallow their own failures into
``recorder_error`` events so the user's capture always completes.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from streamrace.record import graph_readback
from streamrace.record.capture_nodes import ACCESS_NODE_TYPES, CaptureNodes, KernelStats
from streamrace.record.kernel_params import LiveBlocks
from streamrace.record.op_accesses import op_accesses, tensor_range
from streamrace.record.stacks import StackTable
from streamrace.record.triton_launches import pointer_directions, tensor_arguments

_ACTIVE: Recorder | None = None
_LOCK = threading.Lock()
_STREAM_NAMES: dict[int, str] = {}


def name_stream(stream: Any, name: str) -> None:
    """Give a stream a name for reports (``torch.cuda.Stream`` or a raw handle)."""
    _STREAM_NAMES[int(getattr(stream, "cuda_stream", stream))] = name


def _is_cuda_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_cuda


_RECORD_STREAM = torch.ops.aten.record_stream.default
_OP_NAMES: dict[Any, str] = {}


def _op_name(func: Any) -> str:
    """``aten::add.Tensor``: the schema name with its overload, as reports show it."""
    name = _OP_NAMES.get(func)
    if name is None:
        overload = func._overloadname
        name = _OP_NAMES[func] = func._schema.name + (f".{overload}" if overload != "default" else "")
    return name


def _op_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The device an op runs on: that of its first CUDA tensor argument."""
    for value in itertools.chain(args, kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if _is_cuda_tensor(item):
                return item.device.index
    return torch.cuda.current_device()


def _guarded(where: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Run a hook on the active recorder; a failure becomes a recorder_error, never an exception."""

    def wrap(hook: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(hook)
        def run(*args: Any) -> None:
            rec = _ACTIVE
            if rec is None:
                return
            try:
                hook(rec, *args)
            except Exception as exc:  # the user's program must go on
                rec.fail(where, exc)

        return run

    return wrap


class _OpMode(TorchDispatchMode):
    """Records every aten op on CUDA tensors; never changes what the op does."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Stay out of torch.compile's tracing (which would otherwise refuse to compile under a
        # dispatch mode) and see the compiled artifact's ops when it runs.
        return True

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        rec = self.recorder
        before = rec.before_op()
        rec.in_op = True
        try:
            outputs = func(*args, **kwargs)
        finally:
            rec.in_op = False
        try:
            rec.on_op(func, args, kwargs, outputs, before)
        except Exception as exc:  # the user's program must go on
            rec.fail("op", exc)
        return outputs


class _Capture:
    """What the recorder knows about one capture in progress."""

    __slots__ = ("allocs", "begin", "graph", "handle", "nodes", "open", "stream")

    def __init__(self, graph: int, stream: int, handle: int | None, begin: dict[str, Any]) -> None:
        self.graph = graph
        self.stream = stream
        self.handle = handle
        self.begin = begin  # the capture_begin event, completed with the pool at the end
        self.allocs: list[dict[str, Any]] = []  # alloc events from this capture's pool
        self.nodes = CaptureNodes(handle) if handle is not None else None
        self.open = True  # until capture_end: a wait on one of its events joins a stream to it


def _live_allocator_blocks() -> dict[int, tuple[int, int]]:
    """The allocator's live blocks right now: address -> (requested size, owning stream)."""
    live = {}
    for segment in torch.cuda.memory.memory_snapshot() if torch.cuda.is_initialized() else []:
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                live[block["address"]] = (block.get("requested_size") or block["size"], segment["stream"])
    return live


_NodeMark = tuple[_Capture, int] | None  # a capture and its node count before a launch


class Recorder:
    """Collects trace events in memory; ``start``/``stop`` install and remove the hooks.

    ``eager_ops``: also record ops outside captures (the eager domain); by default only
    captured ops are recorded, which is what graph races need and what keeps eager runs fast.
    """

    def __init__(self, *, eager_ops: bool = False, stack_depth: int = 6, read_graphs: bool = True) -> None:
        self.events: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.eager_ops = eager_ops
        self.read_graphs = read_graphs and graph_readback.AVAILABLE
        self._seq = itertools.count()
        self.stacks = StackTable(self.emit, depth=stack_depth)
        self._streams: set[int] = set()
        self._graph_ids = itertools.count(1)
        self._graph_of: dict[int, _Capture] = {}  # id(CUDAGraph) -> capture in progress
        self._capturing_streams: dict[int, _Capture] = {}  # stream -> capture it belongs to
        self._block_owner: dict[int, tuple[int, int, int]] = {}  # addr -> (stream, device, alloc seq)
        self._allocs: list[dict[str, Any]] = []
        self._resolved = 0  # self._allocs[:_resolved] have their size and stream
        self._unknown_allocs: set[int] = set()  # seqs of allocs whose size nothing recorded
        self._history_start = 0
        self._history_pos = 0
        self._event_capture: dict[int, _Capture] = {}  # event -> capture its latest record is in
        self._history_on = False
        self._mode: _OpMode | None = None
        self.in_op = False  # nodes created while an op runs are that op's
        self.op_stack: int | None = None  # the user stack of the op being dispatched
        self._free_seq: dict[int, int] = {}  # alloc seq -> free seq
        self.kernel_stats = KernelStats()

    # -- event emission --------------------------------------------------------------------
    def emit(self, ev: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": next(self._seq), "ev": ev}
        event.update((k, v) for k, v in fields.items() if v is not None)
        self.events.append(event)
        return event

    def position(self) -> int:
        """The seq the next event will have, or more: a session started now sees from here."""
        return self.events[-1]["seq"] + 1 if self.events else 0

    def fail(self, where: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if len(self.errors) < 100:
            self.errors.append(f"{where}: {message}")
            self.emit("recorder_error", message=message, where=where)

    def _stream(self, stream: int, device: int = 0) -> int:
        if stream not in self._streams:
            self._streams.add(stream)
            name = _STREAM_NAMES.get(stream) or ("default" if stream == 0 else None)
            self.emit("stream", stream=stream, device=device, name=name)
        return stream

    def _current_stream(self, device: int) -> int:
        return self._stream(torch._C._cuda_getCurrentRawStream(device), device)

    # -- lifecycle ---------------------------------------------------------------------------
    @staticmethod
    def active() -> Recorder | None:
        """The recorder running in this process, if any (``STREAMRACE=1`` starts one)."""
        return _ACTIVE

    def start(self) -> None:
        global _ACTIVE
        with _LOCK:
            if _ACTIVE is not None:
                raise RuntimeError("a streamrace recorder is already active in this process")
            _install_hooks()
            _ACTIVE = self
        if torch.cuda.is_initialized():
            self._enable_history()
        self._mode = _OpMode(self)
        self._mode.__enter__()

    def stop(self) -> None:
        global _ACTIVE
        for capture in list(self._graph_of.values()):  # captures the program never ended (it raised)
            self._end_capture(capture, None, None, aborted=True)
        self._graph_of.clear()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        with _LOCK:
            _ACTIVE = None
            _uninstall_hooks()
        try:
            self._resolve_allocations()
        except Exception as exc:
            self.fail("finalize", exc)
        if self._history_on:
            torch.cuda.memory._record_memory_history(enabled=None)
            self._history_on = False

    def _enable_history(self) -> None:
        """Size and stream of every block come from the allocator's own history (CPU only)."""
        if self._history_on:
            return
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        self._history_on = True
        self._history_start = len(self._allocs)

    def _resolve_allocations(self) -> None:
        """Give each new alloc event its size and stream from the allocator's history entries
        (same order, same address), or from the live blocks; the rest stay unknown."""
        pending = range(self._resolved, len(self._allocs))
        if not pending:
            return
        entries: list[dict[str, Any]] = []
        if self._history_on:
            traces = torch.cuda.memory._snapshot()["device_traces"]
            entries = [e for dev in traces for e in dev if e["action"] == "alloc"]
        live = _live_allocator_blocks()
        for i in pending:
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
            event["size"], stream = fact
            event["stream"] = self._stream(stream, event.get("device", 0))
        self._resolved = len(self._allocs)

    def trace_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The events from seq ``since`` on, ready for a trace: stacks and streams defined
        earlier are kept, and allocations of unknown size (allocated and freed before the
        history was on) are left out, since they cannot take part in lifetime checks."""
        self._resolve_allocations()
        return [
            e
            for e in self.events
            if e["seq"] not in self._unknown_allocs and (e["seq"] >= since or e["ev"] in ("stack", "stream"))
        ]

    @property
    def dropped_allocations(self) -> int:
        return len(self._unknown_allocs)

    # -- hooks: memory ----------------------------------------------------------------------
    def on_alloc(self, ptr: int) -> None:
        # No catch-up here: a launch noticed after an allocation is still placed before any
        # free or stream event that could matter to it.
        device = torch.cuda.current_device()
        stream = self._current_stream(device)
        # An allocation inside an op (its output, a workspace) happens at the op's line.
        stack = self.op_stack if self.in_op else self.stacks.capture(3)
        event = self.emit("alloc", addr=ptr, size=1, stream=stream, device=device, stack=stack)
        self._block_owner[ptr] = (stream, device, event["seq"])
        self._allocs.append(event)
        capture = self._capturing_streams.get(stream)
        if capture is not None:
            capture.allocs.append(event)

    def on_free(self, ptr: int) -> None:
        if self._capturing_streams and not self.in_op:
            self._catch_up()
        stream, device, alloc_seq = self._block_owner.pop(ptr, (None, torch.cuda.current_device(), None))
        event = self.emit("free", addr=ptr, stream=stream, device=device, stack=self.stacks.capture(3))
        if alloc_seq is not None:
            self._free_seq[alloc_seq] = event["seq"]

    # -- hooks: events and syncs ---------------------------------------------------------
    def on_event_record(self, event: int, stream: int) -> None:
        if self._capturing_streams:
            self._catch_up()
        self.emit("event_record", event=event, stream=self._stream(stream), stack=self.stacks.capture(3))

    def on_event_wait(self, event: int, stream: int) -> None:
        stream = self._stream(stream)
        if self._capturing_streams:
            self._catch_up()
        self.emit("event_wait", event=event, stream=stream, stack=self.stacks.capture(3))
        self._maybe_join(event, stream)

    def _maybe_join(self, event: int, stream: int) -> None:
        """Follow the capture's membership as CUDA does: waiting on a captured record joins."""
        source = self._event_capture.get(event)
        if source is not None and source.open and stream not in self._capturing_streams:
            self._capturing_streams[stream] = source

    # -- hooks: captures -----------------------------------------------------------------
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
            stack=self.stacks.capture(3),
        )
        capture = _Capture(graph, stream, handle, begin)
        self._graph_of[id(cuda_graph)] = capture
        self._capturing_streams[stream] = capture

    def before_capture_end(self, cuda_graph: Any) -> tuple[list[dict[str, Any]], list[list[Any]]] | None:
        capture = self._graph_of.get(id(cuda_graph))
        if capture is None or capture.nodes is None:
            return None
        self._catch_up()
        nodes, edges = graph_readback.read_graph(capture.handle)
        capture.nodes.finish(nodes, self._live_blocks(), self.kernel_stats)
        return nodes, edges

    def _catch_up(self) -> None:
        """Nodes that appeared since the last hook were launched by something the dispatcher
        never saw: give each a kernel event here, in program order, on its stream."""
        for capture in {id(c): c for c in self._capturing_streams.values()}.values():
            if capture.nodes is None:
                continue
            streams = [s for s, c in self._capturing_streams.items() if c is capture]
            for index, kind, stream in capture.nodes.take_unseen(streams):
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
                    stack=self.stacks.capture(4),
                )
                capture.nodes.claim(event, index, index + 1)
                capture.nodes.unresolved.append(event)

    def on_triton_launch(
        self, jit_function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kernel: Any, mark: _NodeMark
    ) -> None:
        if mark is None:
            return
        capture, first = mark
        tensors = tensor_arguments(jit_function, args, kwargs, _is_cuda_tensor)
        written = pointer_directions(kernel)
        inferred = written is None or len(written) != len(tensors)
        reads, writes = [], []
        for i, tensor in enumerate(tensors):
            rng = tensor_range(tensor)
            if rng is not None:
                (writes if inferred or written[i] else reads).append(rng)
        device = tensors[0].device.index if tensors else torch.cuda.current_device()
        event = self.emit(
            "kernel",
            graph=capture.graph,
            node=first,
            name=f"triton:{getattr(jit_function, '__name__', None) or jit_function.fn.__name__}",
            stream=self._current_stream(device),
            device=device,
            reads=reads,
            writes=writes,
            inferred=inferred,
            stack=self.op_stack,
        )
        capture.nodes.claim(event, first, capture.nodes.count())

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
        capture.open = False
        if pool is not None:
            for event in [capture.begin, *capture.allocs]:
                event["pool"] = pool
        for stream in [s for s, c in self._capturing_streams.items() if c is capture]:
            del self._capturing_streams[stream]
        # A capture that failed still ends in the trace, so what it recorded can be analysed.
        self.emit("capture_end", graph=capture.graph, stack=self.stacks.capture(3), aborted=aborted or None)
        if graph_data is not None:
            nodes, edges = graph_data
            self.emit("graph", graph=capture.graph, nodes=nodes, edges=edges)

    def on_record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """``t.record_stream(s)`` launches nothing; it tells the allocator about a block's users."""
        if not tensor.is_cuda:
            return
        raw = torch.cuda.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
        ).cuda_stream
        self.emit(
            "record_stream",
            addr=tensor.untyped_storage().data_ptr(),
            stream=self._stream(raw, tensor.device.index),
            device=tensor.device.index,
            stack=self.stacks.capture(4),
        )

    # -- hooks: ops ------------------------------------------------------------------------
    def before_op(self) -> _NodeMark:
        if self._capturing_streams or self.eager_ops:
            self.op_stack = self.stacks.capture(3)  # shared by the op and what it allocates
        """The capture of the current stream and its node count before an op, to attribute
        the nodes the op creates."""
        if not self._capturing_streams:
            return None
        try:
            self._catch_up()
            capture = self._capturing_streams.get(torch._C._cuda_getCurrentRawStream(torch.cuda.current_device()))
            if capture is None or capture.nodes is None:
                return None
            return capture, capture.nodes.seen
        except Exception as exc:
            self.fail("op nodes", exc)
            return None

    def on_op(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        outputs: Any,
        before: tuple[_Capture, int] | None,
    ) -> None:
        if not self._capturing_streams and not self.eager_ops:
            return
        if func is _RECORD_STREAM:
            self.on_record_stream(*args)
            return
        reads, writes = op_accesses(func, args, kwargs, outputs, _is_cuda_tensor)
        if not reads and not writes:
            return
        device = _op_device(args, kwargs)
        stream = self._current_stream(device)
        capture = self._capturing_streams.get(stream)
        if capture is None and not self.eager_ops:
            return
        event = self.emit(
            "op",
            op=_op_name(func),
            stream=stream,
            device=device,
            reads=reads,
            writes=writes,
            stack=self.op_stack,
        )
        if before is not None and before[0] is capture:
            capture.nodes.claim(event, before[1], capture.nodes.count())


# -- global hook installation -------------------------------------------------------------
_HOOKS_INSTALLED = False
_ORIGINALS: dict[str, Any] = {}


@_guarded("memory allocation")
def _on_alloc(rec: Recorder, ptr: int) -> None:
    rec.on_alloc(ptr)


@_guarded("memory deallocation")
def _on_free(rec: Recorder, ptr: int) -> None:
    rec.on_free(ptr)


@_guarded("event creation")
def _on_event_create(rec: Recorder, event: int) -> None:
    rec.emit("event_create", event=event)


@_guarded("event deletion")
def _on_event_delete(rec: Recorder, event: int) -> None:
    rec._event_capture.pop(event, None)
    rec.emit("event_delete", event=event)


@_guarded("event record")
def _on_event_record(rec: Recorder, event: int, stream: int) -> None:
    capture = rec._capturing_streams.get(stream)
    if capture is None:
        rec._event_capture.pop(event, None)
    else:
        rec._event_capture[event] = capture
    rec.on_event_record(event, stream)


@_guarded("event wait")
def _on_event_wait(rec: Recorder, event: int, stream: int) -> None:
    rec.on_event_wait(event, stream)


@_guarded("stream synchronization")
def _on_stream_sync(rec: Recorder, stream: int) -> None:
    rec.emit("stream_sync", stream=rec._stream(stream))


@_guarded("event synchronization")
def _on_event_sync(rec: Recorder, event: int) -> None:
    rec.emit("event_sync", event=event)


@_guarded("device synchronization")
def _on_device_sync(rec: Recorder) -> None:
    rec.emit("device_sync", device=torch.cuda.current_device())


_CALLBACKS = {
    "MemoryAllocationCallbacks": _on_alloc,
    "MemoryDeallocationCallbacks": _on_free,
    "EventCreationCallbacks": _on_event_create,
    "EventDeletionCallbacks": _on_event_delete,
    "EventRecordCallbacks": _on_event_record,
    "EventWaitCallbacks": _on_event_wait,
    "StreamSynchronizationCallbacks": _on_stream_sync,
    "EventSynchronizationCallbacks": _on_event_sync,
    "DeviceSynchronizationCallbacks": _on_device_sync,
}


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
    if rec is None or warmup or not rec._capturing_streams:
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)
    mark = rec.before_op()
    rec.in_op = True
    try:
        kernel = run(self, *args, grid=grid, warmup=warmup, **kwargs)
    finally:
        rec.in_op = False
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


def _install_hooks() -> None:
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    from torch.cuda import _gpu_trace

    torch._C._activate_gpu_trace()
    for registry, callback in _CALLBACKS.items():
        getattr(_gpu_trace, registry).add_callback(callback)
    graph_cls = torch.cuda.graphs.CUDAGraph
    _ORIGINALS["capture_begin"] = graph_cls.capture_begin
    _ORIGINALS["capture_end"] = graph_cls.capture_end
    graph_cls.capture_begin = _patched_capture_begin
    graph_cls.capture_end = _patched_capture_end
    _HOOKS_INSTALLED = True


def _uninstall_hooks() -> None:
    """Put the program back as it was (gpu-trace activation itself is one-way in torch)."""
    global _HOOKS_INSTALLED
    if not _HOOKS_INSTALLED:
        return
    from torch.cuda import _gpu_trace

    for registry, callback in _CALLBACKS.items():
        callbacks = getattr(_gpu_trace, registry).callback_list
        if callback in callbacks:
            callbacks.remove(callback)
    graph_cls = torch.cuda.graphs.CUDAGraph
    graph_cls.capture_begin = _ORIGINALS.pop("capture_begin")
    graph_cls.capture_end = _ORIGINALS.pop("capture_end")
    if "triton_run" in _ORIGINALS:
        sys.modules["triton.runtime.jit"].JITFunction.run = _ORIGINALS.pop("triton_run")
    _HOOKS_INSTALLED = False
