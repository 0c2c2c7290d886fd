"""Pinned host memory (trace format 1.5: ``host_alloc``, ``host_free``, ``host_op`` and an op's
``host_reads`` / ``host_writes``): the host's own accesses against the copies still in flight
over the same bytes, and pinned memory a live graph copies from (docs/analysis.md §8.11,
HAZARDS.md M1–M3).

The host is one more actor, whose program order is the trace's and whose clock is ``H``
(§2): a device use of host bytes (an eager H2D or D2H copy, or a replay of a graph that
captured one, placed at the replay on the replay's stream) is done, for the host, once a
host synchronization ordered it (``ordered_before`` with the host clock alone). A host access
to bytes that a use not yet done copies from (the host writes them) is a ``PinnedWriteDuringCopy``
(M1); to bytes a use not yet done copies to (the host reads or writes them), a
``PinnedReadBeforeCopy`` (M2). A copy without ``non_blocking`` (``host_blocking``) is done when
it returns.

The host caching allocator's rule (torch's CachingHostAllocator): a freed block that a
``non_blocking`` copy used is handed out again only once the events recorded for those copies
completed, so its next owner is ordered after its old owner's eager copies (they are retired
at the ``host_alloc`` that takes the bytes). A block allocated inside a capture and used by a
captured copy is never handed out again. A block allocated outside any capture and baked into
a graph (a captured copy's host range) is not protected at replay: its free while the graph
lives is a ``GraphPinnedFreed`` (M3), standing when the graph is replayed after the free or
still alive at the end, dropped when the graph is gone first; the next owner, if one came, is
named. Over the events alone, so both engines give the same findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace.analysis.clocks import EAGER, NO_HOST, ordered_before
from streamrace.analysis.detectors.graph_pinned_freed import GraphPinnedFreed
from streamrace.analysis.detectors.pinned_read_before_copy import PinnedReadBeforeCopy
from streamrace.analysis.detectors.pinned_write_during_copy import DeviceUse, PinnedWriteDuringCopy
from streamrace.analysis.event_order import PROGRAM_HANDLERS, ProgramCheck
from streamrace.analysis.ranges import ByteRange, Overlap, interval, normalize, overlaps
from streamrace.analysis.sorted_blocks import SortedBlocks


@dataclass(eq=False)
class _HostBlock:
    """One pinned block: who allocated it, whether inside a capture, and the graphs that
    captured a copy of its bytes (graph -> the first such captured op)."""

    addr: int
    end: int
    alloc: Mapping[str, Any]
    in_capture: bool
    graphs: dict[int, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(eq=False)
class _Captured:
    """A captured op's host range, run again by every replay of its graph."""

    rng: ByteRange
    write: bool
    op: Mapping[str, Any]
    polls: bool = False  # a kernel's pointer into host bytes (``host_ranges``), not a copy


