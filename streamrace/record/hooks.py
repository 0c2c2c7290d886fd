"""The recorder's hooks: what runs at every op, allocation, free and CUDA event.

Two implementations of one interface (``Hooks``), with the same events:

* the **native hooks** (csrc/recorder/, loaded by streamrace/record/native.py): a C++
  RecordFunction callback for every op and C++ ``torch.cuda._gpu_trace`` callbacks, keeping
  compact records until they are drained: what makes recording cheap enough to leave on;
* the **Python hooks** here: a ``TorchDispatchMode`` and Python callbacks, the reference the
  native hooks are tested against (tests/test_native_hooks.py, tests/gpu/), and the fallback
  where the native hooks cannot be built.

Both own the bookkeeping the hot path needs, and the Recorder's parts ask it of either alike
(``HookState``): the sequence counter every event draws from, the streams seen, which stream
captures into which graph, which capture each CUDA event's latest record is in, the user
stacks, each capturing stream's frontier as last seen, and the graph nodes recorded launches
claimed (streamrace/record/capture_nodes.py). ``Hooks`` is what the two differ in: how they
are put into torch and hear its GPU-trace calls, and what a capture's end reads of them. A
hook that finds a stream's frontier moved with no recorded launch catches up (the native
hooks in C++, the Python ones through the Recorder): something the dispatcher never saw
launched there. They emit trace events (dicts); an alloc carries the internal field
``_graph`` (the capture it happened in) for the Recorder to take off, frees carry no stream
and allocs a placeholder size: the Recorder fills those in from the allocation history.
"""

from __future__ import annotations

import itertools
import sys
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from streamrace.record import native
from streamrace.record.capture_nodes import is_trusted
from streamrace.record.cuda_runtime import CudaRuntime
from streamrace.record.graph_memory import GraphMemory, identity
from streamrace.record.graph_readback import GraphColumns
from streamrace.record.hook_tables import GPU_TRACE_HOOKS, MAX_ERRORS
from streamrace.record.installation import GpuTraceRoute
from streamrace.record.op_accesses import index_operands, op_accesses, returns_to_host, tensor_range, view_base
from streamrace.record.stacks import StackTable

GPU_TRACE_REGISTRIES = tuple(h.registry for h in GPU_TRACE_HOOKS)


class HostOps(Protocol):
    """What the Python hooks ask of pinned host memory's part (host_memory.py) at each op."""

    def device_op_fields(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, capturing: bool
    ) -> dict[str, Any]: ...

    def cpu_op(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, stack: int | None
    ) -> None: ...

    # The native hooks' seam: what their C++ calls for a pinned storage it meets first.
    def native_part(self, native: Any) -> Callable[[Any, bool], bool]: ...


class RecorderCatchUp(Protocol):
    """The Recorder's catching up (unseen_launches.py), which the Python hooks ask for when a
    stream launched what no hook saw; the native hooks catch up themselves, in C++."""

    def catch_up(self, hooks: PythonHooks) -> None: ...  # at a capture's end
    def guarded_catch_up(self, hooks: PythonHooks) -> None: ...  # in a hook: a failure is the recorder's


@dataclass(frozen=True)
class HookOptions:
    """What either set of hooks is made with."""

    eager_ops: bool  # record ops outside captures too
    stack_depth: int  # user frames kept per stack
    max_walk: int  # frames looked at per stack, user or not
    shown_path: Callable[[Any], str | None]  # UserCode.shown_path: which frames are the user's
    runtime: CudaRuntime = field(default_factory=CudaRuntime)  # what CUDA is asked through
    host: HostOps | None = None  # pinned host memory (host_memory.py)
    catch_up: RecorderCatchUp | None = None  # the Python hooks' (the native ones catch up themselves)


class CaptureRead(NamedTuple):
    """What the hooks hold of a capture at its end, read once they have caught up."""

    # (node index, seq when emitted) of the kernel events the hooks caught up themselves (the
    # Recorder claims those it makes: none with the Python hooks)
    caught: list[tuple[int, int]]
    graph: GraphColumns  # the graph read back (graph_readback.py, or the same in C++)
    # (seq, frontier node, 1 for a trusted op else 0) of each claim in seq order, flattened
    claims: Sequence[int]


