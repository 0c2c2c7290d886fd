"""The allocator-reuse, byte-range and dedup cases of the CSAN fork, ported to streamrace.

The fork's allocator cases model reuse with a global pointer map; streamrace models PyTorch's
caching allocator (docs/analysis.md section 5): a block goes back only to its own stream, so
the hazard is a block allocated on ``main``, used on a side stream, freed on ``main`` while that
use is unordered, and decided at ``main``'s next allocation. Each scenario runs inside a
capture (the real setting: the graph's private pool) and in eager form: a capture stream
``main`` forks the side streams first and joins them back at the end, as serving code does.
"""

from __future__ import annotations

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, UNSAFE_FREE
from streamrace.trace.builder import TraceBuilder

MODES = pytest.mark.parametrize("mode", ["eager", "capture"])
KiB = 1024


class Program:
    """``main`` plus side streams; in capture mode everything between begin and end is captured."""

    def __init__(self, mode: str, sides: int = 1) -> None:
        self.tb = tb = TraceBuilder()
        self.mode = mode
        self.main = tb.stream("main")
        self.sides = [tb.stream(f"side{i + 1}" if sides > 1 else "side") for i in range(sides)]
        self.side = self.sides[0]
        self.graph = None
        if mode == "capture":
            self._capture = tb.capture(self.main)
            self.graph = self._capture.__enter__()
        for side in self.sides:
            tb.wait_stream(side, self.main, at="model.py:1")  # fork

    def handoff(self, addr: int, nbytes: int, side: int | None = None, at: str = "model.py:20", fill=True) -> int:
        """``main`` writes the tensor (if ``fill``) and records an event; ``side`` waits on it
        and reads the tensor. Returns the read's seq."""
        side = self.side if side is None else side
        if fill:
            self.tb.op("aten::fill_", self.main, writes=[self.tb.span(addr, nbytes)], at="model.py:11")
        ready = self.tb.event()
        self.tb.record(ready, self.main, at="model.py:12")
        self.tb.wait(ready, side, at="model.py:13")
        return self.tb.op("aten::sum", side, reads=[self.tb.span(addr, nbytes)], at=at)

    def join(self, side: int | None = None) -> None:
        self.tb.wait_stream(self.main, self.side if side is None else side, at="model.py:50")

    def finish(self):
        for side in self.sides:
            self.join(side)
        if self.mode == "capture":
            self._capture.__exit__(None, None, None)
        self.result = analyze(self.tb.trace())
        return self.result

    def kinds(self) -> list[str]:
        return [f.kind for f in self.result.raw_findings]

    def check_graph(self) -> None:
        assert all(f.graph == self.graph for f in self.result.raw_findings)


# -- allocator reuse ---------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("joined", [False, True])
def test_reuse_race(mode, joined):
    # The block of x, still read on side, is handed to y on main: y's write races with it.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    read = p.handoff(x, KiB)
    if joined:
        p.join()
    tb.free(x, at="model.py:30")
    free_seq = tb.events[-1]["seq"]
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    alloc_y = tb.events[-1]["seq"]
    write = tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    result = p.finish()
    if joined:
        assert result.raw_findings == []
        return
    (f,) = result.raw_findings
    p.check_graph()
    assert (f.kind, f.hazard, f.aliasing) == (UNSAFE_FREE, "WAR", True)
    use, reuse = f.accesses
    assert (use.seq, use.op, use.access, use.stream_label, use.location) == (
        read,
        "aten::sum",
        "read",
        "side",
        "model.py:20",
    )
    assert (reuse.seq, reuse.op, reuse.access, reuse.stream_label, reuse.location) == (
        write,
        "aten::mul",
        "write",
        "main",
        "model.py:32",
    )
    a = f.allocation
    assert (a.addr, a.size, a.stream_label, a.alloc_location) == (x, KiB, "main", "model.py:10")
    assert (a.free_seq, a.free_location) == (free_seq, "model.py:30")
    assert a.reused_by is not None
    assert {k: a.reused_by[k] for k in ("op", "stream_label", "seq", "location", "alloc_seq", "alloc_location")} == {
        "op": "aten::mul",
        "stream_label": "main",
        "seq": write,
        "location": "model.py:32",
        "alloc_seq": alloc_y,
        "alloc_location": "model.py:31",
    }


