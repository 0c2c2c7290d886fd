"""The engine against the brute-force oracle (tests/oracle.py) on random valid traces.

Each example is a small program over 2-5 streams: ops reading and writing strided views
(slices, 2-D blocks, transposes, step-2 interleaves, expands, scalars, empty views) of a few
blocks of an arena and of memory allocated before recording; allocations and frees on the
same addresses (whole blocks, a part of a freed block, one block over two freed ones), with
the allocator's rule that a freed block goes back only to its own stream; events recorded,
re-recorded, waited, deleted and re-created; wait_stream; record_stream (sometimes on the
block's own stream); host synchronisations outside captures; and up to two captures, one
after the other or at the same time on different streams, whose side streams join through
waits and are joined back before the capture ends.

And the execution view: allocations inside a capture go to its pool, several captures may
share one pool (a block one frees, another takes); captured graphs are replayed on any stream
(their inputs staged by eager ops between, their outputs read after), reset or destroyed, and
replayed after that or before they were captured, as are graph ids never captured, graphs still
capturing and replays issued from inside a capture (all four no-ops); blocks a graph uses are
freed while it lives and handed out again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, GRAPH_INPUT_FREED, RECORD_STREAM_NOOP, STALE_READ, UNSAFE_FREE
from streamrace.trace.builder import TraceBuilder

ARENA = 0x10_0000  # blocks of the trace's allocations live here
CELL = 32  # allocation granule: a block is 1, 2 or 4 cells
CELLS = 8
STATIC = 0x20_0000  # memory allocated before recording started (never allocated or freed)
STATIC_SIZE = 64


def range_key(rng: dict) -> tuple:
    """A range as the trace wrote it (a finding may add ``approximate``)."""
    return tuple(sorted((k, repr(v)) for k, v in rng.items() if k != "approximate"))


def access_key(access) -> tuple:
    """An access of a finding as the oracle names it: seq, kind and range."""
    return (access.seq, access.access, range_key(access.range))


HAZARD = {("write", "read"): "RAW", ("read", "write"): "WAR", ("write", "write"): "WAW"}


@dataclass
class Program:
    """What the generator must know to keep the trace valid."""

    tb: TraceBuilder
    streams: list[int]
    events: dict[int, bool] = field(default_factory=dict)  # id -> alive (not deleted)
    snapshot: dict[int, int | None] = field(default_factory=dict)  # id -> graph of its latest record
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # addr -> (size, stream)
    owner: list[int | None] = field(default_factory=lambda: [None] * CELLS)  # last owner of each cell
    used: list[bool] = field(default_factory=lambda: [False] * CELLS)
    capturing: dict[int, int] = field(default_factory=dict)  # active graph -> its capture stream
    member: dict[int, int] = field(default_factory=dict)  # stream -> the active graph it belongs to
    captures: int = 0
    pool: dict[int, list[int]] = field(default_factory=dict)  # graph -> its pool
    captured: list[int] = field(default_factory=list)  # graphs whose capture ended, in order
    gone: set[int] = field(default_factory=set)  # reset or destroyed
    last_free: dict[int, tuple[int, int]] = field(default_factory=dict)  # stream -> (first cell, cells) freed last

    def members(self, graph: int) -> list[int]:
        return sorted(s for s, g in self.member.items() if g == graph)

    def join_graph(self, stream: int, graph: int | None) -> None:
        """Mirror the joining rule, so that every capture can be joined back at its end."""
        if graph in self.capturing and stream not in self.member:
            self.member[stream] = graph

    def wait(self, event: int, stream: int) -> None:
        self.join_graph(stream, self.snapshot.get(event))
        self.tb.wait(event, stream)

    def record(self, event: int, stream: int) -> None:
        self.snapshot[event] = self.member.get(stream)
        self.tb.record(event, stream)

    def wait_stream(self, waiter: int, waited: int) -> None:
        self.join_graph(waiter, self.member.get(waited))
        self.tb.wait_stream(waiter, waited)


def view(draw: st.DrawFn, addr: int, size: int) -> dict:
    """A random view of the block ``[addr, addr + size)``."""
    tb = TraceBuilder
    itemsize = draw(st.sampled_from([4, 4, 2]))
    n = size // itemsize
    kind = draw(st.sampled_from(["span", "slice", "2d", "t", "rows", "cols", "step2", "expand", "scalar", "empty"]))
    if kind == "span":
        start = draw(st.integers(0, size - 1))
        return tb.span(addr + start, draw(st.integers(0, size - start)))
    if kind == "slice":
        start = draw(st.integers(0, n - 1))
        return tb.view(addr, [draw(st.integers(1, n - start))], [1], itemsize, offset=start)
    if kind == "scalar":
        return tb.view(addr, [], [], itemsize, offset=draw(st.integers(0, n - 1)))
    if kind == "empty":
        return tb.view(addr, [0], [1], itemsize, offset=draw(st.integers(0, n - 1)))
    if kind == "expand":
        start = draw(st.integers(0, n - 1))
        length = draw(st.integers(1, min(4, n - start)))
        return tb.view(addr, [draw(st.integers(1, 3)), length], [0, 1], itemsize, offset=start)
    cols = draw(st.sampled_from([c for c in (2, 4, 8) if n % c == 0 and n // c >= 2]))
    rows = n // cols
    if kind == "2d":
        return tb.view(addr, [rows, cols], itemsize=itemsize)
    if kind == "t":
        return tb.view(addr, [cols, rows], [1, cols], itemsize)
    if kind == "rows":
        first = draw(st.integers(0, rows - 1))
        last = draw(st.integers(first + 1, rows))
        return tb.view(addr, [last - first, cols], [cols, 1], itemsize, offset=first * cols)
    if kind == "cols":
        first = draw(st.integers(0, cols - 1))
        last = draw(st.integers(first + 1, cols))
        return tb.view(addr, [rows, last - first], [cols, 1], itemsize, offset=first)
    phase = draw(st.integers(0, 1))  # x[:, phase::2]
    return tb.view(addr, [rows, (cols - phase + 1) // 2], [cols, 2], itemsize, offset=phase)


def ranges(draw: st.DrawFn, p: Program, most: int) -> list[dict]:
    regions = [(addr, size) for addr, (size, _) in p.live.items()] + [(STATIC, STATIC_SIZE)]
    out = []
    for _ in range(draw(st.integers(0, most))):
        addr, size = draw(st.sampled_from(regions))
        out.append(view(draw, addr, size))
    return out


def some_stream(draw: st.DrawFn, p: Program) -> int:
    """Any stream; while capturing, mostly a member of a capture."""
    if p.member and draw(st.integers(0, 2)) > 0:
        return draw(st.sampled_from(sorted(p.member)))
    return draw(st.sampled_from(p.streams))


def step_op(draw: st.DrawFn, p: Program) -> None:
    stream = some_stream(draw, p)
    reads, writes = ranges(draw, p, 2), ranges(draw, p, 2)
    if reads and draw(st.booleans()):
        writes.append(reads[0])  # in place
    line = draw(st.integers(1, 6))  # few lines, so that dedup folds some of them
    p.tb.op("aten::op", stream, reads=reads, writes=writes, at=f"prog.py:{line}")


def step_alloc(draw: st.DrawFn, p: Program, stream: int | None = None) -> None:
    if stream is None:
        owners = sorted({p.owner[c] for c in range(CELLS) if not p.used[c] and p.owner[c] is not None})
        # Often the owner of a freed block allocates again.
        stream = draw(st.sampled_from(owners)) if owners and draw(st.booleans()) else some_stream(draw, p)
    cells = draw(st.sampled_from([1, 2, 4]))
    fits = [
        first
        for first in range(0, CELLS - cells + 1)
        if all(not p.used[c] and p.owner[c] in (None, stream) for c in range(first, first + cells))
    ]
    if not fits:
        return
    # Like the caching allocator, often the block its stream freed last (cells and size).
    last = p.last_free.get(stream)
    first = last[0] if last in [(f, cells) for f in fits] and draw(st.booleans()) else draw(st.sampled_from(fits))
    graph = p.member.get(stream)
    # Inside a capture, into its pool; rarely an eager block in a pool (a pool made current).
    pool = p.pool[graph] if graph is not None else ([9, 0] if draw(st.integers(0, 7)) == 0 else None)
    addr = p.tb.alloc(cells * CELL, stream, addr=ARENA + first * CELL, at=f"prog.py:{10 + cells}", pool=pool)
    p.live[addr] = (cells * CELL, stream)
    for c in range(first, first + cells):
        p.used[c], p.owner[c] = True, stream


def step_free(draw: st.DrawFn, p: Program) -> None:
    if p.live:
        step_free_at(p, draw(st.sampled_from(sorted(p.live))))


def step_free_at(p: Program, addr: int) -> None:
    size, owner = p.live.pop(addr)
    p.tb.free(addr, at="prog.py:20")
    first = (addr - ARENA) // CELL
    p.last_free[owner] = (first, size // CELL)
    for c in range(first, first + size // CELL):
        p.used[c] = False


def step_handoff(draw: st.DrawFn, p: Program) -> None:
    """The H1 shape: another stream uses a block, the owner frees it, joined or not, and
    maybe allocates again at once and uses the new block on some streams."""
    if not p.live:
        return
    addr = draw(st.sampled_from(sorted(p.live)))
    size, owner = p.live[addr]
    user = draw(st.sampled_from([s for s in p.streams if s != owner]))
    rng = view(draw, addr, size)
    reads, writes = ([rng], []) if draw(st.booleans()) else ([], [rng])
    p.tb.op("aten::use", user, reads=reads, writes=writes, at="prog.py:40")
    if draw(st.booleans()):
        p.wait_stream(owner, user)
    step_free_at(p, addr)
    if draw(st.booleans()):
        step_alloc(draw, p, owner)
        # Sometimes the new block is used at once, on any streams: the reuse that may race
        # with the pending use, named or not as the earlier access (section 5).
        reused = [a for a in p.live if a < addr + size and addr < a + p.live[a][0]]
        for _ in range(draw(st.integers(0, 2)) if reused else 0):
            new = draw(st.sampled_from(sorted(reused)))
            rng = view(draw, new, p.live[new][0])
            reads, writes = ([rng], []) if draw(st.booleans()) else ([], [rng])
            p.tb.op("aten::reuse", draw(st.sampled_from(p.streams)), reads=reads, writes=writes, at="prog.py:41")


def step_record_stream(draw: st.DrawFn, p: Program) -> None:
    if p.live:
        addr = draw(st.sampled_from(sorted(p.live)))
        p.tb.record_stream(addr, draw(st.sampled_from(p.streams)), at="prog.py:30")


def alive_event(draw: st.DrawFn, p: Program) -> int:
    alive = [e for e, ok in p.events.items() if ok]
    if not alive or draw(st.integers(0, 3)) == 0:
        event = p.tb.event()
        p.events[event] = True
        return event
    return draw(st.sampled_from(alive))


def step_record(draw: st.DrawFn, p: Program) -> None:
    p.record(alive_event(draw, p), some_stream(draw, p))


def step_wait(draw: st.DrawFn, p: Program) -> None:
    p.wait(alive_event(draw, p), draw(st.sampled_from(p.streams)))


def step_wait_stream(draw: st.DrawFn, p: Program) -> None:
    waiter = draw(st.sampled_from(p.streams))
    waited = draw(st.sampled_from([s for s in p.streams if s != waiter]))
    p.wait_stream(waiter, waited)


def step_event_life(draw: st.DrawFn, p: Program) -> None:
    """Delete a live event, or re-create a deleted id (a new event with the old id)."""
    if not p.events:
        return
    event = draw(st.sampled_from(sorted(p.events)))
    if p.events[event]:
        p.tb.delete_event(event)
    else:
        p.tb.emit("event_create", event=event)
    p.events[event] = not p.events[event]
    p.snapshot[event] = None


def step_host_sync(draw: st.DrawFn, p: Program) -> None:
    if p.capturing:
        return  # host synchronisation is illegal while capturing
    which = draw(st.sampled_from(["stream", "event", "device"]))
    if which == "stream":
        p.tb.stream_sync(draw(st.sampled_from(p.streams)))
    elif which == "event" and p.events:
        p.tb.event_sync(draw(st.sampled_from(sorted(p.events))))
    else:
        p.tb.device_sync()


def step_capture(draw: st.DrawFn, p: Program) -> None:
    """Begin a capture (possibly while another one is capturing), pull a side stream into
    one, or join one's side streams back and end it."""
    tb = p.tb
    outside = [s for s in p.streams if s not in p.member]
    action = draw(st.sampled_from(["begin", "fork", "fork", "end"] if p.capturing else ["begin"]))
    if action == "begin" and p.captures < 3 and outside:
        p.captures += 1
        stream = draw(st.sampled_from(outside))
        shared = draw(st.booleans())  # several captures into one pool, as serving code does
        pool = [1, 0] if shared else [p.captures, 0]
        graph = tb.emit(
            "capture_begin",
            graph=p.captures,
            stream=stream,
            device=0,
            pool=pool,
            mode="global",
        )["graph"]
        p.pool[graph] = pool
        p.capturing[graph] = stream
        p.member[stream] = graph
    elif action == "fork" and p.capturing and outside:
        graph = draw(st.sampled_from(sorted(p.capturing)))
        p.wait_stream(draw(st.sampled_from(outside)), draw(st.sampled_from(p.members(graph))))
    elif action == "end" and p.capturing:
        end_capture(p, draw(st.sampled_from(sorted(p.capturing))))


