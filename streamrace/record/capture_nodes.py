"""Tie every node of a capture's graph to the trace event that created it.

CUDA appends nodes to the capture graph in creation order, and a launch on a stream makes its
node that stream's whole capture frontier. So a launch the hooks recorded (an op, a Triton
launch) claims, by handle, its stream's frontier node when it ended: it owns every node
created since the previous claim, up to that one. Counting nodes instead would cost CUDA a walk
of the whole graph at every launch. Nodes that appear where no recorded launch was belong to a
launch the dispatcher never saw (Triton through its own launchers, CuPy, a custom extension, a
library call): when a stream's frontier moved without one, the recorder finds the new nodes
and emits a ``kernel`` event for each, at that point of the program, on the stream whose
frontier holds it ("catching up"); those claim their node by index. The native hooks name a
caught-up node by handle, since they find it without walking the graph; its index is known
once the graph is read at the capture's end (``number``).

When the capture ends, ``snapshot`` reads what only the live graph can tell: each node's owner,
and the parameters of the nodes that need them. ``finish``, after the capture, gives kernel
events their accesses (exact for memset/memcpy; from the parameter words otherwise, marked
inferred), and a custom op (outside PyTorch's own namespaces) whose kernels hold pointers to
blocks its schema does not mention gets those blocks as inferred writes.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamrace.record.graph_readback import GraphRead
from streamrace.record.hook_tables import ACCESS_NODE_TYPES, TRUSTED_NAMESPACES
from streamrace.record.kernel_params import LiveBlocks, NodeAccess, node_access


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


def is_trusted(op: str) -> bool:
    """PyTorch's own ops, whose kernels' pointers are not cross-checked (their schemas say it)."""
    return op.startswith(TRUSTED_NAMESPACES)


_CAUGHT = object()  # a snapshot's marker: a node's kernel event, from a catch-up


class CaptureNodes:
    """The nodes of one capture's graph and the launches that created them."""

    def __init__(self, handle: int, base: int, read_access: Callable[[int, str], NodeAccess] = node_access) -> None:
        self.handle = handle
        self.base = base  # nodes there before the capture's first launch
        self._read_access = read_access  # CudaRuntime.node_access
        self.kernels: dict[int, dict[str, Any]] = {}  # node index -> kernel event found by catching up
        # node index -> that event's seq when it was emitted: the order of ownership (a
        # drained event's seq may have moved since; its own seq is what its node names)
        self.caught: dict[int, int] = {}
        self.launches: dict[int, dict[str, Any]] = {}  # seq -> kernel event of a launch claimed by handle
        # The graph's nodes in creation order, once it is read (``number``); until then, the
        # native hooks' kernel events that name their node by handle wait here. Handle -> index
        # is made from them when first asked (_index_of), which is after the capture's end
        # unless a kernel event was drained before it.
        self._handles: Sequence[int] | None = None
        self._index: dict[int, int] | None = None
        self._unnumbered: dict[int, dict[str, Any]] = {}
        self._accesses: dict[int, Any] = {}  # node index -> NodeAccess, read before the graph is gone
        self._checked_ops: dict[int, list[int]] = {}  # seq of a custom op -> its kernel nodes (_owners)
        self._read: GraphRead | None = None
        self._claims: Sequence[int] = ()  # CaptureRead.claims
        # The graph event's nodes and edges: filled once the capture's events are all in (finish).
        self.event_nodes: list[dict[str, Any]] = []
        self.event_edges: list[list[Any]] = []
        # The pinned host blocks live at the capture's end, (addr, size): a kernel parameter
        # pointing into one is the kernel's host range (it may poll a flag the host sets).
        self.pinned: Sequence[tuple[int, int]] = ()
        self._finished = False

    def floor(self) -> int:
        """No node before this index can be new: the capture's first, or after the last one
        a catch-up found (a recorded launch's claim is a handle: the hooks find it)."""
        return max(self.base, max(self.caught) + 1) if self.caught else self.base

    @staticmethod
    def launching_streams(
        new: list[tuple[int, int, str]],
        streams: Iterable[int],
        capture_state: Callable[[int], tuple[int | None, tuple[int, ...]]],
    ) -> list[tuple[int, str, int | None]]:
        """(index, node type, launching stream or None) of new nodes; ``capture_state``:
        GraphReadback.capture_state."""
        frontier: dict[int, int] = {}
        for stream in streams:
            for dep in capture_state(stream)[1]:
                frontier[dep] = stream
        # A launch's nodes end where its stream's frontier is now; earlier ones of the same
        # gap lead to it, so they take the stream of the next node that has one.
        found: list[tuple[int, str, int | None]] = []
        launching: int | None = None
        for index, handle, kind in reversed(new):
            launching = frontier.get(handle, launching)
            found.append((index, kind, launching))
        return found[::-1]

    def claim_kernel(self, event: dict[str, Any], index: int) -> None:
        """The kernel event a catch-up gave node ``index`` (emitted, or drained from the hooks)."""
        self.kernels[index] = event
        self.caught.setdefault(index, event["seq"])

    def claim_caught(self, event: dict[str, Any]) -> None:
        """A kernel event the native hooks caught up, naming its node by handle
        (``_node_handle``): claimed now if the graph was read, else once it is (``number``)."""
        handle = event["_node_handle"]
        if self._handles is None:
            self._unnumbered[handle] = event
        else:
            self._claim_numbered(handle, event)

    @property
    def numbered(self) -> bool:
        return self._handles is not None

    def _index_of(self) -> dict[int, int]:
        """Node handle -> index, once the graph is read."""
        assert self._handles is not None
        if self._index is None:
            self._index = dict(zip(self._handles, range(len(self._handles)), strict=True))
        return self._index

    def number(self, handles: Sequence[int] | None) -> None:
        """The graph's nodes in creation order, read at the capture's end: each kernel event
        caught up by handle gets its node's index. None: the graph could not be read (its
        capture failed); those events then name the capture's first node, as a Triton
        launch's does until it is read."""
        self._handles, self._index = (() if handles is None else handles), None
        waiting, self._unnumbered = self._unnumbered, {}
        for handle, event in waiting.items():
            self._claim_numbered(handle, event)

    def _claim_numbered(self, handle: int, event: dict[str, Any]) -> None:
        index = self._index_of().get(handle, self.base)
        if "_node_handle" in event:  # not a collective that took the event over (collectives.absorb)
            # "node" where the handle was: the trace's keys in the order the Python hooks write
            fields = [("node", index) if key == "_node_handle" else (key, value) for key, value in event.items()]
            event.clear()
            event.update(fields)
        self.claim_kernel(event, index)

    def snapshot(self, read: GraphRead, claims: Sequence[int], caught: Iterable[tuple[int, int]] = ()) -> None:
        """At capture end, what only the live graph can tell: its nodes and edges (``read``),
        which numbers the kernel events caught up by handle, and the parameters of the nodes
        whose accesses are still to be worked out, the ones caught up and those of custom ops.
        ``claims``: CaptureRead.claims; ``caught``: CaptureRead.caught, (node index, seq when
        emitted) of the kernel events the native hooks caught up, whose events are claimed
        when they are drained (maybe renumbered by then: moving a collective onto its stream
        renumbers the events of its call, collectives.py). Who owns which node waits for
        finish, unless a custom op's nodes must be known now."""
        self._read, self._claims = read, claims
        self.number(read.handles)
        self.caught.update(caught)
        if not all(claims[2::3]):
            self._owners()
        needs = set(self.caught) | {i for ids in self._checked_ops.values() for i in ids}
        for i in sorted(needs):
            if read.types[i] in ACCESS_NODE_TYPES:
                self._accesses[i] = self._read_access(read.handles[i], read.types[i])

    def _owners(self) -> dict[int, int]:
        """Node index -> seq of the event that created it (in the order the events were
        emitted); sets the custom ops' nodes and the handle-claimed launches' first node."""
        assert self._read is not None
        index_of = self._index_of().get
        c = self._claims
        merged: list[tuple[int, int, Any]] = [(c[k], index_of(c[k + 1], -1), c[k + 2]) for k in range(0, len(c), 3)]
        merged += [(seq, index, _CAUGHT) for index, seq in self.caught.items()]
        # Nearly in order already (a Triton launch's claim may come after a later event's).
        merged.sort(key=operator.itemgetter(0))
        owners: dict[int, int] = {}
        checked: dict[int, list[int]] = {}
        launches, cursor = self.launches, self.base
        for seq, index, what in merged:
            if what is _CAUGHT:  # a kernel found by catching up: its one node
                owners[index] = seq
                cursor = max(cursor, index + 1)
            elif index >= cursor:  # a recorded launch: everything since the previous claim
                if seq in launches:
                    launches[seq]["node"] = cursor
                for i in range(cursor, index + 1):
                    owners[i] = seq
                if not what:
                    checked.setdefault(seq, []).extend(range(cursor, index + 1))
                cursor = index + 1
        self._checked_ops = checked
        return owners

    def _complete(self) -> None:
        """The graph event's nodes (each with the seq of the event that created it, as that
        event's seq is now) and edges."""
        if self._read is None:
            return
        owners = self._owners()
        nodes = self._read.nodes()
        kernels, caught = self.kernels, self.caught
        for i, owner in owners.items():  # a node's id is its index
            nodes[i]["op"] = kernels[i]["seq"] if i in kernels else owner
            if i not in caught:  # a recorded launch's: its event names it (the native hooks never read it)
                nodes[i].pop("name", None)
        self.event_nodes.extend(nodes)
        self.event_edges.extend(self._read.edges())

    def finish(self, live: Callable[[], LiveBlocks], events: dict[int, dict[str, Any]], stats: KernelStats) -> None:
        """After the capture: the graph event completed, kernel events get their accesses,
        custom ops are cross-checked."""
        if self._finished:
            return
        self._finished = True
        try:
            self._complete()
            self._finish_accesses(live, events, stats)
        finally:
            # A capture's nodes stay for the whole recording (captures.py keeps every one):
            # what only finishing needed goes; the graph event holds its own nodes and edges.
            self._read, self._claims, self._accesses = None, (), {}
            self.event_nodes, self.event_edges = [], []

    def _finish_accesses(
        self, live: Callable[[], LiveBlocks], events: dict[int, dict[str, Any]], stats: KernelStats
    ) -> None:
        if not self._accesses:
            return
        assert self._read is not None
        blocks = live()
        pinned = LiveBlocks([(addr, size, -1, None) for addr, size in self.pinned]) if self.pinned else None
        for index, event in self.kernels.items():
            access = self._accesses.get(index)
            if access is None or event["ev"] != "kernel":  # a collective's own node keeps the op's accesses
                continue
            event["name"] = access.name or self._read.types[index]
            if access.kind == "kernel":
                self._resolve_kernel(event, access, blocks, stats)
                host = pinned.ranges(access.words, event["seq"]) if pinned is not None else []
                if host:
                    event["host_ranges"] = host
            else:
                event["reads"], event["writes"] = access.reads, access.writes
                event["inferred"] = False
        for seq, indices in self._checked_ops.items():
            op = events.get(seq)
            words = [w for i in indices if i in self._accesses for w in self._accesses[i].words]
            if op is not None and words:
                self._cross_check(op, words, blocks)

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