@MODES
@pytest.mark.parametrize("user", ["main", "side"])
def test_same_stream_reuse_safe(mode, user):
    # Reuse of a block that only its own stream used is ordered by program order.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    tb.op("aten::fill_", p.main, writes=[tb.span(x, KiB)], at="model.py:11")
    if user == "side":
        p.handoff(x, KiB)
    else:
        tb.op("aten::sum", p.main, reads=[tb.span(x, KiB)], at="model.py:20")
    tb.free(x, at="model.py:30")
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    p.finish()
    assert p.kinds() == ([] if user == "main" else [UNSAFE_FREE])


@MODES
@pytest.mark.parametrize("recorded", [True, False])
def test_record_stream(mode, recorded):
    # x.record_stream(side) covers side's use: the allocator parks the block (the next main
    # allocation gets fresh memory) and the free is safe. Without it the free is unsafe even
    # though this time the next allocation did not land on the block (latent).
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    read = p.handoff(x, KiB)
    if recorded:
        tb.record_stream(x, p.side, at="model.py:25")
    tb.free(x, at="model.py:30")
    y = tb.alloc(KiB, p.main, at="model.py:31")
    tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    result = p.finish()
    if recorded:
        assert result.raw_findings == []
        return
    (f,) = result.raw_findings
    assert (f.kind, f.hazard, f.aliasing, f.allocation.reused_by) == (UNSAFE_FREE, "WAR", False, None)
    assert f.accesses[0].seq == read
    assert (f.accesses[1].access, f.accesses[1].seq) == ("free", f.allocation.free_seq)


@MODES
@pytest.mark.parametrize("recorded", [("side1",), ("side1", "side2")], ids=["partial", "both"])
def test_partial_record_stream(mode, recorded):
    # Recorded on side1 but also used on side2: side2's use is still unordered.
    p = Program(mode, sides=2)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB, side=p.sides[0], at="model.py:20")
    read2 = p.handoff(x, KiB, side=p.sides[1], at="model.py:21", fill=False)
    for name, side in zip(("side1", "side2"), p.sides, strict=True):
        if name in recorded:
            tb.record_stream(x, side, at="model.py:25")
    tb.free(x, at="model.py:30")
    tb.alloc(KiB, p.main, at="model.py:31")
    result = p.finish()
    if len(recorded) == 2:
        assert result.raw_findings == []
        return
    (f,) = result.raw_findings
    assert (f.kind, f.accesses[0].seq, f.accesses[0].stream_label) == (UNSAFE_FREE, read2, "side2")


@MODES
@pytest.mark.parametrize(
    "sync, safe",
    [
        ("before free", True),
        ("after free, before the next allocation", True),
        ("after the reusing write", False),
    ],
)
def test_explicit_sync(mode, sync, safe):
    # main waits for an event recorded on side after its use. The free is decided at main's
    # next allocation (the point where the allocator may hand the block out), so the wait
    # may come after the free, as long as it precedes that allocation.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB)
    done = tb.event()
    tb.record(done, p.side, at="model.py:21")
    if sync == "before free":
        tb.wait(done, p.main, at="model.py:22")
    tb.free(x, at="model.py:30")
    if sync == "after free, before the next allocation":
        tb.wait(done, p.main, at="model.py:22")
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    if sync == "after the reusing write":
        tb.wait(done, p.main, at="model.py:22")
    p.finish()
    assert p.kinds() == ([] if safe else [UNSAFE_FREE])


@pytest.mark.parametrize("sync", ["device", "stream", "event", None])
def test_host_sync_before_reuse(sync):
    # Eager only: a host synchronisation between the free and the next allocation orders the
    # reuse after the side stream's use (the allocation joins the host clock).
    p = Program("eager")
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB)
    done = tb.event()
    tb.record(done, p.side, at="model.py:21")
    tb.free(x, at="model.py:30")
    if sync == "device":
        tb.device_sync()
    elif sync == "stream":
        tb.stream_sync(p.side)
    elif sync == "event":
        tb.event_sync(done)
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    p.finish()
    assert p.kinds() == ([UNSAFE_FREE] if sync is None else [])


@MODES
@pytest.mark.parametrize("more_allocations", [False, True])
def test_no_later_allocation_on_the_owner(mode, more_allocations):
    # A block freed before the join whose owner allocates nothing more (in this domain) is
    # never handed out while the use is pending: not reported. An allocation on another
    # stream does not hand out main's block either.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB)
    tb.free(x, at="model.py:30")
    tb.alloc(KiB, p.side, at="model.py:40")
    if more_allocations:
        tb.alloc(64, p.main, at="model.py:41")  # any size: it decides the free
    p.finish()
    assert p.kinds() == ([UNSAFE_FREE] if more_allocations else [])