def end_capture(p: Program, graph: int) -> None:
    stream = p.capturing[graph]
    for member in p.members(graph):
        if member != stream:
            p.wait_stream(stream, member)
    p.tb.emit("capture_end", graph=graph)
    p.captured.append(graph)
    del p.capturing[graph]
    for member in p.members(graph):
        del p.member[member]
    for event, recorded_in in p.snapshot.items():
        if recorded_in == graph:
            p.snapshot[event] = -1  # recorded in a graph whose capture has ended


def step_replay(draw: st.DrawFn, p: Program) -> None:
    """Replay a captured graph on any stream, after staging an input and before reading what
    it made; now and then a replay that is no work at all: of a graph gone or never captured,
    of one still capturing, or issued from inside a capture."""
    live = [g for g in p.captured if g not in p.gone]
    which = draw(st.integers(0, 9))
    if which == 0 or not live:
        graph = draw(st.sampled_from([*p.gone, *p.capturing, 77]))
    else:
        graph = draw(st.sampled_from(live))
    if draw(st.booleans()):
        step_op(draw, p)  # stage an input, or read an output
    outside = [s for s in p.streams if s not in p.member]
    stream = draw(st.sampled_from(outside if outside and which else p.streams))
    p.tb.replay(graph, stream, at=f"prog.py:{50 + draw(st.integers(0, 2))}")


