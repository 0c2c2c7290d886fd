"""What the driver's graph queries cost at a real capture's size, and what a node's local id is
(needs a CUDA GPU).

A catch-up (csrc/recorder/unseen_launches.h) asks the driver for every node of the capture
graph to find the few new ones: ``cuGraphGetNodes`` once for the count and once for the
handles, each walking the graph. This prints, on a graph captured from the DSV4 decode
example stacked ``--layers`` deep (kept with ``keep_graph``), what each query costs through
ctypes (a ctypes call's own cost is the ``cuDriverGetVersion`` row, which walks nothing):

* ``cuGraphGetNodes`` for the count alone and for the handles;
* ``cuGraphNodeGetDependencies`` and ``cuGraphNodeGetLocalId`` on one node;
* what a capture's end reads of each node (``cuGraphNodeGetType``, a kernel node's
  ``cuGraphKernelNodeGetParams_v2`` and ``cuFuncGetName``) and of the graph
  (``cuGraphGetEdges_v2``), with the sum over this graph's nodes: the read-back's driver floor;
* ``cuStreamGetCaptureInfo_v2``, the frontier query the hooks make around every launch, and
  the count of the capture graph's nodes, asked inside a live capture of the same model;

and whether each node's local id (``cuGraphNodeGetLocalId``, CUDA 12.9 and later) is its index
in ``cuGraphGetNodes``'s creation order, which a catch-up could then read without the walk.

    python benchmarks/graph_queries.py --layers 32
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from collections.abc import Callable

import torch
from capture_overhead import decoder_on_gpu

_CALLS = 2000


def per_call_us(call: Callable[[], int]) -> float:
    """Microseconds a call, over _CALLS calls (each must succeed)."""
    assert call() == 0
    start = time.perf_counter()
    for _ in range(_CALLS):
        call()
    return (time.perf_counter() - start) / _CALLS * 1e6


def live_capture_us(cuda: ctypes.CDLL, model: object, x: object, loc: object, stream: object) -> tuple[float, float]:
    """Microseconds a frontier query of a capturing stream, and a count of the capture graph's
    nodes (a catch-up's walk), through ctypes, timed in the middle of a capture of the model
    (the graph then holds one forward's nodes)."""
    status, capture_id = ctypes.c_int(0), ctypes.c_uint64(0)
    graph_out, deps, count = ctypes.c_void_p(), ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t(0)
    raw = ctypes.c_void_p(stream.cuda_stream)  # type: ignore[attr-defined]

    def query() -> int:
        return cuda.cuStreamGetCaptureInfo_v2(
            raw,
            ctypes.byref(status),
            ctypes.byref(capture_id),
            ctypes.byref(graph_out),
            ctypes.byref(deps),
            ctypes.byref(count),
        )

    def count_nodes() -> int:
        count.value = 0
        return cuda.cuGraphGetNodes(graph_out, None, ctypes.byref(count))

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        model.forward(x, loc)  # type: ignore[attr-defined]
        frontier_us = per_call_us(query)
        assert status.value == 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
        walk_us = per_call_us(count_nodes)
    return frontier_us, walk_us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")

    model, x, loc, stream = decoder_on_gpu(args.layers, args.batch)
    with torch.cuda.stream(stream):
        model.forward(x, loc)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph, stream=stream):
        model.forward(x, loc)

    cuda = ctypes.CDLL("libcuda.so.1")
    handle = ctypes.c_void_p(graph.raw_cuda_graph())
    count = ctypes.c_size_t(0)
    assert cuda.cuGraphGetNodes(handle, None, ctypes.byref(count)) == 0
    total = count.value
    nodes = (ctypes.c_void_p * total)()
    filled = ctypes.c_size_t(total)
    assert cuda.cuGraphGetNodes(handle, nodes, ctypes.byref(filled)) == 0 and filled.value == total
    last = ctypes.c_void_p(nodes[total - 1])
    deps = (ctypes.c_void_p * 64)()
    out_size, out_uint, out_int = ctypes.c_size_t(0), ctypes.c_uint(0), ctypes.c_int(0)
    types = []
    for i in range(total):
        assert cuda.cuGraphNodeGetType(ctypes.c_void_p(nodes[i]), ctypes.byref(out_int)) == 0
        types.append(out_int.value)
    kernels = [nodes[i] for i, t in enumerate(types) if t == 0]  # CU_GRAPH_NODE_TYPE_KERNEL
    kernel = ctypes.c_void_p(kernels[-1])
    params = ctypes.create_string_buffer(256)  # CUDA_KERNEL_NODE_PARAMS_v2 and room to spare
    assert cuda.cuGraphKernelNodeGetParams_v2(kernel, params) == 0
    # Its first field is the CUfunction; where that is null the CUkernel is at byte 56.
    function = ctypes.c_void_p.from_buffer(params, 0)
    by_kernel = function.value is None
    function = ctypes.c_void_p.from_buffer(params, 56) if by_kernel else function
    get_name = cuda.cuKernelGetName if by_kernel else cuda.cuFuncGetName
    name = ctypes.c_char_p()

    def count_only() -> int:
        out_size.value = 0
        return cuda.cuGraphGetNodes(handle, None, ctypes.byref(out_size))

    def handles() -> int:
        out_size.value = total
        return cuda.cuGraphGetNodes(handle, nodes, ctypes.byref(out_size))

    def dependencies() -> int:
        out_size.value = 64
        return cuda.cuGraphNodeGetDependencies(last, deps, ctypes.byref(out_size))

    edge_count = ctypes.c_size_t(0)
    assert cuda.cuGraphGetEdges_v2(handle, None, None, None, ctypes.byref(edge_count)) == 0
    edges_from = (ctypes.c_void_p * edge_count.value)()
    edges_to = (ctypes.c_void_p * edge_count.value)()
    edge_data = ctypes.create_string_buffer(8 * edge_count.value)  # CUgraphEdgeData: 8 bytes

    def edges() -> int:
        out_size.value = edge_count.value
        return cuda.cuGraphGetEdges_v2(handle, edges_from, edges_to, edge_data, ctypes.byref(out_size))

    def edges_count() -> int:
        out_size.value = 0
        return cuda.cuGraphGetEdges_v2(handle, None, None, None, ctypes.byref(out_size))

    driver_version = ctypes.c_int(0)
    rows = [
        ("cuDriverGetVersion (a ctypes call)", lambda: cuda.cuDriverGetVersion(ctypes.byref(driver_version))),
        ("cuGraphGetNodes, count", count_only),
        ("cuGraphGetNodes, handles", handles),
        ("cuGraphNodeGetDependencies", dependencies),
        ("cuGraphNodeGetType", lambda: cuda.cuGraphNodeGetType(last, ctypes.byref(out_int))),
        ("cuGraphKernelNodeGetParams_v2", lambda: cuda.cuGraphKernelNodeGetParams_v2(kernel, params)),
        ("cuFuncGetName", lambda: get_name(ctypes.byref(name), function)),
        ("cuGraphGetEdges_v2, count", edges_count),
        ("cuGraphGetEdges_v2, edges", edges),
    ]
    local_id = getattr(cuda, "cuGraphNodeGetLocalId", None)  # CUDA 12.9 on; absent before
    if local_id is not None:
        rows.append(("cuGraphNodeGetLocalId", lambda: local_id(last, ctypes.byref(out_uint))))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layers} layers: {total} nodes")
    print(f"{'query':<32}{'us a call':>10}")
    cost = {}
    for label, call in rows:
        cost[label] = per_call_us(call)
        print(f"{label:<32}{cost[label]:>10.2f}")
    frontier_us, walk_us = live_capture_us(cuda, model, x, loc, stream)
    print(f"{'cuStreamGetCaptureInfo_v2':<32}{frontier_us:>10.2f}   (inside a capture)")
    print(f"{'cuGraphGetNodes, count':<32}{walk_us:>10.2f}   (inside a capture, on its graph)")
    base = cost["cuDriverGetVersion (a ctypes call)"]
    per_node = total * (cost["cuGraphNodeGetType"] - base) + len(kernels) * (
        cost["cuGraphKernelNodeGetParams_v2"] + cost["cuFuncGetName"] - 2 * base
    )
    walks = sum(cost[k] - base for k in ("cuGraphGetNodes, count", "cuGraphGetNodes, handles"))
    walks += sum(cost[k] - base for k in ("cuGraphGetEdges_v2, count", "cuGraphGetEdges_v2, edges"))
    print(
        f"a capture end's read-back, driver calls less ctypes': {(per_node + walks) / 1e3:.3f} ms "
        f"({total} nodes, {len(kernels)} kernels, {edge_count.value} edges)"
    )
    if local_id is None:
        print("cuGraphNodeGetLocalId: not in this driver")
        return 0
    ids = []
    for i in range(total):
        assert local_id(ctypes.c_void_p(nodes[i]), ctypes.byref(out_uint)) == 0
        ids.append(out_uint.value)
    same = sum(1 for i, node_id in enumerate(ids) if node_id == i)
    print(f"local id == creation index: {same} of {total} nodes; first ids {ids[:8]}, last {ids[-3:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
