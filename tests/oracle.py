"""A brute-force reference for docs/analysis.md, written from the text and nothing else.

The engine is clever (vector clocks, a shadow interval map, forgetting covered accesses); this
module is deliberately dumb, so that the two can only agree by both being right:

* happens-before is reachability in an explicit networkx DAG per domain (eager, and one per
  captured graph): program order per stream, an edge from the latest record of an event to
  each wait that takes it, and in eager a chain of host-synchronisation nodes with an edge from
  the latest one to every later op, record and allocation on any stream;
* overlap is the intersection of the actual byte sets, enumerated element by element (so keep
  the shapes small);
* every pair of accesses is compared; every access of a freed lifetime is checked at the
  owner stream's next allocation in the domain of the free (section 5), the point from which
  the allocator may hand the block out again; and every later access is checked against the
  pending use of every unsafe free, for the race that makes it aliasing (section 5);
* an access whose every allocation was freed after it with its stream named by
  ``record_stream`` is ordered, by the allocator, before every access that reaches its bytes
  only through later allocations (section 5: the block is handed out again once the events
  recorded on that stream at the free have completed).

The execution view (docs/analysis.md section 8) is modelled as plainly:

* a capture's program is the list of its accesses (each with the allocations live at capture
  that it touches); a replay is one node of the eager DAG on its stream, after the graph's
  previous replay, whose accesses are the program's, each at the replay's seq;
* the last write of every byte is a dict from byte to (write, allocation it went through),
  replayed and eager writes alike, in program order; a read of a byte through an allocation
  made before that write was issued, last written through another one, and not by the same
  replay, is a stale byte;
* a block allocated outside any capture and not into a pool, touched by a live graph's
  program, and freed, is a freed graph input; it stands if the graph is replayed after the
  free or is still alive at the end, and a stale read by or of that graph's replay through it
  is its consequence, not a stale read of its own.

Only the trace's events are read; nothing here imports the engine.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

EAGER = "eager"


def byte_set(rng: dict[str, Any]) -> frozenset[int]:
    """Every byte a range touches (docs/analysis.md section 3), by enumerating its elements."""
    addr = rng["addr"]
    if "nbytes" in rng:
        return frozenset(range(addr, addr + rng["nbytes"]))
    shape, stride, itemsize = rng["shape"], rng["stride"], rng["itemsize"]
    out: set[int] = set()
    for index in itertools.product(*(range(n) for n in shape)):
        start = addr + sum(i * s for i, s in zip(index, stride, strict=True)) * itemsize
        out.update(range(start, start + itemsize))
    return frozenset(out)


@dataclass(frozen=True)
class Use:
    """One access: one range of one op, read or written."""

    seq: int
    stream: int
    domain: Any
    kind: str  # "read" or "write"
    nbytes: frozenset[int]
    rng: dict[str, Any] = field(compare=False, hash=False)
    lifetime: int | None = None  # alloc seq of the live allocation it touches, if any
    lives: tuple[Any, ...] = field(default=(), compare=False, hash=False)  # the allocations it touches


@dataclass(eq=False)
class Lifetime:
    addr: int
    size: int
    stream: int
    alloc_seq: int
    domain: Any = EAGER  # where it was allocated
    pooled: bool = False  # the alloc event names a pool
    free_seq: int | None = None
    recorded: set[int] = field(default_factory=set)
    uses: list[Use] = field(default_factory=list)  # every access through it (a replay's after its free too)

    def bytes(self) -> frozenset[int]:
        return frozenset(range(self.addr, self.addr + self.size))

    def used_before_free(self) -> list[Use]:
        """The uses while it was allocated (a replay goes through the allocations of its
        capture, freed or not: after the free they are no uses of this one)."""
        return [u for u in self.uses if self.free_seq is None or u.seq < self.free_seq]


@dataclass(eq=False)
class Captured:
    """One access of a graph's program."""

    seq: int  # the captured op's
    kind: str
    nbytes: frozenset[int]
    rng: dict[str, Any]
    lives: list[Lifetime]  # the allocations live at capture that it touches