def step_whole_capture(draw: st.DrawFn, p: Program) -> None:
    """A capture on one stream, begun and ended in one step: it reads blocks made before it,
    allocates into its pool (maybe one another capture shares), writes, and frees some of
    its blocks, so that graphs have programs to replay and pools have blocks to hand out."""
    outside = [s for s in p.streams if s not in p.member]
    if p.captures >= 3 or not outside:
        return
    p.captures += 1
    stream = draw(st.sampled_from(outside))
    graph = p.captures
    shared = [p.pool[g] for g in p.pool] if p.pool and draw(st.booleans()) else []
    pool = draw(st.sampled_from(shared)) if shared else [graph, 0]
    p.tb.emit("capture_begin", graph=graph, stream=stream, device=0, pool=pool, mode="global")
    p.pool[graph], p.capturing[graph], p.member[stream] = pool, stream, graph
    made = []
    for _ in range(draw(st.integers(1, 5))):
        what = draw(st.sampled_from(["alloc", "op", "op", "free"]))
        if what == "alloc":
            before = set(p.live)
            step_alloc(draw, p, stream)
            made += [a for a in p.live if a not in before]
        elif what == "free" and made:
            addr = made.pop(draw(st.integers(0, len(made) - 1)))
            step_free_at(p, addr)
        else:
            reads, writes = ranges(draw, p, 2), ranges(draw, p, 2)
            p.tb.op("aten::op", stream, reads=reads, writes=writes, at=f"prog.py:{draw(st.integers(1, 6))}")
    end_capture(p, graph)


