"""The analysis engine: one pass over the events in seq order, detections out.

It drives the happens-before clocks, the shadow memory of each (domain, device) and the
allocation lifetimes, and keeps what it detects as plain records (``Race``, ``UnsafeFree``,
``RecordStreamNoop``) that their detectors (streamrace/analysis/detectors/) turn into findings
once the trace is read: labels and stacks may be declared after their first use, and a later
reuse can still fold a race into an earlier unsafe free (docs/analysis.md §5). The C++ core
(csrc/engine.h) keeps the same records, and ``AnalysisEngine`` is what both engines offer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from streamrace.analysis.clocks import Domain, HappensBefore, ordered_before
from streamrace.analysis.lifetimes import Lifetime, Lifetimes
from streamrace.analysis.ranges import Overlap, normalize, overlaps
from streamrace.analysis.shadow import AccessRecord, ShadowMemory
from streamrace.errors import TraceLimitError


@dataclass(eq=False)
class Race:
    """``later`` races with ``earlier``, the most recent earlier access it races with."""

    earlier: AccessRecord
    later: AccessRecord
    how: Overlap
    lifetime: Lifetime | None  # the block of the colliding bytes, as the earlier access saw it
    reused: Lifetime | None = None  # set when aliasing: the later lifetime of those bytes


@dataclass(eq=False)
class UnsafeFree:
    """``lifetime`` was freed while ``use`` (another stream's) was not ordered before the free.

    ``use`` is the last range of that stream's last op on the block; ``pending`` every range
    of that op that touched the block (``use`` last).
    """

    use: AccessRecord
    lifetime: Lifetime
    domain: Domain
    racer: AccessRecord | None = None  # set when folded: the new lifetime's racing access
    how: Overlap = Overlap.NONE
    reused: Lifetime | None = None
    pending: list[AccessRecord] = field(default_factory=list)


@dataclass(eq=False)
class RecordStreamNoop:
    """``record_stream`` named the block's own stream (H10)."""

    event: Mapping[str, Any]
    lifetime: Lifetime
    domain: Domain
    users: list[int] = field(default_factory=list)  # other streams that used the block so far


Detection = Race | UnsafeFree | RecordStreamNoop

# How often ``run`` reports progress, in events: a few times a second for the Python engine,
# tens of times for the C++ core, too rarely to cost anything.
PROGRESS_EVERY = 8192


class Progress(NamedTuple):
    """How far an analysis has got: what ``analyze(..., progress=callback)`` receives."""

    events: int  # events fed so far
    ops: int
    accesses: int
    graphs: int  # captures begun


class AnalysisEngine(Protocol):
    """What ``analyze`` and the detectors use of an engine, the Python reference (``Engine``) or
    the C++ core (``streamrace.analysis.core.CppEngine``): feed it events in seq order, then
    read its detections, counters and labels."""

    @property
    def events(self) -> int: ...
    @property
    def graphs(self) -> int: ...
    @property
    def ops(self) -> int: ...
    @property
    def accesses(self) -> int: ...
    @property
    def stacks(self) -> Mapping[int, list[list[Any]]]: ...
    @property
    def names(self) -> Mapping[int, str]: ...
    @property
    def appearance(self) -> Mapping[int, int]: ...
    @property
    def detections(self) -> Sequence[Detection]: ...

    def feed(self, ev: Mapping[str, Any]) -> None: ...
    def run(self, events: Iterable[Mapping[str, Any]], progress: Callable[[Progress], None] | None = None) -> None: ...
    def remembered(self) -> int: ...


class Engine:
    """Feed it events in seq order; read ``detections`` and the counters afterwards."""

    def __init__(self, stacks: Mapping[int, list[list[Any]]] | None = None) -> None:
        self.hb = HappensBefore()
        self.lifetimes = Lifetimes()
        self.shadows: dict[tuple[Domain, int], ShadowMemory] = {}
        self.detections: list[Detection] = []
        # (domain, device) -> unsafe frees whose pending use no access of a later lifetime has
        # raced with yet, in detection order (docs/analysis.md §5)
        self._unfolded: dict[tuple[Domain, int], list[UnsafeFree]] = {}
        self.stacks: dict[int, list[list[Any]]] = dict(stacks or {})
        self.names: dict[int, str] = {}  # stream -> the name its `stream` event gave
        self.appearance: dict[int, int] = {}  # stream -> order of first appearance
        self.devices: dict[int, int] = {}  # stream -> device
        self.events = self.graphs = self.ops = self.accesses = 0
        self._order = 0
        self._handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "stream": self._stream,
            "stack": self._stack,
            "capture_begin": self._capture_begin,
            "capture_end": self._capture_end,
            "alloc": self._alloc,
            "free": self._free,
            "record_stream": self._record_stream,
            "op": self._op,
            "kernel": self._op,
            "event_create": self._forget,
            "event_delete": self._forget,
            "event_record": lambda ev: self.hb.record(ev["event"], ev["stream"]),
            "event_wait": lambda ev: self.hb.wait(ev["event"], ev["stream"]),
            "stream_sync": lambda ev: self.hb.stream_sync(ev["stream"]),
            "event_sync": lambda ev: self.hb.event_sync(ev["event"]),
            "device_sync": lambda ev: self.hb.device_sync(),
        }

    def run(self, events: Iterable[Mapping[str, Any]], progress: Callable[[Progress], None] | None = None) -> None:
        """Feed every event; call ``progress`` every PROGRESS_EVERY events and once at the end."""
        feed = self.feed
        if progress is None:
            for ev in events:
                feed(ev)
            return
        for ev in events:
            feed(ev)
            if self.events % PROGRESS_EVERY == 0:
                progress(Progress(self.events, self.ops, self.accesses, self.graphs))
        progress(Progress(self.events, self.ops, self.accesses, self.graphs))

    def feed(self, ev: Mapping[str, Any]) -> None:
        self.events += 1
        stream = ev.get("stream")
        if stream is not None and stream not in self.appearance:
            self.appearance[stream] = len(self.appearance)
        handler = self._handlers.get(ev["ev"])
        if handler is not None:  # `graph` and `recorder_error` do not take part in v1
            try:
                handler(ev)
            except TraceLimitError as exc:  # the C++ core's words: the event, then the range
                raise TraceLimitError(f"event seq {ev.get('seq')}: {exc}") from None

    def remembered(self) -> int:
        """Accesses the shadow memories still hold (not forgotten)."""
        return sum(len(shadow) for shadow in self.shadows.values())

    def _device(self, ev: Mapping[str, Any], stream: int | None) -> int:
        device = ev.get("device")
        if device is None:
            device = self.devices.get(stream, 0) if stream is not None else 0
        return device

    # -- declarations ------------------------------------------------------------------------
    def _stream(self, ev: Mapping[str, Any]) -> None:
        if ev.get("name"):
            self.names[ev["stream"]] = ev["name"]
        if ev.get("device") is not None:
            self.devices[ev["stream"]] = ev["device"]

    def _stack(self, ev: Mapping[str, Any]) -> None:
        self.stacks[ev["id"]] = ev["frames"]

    def _forget(self, ev: Mapping[str, Any]) -> None:
        self.hb.forget(ev["event"])

    # -- captures ----------------------------------------------------------------------------
    def _capture_begin(self, ev: Mapping[str, Any]) -> None:
        self.graphs += 1
        if ev.get("device") is not None:
            self.devices.setdefault(ev["stream"], ev["device"])
        self.hb.capture_begin(ev["graph"], ev["stream"])

    def _capture_end(self, ev: Mapping[str, Any]) -> None:
        graph = ev["graph"]
        self.hb.capture_end(graph)
        # Nothing later is in this domain: its accesses can never race again.
        for key in [key for key in self.shadows if key[0] == graph]:
            del self.shadows[key]
        for key in [key for key in self._unfolded if key[0] == graph]:
            del self._unfolded[key]
        self.lifetimes.end_domain(graph)

    # -- memory --------------------------------------------------------------------------------
    def _alloc(self, ev: Mapping[str, Any]) -> None:
        owner = ev["stream"]
        domain, clock = self.hb.current(owner)
        for lifetime, uses in self.lifetimes.settle(owner, domain, clock, self.hb.host_clock(domain)):
            for recs in uses:
                unsafe = UnsafeFree(recs[-1], lifetime, domain, pending=recs)
                self._unfolded.setdefault((domain, lifetime.device), []).append(unsafe)
                self.detections.append(unsafe)
        self.lifetimes.alloc(ev, self._device(ev, owner))

    def _free(self, ev: Mapping[str, Any]) -> None:
        lifetime = self.lifetimes.free(ev["addr"], self._device(ev, ev.get("stream")), ev)
        if lifetime is not None:
            self.lifetimes.await_reuse(lifetime, self.hb.domain(lifetime.owner))

    def _record_stream(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        lifetime = self.lifetimes.record_stream(ev["addr"], stream, self._device(ev, stream))
        if lifetime is not None and lifetime.owner == stream:
            users = sorted({user for _, user in lifetime.last_use}, key=self.appearance.__getitem__)
            self.detections.append(RecordStreamNoop(ev, lifetime, self.hb.domain(stream), users))

    # -- work ----------------------------------------------------------------------------------
    def _op(self, ev: Mapping[str, Any]) -> None:
        if ev["ev"] == "op":
            self.ops += 1
        reads, writes = ev["reads"], ev["writes"]
        self.accesses += len(reads) + len(writes)
        stream = ev.get("stream")
        if stream is None:  # a kernel node nobody placed on a stream: nothing to order it by
            return
        device = self._device(ev, stream)
        domain, clock, tick = self.hb.op(stream)
        host = self.hb.host_clock(domain)
        shadow = self.shadows.get((domain, device))
        if shadow is None:
            shadow = self.shadows[domain, device] = ShadowMemory()
        for write, ranges in ((False, reads), (True, writes)):
            for raw in ranges:
                rng = normalize(raw)
                if rng.empty:
                    continue
                rec = AccessRecord(self._order, stream, tick, write, rng, domain, device, ev, raw)
                self._order += 1
                rec.lifetimes = self.lifetimes.touched(rng, device)
                self.lifetimes.note_use(rec)
                racer, how = shadow.check(rec, clock, host)
                folded = self._fold(rec, clock, host) if (domain, device) in self._unfolded else ()
                # The race folded into an unsafe free is not reported twice; a later race
                # with the same use is reported as an aliasing race of its own.
                if racer is not None and not any(_same_op(racer, f.use) for f in folded):
                    self._race(racer, rec, how)
                shadow.insert(rec)

    def _fold(self, rec: AccessRecord, clock: Mapping[int, int], host: Mapping[int, int]) -> list[UnsafeFree]:
        """Fold ``rec`` (issued at ``clock`` after ``host``) into every unsafe free whose pending
        use it races with through bytes a later allocation reuses (docs/analysis.md §5);
        returns those frees."""
        key = (rec.domain, rec.device)
        folded: list[UnsafeFree] = []
        kept: list[UnsafeFree] = []
        for unsafe in self._unfolded[key]:
            use, block = unsafe.use, unsafe.lifetime
            if host and ordered_before(use.stream, use.tick, host):
                continue  # a host synchronization ordered the use before everything later
            # The cheap tests first: most pending uses are of other blocks.
            if (
                use.stream != rec.stream
                and block.addr < rec.rng.hi
                and rec.rng.lo < block.end
                and not ordered_before(use.stream, use.tick, clock, host)
            ):
                hit = _reuse_race(unsafe, rec)
                if hit is not None:
                    unsafe.racer, unsafe.how, unsafe.reused = rec, hit[0], hit[1]
                    folded.append(unsafe)
                    continue
            kept.append(unsafe)
        if kept:
            self._unfolded[key] = kept
        else:
            del self._unfolded[key]
        return folded

    def _race(self, earlier: AccessRecord, later: AccessRecord, how: Overlap) -> None:
        collisions = list(_collisions(earlier, later))
        if collisions:
            old, new = collisions[0]
            self.detections.append(Race(earlier, later, how, old, new))
            return
        self.detections.append(Race(earlier, later, how, _block_of(earlier, later)))


def _same_op(a: AccessRecord, b: AccessRecord) -> bool:
    """Two ranges of one op (of one domain)."""
    return a.stream == b.stream and a.tick == b.tick


def _reuse_race(unsafe: UnsafeFree, rec: AccessRecord) -> tuple[Overlap, Lifetime] | None:
    """How ``rec`` (unordered with the pending use, on another stream) races with a range of
    it through a byte of the freed block that a later lifetime of ``rec`` holds, and that
    lifetime; None if it does not."""
    block = unsafe.lifetime
    for old in unsafe.pending:
        if not (old.write or rec.write):
            continue
        for new in rec.lifetimes:
            lo, hi = max(block.addr, new.addr), min(block.end, new.end)
            if lo < hi and overlaps(old.rng, rec.rng, (lo, hi)):
                return overlaps(old.rng, rec.rng), new
    return None


def _collisions(a: AccessRecord, b: AccessRecord) -> Iterator[tuple[Lifetime, Lifetime]]:
    """Pairs of distinct lifetimes, of ``a`` and of ``b``, through which they share a byte."""
    for old in a.lifetimes:
        for new in b.lifetimes:
            if old is new:
                continue
            lo, hi = max(old.addr, new.addr), min(old.end, new.end)
            if lo < hi and overlaps(a.rng, b.rng, (lo, hi)):
                yield old, new


def _block_of(a: AccessRecord, b: AccessRecord) -> Lifetime | None:
    """The lifetime holding bytes both accesses touched (one lifetime: not aliasing)."""
    for lifetime in (*a.lifetimes, *b.lifetimes):
        if overlaps(a.rng, b.rng, (lifetime.addr, lifetime.end)):
            return lifetime
    return None