@dataclass(eq=False)
class Run:
    """An access that runs: eager, or a replay's (``replay``: the replay's seq)."""

    use: Use
    op_seq: int  # the op's seq (a replay's: the captured op's)
    lives: list[Lifetime]
    replay: int | None = None
    graph: int | None = None  # a replay's: the graph

    @property
    def issued(self) -> int:
        return self.use.seq


@dataclass(eq=False)
class Stale:
    """A read that gets another allocation's data: the stale byte it is named by (the lowest
    one the engines can see: see ``Oracle.stale``), its last write, and both allocations."""

    reader: Run
    writer: Run
    read: Lifetime
    wrote: Lifetime
    missed: bool = False  # every stale byte is under a strided write's gaps (the documented limit)


@dataclass(eq=False)
class FreedInput:
    """A block allocated outside the graph's capture, used by it, freed while it lived."""

    graph: int
    use: Captured  # the first captured access of the graph through the block
    life: Lifetime
    free_seq: int
    replay: int | None = None  # the seq of the first replay after the free
    clobbered: Stale | None = None  # the first stale read it led to
    dropped: bool = False  # the graph went (reset, destroyed) before a replay: harmless
    owner: Lifetime | None = None  # the first allocation after the free over its bytes, while the graph lived
    owner_access: int | None = None  # the seq of the first access that ran through the owner over those bytes