def step_pool_handoff(draw: st.DrawFn, p: Program) -> None:
    """Two captures on one stream: the first writes a scratch block and frees it, the second
    (mostly into the same pool) is given the block and keeps it: replayed out of capture order,
    the first graph writes into the second's tensor (HAZARDS.md X4)."""
    outside = [s for s in p.streams if s not in p.member]
    if p.captures > 1 or not outside:
        return
    stream = draw(st.sampled_from(outside))
    pool = None
    for turn in (0, 1):
        p.captures += 1
        graph = p.captures
        pool = pool if turn and draw(st.integers(0, 3)) else [graph, 0]
        p.tb.emit("capture_begin", graph=graph, stream=stream, device=0, pool=pool, mode="global")
        p.pool[graph], p.capturing[graph], p.member[stream] = pool, stream, graph
        before = set(p.live)
        step_alloc(draw, p, stream)
        made = [a for a in p.live if a not in before]
        for addr in made:
            size = p.live[addr][0]
            reads = ranges(draw, p, 1)
            if turn and draw(st.booleans()):
                reads.append(view(draw, addr, size))  # reads its block before writing it
            p.tb.op("aten::op", stream, reads=reads, writes=[view(draw, addr, size)], at=f"prog.py:{7 + turn}")
            if turn == 0:
                step_free_at(p, addr)
        end_capture(p, graph)