class HookState(Protocol):
    """The bookkeeping both sets of hooks keep alike, and what the Recorder's parts ask of it.
    The native hooks' is their C++ object, asked straight; the Python hooks keep theirs
    themselves, where their hot path reads it."""

    def next_seq(self) -> int: ...  # the counter every event's seq is drawn from
    def peek_seq(self) -> int: ...
    def stack(self) -> int: ...  # the user stack here, -1 for none
    def drain(self) -> list[dict[str, Any]]: ...  # the hooks' events since the last drain
    def see_stream(self, stream: int, device: int) -> None: ...  # a stream event, the first time
    # A replay of ``graph`` on the current stream of the current device: its seq.
    def replay(self, graph: int) -> int: ...
    def begin_capture(self, graph: int, stream: int, handle: int) -> None: ...
    def end_capture(self, graph: int) -> None: ...
    def capture_streams(self, graph: int) -> list[int]: ...  # the streams capturing into it now
    def open_graphs(self) -> list[int]: ...
    # A launch the hooks did not see (Triton's) owns the nodes since the previous claim, to ``node``.
    def claim(self, graph: int, seq: int, node: int, trusted: bool) -> None: ...
    def refresh_frontiers(self, graph: int) -> None: ...  # after catching up
    # Around such a launch: (stack, graph or None, frontier node) before it, then its end.
    def begin_launch(self) -> tuple[int, int | None, int]: ...
    def end_launch(self) -> None: ...


class Hooks(Protocol):
    """What the two sets of hooks differ in; what they keep alike is their ``state``."""

    kind: str  # "native" or "python"
    state: HookState

    def start(self) -> None: ...
    def stop(self) -> None: ...
    # How the hooks hear the calls of torch's GPU-trace registries (torch.cuda._gpu_trace).
    def gpu_trace_route(self, gpu_trace: Any) -> GpuTraceRoute: ...
    # At a capture's end (``graph``, its CUDA graph ``handle``): caught up, what they hold of it.
    def read_capture(self, graph: int, handle: int) -> CaptureRead: ...
    # (function name or None, words per parameter) of a kernel node; None: the runtime reads it.
    def kernel_access(self, node: int) -> tuple[str | None, list[list[int]]] | None: ...
    def use_allocator_facts(self) -> str: ...  # "" when allocs now come exact, else why not
    def release_python(self) -> None: ...  # after the last drain: the Python objects they hold go


_OP_NAMES: dict[Any, str] = {}


def op_name(func: Any) -> str:
    """``aten::add.Tensor``: the schema name with its overload, as reports show it."""
    name = _OP_NAMES.get(func)
    if name is None:
        overload = func._overloadname
        name = _OP_NAMES[func] = func._schema.name + (f".{overload}" if overload != "default" else "")
    return name


