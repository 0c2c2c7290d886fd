"""Reading a capture's own graph back: its nodes, their kinds, the edges, each stream's frontier.

Only queries, which CUDA allows on a graph while it is being captured: nothing here creates
work, allocates memory or synchronizes. They go straight to the driver (libcuda, through
ctypes): the recorder asks around every launch, and a plain C call costs a fraction of a
binding call. Kernel parameters (streamrace/record/kernel_params.py) are read through
cuda-bindings, which is optional: without it the trace lacks the ``graph`` events (the header
says so).

The driver is a ``Driver``: the C functions this module calls, by libcuda's symbol names and
with their signatures. ``libcuda()`` loads the real one; ``Driver.at(addresses)`` takes any
functions with those signatures (tests/fake_cuda.py's scripted capture), and the native hooks
take the same addresses (``Driver.addresses``), so one fake serves both sets of hooks.

The driver symbols are the versioned ones CUDA 12.3 introduced and CUDA 13 drivers still
export, so one build reads graphs on both.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamrace.record.hook_tables import CAPTURE_STATUS_ACTIVE, MAX_KERNEL_NAME, node_type_name

try:  # cuda-bindings 12.x/13.x; optional
    from cuda.bindings import driver as _drv
    from cuda.bindings import runtime as _rt
except ImportError:  # pragma: no cover - exercised on machines without cuda-bindings
    _drv = _rt = None

_P = ctypes.c_void_p
_DEPS = ctypes.POINTER(ctypes.POINTER(_P))
_SIZE = ctypes.POINTER(ctypes.c_size_t)
_PROGRAMMATIC = 1  # CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC


# What reading a graph back gives: (node handles, node types, kernel names or None, edges
# flattened as (from id, to id, 1 if programmatic else 0) triples, the event of each event
# record or wait node or 0). Columns of ints and shared strs, made in a capture's end: the
# graph event's per-node objects wait (GraphRead).
GraphColumns = tuple[Sequence[int], list[str], list[str | None], Sequence[int], Sequence[int]]

# Node types whose event the graph event names: what every replay records or waits on.
EVENT_NODE_TYPES = ("eventrecord", "waitevent")


@dataclass
class GraphRead:
    """A graph read back at its capture's end, in columns; ``nodes`` and ``edges`` make the
    graph event's objects later, off the capture's clock."""

    handles: Sequence[int]
    types: list[str]
    names: list[str | None]
    edge_triples: Sequence[int]
    events: Sequence[int] | None = None  # per node: its event (record and wait nodes), else 0

    def nodes(self) -> list[dict[str, Any]]:
        """Nodes in creation order as {id, type[, name][, event]}."""
        nodes: list[dict[str, Any]] = []
        events = self.events or [0] * len(self.types)
        for i, (kind, name, event) in enumerate(zip(self.types, self.names, events, strict=True)):
            entry: dict[str, Any] = {"id": i, "type": kind}
            if name:
                entry["name"] = name
            if event:
                entry["event"] = event
            nodes.append(entry)
        return nodes

    def edges(self) -> list[list[Any]]:
        """Edges by node id, [from, to] or [from, to, "programmatic"] (a dependent-launch edge,
        which does not order completion)."""
        t = self.edge_triples
        return [[t[k], t[k + 1], "programmatic"] if t[k + 2] else [t[k], t[k + 1]] for k in range(0, len(t), 3)]


class KernelNodeParams(ctypes.Structure):
    _fields_ = [  # CUDA_KERNEL_NODE_PARAMS_v2
        ("func", _P),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem_bytes", ctypes.c_uint),
        ("kernel_params", _P),
        ("extra", _P),
        ("kern", _P),
        ("ctx", _P),
    ]


class EdgeData(ctypes.Structure):
    _fields_ = [  # CUgraphEdgeData
        ("from_port", ctypes.c_ubyte),
        ("to_port", ctypes.c_ubyte),
        ("type", ctypes.c_ubyte),
        ("reserved", ctypes.c_ubyte * 5),
    ]


# Driver attribute -> (libcuda symbol, argument types); every one returns a CUresult (int).
SIGNATURES: dict[str, tuple[str, list[Any]]] = {
    "capture_info": (
        "cuStreamGetCaptureInfo_v2",
        [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(_P), _DEPS, _SIZE],
    ),
    "get_nodes": ("cuGraphGetNodes", [_P, _P, _SIZE]),
    "node_type": ("cuGraphNodeGetType", [_P, ctypes.POINTER(ctypes.c_int)]),
    "kernel_params": ("cuGraphKernelNodeGetParams_v2", [_P, ctypes.POINTER(KernelNodeParams)]),
    "func_name": ("cuFuncGetName", [ctypes.POINTER(ctypes.c_char_p), _P]),
    "kernel_name": ("cuKernelGetName", [ctypes.POINTER(ctypes.c_char_p), _P]),
    "edges": ("cuGraphGetEdges_v2", [_P, _P, _P, _P, _SIZE]),
    "record_node_event": ("cuGraphEventRecordNodeGetEvent", [_P, ctypes.POINTER(_P)]),
    "wait_node_event": ("cuGraphEventWaitNodeGetEvent", [_P, ctypes.POINTER(_P)]),
}


def prototype(attribute: str) -> Any:
    """The C function type of a driver attribute (a fake's functions are made with it)."""
    return ctypes.CFUNCTYPE(ctypes.c_int, *SIGNATURES[attribute][1])


class Driver:
    """The driver functions the capture path calls (attributes named as in SIGNATURES)."""

    # Set in __init__, one per SIGNATURES entry: ctypes functions returning a CUresult.
    capture_info: Callable[..., int]
    get_nodes: Callable[..., int]
    node_type: Callable[..., int]
    kernel_params: Callable[..., int]
    func_name: Callable[..., int]
    kernel_name: Callable[..., int]
    edges: Callable[..., int]
    record_node_event: Callable[..., int]
    wait_node_event: Callable[..., int]

    def __init__(self, functions: dict[str, Any], addresses: dict[str, int] | None) -> None:
        for attribute, fn in functions.items():
            setattr(self, attribute, fn)
        # symbol -> address, for the native hooks; None: they look libcuda up themselves.
        self.addresses = addresses

    @classmethod
    def at(cls, addresses: dict[str, int]) -> Driver:
        """The functions at these addresses (by libcuda symbol name)."""
        functions = {attr: prototype(attr)(addresses[symbol]) for attr, (symbol, _) in SIGNATURES.items()}
        return cls(functions, dict(addresses))


def libcuda() -> Driver | None:
    """libcuda's functions, or None where the driver cannot be loaded."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        functions = {attr: getattr(lib, symbol) for attr, (symbol, _) in SIGNATURES.items()}
    except (OSError, AttributeError):
        return None
    for attr, fn in functions.items():
        fn.argtypes, fn.restype = SIGNATURES[attr][1], ctypes.c_int
    return Driver(functions, None)


LIBCUDA = libcuda()
AVAILABLE = _rt is not None and LIBCUDA is not None


class ReadbackError(RuntimeError):
    pass


def _ok(result: Any) -> Any:
    err = result[0]
    if int(err) != 0:
        raise ReadbackError(str(err))
    return result[1:] if len(result) > 2 else result[1]


def _check(err: int, what: str) -> None:
    if err != 0:
        raise ReadbackError(f"{what} failed (CUresult {err})")


class GraphReadback:
    """The capture path's queries, through one driver."""

    def __init__(self, driver: Driver | None) -> None:
        self.driver = driver

    @property
    def _cuda(self) -> Driver:
        # Graphs are read only where the driver loaded (CudaRuntime.reads_graphs).
        assert self.driver is not None, "the CUDA driver is not loaded"
        return self.driver

    def capture_state(self, stream: int) -> tuple[int | None, tuple[int, ...]]:
        """(the graph the stream is capturing into, or None; its frontier: the nodes the
        stream's next launch will depend on). A launch on the stream makes its node the whole
        frontier."""
        status, capture_id, graph = ctypes.c_int(0), ctypes.c_uint64(0), _P()
        deps, count = ctypes.POINTER(_P)(), ctypes.c_size_t(0)
        _check(
            self._cuda.capture_info(
                stream, ctypes.byref(status), ctypes.byref(capture_id), ctypes.byref(graph), ctypes.byref(deps),
                ctypes.byref(count),
            ),
            "cuStreamGetCaptureInfo",
        )  # fmt: skip
        if status.value != CAPTURE_STATUS_ACTIVE:
            return None, ()
        return graph.value, tuple(deps[i] or 0 for i in range(count.value))

    def capture_graph(self, stream: int) -> int | None:
        """The graph a stream is capturing into (as an int handle), or None if it is not capturing."""
        return self.capture_state(stream)[0]

    def node_count(self, graph: int) -> int:
        """Nodes in the graph so far (CUDA counts them one by one: not for every launch)."""
        count = ctypes.c_size_t(0)
        _check(self._cuda.get_nodes(graph, None, ctypes.byref(count)), "cuGraphGetNodes")
        return count.value

    def node_handles(self, graph: int) -> list[int]:
        """Every node of the graph, in creation order."""
        count = ctypes.c_size_t(self.node_count(graph))
        if not count.value:  # the driver refuses a node array with a zero count (an empty capture)
            return []
        nodes = (_P * count.value)()
        _check(self._cuda.get_nodes(graph, nodes, ctypes.byref(count)), "cuGraphGetNodes")
        return [nodes[i] or 0 for i in range(count.value)]

    def node_type(self, node: int) -> str:
        kind = ctypes.c_int(0)
        _check(self._cuda.node_type(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        return node_type_name(kind.value)

    def kernel_name(self, node: int) -> str | None:
        params = KernelNodeParams()
        if self._cuda.kernel_params(node, ctypes.byref(params)) != 0:
            return None
        name = ctypes.c_char_p()
        if params.func:
            err = self._cuda.func_name(ctypes.byref(name), params.func)
        elif params.kern:
            err = self._cuda.kernel_name(ctypes.byref(name), params.kern)
        else:
            return None
        if err != 0 or not name.value:
            return None
        return name.value.decode(errors="replace")[:MAX_KERNEL_NAME]

    def node_event(self, node: int, kind: str) -> int:
        """The event an event record or wait node records or waits on (0: none, or another
        kind of node)."""
        if kind not in EVENT_NODE_TYPES:
            return 0
        query = self._cuda.record_node_event if kind == "eventrecord" else self._cuda.wait_node_event
        event = _P()
        return (event.value or 0) if query(node, ctypes.byref(event)) == 0 else 0

    def describe_nodes(self, handles: list[int]) -> list[tuple[str, str | None]]:
        """(type, kernel name or None) of each node (the native hooks do the same in C++)."""
        return [
            (kind, self.kernel_name(node) if kind == "kernel" else None)
            for node in handles
            for kind in (self.node_type(node),)
        ]

    def nodes_since(self, graph: int, last_claim: int, floor: int) -> list[tuple[int, int, str]]:
        """(index, handle, type) of the nodes after the one ``last_claim`` names, and from index
        ``floor`` on at least (the native hooks do the same in C++)."""
        handles = self.node_handles(graph)
        seen = floor
        if last_claim:
            for i in range(len(handles) - 1, floor - 1, -1):
                if handles[i] == last_claim:
                    seen = i + 1
                    break
        return [(i, handles[i], self.node_type(handles[i])) for i in range(seen, len(handles))]

    def read_graph(self, graph: int) -> GraphColumns:
        """A graph's GraphColumns: nodes in creation order, edges by node id (the native hooks
        do the same in C++)."""
        handles = self.node_handles(graph)
        index = {node: i for i, node in enumerate(handles)}
        described = self.describe_nodes(handles)
        types = [kind for kind, _ in described]
        names = [name for _, name in described]
        driver = self._cuda
        count = ctypes.c_size_t(0)
        _check(driver.edges(graph, None, None, None, ctypes.byref(count)), "cuGraphGetEdges")
        triples: list[int] = []
        if count.value:
            sources, targets, data = (_P * count.value)(), (_P * count.value)(), (EdgeData * count.value)()
            _check(driver.edges(graph, sources, targets, data, ctypes.byref(count)), "cuGraphGetEdges")
            for k in range(count.value):
                # A NULL handle reads as None; node_handles lists it as 0.
                triples += (index[sources[k] or 0], index[targets[k] or 0], int(data[k].type == _PROGRAMMATIC))
        events = [self.node_event(node, kind) for node, kind in zip(handles, types, strict=True)]
        return handles, types, names, triples, events