class HostMemoryCheck(ProgramCheck[list[_Captured]]):
    """Fed every event in order; ``found`` holds the detections."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: SortedBlocks[_HostBlock] = SortedBlocks()
        # (stream, range key, write) -> the latest device use of those host bytes not yet known done
        self._uses: dict[tuple[int, Any, bool], DeviceUse] = {}
        self._freed: dict[int, list[GraphPinnedFreed]] = {}  # graph -> frees of its pinned inputs
        self._host_found: dict[tuple[Any, ...], PinnedWriteDuringCopy | PinnedReadBeforeCopy] = {}
        self._graph_found: list[GraphPinnedFreed] = []
        # Replayed kernels that point into host bytes, not yet known done: each may be
        # polling a flag there that a later host write sets.
        self._polling: list[DeviceUse] = []
        # (host op, it writes, the use it met), held while a polling kernel ordered before
        # the use is pending: the host's later write of that kernel's bytes releases the
        # kernel, so everything after the kernel, the use too, comes after the host op.
        self._held: list[tuple[Mapping[str, Any], bool, DeviceUse]] = []

    @property
    def found(self) -> list[object]:
        for ev, write, use in self._held:  # never released: each is a finding after all
            self._report(ev, write, use)
        self._held.clear()
        standing = [f for f in self._graph_found if f.stands is not False]
        return [*standing, *self._host_found.values()]

    # -- captures ------------------------------------------------------------------------------
    def _new_program(self, graph: int) -> list[_Captured]:
        return []  # the host ranges of its ops

    def _gone(self, ev: Mapping[str, Any]) -> None:
        """The graph is gone: a free of its pinned input that no replay followed is harmless."""
        super()._gone(ev)
        graph = ev["graph"]
        for freed in self._freed.pop(graph, ()):
            if freed.stands is None:
                freed.stands = False
        for block in self._blocks:
            block.graphs.pop(graph, None)

    # -- the host allocator --------------------------------------------------------------------
    def _host_alloc(self, ev: Mapping[str, Any]) -> None:
        addr, end = ev["addr"], ev["addr"] + ev["size"]
        new = _HostBlock(addr, end, ev, self._hb.domain(ev["stream"]) is not EAGER)
        span = interval(addr, end - addr)
        # The allocator handed these bytes out only once the old owner's eager copies were done.
        for key, use in list(self._uses.items()):
            if use.replay is None and overlaps(use.rng, span):
                del self._uses[key]
        for old in self._blocks.ending_after(end, addr):  # their frees were not recorded
            self._blocks.pop(self._blocks.bisect_left(old.addr))
        for frees in self._freed.values():
            for freed in frees:
                if freed.reused is None and freed.block["addr"] < end and addr < freed.block_end:
                    freed.reused = ev
        self._blocks.insert(new)

    def _host_free(self, ev: Mapping[str, Any]) -> None:
        pos = self._blocks.bisect_left(ev["addr"])
        if pos == self._blocks.end or self._blocks.start(pos) != ev["addr"]:
            return  # a block first seen before the recording: nothing is known of it
        block = self._blocks.pop(pos)
        if block.in_capture:
            return  # allocated in a capture: once a captured copy used it, never handed out again
        for graph, op in block.graphs.items():
            if graph not in self._programs and graph not in self._capturing:
                continue
            freed = GraphPinnedFreed(block.alloc, ev, block.end, graph, op)
            self._freed.setdefault(graph, []).append(freed)
            self._graph_found.append(freed)

    # -- device uses ---------------------------------------------------------------------------
    def _op(self, ev: Mapping[str, Any]) -> None:
        reads, writes = ev.get("host_reads"), ev.get("host_writes")
        blocking = ev.get("host_blocking")
        if not (reads or writes or blocking):
            return
        stream = ev["stream"]
        graph = self._hb.domain(stream)
        if graph is not EAGER:
            program = self._capturing.get(graph)
            if program is None:
                return
            for rng, write in _ranges(reads, writes):
                program.append(_Captured(rng, write, ev))
                for block in self._blocks.ending_after(rng.hi, rng.lo):
                    block.graphs.setdefault(graph, ev)
            return
        _, clock, tick = self._hb.op(stream)
        issued_after = dict(clock) if self._polling else None
        for rng, write in _ranges(reads, writes):
            self._uses[(stream, rng.key(), write)] = DeviceUse(stream, tick, ev, write, rng, None, issued_after)
        if blocking:
            self._hb.stream_sync(stream)
            self._retire()

    def _replay(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        if self._hb.domain(stream) is not EAGER:
            return
        graph = ev["graph"]
        for freed in self._freed.get(graph, ()):
            if freed.stands is None:
                freed.stands = True
                freed.replay = ev
        _, clock, tick = self._hb.replay(graph, stream)
        program = self._programs.get(graph)
        if not program:
            return
        issued_after = dict(clock) if self._polling else None
        for captured in program:
            use = DeviceUse(stream, tick, captured.op, captured.write, captured.rng, ev, issued_after)
            if captured.polls:
                self._polling.append(use)
            else:
                self._uses[(stream, captured.rng.key(), captured.write)] = use

    def _kernel(self, ev: Mapping[str, Any]) -> None:
        """A kernel node pointing into pinned host bytes: each replay of its graph runs it
        again, and it may poll them (a flag the host sets: PyTorch's
        test_graph_external_wait_and_record spins on one)."""
        program = self._program_of(ev["graph"])
        if program is None:
            return
        for raw in ev.get("host_ranges") or ():
            rng = normalize(raw)
            if not rng.empty:
                program.append(_Captured(rng, False, ev, polls=True))

    # -- the host's own accesses ---------------------------------------------------------------
    def _host_op(self, ev: Mapping[str, Any]) -> None:
        if not (self._uses or self._polling):
            return
        host = self._hb.host_clock(EAGER)
        self._polling = [k for k in self._polling if not ordered_before(k.stream, k.tick, NO_HOST, host)]
        earlier = len(self._held)
        accessed = _ranges(ev["reads"], ev["writes"])
        for rng, write in accessed:
            for use in self._uses.values():
                if not (write or use.write):
                    continue
                if ordered_before(use.stream, use.tick, NO_HOST, host):
                    continue
                if overlaps(use.rng, rng) != Overlap.EXACT:
                    continue
                if any(_ordered(k, use) for k in self._polling):
                    self._held.append((ev, write, use))
                else:
                    self._report(ev, write, use)
        if not self._polling or earlier == 0:
            return
        # A host write of bytes a pending kernel polls is a signal, not a conflict (kernels
        # are not copies): what the host did before it is ordered before that kernel's end.
        released = [k for k in self._polling if any(w and overlaps(k.rng, r) != Overlap.NONE for r, w in accessed)]
        if released:
            kept = [h for h in self._held[:earlier] if not any(_ordered(k, h[2]) for k in released)]
            self._held[:earlier] = kept

    def _report(self, ev: Mapping[str, Any], write: bool, use: DeviceUse) -> None:
        where = use.replay if use.replay is not None else use.event
        key = (use.write, ev["op"], write, ev.get("stack"), use.event.get("op"), where.get("stack"))
        found = self._host_found.get(key)
        if found is not None:
            if found.last_seq != ev["seq"]:  # once per host access, however many copies it meets
                found.count += 1
                found.last_seq = ev["seq"]
            return
        block = self._block_of(use.rng)
        record = PinnedReadBeforeCopy if use.write else PinnedWriteDuringCopy
        self._host_found[key] = record(ev, write, use, block.alloc if block is not None else None, 1, ev["seq"])

    def _block_of(self, rng: ByteRange) -> _HostBlock | None:
        found = self._blocks.ending_after(rng.hi, rng.lo)
        return found[0] if found else None

    # -- host synchronization ------------------------------------------------------------------
    def _retire(self) -> None:
        """Forget the uses the host now knows are done."""
        host = self._hb.host_clock(EAGER)
        done = [k for k, use in self._uses.items() if ordered_before(use.stream, use.tick, NO_HOST, host)]
        for key in done:
            del self._uses[key]

    def _stream_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.stream_sync(ev["stream"])
        self._retire()

    def _event_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.event_sync(ev["event"])
        self._retire()

    def _device_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.device_sync()
        self._retire()


def _ordered(kernel: DeviceUse, use: DeviceUse) -> bool:
    """Is the polling ``kernel`` ordered before the copy ``use`` (on the device)? Not when both
    are of one replay: a replay is one op, its nodes' order inside the graph is not kept."""
    if use.issued_after is None or (use.replay is not None and use.replay is kernel.replay):
        return False
    return ordered_before(kernel.stream, kernel.tick, use.issued_after)


def _ranges(reads: Any, writes: Any) -> list[tuple[ByteRange, bool]]:
    found = []
    for write, ranges in ((False, reads or ()), (True, writes or ())):
        for raw in ranges:
            rng = normalize(raw)
            if not rng.empty:
                found.append((rng, write))
    return found


# An op or kernel without host ranges is nothing to the check (_op, _kernel return at once).
HostMemoryCheck.NEEDS = {"op": ("host_reads", "host_writes", "host_blocking"), "kernel": ("host_ranges",)}
HostMemoryCheck.HANDLERS = {
    **PROGRAM_HANDLERS,
    "stream_sync": HostMemoryCheck._stream_sync,
    "event_sync": HostMemoryCheck._event_sync,
    "device_sync": HostMemoryCheck._device_sync,
    "host_alloc": HostMemoryCheck._host_alloc,
    "host_free": HostMemoryCheck._host_free,
    "host_op": HostMemoryCheck._host_op,
    "op": HostMemoryCheck._op,
    "replay": HostMemoryCheck._replay,
    "kernel": HostMemoryCheck._kernel,
}
