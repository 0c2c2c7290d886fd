"""Reading a capture's own graph back through cuda-bindings: the nodes, their kinds, the edges.

Only queries, which CUDA allows on a graph while it is being captured: nothing here creates
work, allocates memory or synchronizes. Without cuda-bindings the recorder still works; the
trace then lacks the ``graph`` events (the header says so).
"""

from __future__ import annotations

import ctypes
from typing import Any

try:  # cuda-bindings 12.x/13.x; optional
    from cuda.bindings import driver as _drv
    from cuda.bindings import runtime as _rt
except ImportError:  # pragma: no cover - exercised on machines without cuda-bindings
    _drv = _rt = None

AVAILABLE = _rt is not None
MAX_KERNEL_NAME = 200


def _driver_node_count() -> Any:
    """cuGraphGetNodes through ctypes: the recorder asks for a node count around every op, and
    a plain C call costs a fraction of a binding call. None where libcuda cannot be loaded."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        get_nodes = libcuda.cuGraphGetNodes
    except (OSError, AttributeError):
        return None
    get_nodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    get_nodes.restype = ctypes.c_int
    return get_nodes


_GET_NODES = _driver_node_count() if AVAILABLE else None


class ReadbackError(RuntimeError):
    pass


def _ok(result: Any) -> Any:
    err = result[0]
    if int(err) != 0:
        raise ReadbackError(str(err))
    return result[1:] if len(result) > 2 else result[1]


def capture_graph(stream: int) -> int | None:
    """The graph a stream is capturing into (as an int handle), or None if it is not capturing."""
    info = _ok(_rt.cudaStreamGetCaptureInfo(_rt.cudaStream_t(init_value=stream)))
    status, graph = info[0], info[2]
    if int(status) != int(_rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive):
        return None
    return int(graph)


def node_count(graph: int) -> int:
    """Nodes in the graph so far; new nodes are appended, so counts before and after an op
    delimit the nodes the op created."""
    if _GET_NODES is not None:
        count = ctypes.c_size_t(0)
        if _GET_NODES(graph, None, ctypes.byref(count)) == 0:
            return count.value
    result = _ok(_rt.cudaGraphGetNodes(_rt.cudaGraph_t(init_value=graph), numNodes=0))
    return int(result[-1])


def _kernel_name(node: Any) -> str | None:
    params = _ok(_drv.cuGraphKernelNodeGetParams(_drv.CUgraphNode(init_value=int(node))))
    func = params.func
    if not int(func):
        return None
    name = _ok(_drv.cuFuncGetName(func))
    text = name.decode() if isinstance(name, bytes) else str(name)
    return text[:MAX_KERNEL_NAME]


def read_graph(graph: int) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """(nodes, edges) of a graph: nodes in creation order as {id, type[, name]}, edges by node id."""
    handle = _rt.cudaGraph_t(init_value=graph)
    count = node_count(graph)
    nodes_raw, _n = _ok(_rt.cudaGraphGetNodes(handle, numNodes=count))
    index = {int(node): i for i, node in enumerate(nodes_raw[:count])}
    nodes: list[dict[str, Any]] = []
    for i, node in enumerate(nodes_raw[:count]):
        kind = _ok(_rt.cudaGraphNodeGetType(node))
        type_name = kind.name.removeprefix("cudaGraphNodeType").lower()
        entry: dict[str, Any] = {"id": i, "type": type_name}
        if type_name == "kernel":
            try:
                name = _kernel_name(node)
            except ReadbackError:
                name = None
            if name:
                entry["name"] = name
        nodes.append(entry)
    edges: list[list[Any]] = []
    result = _rt.cudaGraphGetEdges(handle, numEdges=0)
    n_edges = int(_ok(result)[-1])
    if n_edges:
        result = _ok(_rt.cudaGraphGetEdges(handle, numEdges=n_edges))
        sources, targets = result[0], result[1]
        edge_data = result[2] if len(result) > 3 else None
        for k in range(n_edges):
            edge = [index[int(sources[k])], index[int(targets[k])]]
            if edge_data is not None and int(getattr(edge_data[k], "type", 0)) != 0:
                # Programmatic (dependent-launch) edges do not order completion.
                edge.append("programmatic")
            edges.append(edge)
    return nodes, edges
