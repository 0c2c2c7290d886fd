"""The analysis engine: one pass over the events in seq order, detections out.

It drives the happens-before clocks, the shadow memory of each (domain, device) and the
allocation lifetimes, and keeps what it detects as plain records (``Race``, ``UnsafeFree``,
``RecordStreamNoop``) that their detectors (streamrace/analysis/detectors/) turn into findings
once the trace is read: labels and stacks may be declared after their first use, and a later
reuse can still fold a race into an earlier unsafe free (docs/analysis.md §5). The C++ core
(csrc/engine.h) keeps the same records, and ``AnalysisEngine`` is what both engines offer.

The execution view (docs/analysis.md §8): a capture also keeps its graph's *program*, every
access it captured; a ``replay`` runs that program as one op on its stream in the eager
domain, through the lifetimes the capture saw. The last write of every byte (last_writes.py)
says which allocation a read gets its data from (``StaleRead``), and freeing a block a live
graph's program uses is reported at the free (``GraphInputFreed``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from streamrace.analysis.clocks import EAGER, Domain, HappensBefore, ordered_before
from streamrace.analysis.last_writes import LastWrites
from streamrace.analysis.lifetimes import Lifetime, Lifetimes
from streamrace.analysis.ranges import Overlap, normalize, overlaps
from streamrace.analysis.shadow import AccessRecord, ShadowMemory, issued_at
from streamrace.analysis.stream_devices import StreamDevices
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


@dataclass(eq=False)
class StaleRead:
    """``reader`` read bytes of ``read_lifetime`` whose last write, ``writer``, went through
    another allocation of them, ``write_lifetime``, made while ``read_lifetime`` held them:
    the block was handed out again and the reader gets another tensor's data (§8.4)."""

    reader: AccessRecord
    writer: AccessRecord
    read_lifetime: Lifetime
    write_lifetime: Lifetime
    count: int = 1  # the same reader and writer, again (every replay of a loop)


@dataclass(eq=False)
class GraphInputFreed:
    """``lifetime``, allocated outside any capture, was freed while ``graph``, whose program
    ``use`` touches it, could still be replayed (§8.5)."""

    graph: int
    use: AccessRecord  # the first captured access of the graph through the block
    lifetime: Lifetime
    replay: Mapping[str, Any] | None = None  # the first replay after the free; None: latent
    clobbered: StaleRead | None = None  # the first read of another allocation's data it led to
    count: int = 1
    # The block's next owner: the first allocation after the free that took bytes of it while
    # the graph lived, and the first access that ran through it there (None: none yet).
    reused: Lifetime | None = None
    reuser: AccessRecord | None = None


Detection = Race | UnsafeFree | RecordStreamNoop | StaleRead | GraphInputFreed

# How often ``run`` reports progress, in events: a few times a second for the Python engine,
# tens of times for the C++ core, too rarely to cost anything.
PROGRESS_EVERY = 8192


