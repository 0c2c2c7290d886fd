"""A CUDA that captures on the CPU: the fake behind the recorder's seam (cuda_runtime.py).

The Recorder and both sets of hooks run on it unchanged, ops on CPU tensors, while this plays
what CUDA and torch.cuda play in a capture:

* streams and the current one (``on``), stream capture into a graph (``FakeGraph``), each
  capturing stream's frontier, events recorded and waited on (a wait on an event recorded in
  a capture joins the waiting stream to it, as in CUDA), the graph's nodes and edges;
* a kernel node for every op that touches bytes (a dispatch mode under the hooks' own, so the
  node appears inside the op, as a launch would), and launches no op made (``launch``: a
  library kernel, a memset), with parameter words that point into blocks;
* a captured graph's replay (``FakeGraph.replay``: what it does to memory is a function the
  program gives, run with ``memcopy``, which no dispatcher sees, as a GPU runs a graph), its
  reset, and its object's collection; a replay into a capturing stream nests the graph as a
  child node of that capture, as CUDA does;
* a caching allocator over fixed-size blocks of one CPU buffer (``alloc``, ``free``: reuse on
  the same stream and pool, ``empty_cache`` handing freed blocks to any stream again, private
  pools for captures and ``use_pool``), initialized by its first allocation as CUDA is; its
  history (bounded, restarted when read), its live blocks, its trace trackers (told of each
  allocation before the allocation hook runs, of each free after), every allocation as
  it was really made (``truth``), which the recorder's facts are held to, and the blocks
  handed out in order (``handed_out``);
* the ``torch.cuda._gpu_trace`` registries the hooks join, fired as torch fires them.

The driver's queries are C functions with libcuda's signatures (ctypes callbacks), given to
both sets of hooks by address: the Python hooks call them through ctypes, the native hooks
from C++, as they call libcuda's.
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch
from torch._utils import CallbackRegistry
from torch.utils._python_dispatch import TorchDispatchMode

from streamrace.record import graph_readback
from streamrace.record.cuda_runtime import HISTORY_MAX_ENTRIES, AllocationFact
from streamrace.record.hook_tables import GPU_TRACE_HOOKS, NODE_TYPES
from streamrace.record.hooks import op_name
from streamrace.record.kernel_params import NodeAccess
from streamrace.record.op_accesses import op_accesses, returns_to_host

# A custom op with its own kernel, as serving engines register them (not one of PyTorch's own:
# its kernel's pointers are cross-checked against its schema).
_LIBRARY = torch.library.Library("streamrace_fake", "DEF")
_LIBRARY.define("scale_(Tensor(a!) x, float factor) -> Tensor(a!)")
_LIBRARY.impl("scale_", lambda x, factor: x.mul_(factor), "CPU")

_SUCCESS, _INVALID_VALUE, _INVALID_HANDLE, _NOT_FOUND, _LOSSY_QUERY = 0, 1, 400, 500, 801
_VOID_P = ctypes.POINTER(ctypes.c_void_p)
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_PARAM_INFO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, _SIZE_P, _SIZE_P)
# cuGraphNodeGetDependencies_v2(node, deps, edge data, count): only the native hooks ask it
_DEPENDENCIES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _VOID_P, ctypes.c_void_p, _SIZE_P)


class _Node:
    __slots__ = ("access", "event", "handle", "packed", "type")

    def __init__(self, handle: int, type_name: str, access: NodeAccess, packed: bool = False, event: int = 0) -> None:
        self.handle, self.type, self.access = handle, NODE_TYPES.index(type_name), access
        self.packed = packed  # a kernel whose parameters come in one buffer (``extra``)
        self.event = event  # an event record or wait node's event


class _Graph:
    __slots__ = ("edges", "handle", "nodes")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.nodes: list[_Node] = []
        self.edges: list[tuple[int, int]] = []


class FakeCuda:
    """The recorder's runtime (CudaRuntime's attributes), scripted."""

    device_type = 0  # c10::DeviceType::CPU: the native hooks record CPU tensors
    reads_graphs = True
    interposes_gpu_trace = False  # the script calls the registries itself

    def __init__(
        self,
        *,
        blocks: int = 32,
        block_bytes: int = 256,
        initialized: bool = False,
        tracker: bool = True,
        history_entries: int = HISTORY_MAX_ENTRIES,
        program_history: bool = False,
        own_storages: bool = False,
        node_dependencies: bool = True,
    ) -> None:
        """``initialized``: CUDA is initialized before recording starts (else at the first
        allocation); ``tracker``: the allocator takes a trace tracker; ``history_entries``:
        the history's bound (HISTORY_MAX_ENTRIES, as the recorder asks); ``program_history``:
        the program recorded its own history before recording began; ``own_storages``: each
        block is a storage of its own, as the caching allocator's are (else views of one arena);
        ``node_dependencies``: the driver answers cuGraphNodeGetDependencies_v2 (CUDA 12.3
        on), else a native catch-up walks the graph."""
        self.block_bytes = block_bytes
        self._arena = torch.zeros(blocks * block_bytes // 4)
        n = block_bytes // 4
        self._blocks = [torch.zeros(n) if own_storages else self._arena[i * n : (i + 1) * n] for i in range(blocks)]
        self._handles = itertools.count(0x10000, 0x10)  # graphs, nodes, events, functions
        # The current stream, in a cell the native hooks read without Python, as they read
        # c10's current stream (``stream`` reads and sets it).
        self.native_stream_cell = ctypes.c_int64(0)
        self.native_current_stream: Callable[[int], int] | None = None
        self._initialized = initialized
        self._takes_tracker = tracker
        self._trackers: list[Callable[..., None]] = []
        self._history_on = program_history
        self._history_entries = history_entries
        self._history: list[dict[str, Any]] = []
        self._history_lost = False  # the bounded history dropped its oldest entries
        self._live: dict[int, AllocationFact] = {}
        self._unused = list(range(blocks))
        self._freed: dict[tuple[int, Any], list[int]] = {}  # (stream, pool) -> blocks freed there, latest last
        self._owner: dict[int, tuple[int, int, Any]] = {}  # addr -> (block, stream, pool)
        self._capture_pools: dict[int, tuple[int, int]] = {}  # graph -> its pool
        self.pool: tuple[int, int] | None = None  # where eager allocations go (``use_pool``)
        self.truth: list[tuple[int, int, int, tuple[int, int] | None]] = []  # (addr, size, stream, pool)
        self._graphs: dict[int, _Graph] = {}
        self._capturing: dict[int, int] = {}  # stream -> graph
        self._frontier: dict[int, tuple[int, ...]] = {}  # capturing stream -> its frontier
        self._events: dict[int, tuple[int, tuple[int, ...]] | None] = {}  # event -> (graph, frontier) recorded
        self._nodes: dict[int, _Node] = {}
        self._function_names: dict[int, ctypes.Array] = {}  # CUfunction -> its name, kept alive
        self._functions: dict[str, int] = {}
        self._kept: dict[int, ctypes.Array] = {}  # per stream: the frontier array last handed out
        self._pools = itertools.count(1)  # implicit graph pools, as torch numbers them
        self.hidden_pointers: dict[str, list[int]] = {}  # op -> words its kernel holds besides its tensors
        self.graph_launches: list[tuple[int, int]] = []  # (graph, stream) of each replay, in order
        self.handed_out: list[tuple[int, int]] = []  # (block, stream) of each allocation, in order
        self.registries = SimpleNamespace(**{h.registry: CallbackRegistry(h.registry) for h in GPU_TRACE_HOOKS})
        self._callbacks = {
            attr: graph_readback.prototype(attr)(getattr(self, f"_c_{attr}")) for attr in graph_readback.SIGNATURES
        }
        addresses = {
            symbol: ctypes.cast(self._callbacks[attr], ctypes.c_void_p).value
            for attr, (symbol, _) in graph_readback.SIGNATURES.items()
        }
        # The parameter layouts the native hooks read kernel parameters with (Python reads
        # them through cuda-bindings, here the scripted node_access).
        self._param_info = _PARAM_INFO(self._c_param_info)
        for symbol in ("cuFuncGetParamInfo", "cuKernelGetParamInfo"):
            addresses[symbol] = ctypes.cast(self._param_info, ctypes.c_void_p).value
        self._dependencies = _DEPENDENCIES(self._c_node_dependencies)
        if node_dependencies:
            addresses["cuGraphNodeGetDependencies_v2"] = ctypes.cast(self._dependencies, ctypes.c_void_p).value
        self.dependencies_fail = False  # the dependency query fails (a driver error)
        self.dependency_queries = 0  # cuGraphNodeGetDependencies_v2 calls
        self.node_reads = 0  # cuGraphGetNodes calls that read nodes (a walk of the graph)
        self.kernel_param_reads = 0  # cuGraphKernelNodeGetParams_v2 calls
        self._param_buffers: dict[int, tuple[Any, list[Any]]] = {}  # node -> its kernelParams, kept alive
        self._last_params: list[int] = []  # sizes of the parameters of the node read last
        self.driver = graph_readback.Driver.at(addresses)
        self.graphs = graph_readback.GraphReadback(self.driver)
        self._pinned: set[int] = set()  # storages of the fake host memory (pinned)

    @property
    def stream(self) -> int:
        """The current stream."""
        return self.native_stream_cell.value

    @stream.setter
    def stream(self, stream: int) -> None:
        self.native_stream_cell.value = stream

    # -- what the recorder asks (CudaRuntime's interface) -----------------------------------
    def is_recorded_tensor(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.device.type == "cpu" and not self.is_host_tensor(value)

    def is_host_tensor(self, value: Any) -> bool:
        """The fake's host memory: CPU tensors over storages ``pinned`` made (device memory is
        every other CPU tensor)."""
        return (
            isinstance(value, torch.Tensor)
            and value.device.type == "cpu"
            and value.untyped_storage().data_ptr() in self._pinned
        )

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return self.is_host_tensor(tensor)

    def pinned(self, numel: int) -> torch.Tensor:
        """A tensor of pinned host memory (float32): its storage is the host's while it lives."""
        t = torch.zeros(numel)
        start = t.untyped_storage().data_ptr()
        self._pinned.add(start)
        weakref.finalize(t.untyped_storage(), self._pinned.discard, start)
        from streamrace.record.installation import active

        recorder = active()
        if recorder is not None and recorder.host_memory is not None:
            recorder.host_memory.see(t)  # as the hooks would at torch.empty(..., pin_memory=True)
        return t

    @staticmethod
    def tensor_device(tensor: torch.Tensor) -> int:
        return 0

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def missing() -> str | None:
        return None  # the fake is CUDA, whatever torch is

    def current_stream(self, device: int) -> int:
        return self.stream

    @staticmethod
    def raw_stream(device_type: int, device_index: int, stream_id: int) -> int:
        raise AssertionError("a scripted capture's streams are raw handles already")

    @staticmethod
    def stream_handle(stream: Any) -> int:
        raise AssertionError("record_stream is not scripted")

    def gpu_trace(self) -> SimpleNamespace:
        return self.registries

    @property
    def graph_class(self) -> type:
        return FakeGraph

    def initialized(self) -> bool:
        return self._initialized

    def history_enabled(self) -> bool:
        return self._history_on

    def record_history(self, enabled: bool) -> None:
        self._history_on = enabled
        self._history, self._history_lost = [], False

    def take_history(self) -> tuple[list[dict[str, Any]], bool]:
        entries, complete = self._history, not self._history_lost
        self._history, self._history_lost = [], False
        return entries, complete

    def live_blocks(self) -> dict[int, AllocationFact]:
        return dict(self._live)

    def attach_allocator_tracker(self, native_hooks: Any, module: Any) -> str:
        if not self._takes_tracker:
            return "the scripted allocator takes no trace tracker"
        if not self._initialized:
            return "the CUDA caching allocator is not initialized"
        if module.allocator_trace not in self._trackers:
            self._trackers.append(module.allocator_trace)
        return native_hooks.use_allocator_facts(True)

    def node_access(self, node: int, type_name: str) -> NodeAccess:
        return self._nodes[node].access

    # -- the program's side: streams, events, memory, launches ------------------------------
    def implicit_pool(self) -> tuple[int, int]:
        return next(self._pools), 0

    @contextmanager
    def on(self, stream: int) -> Iterator[None]:
        """``torch.cuda.stream(stream)``."""
        outer, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = outer

    @contextmanager
    def use_pool(self, pool: tuple[int, int]) -> Iterator[None]:
        """``torch.cuda.use_mem_pool``: eager allocations from a private pool."""
        outer, self.pool = self.pool, pool
        try:
            yield
        finally:
            self.pool = outer

    def alloc(self, nbytes: int | None = None) -> torch.Tensor:
        """``nbytes`` (default: a whole block) on the current stream, from its capture's pool
        or the current one: a block freed there if any (the latest), else a new one."""
        return self._allocate(nbytes, fire=True)[0]

    def alloc_racing(self, sizes: Sequence[int]) -> list[torch.Tensor]:
        """Allocations as two threads make them: the allocator makes them in order, their
        allocation hooks run in the other order (the history's order is not the hooks')."""
        made = [self._allocate(nbytes, fire=False) for nbytes in sizes]
        for _, addr in reversed(made):
            self.registries.MemoryAllocationCallbacks.fire_callbacks(addr)
        return [tensor for tensor, _ in made]

    def _allocate(self, nbytes: int | None, fire: bool) -> tuple[torch.Tensor, int]:
        self._initialized = True  # CUDA initializes at the first allocation
        size = self.block_bytes if nbytes is None else nbytes
        assert 0 < size <= self.block_bytes
        graph = self._capturing.get(self.stream)
        pool = self._capture_pools[graph] if graph is not None else self.pool
        freed = self._freed.get((self.stream, pool))
        block = freed.pop() if freed else self._unused.pop(0)
        tensor = self._blocks[block]
        addr = tensor.data_ptr()
        self._owner[addr] = (block, self.stream, pool)
        self._live[addr] = (size, self.stream, pool)
        self.truth.append((addr, size, self.stream, pool))
        self.handed_out.append((block, self.stream))
        for tracker in self._trackers:  # inside the allocator, before the hook
            tracker(0, addr, size, self.stream, *(pool or (0, 0)))
        if self._history_on:
            if len(self._history) == self._history_entries:
                del self._history[0]
                self._history_lost = True
            entry = {"action": "alloc", "addr": addr, "size": size, "stream": self.stream, "pool_id": pool or (0, 0)}
            self._history.append(entry)
        if fire:
            self.registries.MemoryAllocationCallbacks.fire_callbacks(addr)
        return tensor, addr

    def free(self, tensor: torch.Tensor) -> None:
        addr = tensor.data_ptr()
        block, stream, pool = self._owner.pop(addr)
        del self._live[addr]
        self._freed.setdefault((stream, pool), []).append(block)
        self.registries.MemoryDeallocationCallbacks.fire_callbacks(addr)
        for tracker in self._trackers:  # the allocator frees after the hook
            tracker(1, addr, 0, 0, 0, 0)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` (``torch.cuda.graph`` calls it before capturing): the
        freed blocks go back to the device, for any stream or pool to get again."""
        for blocks in self._freed.values():
            self._unused += blocks
        self._freed.clear()
        self._unused.sort()

    def capturing(self) -> bool:
        """Whether the current stream captures."""
        return self._capturing.get(self.stream) is not None

    def event(self) -> int:
        event = next(self._handles)
        self._events[event] = None
        self.registries.EventCreationCallbacks.fire_callbacks(event)
        return event

    def record(self, event: int, external: bool = False, heard: bool = True) -> None:
        """``event.record()`` on the current stream: in a capture, it marks the frontier; an
        ``Event(external=True)``'s is an event record node of the graph instead. ``heard``:
        torch's GPU-trace registries hear it (not a library's own ``cudaEventRecord``)."""
        graph = self._capturing.get(self.stream)
        if graph is not None and external:
            self.launch("eventrecord", event=event)
        else:
            self._events[event] = (graph, self._frontier[self.stream]) if graph is not None else None
        if heard:
            self.registries.EventRecordCallbacks.fire_callbacks(event, self.stream)

    def wait(self, event: int, external: bool = False, heard: bool = True) -> None:
        """``stream.wait_event(event)``: an event recorded in a capture joins the stream to it;
        an ``Event(external=True)``'s wait in a capture is an event wait node of the graph.
        ``heard``: torch's GPU-trace registries hear it (not a library's own
        ``cudaStreamWaitEvent``)."""
        recorded = self._events[event]
        if external and self._capturing.get(self.stream) is not None:
            self.launch("waitevent", event=event)
        elif recorded is not None:
            graph, frontier = recorded
            if self._capturing.setdefault(self.stream, graph) != graph:
                raise RuntimeError("cudaErrorStreamCaptureIsolation: the stream captures into another graph")
            mine = self._frontier.get(self.stream, ())
            self._frontier[self.stream] = mine + tuple(n for n in frontier if n not in mine)
        if heard:
            self.registries.EventWaitCallbacks.fire_callbacks(event, self.stream)

    def delete_event(self, event: int) -> None:
        del self._events[event]
        self.registries.EventDeletionCallbacks.fire_callbacks(event)

    def synchronize(self, event: int | None = None) -> None:
        """``event.synchronize()``, else ``stream.synchronize()`` of the current stream."""
        if self._capturing.get(self.stream) is not None:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: synchronizing in a capture")
        if event is not None:
            self.registries.EventSynchronizationCallbacks.fire_callbacks(event)
        else:
            self.registries.StreamSynchronizationCallbacks.fire_callbacks(self.stream)

    def device_synchronize(self) -> None:
        self.registries.DeviceSynchronizationCallbacks.fire_callbacks()

    def launch(
        self,
        type_name: str,
        name: str | None = None,
        params: Sequence[Sequence[int]] = (),
        writes: Sequence[dict[str, int]] = (),
        packed: bool = False,
        event: int = 0,
    ) -> None:
        """A node on the current stream, if it captures (eagerly, the work just runs).
        ``packed``: a kernel launched with its parameters in one buffer (``extra``, its size
        given first) instead of an array of pointers."""
        graph = self._capturing.get(self.stream)
        if graph is None:
            return
        handle = next(self._handles)
        access = NodeAccess(type_name, name, writes=list(writes), params=[list(p) for p in params])
        node = self._nodes[handle] = _Node(handle, type_name, access, packed, event)
        if name is not None:
            self._functions.setdefault(name, next(self._handles))
        g = self._graphs[graph]
        g.nodes.append(node)
        g.edges += [(dep, handle) for dep in self._frontier[self.stream]]
        self._frontier[self.stream] = (handle,)

    def begin_capture(self, pool: tuple[int, int]) -> None:
        if self.stream in self._capturing:
            raise RuntimeError("cudaErrorIllegalState: the stream is capturing already")
        graph = next(self._handles)
        self._graphs[graph] = _Graph(graph)
        self._capture_pools[graph] = pool
        self._capturing[self.stream] = graph
        self._frontier[self.stream] = ()

    def launch_graph(self, graph: int, work: Callable[[], None] | None) -> None:
        """``cudaGraphLaunch`` on the current stream: the graph's work runs (eagerly), or, on a
        capturing stream, the graph becomes a child-graph node of that capture."""
        if self._capturing.get(self.stream) is not None:
            self.launch("graph")
            return
        if work is not None:
            work()
        self.graph_launches.append((graph, self.stream))

    def end_capture(self) -> int:
        """Every stream the capture forked must have joined the capturing one again; the graph."""
        graph = self._capturing[self.stream]
        joined = self._ancestors(graph, self._frontier[self.stream])
        for stream, g in list(self._capturing.items()):
            if g != graph:
                continue
            if not set(self._frontier[stream]) <= joined:
                raise RuntimeError("cudaErrorStreamCaptureUnjoined: a forked stream did not join")
            del self._capturing[stream], self._frontier[stream]
        return graph

    def _ancestors(self, graph: int, nodes: tuple[int, ...]) -> set[int]:
        parents: dict[int, list[int]] = {}
        for src, dst in self._graphs[graph].edges:
            parents.setdefault(dst, []).append(src)
        seen, todo = set(), list(nodes)
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo += parents.get(node, [])
        return seen

    # -- the driver: libcuda's signatures (graph_readback.SIGNATURES); pointers come as ctypes ones --
    def _c_capture_info(self, stream, status, capture_id, graph, deps, count) -> int:
        stream = stream or 0
        captured = self._capturing.get(stream)
        frontier = self._frontier.get(stream, ()) if captured is not None else ()
        status[0] = 1 if captured is not None else 0  # CU_STREAM_CAPTURE_STATUS_ACTIVE, _NONE
        capture_id[0] = captured or 0
        graph[0] = captured
        kept = self._kept[stream] = (ctypes.c_void_p * max(len(frontier), 1))(*frontier)
        deps[0] = ctypes.cast(kept, _VOID_P)
        count[0] = len(frontier)
        return _SUCCESS

    def _c_get_nodes(self, graph, nodes, count) -> int:
        g = self._graphs.get(graph or 0)
        if g is None:
            return _INVALID_HANDLE
        if nodes is None:
            count[0] = len(g.nodes)
            return _SUCCESS
        if count[0] == 0:
            return _INVALID_VALUE  # as libcuda answers a node array with a zero count
        self.node_reads += 1
        out = ctypes.cast(nodes, _VOID_P)
        written = min(count[0], len(g.nodes))
        for i in range(written):
            out[i] = g.nodes[i].handle
        count[0] = written
        return _SUCCESS

    def _c_node_dependencies(self, node, deps, edge_data, count) -> int:
        """The nodes ``node`` depends on; as libcuda, a query for them without room for their
        edge data is refused (where an edge has data: here always, to be strict)."""
        self.dependency_queries += 1
        found = self._nodes.get(node or 0)
        if self.dependencies_fail or found is None:
            return _INVALID_HANDLE
        graph = next(g for g in self._graphs.values() if found in g.nodes)
        parents = [src for src, dst in graph.edges if dst == found.handle]
        if not deps:
            count[0] = len(parents)
            return _SUCCESS
        if not edge_data:
            return _LOSSY_QUERY
        written = min(count[0], len(parents))
        for i in range(written):
            deps[i] = parents[i]
        ctypes.memset(edge_data, 0, 8 * written)  # CUgraphEdgeData: 8 bytes, all default
        count[0] = written
        return _SUCCESS

    def _c_record_node_event(self, node, event_out) -> int:
        return self._node_event(node, "eventrecord", event_out)

    def _c_wait_node_event(self, node, event_out) -> int:
        return self._node_event(node, "waitevent", event_out)

    def _node_event(self, node, type_name: str, event_out) -> int:
        found = self._nodes.get(node or 0)
        if found is None or found.type != NODE_TYPES.index(type_name):
            return _INVALID_VALUE
        event_out[0] = found.event
        return _SUCCESS

    def _c_node_type(self, node, type_out) -> int:
        found = self._nodes.get(node or 0)
        if found is None:
            return _INVALID_HANDLE
        type_out[0] = found.type
        return _SUCCESS

    def _c_kernel_params(self, node, params) -> int:
        self.kernel_param_reads += 1
        found = self._nodes.get(node or 0)
        if found is None or found.access.kind != "kernel":
            return _INVALID_VALUE
        params.contents.func = self._functions.get(found.access.name)
        if node not in self._param_buffers:
            if found.packed:  # {CU_LAUNCH_PARAM_BUFFER_SIZE, &size, ..._POINTER, buffer, END}
                words = [w for p in found.access.params for w in p]
                buffer = (ctypes.c_uint64 * max(len(words), 1))(*words)
                size = ctypes.c_size_t(8 * len(words))
                extra = (ctypes.c_void_p * 5)(2, ctypes.addressof(size), 1, ctypes.addressof(buffer), 0)
                self._param_buffers[node] = (extra, [buffer, size])
            else:
                buffers = [(ctypes.c_uint64 * max(len(p), 1))(*p) for p in found.access.params]
                pointers = (ctypes.c_void_p * max(len(buffers), 1))(*(ctypes.addressof(b) for b in buffers))
                self._param_buffers[node] = (pointers, buffers)
        address = ctypes.addressof(self._param_buffers[node][0])
        if found.packed:
            params.contents.extra = address
        else:
            params.contents.kernel_params = address
        self._last_params = [8 * len(p) for p in found.access.params]
        return _SUCCESS

    def _c_param_info(self, function, index, offset, size) -> int:
        """A fake function takes whatever its launch passed: this answers for the node whose
        parameters were read last (the native hooks ask right after reading them)."""
        if index >= len(self._last_params):
            return _INVALID_VALUE
        offset[0] = sum(self._last_params[:index])
        size[0] = self._last_params[index]
        return _SUCCESS

    def _c_func_name(self, name, function) -> int:
        for text, handle in self._functions.items():
            if handle == function:
                buffer = self._function_names.setdefault(handle, ctypes.create_string_buffer(text.encode()))
                ctypes.cast(name, _VOID_P)[0] = ctypes.addressof(buffer)
                return _SUCCESS
        return _NOT_FOUND

    def _c_kernel_name(self, name, kernel) -> int:
        return _NOT_FOUND  # every fake kernel is a CUfunction

    def _c_edges(self, graph, sources, targets, data, count) -> int:
        g = self._graphs.get(graph or 0)
        if g is None:
            return _INVALID_HANDLE
        if sources is None:
            count[0] = len(g.edges)
            return _SUCCESS
        out_from, out_to = ctypes.cast(sources, _VOID_P), ctypes.cast(targets, _VOID_P)
        written = min(count[0], len(g.edges))
        for i in range(written):
            out_from[i], out_to[i] = g.edges[i]
        count[0] = written  # edge data stays zero: no programmatic edges
        return _SUCCESS


class FakeGraph:
    """``torch.cuda.CUDAGraph`` on a FakeCuda: the recorder wraps its capture_begin/capture_end,
    replay and reset. ``work``: what a replay does to memory (use ``memcopy``: a GPU running a
    graph dispatches no op), settable until the first replay."""

    def __init__(
        self, fake: FakeCuda, work: Callable[[], None] | None = None, prologue: Callable[[], None] | None = None
    ) -> None:
        self._fake = fake
        self._pool: tuple[int, int] | None = None
        self._graph: int | None = None  # the captured graph, once its capture has ended
        self.work = work
        # What torch's generator-state prologue does inside capture_begin (before the capture
        # starts) and replay (before the launch): fills on the current stream.
        self.prologue = prologue

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if self._graph is not None:
            raise RuntimeError("this CUDAGraph instance already owns a captured graph: reset() it first")
        if self.prologue is not None:
            self.prologue()
        self._pool = tuple(pool) if pool else self._fake.implicit_pool()
        self._fake.begin_capture(self._pool)

    def capture_end(self) -> None:
        self._graph = self._fake.end_capture()

    def replay(self) -> None:
        if self._graph is None:
            raise RuntimeError("replay of a CUDAGraph that holds no captured graph")
        if self.prologue is not None:
            self.prologue()
        self._fake.launch_graph(self._graph, self.work)

    def reset(self) -> None:
        self._graph = None

    def pool(self) -> tuple[int, int]:
        return self._pool


def memcopy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy ``src``'s bytes into ``dst`` where no dispatcher sees it: a replayed graph's work."""
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), min(dst.nbytes, src.nbytes))


class Kernels(TorchDispatchMode):
    """A kernel node for each op that touches bytes, launched inside the op: entered before the
    recorder starts, so the Python hooks' own mode sees each op first."""

    def __init__(self, fake: FakeCuda) -> None:
        super().__init__()
        self._fake = fake

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        outputs = func(*args, **kwargs)
        if returns_to_host(func) and self._fake.capturing():
            return outputs  # CUDA would refuse its copy to the host in a capture: it launched nothing
        reads, writes = op_accesses(func, args, kwargs, outputs, self._fake.is_recorded_tensor)
        if reads or writes:
            name = op_name(func)
            words = [[r["addr"]] for r in (*reads, *writes)] + [self._fake.hidden_pointers.get(name, [])]
            self._fake.launch("kernel", f"{name.split('::')[-1].split('.')[0]}_kernel", params=words)
        return outputs
