"""End to end: hand-built traces through analyze() (docs/analysis.md §4–6)."""

from __future__ import annotations

import json

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE
from streamrace.analysis.engine import Engine
from streamrace.trace.builder import TraceBuilder

SIZE = 4096


def freed_before_join(fix: str | None = None, reuse: bool = True):
    """H1 inside a capture: x made on main, read on side, freed on main before the join.

    ``fix``: None (the bug), "join" (join, then free) or "record_stream" (x.record_stream(side)).
    ``reuse``: the next main allocation gets x's block (aliasing) or a fresh one (latent).
    """
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main) as graph:
        x = tb.alloc(SIZE, main, at="model.py:10")
        tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:11")
        tb.wait_stream(side, main, at="model.py:12")
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:13")
        if fix == "join":
            tb.wait_stream(main, side, at="model.py:14")
        elif fix == "record_stream":
            tb.record_stream(x, side, at="model.py:14")
        tb.free(x, at="model.py:15")
        y = tb.alloc(SIZE, main, addr=x if reuse else None, at="model.py:16")
        tb.op("aten::mul", main, writes=[tb.span(y, SIZE)], at="model.py:17")
        tb.wait_stream(main, side, at="model.py:18")
    return tb, graph


def test_freed_before_join_with_reuse_is_one_aliasing_unsafe_free():
    tb, graph = freed_before_join()
    result = analyze(tb.trace())
    (f,) = result.raw_findings
    assert (f.kind, f.hazard, f.aliasing, f.graph) == (UNSAFE_FREE, "WAR", True, graph)
    use, racer = f.accesses
    assert (use.op, use.stream_label, use.access, use.location) == ("aten::sum", "side", "read", "model.py:13")
    assert (racer.op, racer.stream_label, racer.access, racer.location) == ("aten::mul", "main", "write", "model.py:17")
    free_seq = next(ev["seq"] for ev in tb.events if ev["ev"] == "free")
    alloc = f.allocation
    assert (alloc.alloc_location, alloc.free_seq, alloc.free_location) == ("model.py:10", free_seq, "model.py:15")
    assert alloc.reused_by["op"] == "aten::mul" and alloc.reused_by["alloc_location"] == "model.py:16"
    assert alloc.reused_by["seq"] == racer.seq
    assert "main.wait_stream(side)" in f.fix and "record_stream(side)" in f.fix
    assert f.missing_edge.startswith("no happens-before edge from aten::sum on side (model.py:13)")
    assert [(d.signature, d.count, d.graphs) for d in result.findings] == [(f.signature, 1, [graph])]
    assert result.summary == {"findings": 1, "graphs": 1, "replays": 0, "ops": 3, "accesses": 3}


def test_latent_twin_without_reuse_is_still_an_unsafe_free():
    tb, _ = freed_before_join(reuse=False)
    (f,) = analyze(tb.trace()).raw_findings
    assert (f.kind, f.hazard, f.aliasing, f.allocation.reused_by) == (UNSAFE_FREE, "WAR", False, None)
    assert (f.accesses[1].op, f.accesses[1].access, f.accesses[1].stream_label) == ("free", "free", "main")
    assert f.accesses[1].seq == f.allocation.free_seq


def test_fixed_twins_have_no_findings():
    # A block named by record_stream is parked until the capture ends: no reuse to model.
    for fix, reuse in (("join", True), ("join", False), ("record_stream", False)):
        tb, _ = freed_before_join(fix, reuse)
        assert analyze(tb.trace()).raw_findings == [], (fix, reuse)


def test_free_without_a_later_owner_allocation_is_safe():
    """The block is never handed out while the side use is pending (SGLang's `weights`)."""
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:10")
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:13")
        tb.free(x, at="model.py:15")
        tb.alloc(SIZE, side, at="model.py:16")  # another stream's allocation cannot take it
        tb.wait_stream(main, side)
    assert analyze(tb.trace()).raw_findings == []


def test_free_judged_at_the_next_owner_allocation_after_the_join_is_safe():
    """Freed before the join, but the owner allocates again only after joining: never handed out early."""
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:10")
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:13")
        tb.free(x, at="model.py:15")
        tb.wait_stream(main, side)
        y = tb.alloc(SIZE, main, addr=x, at="model.py:16")
        tb.op("aten::mul", main, writes=[tb.span(y, SIZE)], at="model.py:17")
    assert analyze(tb.trace()).raw_findings == []


