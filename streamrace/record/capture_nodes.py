"""Tie every node of a capture's graph to the trace event that created it.

CUDA appends nodes to the capture graph in creation order, so node counts taken around a
dispatched op delimit that op's nodes. Nodes that appear between two hooks belong to a
launch the dispatcher never saw (Triton, CuPy, a custom extension, a library call): the
recorder emits a ``kernel`` event for each, at that point of the program, on the stream whose
capture frontier holds it. When the capture ends, ``finish`` reads every node back: kernel
events get their name and their accesses (exact for memset/memcpy; from the parameter words
otherwise, marked inferred), and a custom op (outside PyTorch's own namespaces) whose kernels
hold pointers to blocks its schema does not mention gets those blocks as inferred writes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamrace.record import graph_readback
from streamrace.record.graph_readback import _ok, _rt
from streamrace.record.kernel_params import LiveBlocks, node_access

ACCESS_NODE_TYPES = ("kernel", "memset", "memcpy")
# PyTorch's own kernels are described by their schemas, and their by-value parameter structs
# (OffsetCalculator and friends) carry unused slots with stale stack bytes that look like live
# pointers: checking them only invents writes. Custom ops are where hidden pointers live.
_TRUSTED_NAMESPACES = ("aten::", "prims::", "c10d::", "_c10d_functional::")


@dataclass(frozen=True)
class KernelAnnotation:
    """What a custom kernel does with its parameters, by position: the user knows, CUDA does not."""

    reads: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()


_ANNOTATIONS: dict[str, KernelAnnotation] = {}


def kernel_access(name: str, reads: Sequence[int] = (), writes: Sequence[int] = ()) -> None:
    """Declare which parameters of the kernels named ``name`` (a glob over the CUDA function
    name) are only read and which are written, so their accesses are exact, not inferred."""
    _ANNOTATIONS[name] = KernelAnnotation(tuple(reads), tuple(writes))


def _annotation(name: str | None) -> KernelAnnotation | None:
    if name is None:
        return None
    for pattern, annotation in _ANNOTATIONS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return annotation
    return None


@dataclass
class KernelStats:
    """How much of the graph the dispatcher did not see, and how well pointers resolved."""

    invisible_kernels: int = 0
    param_words: int = 0
    resolved_words: int = 0


class CaptureNodes:
    """The nodes of one capture graph and the events that created them. How many nodes a
    recorded launch has claimed so far is the hooks' to keep (they count around every op)."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.owner_of: dict[int, dict[str, Any]] = {}  # node index -> op or kernel event
        self.unresolved: list[dict[str, Any]] = []  # kernel events whose accesses come from the node

    def count(self) -> int:
        return graph_readback.node_count(self.handle)

    def claim(self, event: dict[str, Any], first: int, end: int) -> None:
        for index in range(first, end):
            self.owner_of[index] = event

    def _nodes(self) -> list[Any]:
        nodes, n = _ok(_rt.cudaGraphGetNodes(_rt.cudaGraph_t(init_value=self.handle), numNodes=self.count()))
        return list(nodes[: int(n)])

    def take_unseen(self, streams: Iterable[int], seen: int) -> tuple[list[tuple[int, str, int | None]], int]:
        """Nodes created after the first ``seen``: ([(index, node type, launching stream or
        None)], the node count now)."""
        count = self.count()
        if count <= seen:
            return [], count
        nodes = self._nodes()
        frontier: dict[int, int] = {}
        for stream in streams:
            info = _ok(_rt.cudaStreamGetCaptureInfo(_rt.cudaStream_t(init_value=stream)))
            deps, n = info[3], int(info[5])
            for dep in list(deps)[:n]:
                frontier[int(dep)] = stream
        # A launch's nodes end where its stream's frontier is now; earlier ones of the same
        # gap lead to it, so they take the stream of the next node that has one.
        unseen = []
        stream = None
        for index in range(count - 1, seen - 1, -1):
            stream = frontier.get(int(nodes[index]), stream)
            kind = _ok(_rt.cudaGraphNodeGetType(nodes[index])).name.removeprefix("cudaGraphNodeType").lower()
            unseen.append((index, kind, stream))
        return unseen[::-1], count

    def finish(self, graph_nodes: list[dict[str, Any]], live: LiveBlocks, stats: KernelStats) -> None:
        """Fill kernel events and cross-check ops, using each node's own parameters."""
        handles = self._nodes()
        unresolved = {id(e) for e in self.unresolved}
        for node in graph_nodes:
            owner = self.owner_of.get(node["id"])
            if owner is None:
                continue
            node["op"] = owner["seq"]
            resolve = id(owner) in unresolved
            check = owner["ev"] == "op" and not owner["op"].startswith(_TRUSTED_NAMESPACES)
            if node["type"] not in ACCESS_NODE_TYPES or not (resolve or check):
                continue  # reading a node's parameters costs; only these two need them
            access = node_access(handles[node["id"]], node["type"])
            if resolve:
                owner["name"] = access.name or node["type"]
                if node["type"] == "kernel":
                    self._resolve_kernel(owner, access, live, stats)
                else:
                    owner["reads"], owner["writes"] = access.reads, access.writes
                    owner["inferred"] = False
            elif access.words:
                self._cross_check(owner, access.words, live)

    @staticmethod
    def _resolve_kernel(event: dict[str, Any], access: Any, live: LiveBlocks, stats: KernelStats) -> None:
        """Parameter words that land in a live block are accesses: exact where annotated,
        writes marked inferred where the direction is unknown."""
        seq = event["seq"]
        words = access.words
        stats.invisible_kernels += 1
        stats.param_words += len(words)
        stats.resolved_words += sum(live.resolve(w, seq) is not None for w in words)
        annotation = _annotation(access.name)
        if annotation is None:
            event["writes"] = live.ranges(words, seq)
            return
        params = access.params
        event["reads"] = live.ranges([w for i in annotation.reads if i < len(params) for w in params[i]], seq)
        event["writes"] = live.ranges([w for i in annotation.writes if i < len(params) for w in params[i]], seq)
        event["inferred"] = False

    @staticmethod
    def _cross_check(op: dict[str, Any], words: list[int], live: LiveBlocks) -> None:
        """Blocks an op's kernel points into that its schema never mentions: inferred writes."""
        declared = {
            block
            for rng in (*op["reads"], *op["writes"])
            if (block := live.resolve(rng["addr"], op["seq"])) is not None
        }
        extra = [rng for rng in live.ranges(words, op["seq"]) if live.resolve(rng["addr"], op["seq"]) not in declared]
        if extra:
            op["writes"] = [*op["writes"], *extra]
            op["inferred"] = True