class Progress(NamedTuple):
    """How far an analysis has got: what ``analyze(..., progress=callback)`` receives."""

    events: int  # events fed so far
    ops: int
    accesses: int
    graphs: int  # captures begun
    replays: int = 0  # replays of recorded captures


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
    def replays(self) -> int: ...
    @property
    def unknown_replays(self) -> int: ...
    @property
    def stacks(self) -> Mapping[int, list[list[Any]]]: ...
    @property
    def names(self) -> Mapping[int, str]: ...
    @property
    def appearance(self) -> Mapping[int, int]: ...
    @property
    def library_calls(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def captures(self) -> Mapping[int, list[int]]: ...
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
        # library_call events, as they are: the library protocols judge findings by them
        self.library_calls: list[Mapping[str, Any]] = []
        self.captures: dict[int, list[int]] = {}  # stream -> the graphs captured on it, in order
        self.devices = StreamDevices()
        self.events = self.graphs = self.ops = self.accesses = 0
        self.replays = 0
        self.unknown_replays = 0  # replays of graphs the trace has no capture of
        self._order = 0
        # The execution view (§8): each live graph's program, the clock of its last replay,
        # every device's last writes, and which graphs use each block allocated outside them.
        self._programs: dict[int, list[AccessRecord]] = {}
        self._replayed: dict[int, dict[int, int]] = {}
        self._last_writes: dict[int, LastWrites[tuple[AccessRecord, Lifetime]]] = {}
        self._graph_users: dict[int, dict[int, AccessRecord]] = {}  # lifetime id -> graph -> first use
        self._graph_inputs: dict[int, set[int]] = {}  # graph -> ids of those lifetimes it uses
        self._inputs_freed: dict[int, list[GraphInputFreed]] = {}  # graph -> its freed inputs
        self._input_freed: dict[tuple[int, int], GraphInputFreed] = {}  # (lifetime id, graph) ->
        self._stale: dict[tuple[int, int], StaleRead] = {}  # (reader seq, writer seq) -> the first
        # Freed inputs of live graphs whose block no allocation took yet, by device; and those
        # whose next owner is known, by its lifetime id, until an access runs through it.
        self._ownerless: dict[int, list[GraphInputFreed]] = {}
        self._unused_owner: dict[int, list[GraphInputFreed]] = {}
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
            "replay": self._replay,
            "graph_reset": self._graph_gone,
            "graph_destroy": self._graph_gone,
            "event_create": self._forget,
            "event_delete": self._forget,
            "event_record": lambda ev: self.hb.record(ev["event"], ev["stream"]),
            "event_wait": lambda ev: self.hb.wait(ev["event"], ev["stream"]),
            "graph": lambda ev: self.hb.graph_read(ev["graph"], ev["nodes"]),
            "stream_sync": lambda ev: self.hb.stream_sync(ev["stream"]),
            "event_sync": lambda ev: self.hb.event_sync(ev["event"]),
            "device_sync": lambda ev: self.hb.device_sync(),
            "library_call": self.library_calls.append,
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
                progress(Progress(self.events, self.ops, self.accesses, self.graphs, self.replays))
        progress(Progress(self.events, self.ops, self.accesses, self.graphs, self.replays))

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

    # -- declarations ------------------------------------------------------------------------
    def _stream(self, ev: Mapping[str, Any]) -> None:
        if ev.get("name"):
            self.names[ev["stream"]] = ev["name"]
        self.devices.declare(ev)

    def _stack(self, ev: Mapping[str, Any]) -> None:
        self.stacks[ev["id"]] = ev["frames"]

    def _forget(self, ev: Mapping[str, Any]) -> None:
        self.hb.forget(ev["event"])

    # -- captures ----------------------------------------------------------------------------
    def _capture_begin(self, ev: Mapping[str, Any]) -> None:
        self.graphs += 1
        self.devices.capture_begin(ev)
        self._graph_gone(ev)  # a graph id captured again: the old program is gone
        self._programs[ev["graph"]] = []
        self.hb.capture_begin(ev["graph"], ev["stream"])
        self.captures.setdefault(ev["stream"], []).append(ev["graph"])

    def _capture_end(self, ev: Mapping[str, Any]) -> None:
        graph = ev["graph"]
        if ev.get("aborted"):
            self._graph_gone(ev)  # a failed capture has no graph to replay
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
        lifetime = self.lifetimes.alloc(ev, self.devices.of(ev, owner), domain)
        if self._ownerless.get(lifetime.device):
            self._take_freed_inputs(lifetime)

    def _free(self, ev: Mapping[str, Any]) -> None:
        lifetime = self.lifetimes.free(ev["addr"], self.devices.of(ev, ev.get("stream")), ev)
        if lifetime is None:
            return
        self.lifetimes.await_reuse(lifetime, self.hb.domain(lifetime.owner))
        self._unused_owner.pop(lifetime.id, None)  # a next owner freed unused: nothing ran through it
        # Latent until the graph is replayed or outlives the trace; gone with the graph (§8.5).
        for graph, use in self._graph_users.pop(lifetime.id, {}).items():
            self._graph_inputs[graph].discard(lifetime.id)
            freed = GraphInputFreed(graph, use, lifetime)
            self._inputs_freed.setdefault(graph, []).append(freed)
            self._input_freed[lifetime.id, graph] = freed
            self._ownerless.setdefault(lifetime.device, []).append(freed)
            self.detections.append(freed)

    def _take_freed_inputs(self, lifetime: Lifetime) -> None:
        """``lifetime`` is the next owner of every freed input of a live graph whose bytes it
        takes (§8.5): the allocation the graph's replays now read or write through."""
        waiting = self._ownerless[lifetime.device]
        kept = []
        for freed in waiting:
            block = freed.lifetime
            if block.addr < lifetime.end and lifetime.addr < block.end:
                freed.reused = lifetime
                self._unused_owner.setdefault(lifetime.id, []).append(freed)
            else:
                kept.append(freed)
        if kept:
            self._ownerless[lifetime.device] = kept
        else:
            del self._ownerless[lifetime.device]

    def _record_stream(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        lifetime = self.lifetimes.record_stream(ev["addr"], stream, self.devices.of(ev, stream))
        if lifetime is not None and lifetime.owner == stream:
            users = sorted({user for _, user in lifetime.last_use}, key=self.appearance.__getitem__)
            self.detections.append(RecordStreamNoop(ev, lifetime, self.hb.domain(stream), users))

    # -- work ----------------------------------------------------------------------------------
    def _op(self, ev: Mapping[str, Any]) -> None:
        is_op = ev["ev"] == "op"
        if is_op:
            self.ops += 1
        reads, writes = ev["reads"], ev["writes"]
        self.accesses += len(reads) + len(writes)
        stream = ev.get("stream")
        if stream is None:  # a kernel node nobody placed on a stream: nothing to order it by
            return
        device = self.devices.of(ev, stream)
        domain, clock, tick = self.hb.op(stream)
        host = self.hb.host_clock(domain)
        shadow = self._shadow(domain, device)
        program = self._programs.get(domain) if domain is not EAGER else None
        for write, ranges in ((False, reads), (True, writes)):
            for raw in ranges:
                rng = normalize(raw)
                if rng.empty:
                    continue
                rec = AccessRecord(self._order, stream, tick, write, rng, domain, device, ev, raw)
                self._order += 1
                rec.lifetimes = self.lifetimes.touched(rng, device)
                if write and is_op:
                    _keeps_state(rec.lifetimes, domain)
                if domain is EAGER:
                    self._execute(rec)
                elif program is not None:
                    self._capture_into(program, rec)
                self._check(rec, shadow, clock, host)

    def _shadow(self, domain: Domain, device: int) -> ShadowMemory:
        shadow = self.shadows.get((domain, device))
        if shadow is None:
            shadow = self.shadows[domain, device] = ShadowMemory()
        return shadow

    def _check(
        self, rec: AccessRecord, shadow: ShadowMemory, clock: Mapping[int, int], host: Mapping[int, int]
    ) -> None:
        """The happens-before checks of one access: races, unsafe frees, then remember it."""
        self.lifetimes.note_use(rec)
        racer, how = shadow.check(rec, clock, host)
        folded = self._fold(rec, clock, host) if (rec.domain, rec.device) in self._unfolded else ()
        # The race folded into an unsafe free is not reported twice; a later race
        # with the same use is reported as an aliasing race of its own.
        if racer is not None and not any(_same_op(racer, f.use) for f in folded):
            self._race(racer, rec, how)
        shadow.insert(rec)

    # -- the execution view (§8) ---------------------------------------------------------------
    def _capture_into(self, program: list[AccessRecord], rec: AccessRecord) -> None:
        """``rec`` is part of its capture's program; note the blocks it uses that were
        allocated outside any capture and not into a graph pool (their free is §8.5's)."""
        program.append(rec)
        graph = rec.domain
        assert graph is not EAGER  # a captured access
        for lifetime in rec.lifetimes:
            if lifetime.domain is EAGER and not lifetime.alloc.get("pool"):
                users = self._graph_users.setdefault(lifetime.id, {})
                if graph not in users:
                    users[graph] = rec
                    self._graph_inputs.setdefault(graph, set()).add(lifetime.id)

    def _replay(self, ev: Mapping[str, Any]) -> None:
        """Run graph ``ev["graph"]``'s program as one op on the replay's stream (§8.2)."""
        graph, stream = ev["graph"], ev["stream"]
        program = self._programs.get(graph)
        if program is None or self.hb.members(graph) or self.hb.domain(stream) is not EAGER:
            self.unknown_replays += program is None
            return  # a graph captured before the trace began (or still capturing)
        self.replays += 1
        previous = self._replayed.get(graph)
        if previous is not None:
            self.hb.order_after(stream, previous)  # launches of one graph are serialized
        domain, clock, tick = self.hb.replay(graph, stream)
        host = self.hb.host_clock(domain)
        self._replayed[graph] = dict(clock)
        for freed in self._inputs_freed.get(graph, ()):
            if freed.replay is None:
                freed.replay = ev
        for captured in program:
            rec = AccessRecord(
                self._order,
                stream,
                tick,
                captured.write,
                captured.rng,
                EAGER,
                captured.device,
                captured.event,
                captured.raw,
                captured.lifetimes,
                replay=ev,
            )
            self._order += 1
            self._execute(rec)
            self._check(rec, self._shadow(EAGER, rec.device), clock, host)

    def _graph_gone(self, ev: Mapping[str, Any]) -> None:
        """The graph was reset or destroyed (or its capture failed): it replays no more, so a
        free of what it used, not yet followed by a replay, was harmless after all."""
        graph = ev["graph"]
        self._programs.pop(graph, None)
        self._replayed.pop(graph, None)
        for lifetime_id in self._graph_inputs.pop(graph, ()):
            users = self._graph_users.get(lifetime_id)
            if users is not None:
                users.pop(graph, None)
                if not users:
                    del self._graph_users[lifetime_id]
        for freed in self._inputs_freed.pop(graph, ()):
            del self._input_freed[freed.lifetime.id, graph]
            if freed.reused is None:  # no allocation takes the block from the graph any more
                _drop(self._ownerless, freed.lifetime.device, freed)
            if freed.replay is None:
                self.detections.remove(freed)
                if freed.reused is not None and freed.reuser is None:
                    _drop(self._unused_owner, freed.reused.id, freed)

    def _execute(self, rec: AccessRecord) -> None:
        """An access that runs (eager, or a replay's): a write becomes the last write of its
        bytes, through the lifetimes it went through; a read is checked against them."""
        if self._unused_owner:
            self._name_next_owner(rec)
        writes = self._last_writes.get(rec.device)
        if writes is None:
            writes = self._last_writes[rec.device] = LastWrites()
        lo, hi = rec.rng.lo, rec.rng.hi
        if rec.write:
            writes.assign(lo, hi, None)  # bytes of no known block: who wrote them says nothing
            for lifetime in rec.lifetimes:
                writes.assign(max(lo, lifetime.addr), min(hi, lifetime.end), (rec, lifetime))
            return
        replay = rec.replay
        for lifetime in rec.lifetimes:
            born = lifetime.alloc["seq"]
            for start, end, (writer, through) in writes.under(max(lo, lifetime.addr), min(hi, lifetime.end)):
                # Only a write made while the reader's allocation held the bytes clobbers them;
                # before it, they are just a fresh allocation's uninitialised bytes. A replay
                # reading what it wrote itself reads its graph's own data, as at capture.
                if (
                    through is not lifetime
                    and born < issued_at(writer)
                    and (replay is None or writer.replay is not replay)
                    and overlaps(writer.rng, rec.rng, (start, end))
                ):
                    self._stale_read(rec, writer, lifetime, through)
                    return

    def _name_next_owner(self, rec: AccessRecord) -> None:
        """``rec`` runs through the next owner of freed graph inputs: the first such access that
        touches the bytes it took from one is what names that owner (§8.5)."""
        for lifetime in rec.lifetimes:
            waiting = self._unused_owner.get(lifetime.id)
            if waiting is None:
                continue
            kept = []
            for freed in waiting:
                block = freed.lifetime
                taken = (max(block.addr, lifetime.addr), min(block.end, lifetime.end))
                if overlaps(rec.rng, rec.rng, taken):
                    freed.reuser = rec
                else:
                    kept.append(freed)
            if kept:
                self._unused_owner[lifetime.id] = kept
            else:
                del self._unused_owner[lifetime.id]

    def _stale_read(self, reader: AccessRecord, writer: AccessRecord, read: Lifetime, wrote: Lifetime) -> None:
        for rec in (reader, writer):
            if rec.replay is None:
                continue
            for lifetime in (read, wrote):
                freed = self._input_freed.get((lifetime.id, rec.replay["graph"]))
                if freed is not None:  # the consequence of a freed graph input: reported there
                    if freed.clobbered is None:
                        freed.clobbered = StaleRead(reader, writer, read, wrote)
                    return
        key = (reader.event["seq"], writer.event["seq"])
        seen = self._stale.get(key)
        if seen is not None:
            seen.count += 1
            return
        stale = self._stale[key] = StaleRead(reader, writer, read, wrote)
        self.detections.append(stale)

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


def _drop(waiting: dict[int, list[GraphInputFreed]], key: int, freed: GraphInputFreed) -> None:
    """Take ``freed`` out of ``waiting[key]`` if it is there, and the key with its last one."""
    left = waiting.get(key)
    if left is None or freed not in left:
        return
    left.remove(freed)
    if not left:
        del waiting[key]


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
            if new.id <= block.id:
                continue  # a replay's, through the freed allocation or an earlier one: no reuse
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


def _keeps_state(lifetimes: Iterable[Lifetime], domain: Domain) -> None:
    """An op of ``domain`` wrote these live blocks: each allocated in a capture and written by
    eager work or another graph's op is one the program keeps its state in (``kept``)."""
    for lifetime in lifetimes:
        if lifetime.domain is not EAGER and (domain is EAGER or domain != lifetime.domain):
            lifetime.kept = True
