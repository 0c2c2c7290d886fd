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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import Oracle

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE
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
    first = draw(st.sampled_from(fits))
    addr = p.tb.alloc(cells * CELL, stream, addr=ARENA + first * CELL, at=f"prog.py:{10 + cells}")
    p.live[addr] = (cells * CELL, stream)
    for c in range(first, first + cells):
        p.used[c], p.owner[c] = True, stream


def step_free(draw: st.DrawFn, p: Program) -> None:
    if p.live:
        step_free_at(p, draw(st.sampled_from(sorted(p.live))))


def step_free_at(p: Program, addr: int) -> None:
    size, _ = p.live.pop(addr)
    p.tb.free(addr, at="prog.py:20")
    first = (addr - ARENA) // CELL
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
    if action == "begin" and p.captures < 2 and outside:
        p.captures += 1
        stream = draw(st.sampled_from(outside))
        shared = draw(st.booleans())  # several captures into one pool, as serving code does
        graph = tb.emit(
            "capture_begin",
            graph=p.captures,
            stream=stream,
            device=0,
            pool=[1, 0] if shared else [p.captures, 0],
            mode="global",
        )["graph"]
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
    del p.capturing[graph]
    for member in p.members(graph):
        del p.member[member]
    for event, recorded_in in p.snapshot.items():
        if recorded_in == graph:
            p.snapshot[event] = -1  # recorded in a graph whose capture has ended


STEPS = [
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
    uses = {(u.seq, u.kind, range_key(u.rng)): u for u in oracle.uses}
    for f in races:
        earlier, later = (uses.get((a.seq, a.access, range_key(a.range))) for a in f.accesses)
        assert earlier and later, f"a finding names an access the trace does not have: {f}"
        assert f.hazard == HAZARD[(earlier.kind, later.kind)], f
        # The earlier access named is the most recent one the later access races with (one the
        # engine may not forget: a later access covering it would race too, and be more recent).
        assert earlier.seq == oracle.latest_race[id(later)], f
        # Aliasing: the two touch the bytes through two different allocations of them.
        lifetimes = (earlier.lifetime, later.lifetime)
        assert f.aliasing == (None not in lifetimes and lifetimes[0] != lifetimes[1]), f

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

    noops = [f for f in raw if f.kind == RECORD_STREAM_NOOP]
    assert bool(noops) == bool(oracle.noop_record_streams)
    # Dedup loses nothing: the counts of the deduplicated findings add up to the raw ones.
    assert sum(f.count for f in result.findings) == len(raw)
    assert len({f.signature for f in result.findings}) == len(result.findings)