def step_graph_gone(draw: st.DrawFn, p: Program) -> None:
    """Reset or destroy a graph (now and then one that is still capturing)."""
    graphs = [g for g in p.captured if g not in p.gone] + (list(p.capturing) if draw(st.integers(0, 5)) == 0 else [])
    if not graphs:
        return
    graph = draw(st.sampled_from(graphs))
    if draw(st.booleans()):
        p.tb.reset_graph(graph, at="prog.py:60")
    else:
        p.tb.destroy_graph(graph)
    p.gone.add(graph)


STEPS = [
    (step_replay, 4),
    (step_whole_capture, 2),
    (step_pool_handoff, 1),
    (step_graph_gone, 1),
    (step_op, 8),
    (step_alloc, 4),
    (step_free, 3),
    (step_record, 2),
    (step_wait, 2),
    (step_wait_stream, 2),
    (step_event_life, 1),
    (step_handoff, 1),
    (step_record_stream, 1),
    (step_host_sync, 2),
    (step_capture, 2),
]


@st.composite
def programs(draw: st.DrawFn):
    tb = TraceBuilder()
    p = Program(tb, [tb.stream(f"s{i}") for i in range(draw(st.integers(2, 5)))])
    choices = [step for step, weight in STEPS for _ in range(weight)]
    for _ in range(draw(st.integers(4, 40))):
        draw(st.sampled_from(choices))(draw, p)
    for graph in sorted(p.capturing):
        end_capture(p, graph)
    return tb.trace()


@settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs())
def test_engine_agrees_with_oracle(trace):
    oracle = Oracle(trace)
    result = analyze(trace)
    raw = result.raw_findings

    races = [f for f in raw if f.kind == DATA_RACE]
    folded = [f for f in raw if f.kind == UNSAFE_FREE and f.aliasing]
    # Every later access that races with something is reported: as a data race, or folded
    # into the unsafe free whose block it reuses.
    assert {f.accesses[1].seq for f in races + folded} == oracle.racing
    for f in races:
        earlier, later = f.accesses
        assert (earlier.seq, earlier.access, later.seq, later.access) in oracle.pairs, f
    # Exactly: one data race per racing access, less the ones folded into an unsafe free
    # (the first fold of a free, when the earlier access it names is of the pending op).
    expected = Counter(
        (u.seq, u.kind, range_key(u.rng))
        for u in oracle.uses
        if id(u) in oracle.latest_race and id(u) not in oracle.suppressed
    )
    assert Counter(access_key(f.accesses[1]) for f in races) == expected
    # A replay runs its program at its own seq: one key may name several accesses of it.
    uses: dict[tuple, list] = {}
    for u in oracle.uses:
        uses.setdefault((u.seq, u.kind, range_key(u.rng)), []).append(u)
    for f in races:
        earliers, laters = (uses.get((a.seq, a.access, range_key(a.range)), []) for a in f.accesses)
        assert earliers and laters, f"a finding names an access the trace does not have: {f}"
        assert f.hazard == HAZARD[(earliers[0].kind, laters[0].kind)], f
        # The earlier access named is the most recent one the later access races with (one the
        # engine may not forget: a later access covering it would race too, and be more recent);
        # aliasing: the two touch the bytes through two different allocations of them.
        assert any(
            earlier.seq == oracle.latest_race.get(id(later))
            and f.aliasing == (None not in (earlier.lifetime, later.lifetime) and earlier.lifetime != later.lifetime)
            for earlier in earliers
            for later in laters
        ), f

    unsafe = [f for f in raw if f.kind == UNSAFE_FREE]
    assert {f.allocation.free_seq for f in unsafe} == set(oracle.unsafe_frees)
    # One finding per stream whose pending use makes the free unsafe.
    keys = [(f.allocation.free_seq, f.accesses[0].stream) for f in unsafe]
    assert sorted(keys) == sorted(oracle.folds), unsafe
    for f in unsafe:
        use, second = f.accesses
        free = f.allocation.free_seq
        key = (free, use.stream)
        assert (use.seq, use.access) in oracle.unsafe_frees[free], f
        assert use.seq == oracle.pending_op[key], f
        # The hazard stays the pending use's, folded or not.
        assert f.hazard == {"read": "WAR", "write": "WAW"}[use.access], f
        folds = oracle.folds[key]
        if folds:
            # Section 5: some access of a later allocation of the bytes races with the pending
            # use, whichever earlier access the engine names for it: the first one is folded.
            first = folds[0]
            assert f.aliasing, (f, first)
            assert access_key(second) == (first.seq, first.kind, range_key(first.rng)), f
            assert f.allocation.reused_by is not None and f.allocation.reused_by["seq"] == second.seq, f
            assert any(p[0] == use.seq and p[2] == second.seq for p in oracle.reuse_races[free]), f
        else:
            assert not f.aliasing, f
            assert (second.access, second.seq) == ("free", free), f

    check_stale_reads(oracle, [f for f in raw if f.kind == STALE_READ])
    check_freed_inputs(oracle, [f for f in raw if f.kind == GRAPH_INPUT_FREED])

    noops = [f for f in raw if f.kind == RECORD_STREAM_NOOP]
    assert bool(noops) == bool(oracle.noop_record_streams)
    # Dedup loses nothing: the counts of the deduplicated findings add up to the raw ones
    # (a raw stale-read counts the reads of its reading op and writer op already).
    assert sum(f.count for f in result.findings) == sum(f.count for f in raw)
    assert len({f.signature for f in result.findings}) == len(result.findings)


