"""What the driver's graph queries cost at a real capture's size, and what a node's local id is
(needs a CUDA GPU).

A catch-up (csrc/recorder/unseen_launches.h) asks the driver for every node of the capture
graph to find the few new ones: ``cuGraphGetNodes`` once for the count and once for the
handles, each walking the graph. This prints, on a graph captured from the DSV4 decode
example stacked ``--layers`` deep (kept with ``keep_graph``), what each query costs through
ctypes (a ctypes call's own cost is the ``cuDriverGetVersion`` row, which walks nothing):

* ``cuGraphGetNodes`` for the count alone and for the handles;
* ``cuGraphNodeGetDependencies`` and ``cuGraphNodeGetLocalId`` on one node;

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

    def count_only() -> int:
        out_size.value = 0
        return cuda.cuGraphGetNodes(handle, None, ctypes.byref(out_size))

    def handles() -> int:
        out_size.value = total
        return cuda.cuGraphGetNodes(handle, nodes, ctypes.byref(out_size))

    def dependencies() -> int:
        out_size.value = 64
        return cuda.cuGraphNodeGetDependencies(last, deps, ctypes.byref(out_size))

    rows = [
        ("cuDriverGetVersion (a ctypes call)", lambda: cuda.cuDriverGetVersion(ctypes.byref(out_int))),
        ("cuGraphGetNodes, count", count_only),
        ("cuGraphGetNodes, handles", handles),
        ("cuGraphNodeGetDependencies", dependencies),
    ]
    local_id = getattr(cuda, "cuGraphNodeGetLocalId", None)  # CUDA 12.9 on; absent before
    if local_id is not None:
        rows.append(("cuGraphNodeGetLocalId", lambda: local_id(last, ctypes.byref(out_uint))))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layers} layers: {total} nodes")
    print(f"{'query':<32}{'us a call':>10}")
    for name, call in rows:
        print(f"{name:<32}{per_call_us(call):>10.2f}")
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