class Oracle:
    """Run the model over ``trace.events``; read the answers from the attributes.

    * ``pairs``: every racing pair ``(earlier seq, earlier kind, later seq, later kind)``;
    * ``racing``: the seqs of ops with an access that races with some earlier access;
    * ``uses``: every access, with the allocation (if any) whose bytes it touches;
    * ``latest_race``: ``id(use)`` -> the seq of the latest earlier access it races with;
    * ``unsafe_frees``: free seq -> the set of ``(seq, kind)`` of the unordered uses;
    * ``reuse_races``: free seq -> the racing pairs ``(use seq, use kind, seq, kind)`` between
      an unordered use and an access of a later allocation that reuses the freed bytes;
    * ``pending_op``: ``(free seq, stream)`` -> the seq of the pending use of each stream
      whose use makes the free unsafe: its last op on the block in the domain of the free;
    * ``folds``: ``(free seq, stream)`` -> the accesses, in trace order, issued after the
      allocation that decided the free, that race with a range of that pending use through a
      byte of the freed block held by a later allocation (section 5: the first one is folded);
    * ``suppressed``: ``id(use)`` of the accesses whose data race is not reported because it
      is folded: the first fold of an unsafe free whose latest racing access is of its
      pending op;
    * ``noop_record_streams``: seqs of record_stream calls on the block's own stream;
    * ``stale``: every read that runs (eager or replayed) with a stale byte, in program order,
      named by its lowest stale byte; ``missed`` when every stale byte of it lies between the
      elements of a later strided write (the engines take a write as the last write of its
      whole span: docs/analysis.md section 8 says so), and ``folded`` into a freed graph input
      when the read or the write is that graph's replay and goes through the freed block;
    * ``freed_inputs``: the freed graph inputs that stand (replayed after the free, or the graph
      alive at the end), in the order of their frees, each with its block's next owner: the
      first allocation over its bytes made while the graph lived, and the first access that
      ran through that allocation over them, before it was freed.
    """

    def __init__(self, trace: Any) -> None:
        self.dags: dict[Any, nx.DiGraph] = {}
        self.uses: list[Use] = []
        self.unsafe_frees: dict[int, set[tuple[int, str]]] = {}
        self.noop_record_streams: set[int] = set()
        self._member: dict[int, int] = {}  # stream -> the active graph it is a member of
        self._active: set[int] = set()
        self._snapshot: dict[int, tuple[Any, int]] = {}  # event -> (domain, record node)
        self._last: dict[tuple[Any, int], int] = {}  # (domain, stream) -> latest node
        self._host: int | None = None  # latest host synchronisation node (eager)
        self._live: dict[int, Lifetime] = {}
        self._lifetimes: list[Lifetime] = []
        self._undecided: list[tuple[int, Any, Lifetime]] = []  # (free seq, domain, lifetime)
        self._checks: list[tuple[int, Any, int, Lifetime]] = []  # (free seq, domain, alloc seq, lifetime)
        self._descendants: dict[tuple[Any, int], set[int]] = {}
        # The execution view.
        self._programs: dict[int, list[Captured]] = {}  # live graph -> its program
        self._last_replay: dict[int, int] = {}  # graph -> the seq of its latest replay
        self._inputs: dict[Lifetime, dict[int, Captured]] = {}  # block -> graph -> first captured use
        self._freed: dict[tuple[Lifetime, int], FreedInput] = {}  # standing or latent, not dropped
        self._all_freed: list[FreedInput] = []
        self._last_write: dict[int, tuple[Run, Lifetime | None]] = {}  # byte ->
        self._gap: set[int] = set()  # bytes the last write whose span holds them did not write
        self.stale: list[Stale] = []
        self.folded: dict[int, FreedInput] = {}  # id(stale) -> the freed input it folds into
        for ev in trace.events:
            getattr(self, "_on_" + ev["ev"], self._ignore)(ev)
        self.freed_inputs = [f for f in self._all_freed if not f.dropped]
        self.pairs = self._races()
        self.racing = {later for _, _, later, _ in self.pairs}
        self.reuse_races: dict[int, set[tuple[int, str, int, str]]] = {}
        self.pending_op: dict[tuple[int, int], int] = {}
        self.folds: dict[tuple[int, int], list[Use]] = {}
        self.suppressed: set[int] = set()
        for free_seq, domain, alloc_seq, life in self._checks:
            unordered = [
                u
                for u in life.used_before_free()
                if u.stream != life.stream
                and u.domain == domain
                and u.stream not in life.recorded
                and not self.happens_before(domain, u.seq, alloc_seq)
            ]
            if not unordered:
                continue
            self.unsafe_frees[free_seq] = {(u.seq, u.kind) for u in unordered}
            self.reuse_races[free_seq] = {
                (u.seq, u.kind, b.seq, b.kind)
                for later in self._lifetimes
                if later.alloc_seq > free_seq and not later.bytes().isdisjoint(life.bytes())
                for b in later.uses
                for u in unordered
                if (u.seq, u.kind, b.seq, b.kind) in self.pairs
                and not (u.nbytes & b.nbytes & life.bytes()).isdisjoint(later.bytes())
            }
            for stream in {u.stream for u in unordered}:
                key = (free_seq, stream)
                used = life.used_before_free()
                last = max(u.seq for u in used if u.stream == stream and u.domain == domain)
                self.pending_op[key] = last
                pending = [u for u in used if u.seq == last and u.stream == stream]
                self.folds[key] = folds = [
                    b for b in self.uses if b.seq > alloc_seq and self._reuse_race(domain, free_seq, life, pending, b)
                ]
                if folds and self.latest_race.get(id(folds[0])) == last:
                    self.suppressed.add(id(folds[0]))

    def _reuse_race(self, domain: Any, free_seq: int, life: Lifetime, pending: list[Use], b: Use) -> bool:
        """``b`` races (section 4) with a range of the pending use through a byte of the freed
        block that a later allocation holds while ``b`` touches it."""
        if b.domain != domain or b.stream == pending[0].stream:
            return False
        for later in self._lifetimes:
            if later.alloc_seq <= free_seq or not any(b is u for u in later.uses):
                continue
            reused = b.nbytes & life.bytes() & later.bytes()
            for u in pending:
                if (
                    "write" in (u.kind, b.kind)
                    and not reused.isdisjoint(u.nbytes)
                    and not self.happens_before(domain, u.seq, b.seq)
                ):
                    return True
        return False

    # -- happens-before ------------------------------------------------------------------
    def happens_before(self, domain: Any, a: int, b: int) -> bool:
        key = (domain, a)
        if key not in self._descendants:
            self._descendants[key] = nx.descendants(self.dags[domain], a)
        return b in self._descendants[key]

    def _domain(self, stream: int) -> Any:
        return self._member.get(stream, EAGER)

    def _node(self, domain: Any, stream: int, seq: int, joins_host: bool = True) -> None:
        dag = self.dags.setdefault(domain, nx.DiGraph())
        dag.add_node(seq)
        previous = self._last.get((domain, stream))
        if previous is not None:
            dag.add_edge(previous, seq)
        if domain == EAGER and joins_host and self._host is not None:
            dag.add_edge(self._host, seq)
        self._last[(domain, stream)] = seq

    def _host_sync(self, seq: int, sources: list[int]) -> None:
        dag = self.dags.setdefault(EAGER, nx.DiGraph())
        dag.add_node(seq)
        for node in [*sources, *([self._host] if self._host is not None else [])]:
            dag.add_edge(node, seq)
        self._host = seq

    # -- events --------------------------------------------------------------------------
    def _ignore(self, ev: dict[str, Any]) -> None:
        pass

    def _on_capture_begin(self, ev: dict[str, Any]) -> None:
        self._gone(ev["graph"])  # the id captured again: the old graph is gone
        self._programs[ev["graph"]] = []
        self._member[ev["stream"]] = ev["graph"]
        self._active.add(ev["graph"])

    def _on_capture_end(self, ev: dict[str, Any]) -> None:
        if ev.get("aborted"):
            self._gone(ev["graph"])
        self._active.discard(ev["graph"])
        for stream in [s for s, g in self._member.items() if g == ev["graph"]]:
            del self._member[stream]
        # A block freed in the graph whose owner allocated nothing more in it is never
        # handed out in it: not reported.
        self._undecided = [f for f in self._undecided if f[1] != ev["graph"]]

    def _on_event_create(self, ev: dict[str, Any]) -> None:
        self._snapshot.pop(ev["event"], None)

    _on_event_delete = _on_event_create

    def _on_event_record(self, ev: dict[str, Any]) -> None:
        domain = self._domain(ev["stream"])
        self._node(domain, ev["stream"], ev["seq"])
        self._snapshot[ev["event"]] = (domain, ev["seq"])

    def _on_event_wait(self, ev: dict[str, Any]) -> None:
        stream, snapshot = ev["stream"], self._snapshot.get(ev["event"])
        if snapshot is not None and snapshot[0] in self._active and stream not in self._member:
            self._member[stream] = snapshot[0]  # the side stream is pulled into the capture
        domain = self._domain(stream)
        # A wait is not ordered after the host clock in the text; every later node of its
        # stream that matters (op, record, alloc) is, so this changes no answer.
        self._node(domain, stream, ev["seq"], joins_host=False)
        if snapshot is not None and snapshot[0] == domain:
            self.dags[domain].add_edge(snapshot[1], ev["seq"])

    def _on_op(self, ev: dict[str, Any]) -> None:
        stream, seq = ev["stream"], ev["seq"]
        domain = self._domain(stream)
        self._node(domain, stream, seq)
        program = self._programs.get(domain) if domain != EAGER else None
        for kind, ranges in (("read", ev["reads"]), ("write", ev["writes"])):
            for rng in ranges:
                nbytes = byte_set(rng)
                lives = [life for life in self._live.values() if not nbytes.isdisjoint(life.bytes())]
                lifetime = min((life.alloc_seq for life in lives), default=None)
                use = Use(seq, stream, domain, kind, nbytes, rng, lifetime, tuple(lives))
                self.uses.append(use)
                for life in lives:
                    life.uses.append(use)
                if not nbytes:
                    continue
                if domain == EAGER:
                    self._run(Run(use, seq, lives))
                elif program is not None:
                    captured = Captured(seq, kind, nbytes, rng, lives)
                    program.append(captured)
                    for life in lives:
                        if life.domain == EAGER and not life.pooled:
                            self._inputs.setdefault(life, {}).setdefault(domain, captured)

    # -- the execution view ----------------------------------------------------------------
    def _on_replay(self, ev: dict[str, Any]) -> None:
        graph, stream, seq = ev["graph"], ev["stream"], ev["seq"]
        program = self._programs.get(graph)
        if program is None or graph in self._active or stream in self._member:
            return  # not captured in the trace, gone, capturing, or issued inside a capture
        self._node(EAGER, stream, seq)
        previous = self._last_replay.get(graph)
        if previous is not None:  # CUDA runs the launches of one graph one after the other
            self.dags[EAGER].add_edge(previous, seq)
        self._last_replay[graph] = seq
        for freed in self._freed.values():
            if freed.graph == graph and freed.replay is None:
                freed.replay = seq
        for captured in program:
            lifetime = min((life.alloc_seq for life in captured.lives), default=None)
            use = Use(seq, stream, EAGER, captured.kind, captured.nbytes, captured.rng, lifetime, tuple(captured.lives))
            self.uses.append(use)
            for life in captured.lives:
                life.uses.append(use)
            self._run(Run(use, captured.seq, captured.lives, replay=seq, graph=graph))

    def _on_graph_reset(self, ev: dict[str, Any]) -> None:
        self._gone(ev["graph"])

    _on_graph_destroy = _on_graph_reset

    def _gone(self, graph: int) -> None:
        """The graph replays no more: a freed input of it not replayed since was harmless."""
        self._programs.pop(graph, None)
        self._last_replay.pop(graph, None)
        for users in self._inputs.values():
            users.pop(graph, None)
        for key in [key for key in self._freed if key[1] == graph]:
            freed = self._freed.pop(key)
            freed.dropped = freed.replay is None

    def _run(self, run: Run) -> None:
        """An access that runs: a read gets each byte's last write; a write becomes it."""
        use = run.use
        for freed in self._all_freed:
            owner = freed.owner
            if (
                owner is not None
                and freed.owner_access is None
                and owner.free_seq is None
                and owner in run.lives
                and use.nbytes & owner.bytes() & freed.life.bytes()
            ):
                freed.owner_access = use.seq
        if use.kind == "write":
            span = range(min(use.nbytes), max(use.nbytes) + 1)
            for byte in span:
                if byte in use.nbytes:
                    through = next((life for life in run.lives if byte in life.bytes()), None)
                    self._last_write[byte] = (run, through)
                    self._gap.discard(byte)
                else:
                    self._gap.add(byte)
            return
        stale_bytes = []
        for byte in sorted(use.nbytes):
            read = next((life for life in run.lives if byte in life.bytes()), None)
            last = self._last_write.get(byte)
            if read is None or last is None or last[1] is None:
                continue
            writer, wrote = last
            if (
                wrote is not read
                and read.alloc_seq < writer.issued
                and not (run.replay is not None and writer.replay == run.replay)
            ):
                stale_bytes.append((byte not in self._gap, byte, writer, read, wrote))
        if not stale_bytes:
            return
        seen = [b for b in stale_bytes if b[0]] or stale_bytes
        _, _, writer, read, wrote = seen[0]
        stale = Stale(run, writer, read, wrote, missed=not seen[0][0])
        self.stale.append(stale)
        if stale.missed:
            return  # nothing the engines can see: it clobbers no freed input either
        for side in (run, writer):
            for life in (read, wrote) if side.graph is not None else ():
                freed = self._freed.get((life, side.graph))
                if freed is not None:  # the consequence of a freed graph input
                    self.folded[id(stale)] = freed
                    if freed.clobbered is None:
                        freed.clobbered = stale
                    return

    def _on_alloc(self, ev: dict[str, Any]) -> None:
        # The allocation is where the owner's earlier frees in this domain may be handed out:
        # it is a node of the owner's program order (after the host clock, in eager), and
        # each of those frees is decided against it, once and for good.
        stream, seq = ev["stream"], ev["seq"]
        domain = self._domain(stream)
        self._node(domain, stream, seq)
        undecided = []
        for free_seq, free_domain, life in self._undecided:
            if life.stream == stream and free_domain == domain:
                self._checks.append((free_seq, domain, seq, life))
            else:
                undecided.append((free_seq, free_domain, life))
        self._undecided = undecided
        self._live[ev["addr"]] = Lifetime(ev["addr"], ev["size"], stream, seq, domain, bool(ev.get("pool")))
        self._lifetimes.append(self._live[ev["addr"]])
        for freed in self._freed.values():  # the graph lives
            if freed.owner is None and freed.life.bytes() & self._live[ev["addr"]].bytes():
                freed.owner = self._live[ev["addr"]]

    def _on_free(self, ev: dict[str, Any]) -> None:
        life = self._live.pop(ev["addr"], None)
        if life is None:
            return  # allocated before recording started: ignored
        life.free_seq = ev["seq"]
        self._undecided.append((ev["seq"], self._domain(life.stream), life))
        for graph, use in self._inputs.pop(life, {}).items():
            freed = FreedInput(graph, use, life, ev["seq"])
            self._freed[life, graph] = freed
            self._all_freed.append(freed)

    def _on_record_stream(self, ev: dict[str, Any]) -> None:
        life = self._live.get(ev["addr"])
        if life is None:
            return
        if ev["stream"] == life.stream:
            self.noop_record_streams.add(ev["seq"])
        else:
            life.recorded.add(ev["stream"])

    def _on_stream_sync(self, ev: dict[str, Any]) -> None:
        if ev["stream"] in self._member:
            return  # illegal while capturing: ignored
        last = self._last.get((EAGER, ev["stream"]))
        self._host_sync(ev["seq"], [last] if last is not None else [])

    def _on_event_sync(self, ev: dict[str, Any]) -> None:
        snapshot = self._snapshot.get(ev["event"])
        if snapshot is not None and snapshot[0] == EAGER:
            self._host_sync(ev["seq"], [snapshot[1]])

    def _on_device_sync(self, ev: dict[str, Any]) -> None:
        sources = [node for (domain, _), node in self._last.items() if domain == EAGER]
        self._host_sync(ev["seq"], sources)

    # -- races ---------------------------------------------------------------------------
    def _races(self) -> set[tuple[int, str, int, str]]:
        pairs = set()
        self.latest_race: dict[int, int] = {}  # id(later use) -> seq of the latest use it races with
        for a, b in itertools.combinations(self.uses, 2):  # self.uses is in seq order
            if (
                a.seq != b.seq
                and a.domain == b.domain
                and a.stream != b.stream
                and "write" in (a.kind, b.kind)
                and not a.nbytes.isdisjoint(b.nbytes)
                and not self.happens_before(a.domain, a.seq, b.seq)
                and not _allocator_waited(a, b)
            ):
                pairs.add((a.seq, a.kind, b.seq, b.kind))
                self.latest_race[id(b)] = a.seq
        return pairs


def _allocator_waited(a: Use, b: Use) -> bool:
    """Every allocation ``a`` went through was freed after ``a`` and before ``b``, with ``a``'s
    stream named by ``record_stream``, and ``b`` goes through none of them: the allocator gave
    the bytes to ``b``'s allocation only once ``a``'s stream was done with them."""
    return bool(a.lives) and all(
        life.free_seq is not None
        and a.seq < life.free_seq < b.seq
        and a.stream in life.recorded
        and not any(life is other for other in b.lives)
        for life in a.lives
    )