@pytest.mark.parametrize(
    "scenario, unsafe",
    [
        ("eager free; main allocates only inside a capture", False),
        ("eager free; main allocates inside a capture, then eagerly", True),
        ("free inside a capture; main allocates eagerly after it", False),
    ],
)
def test_free_is_decided_in_its_own_domain(scenario, unsafe):
    # The next allocation that decides a free is the owner's next one in the domain of the
    # free: a graph's private pool does not hand out eager blocks, nor the reverse.
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    if scenario.startswith("eager free"):
        x = tb.alloc(KiB, main, at="model.py:10")
        tb.op("aten::sum", side, reads=[tb.span(x, KiB)], at="model.py:20")
        tb.free(x, at="model.py:30")
        with tb.capture(main):
            tb.alloc(KiB, main, at="model.py:31")
        if unsafe:
            tb.alloc(64, main, at="model.py:32")
    else:
        with tb.capture(main):
            tb.wait_stream(side, main)
            x = tb.alloc(KiB, main, at="model.py:10")
            tb.wait_stream(side, main)
            tb.op("aten::sum", side, reads=[tb.span(x, KiB)], at="model.py:20")
            tb.free(x, at="model.py:30")
            tb.wait_stream(main, side)
        tb.alloc(KiB, main, addr=x, at="model.py:31")
    result = analyze(tb.trace())
    assert [(f.kind, f.graph) for f in result.raw_findings] == ([(UNSAFE_FREE, None)] if unsafe else [])


def test_reuse_in_another_graph_is_not_checked():
    # The next main allocation comes in a later capture sharing the pool: a different
    # domain, so the free in the first graph is never decided against it.
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main, pool=(1, 0)):
        tb.wait_stream(side, main)
        x = tb.alloc(KiB, main, at="model.py:10")
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.span(x, KiB)], at="model.py:20")
        tb.free(x, at="model.py:30")
        tb.wait_stream(main, side)
    with tb.capture(main, pool=(1, 0)):
        y = tb.alloc(KiB, main, addr=x, at="model.py:31")
        tb.op("aten::mul", main, writes=[tb.span(y, KiB)], at="model.py:32")
    assert analyze(tb.trace()).raw_findings == []


