"""The program's own pools (trace format 1.4: ``pool_alloc``, ``pool_free``, made by
``streamrace.annotate``): each range a pool gives out is an allocation of its own, and a free
while another stream may still use it is unsafe (docs/analysis.md §8.8, HAZARDS.md M7).

The rule is the caching allocator's (§5), on the pool's ranges: from its free, a range may be
given to work on the free's stream, so every use of it by another stream must be ordered
before that point (an event the free's stream waited on, or a host synchronization). A use
that is not is **pending**: the free is a ``PoolUnsafeFree``, latent until a later access to
those bytes on another stream, unordered with the pending use, makes it manifest (the next
owner's write racing with the old owner's read).

Eager work only: a use is an eager op or kernel, or a replay of a captured graph (all of its
program's accesses, at the replay, on the replay's stream: a page a replayed step reads is in
use until that replay is done). Annotations inside a capture, and captured ops, are not
uses of their own. Over the events alone, so both engines give the same findings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace.analysis.clocks import EAGER, ordered_before
from streamrace.analysis.detectors.pool_unsafe_free import PoolUnsafeFree, PoolUse
from streamrace.analysis.event_order import PROGRAM_HANDLERS, ProgramCheck
from streamrace.analysis.ranges import normalize
from streamrace.analysis.sorted_blocks import SortedBlocks


@dataclass(eq=False)
class _Range:
    """One range a pool gave out: its last use by each stream, and after its free the uses
    that were pending then (while some later access may still race with them)."""

    addr: int
    end: int
    device: int
    alloc: Mapping[str, Any]
    uses: dict[int, PoolUse] = field(default_factory=dict)  # stream -> its last use
    free: Mapping[str, Any] | None = None
    detection: PoolUnsafeFree | None = None


# A graph's program: (device, captured op) of its ops, in order.
_Program = list[tuple[int, Mapping[str, Any]]]


class AppPoolCheck(ProgramCheck[_Program]):
    """Fed every event in order; ``found`` holds the detections."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, SortedBlocks[_Range]] = {}  # device -> ranges given out
        self._freed: dict[int, SortedBlocks[_Range]] = {}  # device -> unsafely freed, still pending
        self.found: list[PoolUnsafeFree] = []

    def _new_program(self, graph: int) -> _Program:
        return []

    # -- the pools -----------------------------------------------------------------------------
    def _pool_alloc(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        if self._hb.domain(stream) is not EAGER:
            return
        device = self._devices.of(ev, stream)
        self._live.setdefault(device, SortedBlocks()).insert(_Range(ev["addr"], ev["addr"] + ev["size"], device, ev))

    def _pool_free(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        domain, clock = self._hb.current(stream)
        if domain is not EAGER:
            return
        device = self._devices.of(ev, stream)
        blocks = self._live.get(device)
        if blocks is None:
            return
        pos = blocks.bisect_left(ev["addr"])
        if pos == blocks.end or blocks.start(pos) != ev["addr"]:
            return  # a free of a range no pool_alloc gave out: nothing to judge
        freed = blocks.pop(pos)
        freed.free = ev
        host = self._hb.host_clock(EAGER)
        pending = [
            use
            for other, use in freed.uses.items()
            if other != stream and not ordered_before(other, use.tick, clock, host)
        ]
        if not pending:
            return
        pending.sort(key=lambda use: use.event["seq"])
        freed.detection = PoolUnsafeFree(freed.alloc, ev, pending[-1], device)
        self.found.append(freed.detection)
        self._freed.setdefault(device, SortedBlocks()).insert(freed)

    # -- uses ----------------------------------------------------------------------------------
    def _op(self, ev: Mapping[str, Any]) -> None:
        stream = ev.get("stream")
        if stream is None:
            return
        device = self._devices.of(ev, stream)
        graph = self._hb.domain(stream)
        if graph is not EAGER:
            program = self._capturing.get(graph)
            if program is not None:
                program.append((device, ev))  # its ranges are read only if a pool is live at a replay
            return
        _, clock, tick = self._hb.op(stream)
        if self._live or self._freed:  # a trace with no pool costs a clock tick an op
            for (lo, hi), write in _spans(ev):
                self._use(device, lo, hi, write, stream, clock, tick, ev, None)

    def _replay(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        if self._hb.domain(stream) is not EAGER:
            return
        _, clock, tick = self._hb.replay(ev["graph"], stream)
        if not (self._live or self._freed):
            return
        for device, op in self._programs.get(ev["graph"], ()):
            for (lo, hi), write in _spans(op):
                self._use(device, lo, hi, write, stream, clock, tick, ev, ev)

    def _use(
        self,
        device: int,
        lo: int,
        hi: int,
        write: bool,
        stream: int,
        clock: Mapping[int, int],
        tick: int,
        ev: Mapping[str, Any],
        replay: Mapping[str, Any] | None,
    ) -> None:
        freed = self._freed.get(device)
        if freed is not None:
            host = self._hb.host_clock(EAGER)
            for old in freed.ending_after(hi, lo):
                unsafe = old.detection
                assert unsafe is not None
                pending = unsafe.pending
                racing = pending.stream != stream and not ordered_before(pending.stream, pending.tick, clock, host)
                if racing and unsafe.racer is None and (write or pending.write):
                    unsafe.racer = PoolUse(stream, tick, ev, write, replay)
                    unsafe.reused = self._owner(device, lo, hi)
        live = self._live.get(device)
        if live is not None:
            for owned in live.ending_after(hi, lo):
                owned.uses[stream] = PoolUse(stream, tick, ev, write, replay)

    def _owner(self, device: int, lo: int, hi: int) -> Mapping[str, Any] | None:
        """The pool_alloc event of the range given out again over ``[lo, hi)``, if one was."""
        live = self._live.get(device)
        found = live.ending_after(hi, lo) if live is not None else []
        return found[0].alloc if found else None

    def _stream_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.stream_sync(ev["stream"])

    def _event_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.event_sync(ev["event"])

    def _device_sync(self, ev: Mapping[str, Any]) -> None:
        self._hb.device_sync()


def _spans(ev: Mapping[str, Any]) -> Iterator[tuple[tuple[int, int], bool]]:
    """((lo, hi), write) of each range an op or kernel event touches."""
    for write, ranges in ((False, ev["reads"]), (True, ev["writes"])):
        for raw in ranges:
            rng = normalize(raw)
            if not rng.empty:
                yield (rng.lo, rng.hi), write


AppPoolCheck.HANDLERS = {
    **PROGRAM_HANDLERS,
    "stream_sync": AppPoolCheck._stream_sync,
    "event_sync": AppPoolCheck._event_sync,
    "device_sync": AppPoolCheck._device_sync,
    "pool_alloc": AppPoolCheck._pool_alloc,
    "pool_free": AppPoolCheck._pool_free,
    "op": AppPoolCheck._op,
    "kernel": AppPoolCheck._op,
    "replay": AppPoolCheck._replay,
}
