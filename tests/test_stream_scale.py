"""Clocks are sparse: memory grows with the orderings they hold, not with the square of the
stream count (docs/analysis.md §2). Tens of thousands of streams of one op each, with host
synchronizations and a capture that many streams join, would take gigabytes with a clock
entry per stream for every stream; both engines must finish and find the right races."""

from __future__ import annotations

import pytest
from analysis_engines import ENGINES

from streamrace.analysis import analyze
from streamrace.analysis.core import CORE_ENV, cpp_available
from streamrace.analysis.detectors import DATA_RACE
from streamrace.trace.builder import TraceBuilder

STREAMS = 20_000
CAPTURED = 2_000  # side streams that join one capture
SLOT = 1 << 21  # one 2 MiB granule per stream: the shadow memory stays small, the clocks do not
BASE = 0x7000_0000_0000


def many_streams() -> tuple[TraceBuilder, set[int], set[int]]:
    """Eager: every stream writes its own slot once; the even ones are synchronized with the
    host (stream_sync), a device_sync every 6,000 streams orders all before it; then a reader
    reads every slot. Captured: side streams join the capture, each writes a slot, and the
    capturing stream reads them all without joining back. Returns the builder and the seqs of
    the writes that must race (eager, captured)."""
    tb = TraceBuilder()
    reader = tb.stream("reader")
    eager_racers: set[int] = set()
    for i in range(STREAMS):
        stream = tb.stream()
        tb.op("aten::fill_", stream, writes=[tb.span(BASE + i * SLOT, 8)], at="model.py:10")
        seq = tb.events[-1]["seq"]
        if i % 6_000 == 5_999:
            tb.device_sync()
            eager_racers.clear()
        elif i % 2 == 0:
            tb.stream_sync(stream)
        else:
            eager_racers.add(seq)
    tb.op("aten::sum", reader, reads=[tb.span(BASE + i * SLOT, 8) for i in range(STREAMS)], at="model.py:20")
    captured_racers: set[int] = set()
    main = tb.stream("main")
    sides = [tb.stream() for _ in range(CAPTURED)]
    with tb.capture(main):
        for i, side in enumerate(sides):
            tb.wait_stream(side, main)
            tb.op("aten::copy_", side, writes=[tb.span(BASE + i * SLOT, 8)], at="model.py:30")
            captured_racers.add(tb.events[-1]["seq"])
        tb.op("aten::cat", main, reads=[tb.span(BASE + i * SLOT, 8) for i in range(CAPTURED)], at="model.py:31")
    return tb, eager_racers, captured_racers


@pytest.mark.parametrize("core", ENGINES)
def test_twenty_thousand_streams_of_one_op_each(core: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tb, eager_racers, captured_racers = many_streams()
    monkeypatch.setenv(CORE_ENV, core)
    result = analyze(tb.trace())
    raw = result.raw_findings
    assert {f.kind for f in raw} == {DATA_RACE}
    eager = {f.accesses[0].seq for f in raw if f.graph is None}
    captured = {f.accesses[0].seq for f in raw if f.graph is not None}
    assert len(eager_racers) == 1_000  # the odd writers after the last device_sync
    assert (eager, captured) == (eager_racers, captured_racers)
    assert [(f.hazard, f.accesses[1].op, f.count) for f in result.findings] == [
        ("RAW", "aten::sum", len(eager_racers)),
        ("RAW", "aten::cat", len(captured_racers)),
    ]


def fork_join(streams: int) -> TraceBuilder:
    """A main stream forks to ``streams`` side streams, each side also waiting on the one
    before it, and joins back only every third: clocks of many streams, merged in every order,
    and the main stream's next write races with the sides it did not join."""
    tb = TraceBuilder()
    main = tb.stream("main")
    sides = [tb.stream() for _ in range(streams)]
    shared = BASE
    for step in range(3):
        tb.op("aten::fill_", main, writes=[tb.span(shared, 64)], at="model.py:40")
        for i, side in enumerate(sides):
            tb.wait_stream(side, main)
            if i and (i + step) % 2:
                tb.wait_stream(side, sides[i - 1])
            tb.op(
                "aten::add", side, reads=[tb.span(shared, 64)], writes=[tb.span(BASE + (i + 1) * SLOT, 8)], at="m.py:41"
            )
        for side in sides[step::3]:
            tb.wait_stream(main, side)
    tb.op("aten::zero_", main, writes=[tb.span(shared, 64)], at="model.py:42")
    tb.op("aten::cat", main, reads=[tb.span(BASE + (i + 1) * SLOT, 8) for i in range(streams)], at="model.py:43")
    return tb


@pytest.mark.skipif(not cpp_available(), reason="C++ core not built")
@pytest.mark.parametrize("streams", [10, 63, 64, 65, 200])
def test_both_engines_agree_across_the_dense_prefix_of_the_cpp_clocks(
    streams: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C++ clock indexes its first 64 streams directly and keeps the rest as pairs."""
    trace = fork_join(streams).trace()
    reports = []
    for core in ("python", "cpp"):
        monkeypatch.setenv(CORE_ENV, core)
        result = analyze(trace)
        reports.append([f.to_dict() for f in result.raw_findings])
    assert reports[0] == reports[1]
    hazards = [f["hazard"] for f in reports[0] if f["kind"] == DATA_RACE]
    assert len(hazards) == len(reports[0]) and "WAR" in hazards and hazards.count("RAW") > streams // 3