@MODES
@pytest.mark.parametrize("side_reads", ["whole", "first half"])
def test_split_block(mode, side_reads):
    # A new allocation takes the second half of the freed block. The free is unsafe either
    # way; it aliases only if side's use reached into the half that was handed out.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    read = p.handoff(x, KiB if side_reads == "whole" else KiB // 2)
    tb.free(x, at="model.py:30")
    y = tb.alloc(KiB // 2, p.main, addr=x + KiB // 2, at="model.py:31")
    write = tb.op("aten::mul", p.main, writes=[tb.span(y, KiB // 2)], at="model.py:32")
    result = p.finish()
    (f,) = result.raw_findings
    assert (f.kind, f.accesses[0].seq) == (UNSAFE_FREE, read)
    if side_reads == "whole":
        assert f.aliasing is True
        assert (f.accesses[1].seq, f.allocation.reused_by["seq"]) == (write, write)
    else:
        assert (f.aliasing, f.allocation.reused_by, f.accesses[1].access) == (False, None, "free")


def coalesced(mode: str, joined: bool):
    """Two adjacent blocks on main, handed to side1 and side2, freed, and taken back by one
    allocation z that main writes. Returns the program and the seqs (read1, read2, write)."""
    p = Program(mode, sides=2)
    tb = p.tb
    x1 = tb.alloc(KiB // 2, p.main, at="model.py:10")
    x2 = tb.alloc(KiB // 2, p.main, addr=x1 + KiB // 2, at="model.py:11")
    read1 = p.handoff(x1, KiB // 2, side=p.sides[0], at="model.py:20")
    read2 = p.handoff(x2, KiB // 2, side=p.sides[1], at="model.py:21")
    if joined:
        p.join(p.sides[0])
        p.join(p.sides[1])
    tb.free(x1, at="model.py:30")
    tb.free(x2, at="model.py:30")
    z = tb.alloc(KiB, p.main, addr=x1, at="model.py:31")
    write = tb.op("aten::mul", p.main, writes=[tb.span(z, KiB)], at="model.py:32")
    p.finish()
    return p, (x1, x2), (read1, read2, write)


@MODES
@pytest.mark.parametrize("joined", [False, True])
def test_coalesced_blocks(mode, joined):
    # One new allocation spans two freed blocks whose uses are pending: both frees are
    # unsafe, and z's write is reported once, folded into a free whose block it reuses.
    p, blocks, (read1, read2, write) = coalesced(mode, joined)
    if joined:
        assert p.result.raw_findings == []
        return
    assert p.kinds() == [UNSAFE_FREE, UNSAFE_FREE]
    unsafe = sorted(p.result.raw_findings, key=lambda f: f.allocation.addr)
    assert [(f.allocation.addr, f.accesses[0].seq) for f in unsafe] == [(blocks[0], read1), (blocks[1], read2)]
    aliasing = [f for f in unsafe if f.aliasing]
    assert aliasing and all(f.allocation.reused_by["seq"] == f.accesses[1].seq == write for f in aliasing)


@MODES
def test_coalesced_blocks_both_alias(mode):
    # docs/analysis.md section 5: a later allocation reuses the bytes and one of its accesses
    # races with the unordered use, so the finding becomes aliasing. That holds for both
    # blocks: z's write races with side1's read and with side2's.
    p, _, (_, _, write) = coalesced(mode, joined=False)
    assert [(f.aliasing, f.allocation.reused_by and f.allocation.reused_by["seq"]) for f in p.result.raw_findings] == [
        (True, write),
        (True, write),
    ]


@MODES
def test_aliasing_whichever_race_is_named(mode):
    # side reads x and main frees it before the join; main's next allocation takes the block.
    # side writes it (ordered after its own read), then side2 writes it: side2's write races
    # with side's pending read through the reused block, and with side's write; the engine
    # names the latter, and must still mark the free aliasing (the block was reused and the
    # reuse collides with the pending use).
    p = Program(mode, sides=2)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB, side=p.sides[0])
    tb.free(x, at="model.py:30")
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    tb.wait_stream(p.sides[0], p.main)
    tb.op("aten::zero_", p.sides[0], writes=[tb.span(y, KiB)], at="model.py:33")
    late = tb.op("aten::mul", p.sides[1], writes=[tb.span(y, KiB)], at="model.py:34")
    p.finish()
    (free,) = [f for f in p.result.raw_findings if f.kind == UNSAFE_FREE]
    assert free.aliasing
    assert free.allocation.reused_by is not None and free.allocation.reused_by["seq"] == late


@MODES
def test_fold_covers_every_range_of_the_pending_use(mode):
    # side writes both halves of x in one op (split outputs); main's next allocation takes
    # the block and reads its first half: one bug, one finding, aliasing.
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    tb.op("aten::split_copy", p.side, writes=[tb.span(x, KiB // 2), tb.span(x + KiB // 2, KiB // 2)], at="model.py:20")
    tb.free(x, at="model.py:30")
    y = tb.alloc(KiB, p.main, addr=x, at="model.py:31")
    read = tb.op("aten::sum", p.main, reads=[tb.span(y, KiB // 2)], at="model.py:32")
    result = p.finish()
    (f,) = result.raw_findings
    assert (f.kind, f.hazard, f.aliasing) == (UNSAFE_FREE, "WAW", True)
    assert (f.accesses[1].seq, f.allocation.reused_by["seq"]) == (read, read)


@MODES
@pytest.mark.parametrize("where", ["adjacent", "far", "same block"])
def test_no_overlap(mode, where):
    # The free is unsafe (latent) whatever the next allocation is; it aliases only when the
    # new allocation's bytes meet the pending use (half-open ranges: adjacent is no overlap).
    p = Program(mode)
    tb = p.tb
    x = tb.alloc(KiB, p.main, at="model.py:10")
    p.handoff(x, KiB)
    tb.free(x, at="model.py:30")
    addr = {"adjacent": x + KiB, "far": x + 64 * KiB, "same block": x}[where]
    y = tb.alloc(KiB, p.main, addr=addr, at="model.py:31")
    tb.op("aten::mul", p.main, writes=[tb.span(y, KiB)], at="model.py:32")
    result = p.finish()
    assert p.kinds() == [UNSAFE_FREE]
    (f,) = result.raw_findings
    assert f.aliasing is (where == "same block")


# -- byte ranges -------------------------------------------------------------------------

V = TraceBuilder.view
S = TraceBuilder.span
BASE = 0x20_0000_0000  # a static buffer: x, 4-byte elements

RANGE_CASES = [
    # (name, write range, read range, race)
    ("contiguous overlap", S(BASE, 64), S(BASE + 32, 64), True),
    ("contiguous adjacent half-open", S(BASE, 64), S(BASE + 64, 64), False),
    ("contiguous one byte overlap", S(BASE, 65), S(BASE + 64, 64), True),
    ("2d vs its last element", V(BASE, [3, 4]), V(BASE, [], [], offset=11), True),
    ("2d vs the element after it", V(BASE, [3, 4]), V(BASE, [], [], offset=12), False),
    ("2d disjoint rows", V(BASE, [2, 4]), V(BASE, [1, 4], offset=8), False),
    ("2d overlapping rows", V(BASE, [2, 4]), V(BASE, [2, 4], offset=4), True),
    ("slice x[2:8] vs x[0:3]", V(BASE, [6], offset=2), V(BASE, [3]), True),
    ("slice x[2:8] vs x[8:10]", V(BASE, [6], offset=2), V(BASE, [2], offset=8), False),
    ("transpose x[:2].t() vs x[2:]", V(BASE, [4, 2], [1, 4]), V(BASE, [2, 4], offset=8), False),
    ("transpose x[:2].t() vs x[1, 3]", V(BASE, [4, 2], [1, 4]), V(BASE, [], [], offset=7), True),
    ("zero stride expand vs next row", V(BASE, [5, 10], [0, 1]), V(BASE, [10], offset=10), False),
    ("zero stride expand vs its last", V(BASE, [5, 10], [0, 1]), V(BASE, [1], offset=9), True),
    ("scalar vs the same element", V(BASE, [], [], offset=3), V(BASE, [4]), True),
    ("scalar vs the next element", V(BASE, [], [], offset=4), V(BASE, [4]), False),
    ("empty view", V(BASE, [0]), V(BASE, [16]), False),
    ("empty 2d view", V(BASE, [4, 0]), V(BASE, [16]), False),
    ("empty span", S(BASE + 8, 0), V(BASE, [16]), False),
    ("one element view", V(BASE, [1], offset=2), V(BASE, [16]), True),
    ("interleaved x[:, ::2] vs x[:, 1::2]", V(BASE, [4, 4], [8, 2]), V(BASE, [4, 4], [8, 2], offset=1), False),
    ("interleaved x[:, ::2] vs x[:, 2::2]", V(BASE, [4, 4], [8, 2]), V(BASE, [4, 3], [8, 2], offset=2), True),
    ("lattice x[0:3, ::2] vs x[2:5, ::2]", V(BASE, [3, 4], [8, 2]), V(BASE, [3, 4], [8, 2], offset=16), True),
    ("lattice x[0:3, ::2] vs x[3:6, ::2]", V(BASE, [3, 4], [8, 2]), V(BASE, [3, 4], [8, 2], offset=24), False),
    ("x[:, ::2] vs column x[:, 1]", V(BASE, [4, 4], [8, 2]), V(BASE, [4], [8], offset=1), False),
    ("x[:, ::2] vs column x[:, 2]", V(BASE, [4, 4], [8, 2]), V(BASE, [4], [8], offset=2), True),
    ("x[:, ::2] vs x.t() rows", V(BASE, [4, 4], [8, 2]), V(BASE, [8, 4], [1, 8]), True),
    ("overlapping slices x[0:60] vs x[40:100]", V(BASE, [60]), V(BASE, [60], offset=40), True),
    ("disjoint slices x[:40] vs x[60:100]", V(BASE, [40]), V(BASE, [40], offset=60), False),
    ("bytes: fp16 view vs fp32 element", V(BASE, [2], itemsize=2, offset=3), V(BASE, [], [], offset=1), True),
    ("bytes: fp16 view before fp32 element", V(BASE, [2], itemsize=2, offset=2), V(BASE, [], [], offset=2), False),
]


def race_between(mode: str, first: dict, second: dict, kinds=("write", "read")):
    """first on side, then second on main, nothing between them: the data races found."""
    p = Program(mode)
    one = {kinds[0] + "s": [first]}
    two = {kinds[1] + "s": [second]}
    a = p.tb.op("aten::first", p.side, at="model.py:60", **one)
    b = p.tb.op("aten::second", p.main, at="model.py:61", **two)
    p.finish()
    races = [f for f in p.result.raw_findings if f.kind == DATA_RACE]
    assert all((f.accesses[0].seq, f.accesses[1].seq) == (a, b) for f in races)
    assert len(p.result.raw_findings) == len(races)
    return races


@MODES
@pytest.mark.parametrize("first, second, race", [c[1:] for c in RANGE_CASES], ids=[c[0] for c in RANGE_CASES])
def test_byte_ranges(mode, first, second, race):
    races = race_between(mode, first, second)
    assert len(races) == int(race)
    if race:
        assert races[0].hazard == "RAW"
        assert races[0].accesses[0].range["addr"] == first["addr"]
        assert races[0].accesses[1].range["addr"] == second["addr"]


@MODES
@pytest.mark.parametrize(
    "kinds, hazard", [(("read", "write"), "WAR"), (("write", "write"), "WAW"), (("read", "read"), None)]
)
def test_hazard_kinds(mode, kinds, hazard):
    races = race_between(mode, S(BASE, 64), S(BASE + 32, 64), kinds)
    assert [f.hazard for f in races] == ([hazard] if hazard else [])


@pytest.mark.parametrize("runs, approximate", [(70_000, True), (1_000, False)])
def test_many_runs_on_two_lattices(runs, approximate):
    # x[::3] against the elements 6r+1 and 6r+5: disjoint (one holds the multiples of 3, the other
    # none), but on different lattices whose steps share only the element size, so no residue
    # separates them (x[::2] vs x[1::4] would be decided exactly modulo 8 bytes). Exact while one
    # side has at most 65,536 contiguous runs; beyond that on both sides streamrace assumes an
    # overlap and says so.
    races = race_between("eager", V(BASE, [2 * runs], [3]), V(BASE, [runs, 2], [6, 4], offset=1))
    if approximate:
        (f,) = races
        assert any(a.range.get("approximate") is True for a in f.accesses)
    else:
        assert races == []


def test_interleaved_strides_far_beyond_the_run_limit_are_decided_by_residue():
    # x[::2] vs x[1::4] with 70,000 runs each: modulo the steps' common divisor (8 bytes) one
    # holds bytes 0-3, the other bytes 4-7, so no byte is shared and nothing is assumed.
    assert race_between("eager", V(BASE, [70_000], [2]), V(BASE, [70_000], [4], offset=1)) == []


# -- dedup -------------------------------------------------------------------------------


def layers(tb: TraceBuilder, main: int, side: int, buf: int, lines: list[int]) -> None:
    """One layer per line: fork, side writes buf, main reads it before the join, join."""
    for line in lines:
        tb.wait_stream(side, main, at="layer.py:1")
        tb.op("aten::index_put_", side, writes=[tb.span(buf, 256)], at="layer.py:10")
        tb.op("aten::gather", main, reads=[tb.span(buf, 256)], at=f"layer.py:{line}")
        tb.wait_stream(main, side, at="layer.py:30")


@MODES
@pytest.mark.parametrize(
    "lines, counts", [([20] * 5, [5]), ([20, 20, 21, 20, 20], [4, 1])], ids=["same", "one-differs"]
)
def test_dedup(mode, lines, counts):
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    buf = tb.alloc(256, main, at="model.py:5")
    if mode == "capture":
        with tb.capture(main) as graph:
            layers(tb, main, side, buf, lines)
    else:
        layers(tb, main, side, buf, lines)
    result = analyze(tb.trace())
    assert len(result.raw_findings) == 5
    assert [f.count for f in result.findings] == counts
    assert [f.accesses[1].location for f in result.findings] == [f"layer.py:{line}" for line in dict.fromkeys(lines)]
    assert all(f.kind == DATA_RACE and f.hazard == "RAW" for f in result.findings)
    assert all(f.graphs == ([graph] if mode == "capture" else []) for f in result.findings)
    assert result.summary["findings"] == len(counts)


def test_dedup_across_batch_sizes():
    # The same bug in two layers of three captured batch sizes (one shared pool): one
    # finding, count 6, the three graphs listed.
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    buf = tb.alloc(256, main, at="model.py:5")
    graphs = []
    for _ in (4, 2, 1):
        with tb.capture(main, pool=(1, 0)) as graph:
            graphs.append(graph)
            layers(tb, main, side, buf, [20, 20])
    result = analyze(tb.trace())
    (f,) = result.findings
    assert (f.count, sorted(f.graphs)) == (6, sorted(graphs))
    assert result.summary["graphs"] == 3