def _op_device(args: tuple[Any, ...], kwargs: dict[str, Any], runtime: CudaRuntime) -> int:
    """The device an op runs on: that of its first recorded (CUDA) tensor argument."""
    for value in itertools.chain(args, kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if runtime.is_recorded_tensor(item):
                return runtime.tensor_device(item)
    return runtime.current_device()


_RECORD_STREAM = torch.ops.aten.record_stream.default


class _OpMode(TorchDispatchMode):
    """Records every aten op on CUDA tensors; never changes what the op does."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Stay out of torch.compile's tracing (which would otherwise refuse to compile under a
        # dispatch mode) and see the compiled artifact's ops when it runs.
        return True

    def __init__(self, hooks: PythonHooks) -> None:
        super().__init__()
        self.hooks = hooks

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        hooks = self.hooks
        before = hooks.guard("op", hooks.before_op)
        stack = hooks.op_stack
        hooks.depth += 1
        try:
            outputs = func(*args, **kwargs)
        finally:
            hooks.depth -= 1
            hooks.op_stack = -1
        hooks.guard("op", hooks.on_op, func, args, kwargs, outputs, before, stack)
        return outputs


class _Capture:
    __slots__ = ("claims", "handle", "open")

    def __init__(self, handle: int) -> None:
        self.handle, self.open = handle, True
        self.claims: list[tuple[int, int, bool]] = []


class PythonHooks:
    """The reference hooks: a TorchDispatchMode and Python ``_gpu_trace`` callbacks."""

    kind = "python"

    def __init__(self, options: HookOptions) -> None:
        self.eager_ops = options.eager_ops
        self._recorder_catch_up = options.catch_up
        self._runtime = options.runtime
        self._graphs = options.runtime.graphs
        self._host = options.host
        self._seq = 0
        self._records: list[dict[str, Any]] = []
        # An event's seq is drawn and the event stored as one step, against another thread's
        # drain (a worker's replay flushes): between the two, the flush wrote later seqs and
        # the event, stored after, fell below what the file holds and was lost. Reentrant: a
        # garbage collection inside _emit may run a weakref callback that draws a seq too.
        self._lock = threading.RLock()
        self._stacks = StackTable(
            self._emit, depth=options.stack_depth, max_walk=options.max_walk, shown_path=options.shown_path
        )
        self._streams: set[int] = set()
        self._captures: dict[int, _Capture] = {}
        self._capturing: dict[int, int] = {}  # stream -> graph it captures into
        self._event_capture: dict[int, int] = {}  # event -> graph its latest record is in
        # event -> the frontier of its latest record the hooks know of (heard in a readable
        # capture, or stood in for): what a wait on it is checked against (_stand_in)
        self._record_frontier: dict[int, tuple[int, ...]] = {}
        # (stream, nodes) a wait being checked brought in, while its catch-up runs: no launch of
        # that stream's (UnseenLaunches.catch_up)
        self.brought_by_wait: tuple[int, frozenset[int]] | None = None
        self._known: dict[int, tuple[int, ...]] = {}  # capturing stream -> its frontier as last seen
        self._last_stream = 0  # the stream of the previous launch, while no event hook came between
        self._errors = 0
        self._mode: _OpMode | None = None
        self.depth = 0  # ops and launches in flight: nodes created meanwhile are theirs
        self.op_stack = -1  # the stack of the op in flight, shared by what it allocates
        self.callbacks = {h.registry: self._callback(h.hook, h.where) for h in GPU_TRACE_HOOKS}
        self._graph_memory = GraphMemory()
        self.state: HookState = self  # the bookkeeping below

    # -- the bookkeeping (HookState) -----------------------------------------------------------
    def _emit(self, ev: str, **fields: Any) -> dict[str, Any]:
        # The seq is drawn before anything is allocated: a garbage collection here may run a
        # weakref callback that draws one too (replays.py, a graph's destruction).
        with self._lock:
            event = {"seq": self.next_seq(), "ev": ev}
            event.update((k, v) for k, v in fields.items() if v is not None)
            self._records.append(event)
        return event

    def next_seq(self) -> int:
        with self._lock:  # two threads drew one seq between its read and its increment
            seq = self._seq
            self._seq += 1
        return seq

    def peek_seq(self) -> int:
        return self._seq

    def stack(self) -> int:
        # Frames of streamrace itself are library frames: the walk passes them by.
        stack = self._stacks.capture(2)
        return -1 if stack is None else stack

    def _stack_field(self, stack: int) -> int | None:
        return None if stack < 0 else stack

    def see_stream(self, stream: int, device: int) -> None:
        if stream not in self._streams:
            self._streams.add(stream)
            self._emit("stream", stream=stream, device=device)

    def _current_stream(self, device: int) -> int:
        stream = self._runtime.current_stream(device)
        self.see_stream(stream, device)
        return stream

    def replay(self, graph: int) -> int:
        device = self._runtime.current_device()
        stream = self._current_stream(device)
        # The walk starts at the caller's frame, as the native hooks' does (this method is C++ there).
        stack = self._stacks.capture(2)
        return self._emit("replay", graph=graph, stream=stream, device=device, stack=stack)["seq"]

    def begin_capture(self, graph: int, stream: int, handle: int) -> None:
        self._captures[graph] = _Capture(handle)
        self._capturing[stream] = graph
        if handle:
            self._known[stream] = self._graphs.capture_state(stream)[1]

    def end_capture(self, graph: int) -> None:
        if graph in self._captures:
            self._captures[graph].open = False
        for event in [e for e, g in self._event_capture.items() if g == graph]:
            self._record_frontier.pop(event, None)  # its nodes are the ended capture's
        for stream in [s for s, g in self._capturing.items() if g == graph]:
            del self._capturing[stream]
            self._known.pop(stream, None)

    def capture_streams(self, graph: int) -> list[int]:
        return sorted(s for s, g in self._capturing.items() if g == graph)

    def open_graphs(self) -> list[int]:
        return sorted(g for g, c in self._captures.items() if c.open)

    def claims(self, graph: int) -> list[int]:
        """(seq, frontier node, 1 for a trusted op else 0) of each claim in seq order, flattened."""
        claims = self._captures[graph].claims if graph in self._captures else []
        return [int(v) for claim in claims for v in claim]

    def last_claim(self, graph: int) -> int:
        """The node the latest claim ends at, 0 for none (the Recorder's catch-up starts there)."""
        claims = self._captures[graph].claims if graph in self._captures else []
        return claims[-1][1] if claims else 0

    def claim(self, graph: int, seq: int, node: int, trusted: bool) -> None:
        if graph in self._captures:
            self._captures[graph].claims.append((seq, node, trusted))

    def refresh_frontiers(self, graph: int) -> None:
        if graph in self._captures and self._captures[graph].handle:
            for stream in self.capture_streams(graph):
                self._known[stream] = self._graphs.capture_state(stream)[1]

    def _read_graph(self, stream: int) -> int | None:
        """The graph a capturing stream's launches go to, if it can be read."""
        graph = self._capturing.get(stream)
        return graph if graph is not None and self._captures[graph].handle else None

    def _moved(self, streams: list[int]) -> bool:
        """Whether a stream's frontier moved since the hooks last saw it."""
        return any(self._graphs.capture_state(s)[1] != self._known.get(s) for s in streams)

    def _catch_up(self) -> None:
        """The Recorder's catch-up, asked from a hook: its failure is the recorder's."""
        if self._recorder_catch_up is not None:
            self._recorder_catch_up.guarded_catch_up(self)

    def _check(self, stream: int) -> None:
        """Catch up when the stream's frontier moved and no recorded launch moved it."""
        if self._read_graph(stream) is not None and self._moved([stream]):
            self._catch_up()

    def _check_before_launch(self, graph: int, stream: int) -> None:
        """Before a launch claims every node since the previous claim, the streams that may
        have launched unseen must be accounted for: its own, and, after a change of stream or
        an event hook (where programs move between streams), every stream of its capture."""
        self._check_since_last_launch(graph, stream)
        self._last_stream = stream

    def _check_before_free(self, stream: int) -> None:
        """Before a free outside an op, a launch no hook saw (on any stream of the capture)
        that may still use the block must be in the trace: after the free its pointer resolves
        to nothing, and the unsafe free is missed. The streams a launch would check; but it is
        no launch, and the next launch still checks them all where it would have."""
        graph = self._read_graph(stream)
        if graph is not None:
            self._check_since_last_launch(graph, stream)

    def _check_since_last_launch(self, graph: int, stream: int) -> None:
        same = self._last_stream == stream
        if self._moved([stream] if same else self.capture_streams(graph)):
            self._catch_up()

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            records, self._records = self._records, []
        return records

    def read_capture(self, graph: int, handle: int) -> CaptureRead:
        if self._recorder_catch_up is not None:
            self._recorder_catch_up.catch_up(self)  # it claims the kernel events it makes itself
        return CaptureRead([], self._graphs.read_graph(handle), self.claims(graph))

    def kernel_access(self, node: int) -> tuple[str | None, list[list[int]]] | None:
        return None

    def gpu_trace_route(self, gpu_trace: Any) -> GpuTraceRoute:
        return GpuTraceRoute(self.callbacks)  # each callback joins its registry's list

    def release_python(self) -> None:
        self._recorder_catch_up = None

    def use_allocator_facts(self) -> str:
        return "the Python hooks have no allocator trace tracker"

    def guard(self, where: str, hook: Callable[..., Any], *args: Any) -> Any:
        """Run a hook; its failure becomes a recorder_error, never the program's exception."""
        try:
            return hook(*args)
        except Exception as exc:  # the user's program must go on
            if self._errors < MAX_ERRORS:
                self._errors += 1
                self._emit("recorder_error", message=f"{type(exc).__name__}: {exc}", where=where)
            return None

    def _any_open(self) -> bool:
        return bool(self._capturing)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._mode = _OpMode(self)
        self._mode.__enter__()

    def stop(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None

    # -- ops -----------------------------------------------------------------------------------
    def before_op(self) -> tuple[int, int, tuple[int, ...]] | None:
        """The capture of the current stream and the stream's frontier before an op, to
        attribute the nodes the op creates; the op's stack is taken here, shared with its
        allocations."""
        if not (self._any_open() or self.eager_ops) or self.depth:
            return None
        self.op_stack = self.stack()
        if not self._any_open():
            return None
        stream = self._runtime.current_stream(self._runtime.current_device())
        graph = self._read_graph(stream)
        if graph is None:
            return None
        self._check_before_launch(graph, stream)
        return graph, stream, self._graphs.capture_state(stream)[1]

    def on_op(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        outputs: Any,
        before: tuple[int, int, tuple[int, ...]] | None,
        stack: int,
    ) -> None:
        if not self._any_open() and not self.eager_ops:
            return
        if func is _RECORD_STREAM:
            # The dispatcher passes both of record_stream's arguments positionally, even
            # when the program names them (``t.record_stream(s=stream)``).
            tensor, stream_object = args
            self._record_stream(tensor, stream_object, stack)
            return
        behind: tuple[list[Any], list[Any]] = ([], [])  # the tensors behind the reads and writes
        reads, writes = op_accesses(func, args, kwargs, outputs, self._runtime.is_recorded_tensor, behind)
        host = self._host
        if not reads and not writes:
            if self._graph_memory.bases:
                self._view(func, args, kwargs, outputs, stack)
            if host is not None:
                self.guard("pinned memory", host.cpu_op, func, args, kwargs, outputs, self._stack_field(stack))
            return
        device = _op_device(args, kwargs, self._runtime)
        stream = self._current_stream(device)
        graph = self._capturing.get(stream)
        if graph is None and not self.eager_ops:
            return
        host_fields: dict[str, Any] = {}
        if host is not None:
            capturing = self._any_open()  # CUDA is not asked about a pointer while any stream captures
            host_fields = self.guard("pinned memory", host.device_op_fields, func, args, kwargs, outputs, capturing)
            host_fields = host_fields or {}
        if graph is not None and returns_to_host(func):
            return  # a capture that succeeded holds no kernel of it (hook_tables.HOST_RESULT_TYPES)
        name = op_name(func)
        index = index_operands(func, args, kwargs, self._runtime.is_recorded_tensor) or None
        tensors = None
        if graph is not None:
            self._graph_memory.captured_writes(behind[1])
        elif self._graph_memory.bases:
            ids = [identity(t) if self._graph_memory.holds(t) else 0 for t in behind[0]]
            tensors = ids if any(ids) else None
        event = self._emit(
            "op",
            op=name,
            stream=stream,
            device=device,
            reads=reads,
            writes=writes,
            index=index,
            tensors=tensors,
            stack=self._stack_field(stack),
            **host_fields,
        )
        if before is not None and before[0] == graph and before[1] == stream:
            after = self._graphs.capture_state(stream)[1]
            if after and after != before[2]:
                self.claim(graph, event["seq"], after[-1], is_trusted(name))
            self._known[stream] = after

    def _view(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, stack: int) -> None:
        """An eager view op whose result views graph memory: a ``view`` event per such result,
        naming it and the tensor it views."""
        is_tensor = self._runtime.is_recorded_tensor
        base = view_base(func, args, kwargs, is_tensor)
        if base is None:
            return
        device = _op_device(args, kwargs, self._runtime)
        stream = self._current_stream(device)
        if stream in self._capturing:
            return  # a view made in a capture is the static output as the program holds it
        results = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
        for t in results:
            if not is_tensor(t) or not self._graph_memory.holds(t):
                continue
            rng = tensor_range(t)
            if rng is None:
                continue
            self._emit(
                "view",
                tensor=identity(t),
                op=op_name(func),
                ranges=[rng],
                base=identity(base),
                stream=stream,
                device=device,
                stack=self._stack_field(stack),
            )

    def _record_stream(self, tensor: torch.Tensor, stream: Any, stack: int) -> None:
        """``t.record_stream(s)`` launches nothing; it tells the allocator about a block's users."""
        if not self._runtime.is_recorded_tensor(tensor):
            return
        raw = self._runtime.stream_handle(stream)
        addr = tensor.untyped_storage().data_ptr()
        device = self._runtime.tensor_device(tensor)
        self.see_stream(raw, device)
        self._emit("record_stream", addr=addr, stream=raw, device=device, stack=self._stack_field(stack))

    # -- launches the recorder sees in Python (Triton) ------------------------------------------
    def begin_launch(self) -> tuple[int, int | None, int]:
        self.op_stack = stack = self.stack()
        self.depth += 1
        stream = self._runtime.current_stream(self._runtime.current_device())
        graph = self._read_graph(stream)
        if graph is None:
            return stack, None, 0
        self._check_before_launch(graph, stream)
        frontier = self._graphs.capture_state(stream)[1]
        return stack, graph, frontier[-1] if frontier else 0

    def end_launch(self) -> None:
        self.depth = max(self.depth - 1, 0)
        self.op_stack = -1

    # -- torch.cuda._gpu_trace callbacks ----------------------------------------------------------
    def _callback(self, name: str, where: str) -> Callable[..., None]:
        hook = getattr(self, "_" + name)

        def callback(*args: Any) -> None:
            self.guard(where, hook, *args)

        return callback

    def _op_stack(self) -> int:
        """An allocation or free inside an op shares the op's stack; elsewhere it has its own."""
        if self.depth and self.op_stack >= 0:
            return self.op_stack
        return self.stack()

    def _on_alloc(self, ptr: int) -> None:
        device = self._runtime.current_device()
        stream = self._current_stream(device)
        stack = self._op_stack()
        graph = self._capturing.get(stream)
        self._emit(
            "alloc", addr=ptr, size=1, stream=stream, device=device, stack=self._stack_field(stack), _graph=graph
        )

    def _on_free(self, ptr: int) -> None:
        self._graph_memory.freed(ptr)
        device = self._runtime.current_device()
        if self._any_open() and not self.depth:
            self._check_before_free(self._runtime.current_stream(device))
        self._emit("free", addr=ptr, device=device, stack=self._stack_field(self._op_stack()))

    def _on_event_create(self, event: int) -> None:
        self._emit("event_create", event=event)

    def _on_event_delete(self, event: int) -> None:
        self._event_capture.pop(event, None)
        self._record_frontier.pop(event, None)
        self._emit("event_delete", event=event)

    def _on_event_record(self, event: int, stream: int) -> None:
        self._last_stream = 0
        graph = self._capturing.get(stream)
        if graph is None:
            self._event_capture.pop(event, None)
        else:
            self._event_capture[event] = graph
        self._check(stream)
        if self._read_graph(stream) is not None:
            self._record_frontier[event] = self._graphs.capture_state(stream)[1]
        else:
            self._record_frontier.pop(event, None)
        self.see_stream(stream, self._runtime.current_device())
        self._emit("event_record", event=event, stream=stream, stack=self._stack_field(self.stack()))

    def _on_event_wait(self, event: int, stream: int) -> None:
        self._last_stream = 0
        self.see_stream(stream, self._runtime.current_device())
        stood_in = None
        graph = self._read_graph(stream)
        if graph is not None:
            known = set(self._known.get(stream, ()))
            now = set(self._graphs.capture_state(stream)[1])
            # The wait added the event's nodes to the frontier; a launch would have replaced it.
            if not known <= now:
                self._catch_up()
            # An op's own waits join what it launched, which its claim takes; a stream that
            # launched unseen since last seen holds nodes no wait brought in.
            elif not self.depth:
                stood_in = self._stand_in(graph, event, stream, known, now)
        stack = self._stack_field(self.stack())
        if stood_in is not None:
            self._emit("event_record", event=event, stream=stood_in, stack=stack, inferred=True)
        self._emit("event_wait", event=event, stream=stream, stack=stack)
        # Waiting on an event recorded in an open capture joins the capture, as in CUDA.
        source = self._event_capture.get(event)
        if source is not None and self._captures[source].open and stream not in self._capturing:
            self._capturing[stream] = source
        if self._read_graph(stream) is not None:
            self._known[stream] = self._graphs.capture_state(stream)[1]

    def _stand_in(self, graph: int, event: int, waiting: int, known: set[int], now: set[int]) -> int | None:
        """The stream a record of ``event`` is stood in for on, just before a wait on it, or
        None. The event's latest record the hooks know of (heard, or stood in for) is what the
        analysis orders the wait by. Where the wait brought in nodes that record does not hold,
        and the record orders nothing the waiting stream holds now (none, no nodes, or not all
        of them there), a library recorded the event itself, unheard: the one other stream
        whose whole frontier the waiting stream now holds, had not held (``known``) and that
        record does not, stands in (its record orders exactly what the real one did: anything
        it did after that would be in its frontier and not in the waiting stream's). A record
        that still holds keeps the wait (what else is new may be the waiting stream's own
        launch, which its last-seen frontier cannot tell). Else, where the record's nodes are
        not all in the waiting stream's frontier, it is not the record waited on, and one on
        the waiting stream itself stands in, so that the wait orders nothing rather than what
        the graph does not. UnseenLaunches::stand_in in the native hooks."""
        recorded = self._record_frontier.get(event)
        held = set(recorded or ())
        joined = None
        brought = now - known - held  # new in the waiting stream's frontier, not in the known record
        if brought:
            streams = self.capture_streams(graph)
            frontiers = {s: self._graphs.capture_state(s)[1] for s in streams}
            elsewhere = {n for s in streams if s != waiting for n in frontiers[s]}
            # A node no other stream's frontier holds may be the waiting stream's own launch,
            # unseen, which its last-seen frontier cannot tell (a wait may bring those nodes
            # back), or that of a stream that went on since: which, no frontier says, and nothing
            # is stood in for (nor caught up here, where it would go on the waiting stream: the
            # next check places it by the chain it ends).
            if brought - elsewhere:
                return None
            if held and held <= now:  # a known record that still holds keeps the wait
                return None
            joined = self._unheard_record(waiting, known, held, brought, frontiers)
        if joined is None and recorded is not None and not held <= now:
            joined = waiting, tuple(self._graphs.capture_state(waiting)[1])
        if joined is None:
            return None
        self._event_capture[event] = graph
        self._record_frontier[event] = joined[1]
        return joined[0]

    def _unheard_record(
        self,
        waiting: int,
        known: set[int],
        recorded: set[int],
        brought: set[int],
        frontiers: dict[int, tuple[int, ...]],
    ) -> tuple[int, tuple[int, ...]] | None:
        """For _stand_in: (the stream, its frontier) of the one other stream of the capture
        whose whole frontier the waiting stream now holds, had not held and the event's known
        record does not; ``frontiers``: the capture's streams' frontiers. What the streams
        launched unseen is caught up first, so that the record comes after their kernels. None
        for none or several: no record is made up (a race may then be reported that the graph
        orders, never one hidden)."""
        # The waiting stream's moved by the wait.
        if any(frontier != self._known.get(s) for s, frontier in frontiers.items() if s != waiting):
            self.brought_by_wait = waiting, frozenset(brought)  # no launch of the waiting stream's
            try:
                self._catch_up()
            finally:
                self.brought_by_wait = None
            frontiers = {s: self._graphs.capture_state(s)[1] for s in frontiers}
        now = set(frontiers[waiting])
        joined = []
        for other, frontier in frontiers.items():
            if other == waiting:
                continue
            nodes = set(frontier)
            if nodes and nodes <= now and not nodes <= known and not nodes <= recorded:
                joined.append((other, frontier))
        return joined[0] if len(joined) == 1 else None

    def _on_stream_sync(self, stream: int) -> None:
        self.see_stream(stream, self._runtime.current_device())
        self._emit("stream_sync", stream=stream)

    def _on_event_sync(self, event: int) -> None:
        self._emit("event_sync", event=event)

    def _on_device_sync(self) -> None:
        self._emit("device_sync", device=self._runtime.current_device())


class NativeHooks:
    """The native hooks (csrc/recorder/): the C++ module's Hooks object, which is their state."""

    kind = "native"

    def __init__(self, module: Any, options: HookOptions, device_type: int | None = None) -> None:
        # device_type: whose tensors are recorded (c10::DeviceType), the runtime's unless given:
        # tests record CPU tensors (0) with the real runtime.
        runtime = options.runtime
        self._device_type = runtime.device_type if device_type is None else device_type
        self._native = module.Hooks(
            options.eager_ops,
            self._device_type,
            options.stack_depth,
            options.max_walk,
            options.shown_path,
            runtime.raw_stream,
            runtime.driver.addresses if runtime.driver is not None else None,
            runtime.native_current_stream,
            runtime.native_stream_cell,
        )
        self.state: HookState = self._native  # its bookkeeping methods are C++'s own
        self._runtime = runtime
        self.callbacks = {h.registry: getattr(module, h.hook) for h in GPU_TRACE_HOOKS}
        self._module = module
        self._host = options.host
        if self._host is not None:  # pinned host memory: the C++ op hooks ask the Python part
            self._native.set_host_part(self._host.native_part(self._native))

    def start(self) -> None:
        self._native.start()

    def stop(self) -> None:
        self._native.stop()
        if self._host is not None:
            self._native.set_host_part(None)

    def release_python(self) -> None:
        self._native.release_python()

    def kernel_access(self, node: int) -> tuple[str | None, list[list[int]]] | None:
        return self._native.kernel_access(node)

    def read_capture(self, graph: int, handle: int) -> CaptureRead:
        native = self._native
        # Caught up first: the read-back leaves unnamed the kernel nodes a recorded launch made.
        native.catch_up()
        # Read in this order: what was caught up (read_graph reads it first, and numbers its
        # nodes), the graph, the claims. The columns of ints come as int64 bytes and become
        # arrays: no int object per node now.
        handles, types, names, edges, events, caught_at = native.read_graph(handle, graph)
        columns = (array("q", handles), types, names, array("q", edges), array("q", events))
        caught = array("q", caught_at)
        return CaptureRead(list(zip(caught[::2], caught[1::2], strict=True)), columns, array("q", native.claims(graph)))

    def use_allocator_facts(self) -> str:
        """Allocations take their exact facts from the allocator's trace tracker from now on
        (attached through the runtime: torch's allocator, or a scripted one): "" when they
        do, else why not (the build's reason, where it has one, says more)."""
        why_not = self._runtime.attach_allocator_tracker(self._native, self._module)
        if why_not:
            return native.tracker_unavailable or why_not
        return ""

    # Why torch's GPU-trace calls come through the Python registries this recording ("" when
    # they come straight from torch's C++), set by interpose.
    interposer_unavailable: str = "not tried"

    def interpose(self, gpu_trace: Any) -> tuple[str, ...]:
        """torch's GPU-trace calls straight from its C++ to the native hooks, where the runtime
        allows it (csrc/recorder/trace_interposer.h): the registries now served that way.
        Others' Python callbacks in those registries still run."""
        if not self._runtime.interposes_gpu_trace:
            self.interposer_unavailable = "the runtime is scripted"
            return ()
        hooks = self._module.interposed_hooks
        if not hooks:  # a build without it, which says why
            self.interposer_unavailable = str(self._module.interposer_unavailable)
            return ()
        lists = [getattr(getattr(gpu_trace, h.registry, None), "callback_list", None) for h in GPU_TRACE_HOOKS]
        self.interposer_unavailable = self._module.install_interposer(self._device_type, lists)
        if self.interposer_unavailable:
            return ()
        return tuple(h.registry for h in GPU_TRACE_HOOKS if h.hook in hooks)

    def stop_interposing(self) -> None:
        if not self.interposer_unavailable:
            self._module.uninstall_interposer()

    def fire_overrides(self, gpu_trace: Any) -> dict[str, Callable[..., None]]:
        """The busiest registries call the native hooks directly (callbacks others add to them
        still run); where a registry is not as expected, the hook joins its list instead."""
        overrides = {}
        for hook in GPU_TRACE_HOOKS:
            target = getattr(gpu_trace, hook.registry, None) if hook.direct else None
            callback_list = getattr(target, "callback_list", None)
            if isinstance(callback_list, list) and callable(getattr(target, "fire_callbacks", None)):
                overrides[hook.registry] = self._module.fire_function(hook.hook, callback_list)
        return overrides

    def gpu_trace_route(self, gpu_trace: Any) -> GpuTraceRoute:
        """The registries served in C++ straight from torch, where the runtime allows it; of
        the others, the busiest fired by the native hooks directly; the rest joined."""
        interposed = self.interpose(gpu_trace)
        try:
            overrides = self.fire_overrides(gpu_trace)
        except BaseException:
            self.stop_interposing()  # a recording that fails to start leaves torch's interpreter
            raise
        return GpuTraceRoute(self.callbacks, interposed, overrides, self.stop_interposing)


def make_hooks(choice: str, options: HookOptions) -> tuple[Hooks, str | None]:
    """The hooks to record with (``choice``: auto, native or python), and why the native ones
    are not used where they could have been."""
    if choice == "python":
        return PythonHooks(options), None
    try:
        return NativeHooks(native.load(), options), None
    except native.NativeUnavailable as exc:
        if choice == "native":
            raise
        print(f"streamrace: native recorder unavailable ({exc}); recording with the Python hooks", file=sys.stderr)
        return PythonHooks(options), str(exc)