def op_seq(access) -> int:
    """The op an access of a finding is of: a replay's is the captured op it runs again."""
    return access.captured["seq"] if access.captured is not None else access.seq


def check_stale_reads(oracle: Oracle, stale: list) -> None:
    """One stale-read per reading op and last writer's op, counting every read of them (every
    replay of a loop), named by its first read: exactly the oracle's, less those folded into a
    freed graph input and those the engines cannot see (the documented strided-write limit)."""
    seen = [s for s in oracle.stale if not s.missed and id(s) not in oracle.folded]
    expected = Counter((s.reader.op_seq, s.writer.op_seq) for s in seen)
    assert Counter({(op_seq(f.accesses[1]), op_seq(f.accesses[0])): f.count for f in stale}) == expected, stale
    first = {}
    for s in seen:
        first.setdefault((s.reader.op_seq, s.writer.op_seq), s)
    for f in stale:
        writer, reader = f.accesses
        want = first[op_seq(reader), op_seq(writer)]
        assert (writer.access, reader.access, f.hazard, f.aliasing) == ("write", "read", "RAW", True), f
        assert (writer.seq, range_key(writer.range)) == (want.writer.issued, range_key(want.writer.use.rng)), f
        assert (reader.seq, range_key(reader.range)) == (want.reader.issued, range_key(want.reader.use.rng)), f
        assert f.allocation is not None and f.allocation.reused_by is not None, f
        blocks = {f.allocation.alloc_seq, f.allocation.reused_by["alloc_seq"]}
        assert blocks == {want.read.alloc_seq, want.wrote.alloc_seq}, f


def check_freed_inputs(oracle: Oracle, freed: list) -> None:
    """A freed graph input for each one the oracle keeps: the graph, its first captured access
    through the block, the free, replayed after it or latent, whether a replay read or wrote
    through the allocation that took the block, and the block's next owner (its allocation
    and first access)."""
    found = sorted(
        (
            f.graph,
            f.accesses[0].seq,
            f.accesses[0].access,
            range_key(f.accesses[0].range),
            f.allocation.alloc_seq,
            f.accesses[1].seq,
            "replayed after the free" in f.message,
            f.aliasing,
            (f.allocation.reused_by["seq"], f.allocation.reused_by["alloc_seq"]) if f.allocation.reused_by else None,
        )
        for f in freed
    )
    expected = sorted(
        (
            g.graph,
            g.use.seq,
            g.use.kind,
            range_key(g.use.rng),
            g.life.alloc_seq,
            g.free_seq,
            g.replay is not None,
            g.clobbered is not None,
            (g.owner_access, g.owner.alloc_seq) if g.owner is not None and g.owner_access is not None else None,
        )
        for g in oracle.freed_inputs
    )
    assert found == expected