def test_record_stream_on_the_allocating_stream_is_a_noop():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:10")
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:13")
        tb.record_stream(x, main, at="model.py:14")  # meant side
        tb.free(x, at="model.py:15")
        tb.alloc(SIZE, main, at="model.py:16")
        tb.wait_stream(main, side)
    findings = analyze(tb.trace()).findings
    assert [f.kind for f in findings] == [RECORD_STREAM_NOOP, UNSAFE_FREE]
    noop = findings[0]
    assert (noop.severity, noop.hazard, noop.accesses[0].location) == ("warning", None, "model.py:14")
    assert "record_stream(side)" in noop.fix and noop.allocation.alloc_location == "model.py:10"


def test_identical_races_dedup_into_one_finding_with_a_count():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    for graph in range(2):
        with tb.capture(main):
            tb.wait_stream(side, main)
            for _ in range(5 if graph == 0 else 1):  # five layers, then a smaller batch
                x = tb.alloc(SIZE, main, at="model.py:5")
                tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:6")
                tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:7")
            tb.wait_stream(main, side)
    result = analyze(tb.trace())
    assert len(result.raw_findings) == 6
    (f,) = result.findings
    assert (f.kind, f.hazard, f.count, f.graphs) == (DATA_RACE, "RAW", 6, [1, 2])
    assert f.accesses[0].location == "model.py:6" and f.accesses[1].location == "model.py:7"
    assert f.to_dict()["count"] == 6 and result.summary["findings"] == 1


def test_eager_race_reports_the_most_recent_racing_access():
    tb = TraceBuilder()
    main, side = tb.stream(), tb.stream("side")
    x = tb.alloc(SIZE, main, at="model.py:1")
    tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:2")
    second = tb.op("aten::add_", main, writes=[tb.view(x, [SIZE // 8], [2])], at="model.py:3")
    tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:4")
    (f,) = analyze(tb.trace()).raw_findings
    assert (f.kind, f.graph, f.accesses[0].seq) == (DATA_RACE, None, second)
    assert (f.accesses[0].stream_label, f.accesses[1].stream_label) == ("stream#0", "side")


def test_covered_accesses_are_forgotten():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    x = tb.alloc(SIZE, main)
    for _ in range(50):
        tb.op("aten::add_", main, reads=[tb.span(x, SIZE)], writes=[tb.span(x, SIZE)])
    tb.wait_stream(side, main)
    for _ in range(50):
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)])
    engine = Engine()
    for ev in tb.events:
        engine.feed(ev)
    (shadow,) = engine.shadows.values()
    assert len(shadow) == 2  # main's last write and side's last read
    assert engine.detections == []


def test_host_sync_orders_eager_reuse():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    x = tb.alloc(SIZE, main)
    tb.op("aten::sum", side, reads=[tb.span(x, SIZE)])
    tb.stream_sync(side)
    tb.free(x)
    y = tb.alloc(SIZE, main, addr=x)
    tb.op("aten::fill_", main, writes=[tb.span(y, SIZE)])
    assert analyze(tb.trace()).raw_findings == []


def test_huge_strided_views_race_approximately():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    n = 70_000
    tb.op("k1", main, writes=[{"addr": 0x100000, "shape": [n], "stride": [2], "itemsize": 1}])
    tb.op("k2", side, reads=[{"addr": 0x100001, "shape": [n], "stride": [3], "itemsize": 1}])
    (f,) = analyze(tb.trace()).raw_findings
    assert all(a.range["approximate"] is True for a in f.accesses)


def test_kernel_events_are_accesses_of_their_stream():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main) as graph:
        x = tb.alloc(SIZE, main)
        tb.wait_stream(side, main)
        tb.emit("kernel", graph=graph, node=3, name="triton_poi_0", stream=side, reads=[], writes=[tb.span(x, 8)])
        tb.op("aten::sum", main, reads=[tb.span(x, SIZE)])
        tb.emit("kernel", graph=graph, node=4, name="unplaced", reads=[tb.span(x, 8)], writes=[tb.span(x, 8)])
        tb.wait_stream(main, side)
    result = analyze(tb.trace())
    (f,) = result.raw_findings
    assert (f.hazard, f.accesses[0].op, f.accesses[1].op) == ("RAW", "triton_poi_0", "aten::sum")
    assert result.summary["ops"] == 1 and result.summary["accesses"] == 4


def test_streaming_input_and_determinism():
    tb, _ = freed_before_join()
    trace = tb.trace()
    first = json.dumps(analyze(trace).to_dict("0.0"), sort_keys=False)
    assert json.dumps(analyze(trace).to_dict("0.0")) == first
    streamed = analyze(trace.header, iter(trace.events)).to_dict("0.0")
    assert json.dumps(streamed) == first
    doc = json.loads(first)
    assert (doc["streamrace"], doc["trace_format"], list(doc["summary"])) == (
        "0.0",
        1,
        ["findings", "graphs", "replays", "ops", "accesses"],
    )
