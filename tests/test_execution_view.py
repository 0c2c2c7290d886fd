"""The execution view (docs/analysis.md §8): whole programs, with replays, eager work and graph
lifetimes, one hand-built trace per class of HAZARDS.md's X1-X6 and its fixed twin, each
modelled on the program of the same name in examples/execution_gallery.py (proven on the H200:
the buggy variants corrupt at replay, the fixed twins do not), plus correct patterns that must
stay clean. Every test runs on both engines (``PROGRAMS`` are also held to byte-identical
findings by tests/test_core_differential.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from test_padded_scatter import PROGRAMS as PADDED_PROGRAMS

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, GRAPH_INPUT_FREED, STALE_READ, UNSAFE_FREE
from streamrace.analysis.findings import Finding
from streamrace.trace.builder import TraceBuilder

N = 4 << 20  # 4 MiB: one large-pool block per tensor
ROUNDS = 3
pytestmark = pytest.mark.usefixtures("engine")  # every test on both engines


def kinds(tb: TraceBuilder) -> list[str]:
    return [f.kind for f in analyze(tb.trace()).findings]


def only(tb: TraceBuilder, kind: str) -> Finding:
    findings = analyze(tb.trace()).findings
    assert [f.kind for f in findings] == [kind], [f.message for f in findings]
    return findings[0]


# -- X1: a side-stream consumer reads the static output the next replay overwrites ------------
def static_output_consumer(fixed: bool) -> TraceBuilder:
    tb = TraceBuilder()
    main, consumer = tb.stream("main"), tb.stream("consumer")
    static_in = tb.alloc(N, main, at="x1.py:10")
    with tb.capture(main) as graph:
        static_out = tb.alloc(N, main, at="x1.py:13", pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(static_in, N)], [tb.span(static_out, N)], at="x1.py:13")
    consumed = tb.event()
    for step in range(ROUNDS):
        if fixed and step:
            tb.wait(consumed, main, at="x1.py:19")
        tb.op("aten::fill_", main, writes=[tb.span(static_in, N)], at="x1.py:20")
        tb.replay(graph, main, at="x1.py:21")
        tb.wait_stream(consumer, main, at="x1.py:22")
        clone = tb.alloc(N, consumer, at="x1.py:25")
        tb.op("aten::clone", consumer, [tb.span(static_out, N)], [tb.span(clone, N)], at="x1.py:25")
        tb.record(consumed, consumer, at="x1.py:26")
    return tb


def test_x1_next_replay_overwrites_what_a_consumer_still_reads() -> None:
    race = only(static_output_consumer(fixed=False), DATA_RACE)
    assert race.hazard == "WAR"
    clone, replay = race.accesses
    assert (clone.op, clone.location, clone.stream_label) == ("aten::clone", "x1.py:25", "consumer")
    assert (replay.op, replay.location, replay.access) == ("aten::mul", "x1.py:21", "write")
    assert replay.captured is not None and replay.captured["location"] == "x1.py:13"
    assert "graph 1's replay" in race.message and "captured at x1.py:13" in race.message
    assert race.fix_code == "main.wait_stream(consumer)"
    assert race.count == ROUNDS - 1  # every replay after the first


def test_x1_fixed_the_next_replay_waits_for_the_consumer() -> None:
    assert kinds(static_output_consumer(fixed=True)) == []


# -- X2: the input is staged on a copy stream and the replay does not wait ---------------------
def unwaited_input_staging(fixed: bool) -> TraceBuilder:
    tb = TraceBuilder()
    main, copier = tb.stream("main"), tb.stream("copy")
    static_in = tb.alloc(N, main, at="x2.py:10")
    with tb.capture(main) as graph:
        static_out = tb.alloc(N, main, at="x2.py:13", pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(static_in, N)], [tb.span(static_out, N)], at="x2.py:13")
    sources = [tb.alloc(N, main, at="x2.py:15") for _ in range(ROUNDS)]
    for source in sources:
        tb.wait_stream(copier, main, at="x2.py:17")
        tb.op("aten::copy_", copier, [tb.span(source, N)], [tb.span(static_in, N)], at="x2.py:20")
        if fixed:
            tb.wait_stream(main, copier, at="x2.py:22")
        tb.replay(graph, main, at="x2.py:23")
        tb.device_sync()
    return tb


def test_x2_replay_reads_the_input_a_copy_stream_still_writes() -> None:
    race = only(unwaited_input_staging(fixed=False), DATA_RACE)
    assert race.hazard == "RAW"
    copy, replay = race.accesses
    assert (copy.op, copy.stream_label, replay.op, replay.access) == ("aten::copy_", "copy", "aten::mul", "read")
    assert race.fix_code == "main.wait_stream(copy)"
    assert "just before x2.py:23" in (race.fix or "")  # at the replay, not at the captured line
    assert race.count == ROUNDS


def test_x2_fixed_the_replay_waits_for_the_copy() -> None:
    assert kinds(unwaited_input_staging(fixed=True)) == []


# -- X3: two graphs of one pool replayed concurrently on two streams -----------------------------
def concurrent_shared_pool(fixed: bool) -> TraceBuilder:
    tb = TraceBuilder()
    main, capture, left, right = (tb.stream(name) for name in ("main", "capture", "left", "right"))
    x1, x2 = tb.alloc(N, main, at="x3.py:10"), tb.alloc(N, main, at="x3.py:10")
    with tb.capture(capture) as first:
        pool = (first, 0)
        scratch = tb.alloc(N, capture, at="x3.py:14", pool=pool)
        tb.op("aten::mul", capture, [tb.span(x1, N)], [tb.span(scratch, N)], at="x3.py:14")
        out1 = tb.alloc(N, capture, at="x3.py:17", pool=pool)
        tb.op("aten::add", capture, [tb.span(scratch, N)], [tb.span(out1, N)], at="x3.py:17")
        tb.free(scratch, at="x3.py:18")
    with tb.capture(capture, pool=None if fixed else pool) as second:
        own = (second, 0) if fixed else pool
        other = tb.alloc(N, capture, addr=None if fixed else scratch, at="x3.py:21", pool=own)
        tb.op("aten::mul", capture, [tb.span(x2, N)], [tb.span(other, N)], at="x3.py:21")
        out2 = tb.alloc(N, capture, at="x3.py:23", pool=own)
        tb.op("aten::add", capture, [tb.span(other, N)], [tb.span(out2, N)], at="x3.py:23")
        tb.free(other, at="x3.py:24")
    for _ in range(ROUNDS):
        tb.op("aten::fill_", main, writes=[tb.span(x1, N)], at="x3.py:28")
        tb.op("aten::fill_", main, writes=[tb.span(x2, N)], at="x3.py:29")
        tb.wait_stream(left, main, at="x3.py:30")
        tb.wait_stream(right, main, at="x3.py:31")
        tb.replay(first, left, at="x3.py:33")
        tb.replay(second, right, at="x3.py:35")
        tb.device_sync()
    return tb


def test_x3_graphs_sharing_a_pool_replayed_concurrently_collide() -> None:
    findings = analyze(concurrent_shared_pool(fixed=False).trace()).findings
    assert {f.kind for f in findings} == {DATA_RACE}
    assert all(f.aliasing for f in findings), "two tensors of two graphs in one block"
    sides = {(a.captured or {}).get("graph") for f in findings for a in f.accesses}
    assert sides == {1, 2}
    race = findings[0]
    assert race.allocation is not None and race.allocation.reused_by is not None


def test_x3_fixed_private_pools() -> None:
    assert kinds(concurrent_shared_pool(fixed=True)) == []


def test_x3_replays_serialized_on_one_stream_are_ordered() -> None:
    tb = concurrent_shared_pool(fixed=False)
    trace = tb.trace()
    main = next(ev["stream"] for ev in trace.events if ev.get("name") == "main")
    one_stream = [dict(ev, stream=main) if ev["ev"] == "replay" else ev for ev in trace.events]
    assert analyze(trace.header, one_stream).findings == []


# -- X4: three graphs of one pool replayed out of capture order --------------------------------
def out_of_order_shared_pool(fixed: bool) -> TraceBuilder:
    tb = TraceBuilder()
    main = tb.stream("main")
    x = tb.alloc(N, main, at="x4.py:10")
    with tb.capture(main) as g0:
        pool = (g0, 0)
        scratch = tb.alloc(N, main, at="x4.py:13", pool=pool)
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(scratch, N)], at="x4.py:13")
        out1 = tb.alloc(N, main, at="x4.py:15", pool=pool)
        tb.op("aten::add", main, [tb.span(scratch, N)], [tb.span(out1, N)], at="x4.py:15")
        tb.free(scratch, at="x4.py:16")
    with tb.capture(main, pool=pool) as g1:
        out2 = tb.alloc(N, main, addr=scratch, at="x4.py:19", pool=pool)  # the block scratch had
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(out2, N)], at="x4.py:19")
    with tb.capture(main, pool=pool) as g2:
        out3 = tb.alloc(N, main, at="x4.py:21", pool=pool)
        tb.op("aten::add", main, [tb.span(out2, N)], [tb.span(out3, N)], at="x4.py:21")
    graphs = (g0, g1, g2)
    for _ in range(ROUNDS):
        tb.op("aten::fill_", main, writes=[tb.span(x, N)], at="x4.py:26")
        for index in (0, 1, 2) if fixed else (1, 0, 2):
            tb.replay(graphs[index], main, at=f"x4.py:{28 + index}")
        tb.device_sync()
        tb.op("aten::equal", main, [tb.span(out1, N), tb.span(out3, N)], at="x4.py:31")
    return tb


def test_x4_out_of_order_replay_clobbers_the_output_a_later_graph_reads() -> None:
    stale = only(out_of_order_shared_pool(fixed=False), STALE_READ)
    writer, reader = stale.accesses
    assert writer.captured is not None and writer.captured["graph"] == 1 and writer.access == "write"
    assert reader.captured is not None and reader.captured["graph"] == 3 and reader.op == "aten::add"
    assert writer.captured["location"] == "x4.py:13" and reader.captured["location"] == "x4.py:21"
    assert stale.allocation is not None and stale.allocation.alloc_location == "x4.py:13"
    assert stale.allocation.free_location == "x4.py:16", "the free that let the block be handed out"
    assert stale.allocation.reused_by is not None and stale.allocation.reused_by["alloc_location"] == "x4.py:19"
    assert "capture" in (stale.fix or "") and stale.count == ROUNDS


def test_x4_fixed_replays_in_capture_order() -> None:
    assert kinds(out_of_order_shared_pool(fixed=True)) == []


# -- X5: a graph's input made outside its pool is freed, and its block taken --------------------
def foreign_input_freed(variant: str) -> TraceBuilder:
    """``buggy``: freed, taken, replayed; ``latent``: freed, the graph lives on unreplayed;
    ``fixed``: kept alive as long as the graph; ``graph_first``: the graph dies first."""
    tb = TraceBuilder()
    main = tb.stream("main")
    for _ in range(2):
        x = tb.alloc(N, main, at="x5.py:10")
        tb.op("aten::fill_", main, writes=[tb.span(x, N)], at="x5.py:10")
        with tb.capture(main) as graph:
            out = tb.alloc(N, main, at="x5.py:13", pool=(graph, 0))
            tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(out, N)], at="x5.py:13")
        if variant == "graph_first":
            tb.destroy_graph(graph)
        if variant != "fixed":
            tb.free(x, at="x5.py:17")
        if variant == "latent":
            continue
        other = tb.alloc(N, main, addr=x if variant != "fixed" else None, at="x5.py:18")
        tb.op("aten::fill_", main, writes=[tb.span(other, N)], at="x5.py:18")
        if variant != "graph_first":
            tb.replay(graph, main, at="x5.py:20")
        tb.device_sync()
        tb.free(other, at="x5.py:23")
        if variant != "graph_first":
            tb.destroy_graph(graph)
        if variant == "fixed":
            tb.free(x, at="x5.py:10")
    return tb


def test_x5_freeing_a_graph_input_is_reported_at_the_free() -> None:
    freed = only(foreign_input_freed("buggy"), GRAPH_INPUT_FREED)
    use, free = freed.accesses
    assert (use.op, use.access, use.location) == ("aten::mul", "read", "x5.py:13")
    assert (free.access, free.location) == ("free", "x5.py:17")
    assert freed.allocation is not None and freed.allocation.alloc_location == "x5.py:10"
    assert "replayed after the free at x5.py:20" in freed.message
    assert freed.aliasing, "the fill through the allocation that took the block is named"
    assert "aten::fill_ on main (x5.py:18)" in freed.message
    assert freed.count == 2  # each step: its own graph, the same code


def test_x5_latent_freed_while_the_graph_lives() -> None:
    freed = only(foreign_input_freed("latent"), GRAPH_INPUT_FREED)
    assert "latent" in freed.message and not freed.aliasing


@pytest.mark.parametrize("variant", ["fixed", "graph_first"])
def test_x5_fixed_kept_alive_or_the_graph_dies_first(variant: str) -> None:
    assert kinds(foreign_input_freed(variant)) == []


def test_x5_freed_after_capture_then_graph_destroyed_unreplayed_is_clean() -> None:
    """A function's locals die in order: the input first, the graph just after; never replayed
    in between, so nothing read the block."""
    tb = TraceBuilder()
    main = tb.stream("main")
    x = tb.alloc(N, main, at="f.py:1")
    with tb.capture(main) as graph:
        out = tb.alloc(N, main, at="f.py:3", pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(out, N)], at="f.py:3")
    tb.replay(graph, main, at="f.py:4")
    tb.free(x, at="f.py:5")
    tb.destroy_graph(graph)
    assert kinds(tb) == []


def test_x5_reset_graph_does_not_replay() -> None:
    tb = foreign_input_freed("latent")
    trace = tb.trace()
    events = list(trace.events)
    last = max(ev["seq"] for ev in events)
    events += [{"seq": last + 1 + i, "ev": "graph_reset", "graph": g} for i, g in enumerate((1, 2))]
    assert analyze(trace.header, events).findings == []


# -- X6: eager, freed on the allocating stream while a side stream reads -----------------------
def eager_freed_before_use(fixed: bool) -> TraceBuilder:
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    for _ in range(2):
        x = tb.alloc(N, main, at="x6.py:10")
        made = tb.alloc(N, main, at="x6.py:11")
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(made, N)], at="x6.py:11")
        tb.wait_stream(side, main, at="x6.py:13")
        result = tb.alloc(N, side, at="x6.py:16")
        tb.op("aten::add", side, [tb.span(made, N)], [tb.span(result, N)], at="x6.py:16")
        if fixed:
            tb.record_stream(made, side, at="x6.py:18")
        tb.free(made, at="x6.py:19")
        later = tb.alloc(N, main, addr=None if fixed else made, at="x6.py:20")
        tb.op("aten::fill_", main, writes=[tb.span(later, N)], at="x6.py:20")
        tb.wait_stream(main, side, at="x6.py:22")
        tb.device_sync()
        for block in (later, result, x):
            tb.free(block)
    return tb


def test_x6_eager_freed_before_the_side_stream_is_done() -> None:
    unsafe = only(eager_freed_before_use(fixed=False), UNSAFE_FREE)
    assert unsafe.aliasing and unsafe.graph is None


def test_x6_fixed_record_stream() -> None:
    assert kinds(eager_freed_before_use(fixed=True)) == []


def staged_inputs(recorded: bool) -> TraceBuilder:
    """The serving loop's staging (benchmarks/serving_loop.py): each step's input is copied to
    the GPU on a copy stream, read on main, freed with ``record_stream(main)``, and the next
    step's copy is handed the same block."""
    tb = TraceBuilder()
    main, copier = tb.stream("main"), tb.stream("copy")
    static_in = tb.alloc(N, main, at="loop.py:1")
    block = None
    for _ in range(ROUNDS):
        block = staged = tb.alloc(N, copier, addr=block, at="loop.py:5")
        tb.op("aten::_to_copy", copier, writes=[tb.span(staged, N)], at="loop.py:5")
        ready = tb.event()
        tb.record(ready, copier)
        tb.wait(ready, main)
        tb.op("aten::copy_", main, [tb.span(staged, N)], [tb.span(static_in, N)], at="loop.py:8")
        if recorded:
            tb.record_stream(staged, main, at="loop.py:9")
        tb.free(staged, at="loop.py:10")
    return tb


def test_a_block_freed_with_record_stream_is_handed_out_only_after_its_users() -> None:
    """The caching allocator reuses the block only once main's recorded event has completed:
    the next copy into it is ordered after main's read, though no stream waits."""
    assert kinds(staged_inputs(recorded=True)) == []


def test_without_record_stream_the_reuse_is_reported() -> None:
    assert kinds(staged_inputs(recorded=False)) == [UNSAFE_FREE]


# -- correct programs around captures ------------------------------------------------------------
def one_graph_on_two_streams() -> TraceBuilder:
    tb = TraceBuilder()
    main, a, b = tb.stream("main"), tb.stream("a"), tb.stream("b")
    x = tb.alloc(N, main)
    with tb.capture(main) as graph:
        out = tb.alloc(N, main, pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(out, N)])
    tb.wait_stream(a, main)
    tb.wait_stream(b, main)
    tb.replay(graph, a)
    tb.replay(graph, b)
    return tb


def test_a_graph_replayed_on_two_streams_is_serialized() -> None:
    """CUDA serializes launches of one executable graph: no race between its own replays."""
    assert kinds(one_graph_on_two_streams()) == []


def output_block_reused_by_a_later_graph() -> TraceBuilder:
    tb = TraceBuilder()
    main = tb.stream("main")
    x = tb.alloc(N, main)
    with tb.capture(main) as first:
        pool = (first, 0)
        out = tb.alloc(N, main, pool=pool)
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(out, N)])
    tb.free(out)  # the program drops the output: the block goes back to the private pool
    with tb.capture(main, pool=pool) as second:
        scratch = tb.alloc(N, main, addr=out, pool=pool)
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(scratch, N)])
        out2 = tb.alloc(N, main, pool=pool)
        tb.op("aten::add", main, [tb.span(scratch, N)], [tb.span(out2, N)])
        tb.free(scratch)
    for graph in (second, first, second, first):
        tb.replay(graph, main)
    tb.op("aten::sum", main, [tb.span(out2, N)])
    return tb


def test_a_later_graph_reusing_an_output_block_reads_its_own_writes() -> None:
    """In-capture reuse: the second graph's scratch takes the first's dead output's block; each
    replay reads what it wrote itself, in any replay order."""
    assert kinds(output_block_reused_by_a_later_graph()) == []


def fresh_allocation_read() -> TraceBuilder:
    tb = TraceBuilder()
    main = tb.stream("main")
    x = tb.alloc(N, main)
    with tb.capture(main) as graph:
        scratch = tb.alloc(N, main, pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(scratch, N)])
        tb.free(scratch)
    tb.replay(graph, main)
    with tb.capture(main, pool=(graph, 0)) as later:
        fresh = tb.alloc(N, main, addr=scratch, pool=(graph, 0))
        tb.op("aten::sum", main, [tb.span(fresh, N)])  # reads before writing: garbage, not X4
    del later
    return tb


def test_reading_a_fresh_allocation_is_not_a_stale_read() -> None:
    """Uninitialised bytes of a new tensor are whatever was there: not another tensor's data."""
    assert kinds(fresh_allocation_read()) == []


def block_rewritten_inside_one_capture() -> TraceBuilder:
    """A capture writes a scratch block, frees it, and reads the next allocation of the block
    before writing it: uninitialised bytes (the capture's own data), at capture and at replay."""
    tb = TraceBuilder()
    main = tb.stream("main")
    x = tb.alloc(N, main)
    with tb.capture(main) as graph:
        scratch = tb.alloc(N, main, pool=(graph, 0))
        tb.op("aten::mul", main, [tb.span(x, N)], [tb.span(scratch, N)])
        tb.free(scratch)
        again = tb.alloc(N, main, addr=scratch, pool=(graph, 0))
        tb.op("aten::sum", main, [tb.span(again, N)], [tb.span(x, 8)])
    for _ in range(ROUNDS):
        tb.replay(graph, main)
    return tb


def test_a_replay_reading_what_it_wrote_itself_through_another_allocation_is_clean() -> None:
    assert kinds(block_rewritten_inside_one_capture()) == []


def replay_through_a_freed_output() -> TraceBuilder:
    """A side stream writes a graph's output, the program frees it unjoined and allocates
    again, and the graph is replayed: its write goes through the freed allocation itself."""
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main) as graph:
        out = tb.alloc(N, main, at="o.py:2", pool=(graph, 0))
        tb.op("aten::fill_", main, writes=[tb.span(out, N)], at="o.py:3")
    tb.op("aten::zero_", side, writes=[tb.span(out, N)], at="o.py:5")
    tb.free(out, at="o.py:6")
    tb.alloc(N, main, at="o.py:7")  # another block: the freed one is not handed out
    tb.replay(graph, main, at="o.py:8")
    return tb


def test_a_replay_through_the_freed_block_itself_is_no_reuse_of_it() -> None:
    """The free is unsafe and the replay races with the side stream's write, but nothing
    took the block: neither finding says another allocation reused it."""
    findings = analyze(replay_through_a_freed_output().trace()).findings
    assert sorted((f.kind, f.aliasing) for f in findings) == [(DATA_RACE, False), (UNSAFE_FREE, False)]


def test_the_json_report_carries_the_new_kinds_whole() -> None:
    """A stale read and a freed graph input through the JSON report: strict JSON, each finding
    as its dict (the replay side's ``captured`` included), the replays counted."""
    from streamrace.report import TraceResult, json_report

    traces = [
        TraceResult("x4.jsonl", analyze(out_of_order_shared_pool(fixed=False).trace())),
        TraceResult("x5.jsonl", analyze(foreign_input_freed("buggy").trace())),
    ]
    doc = json.loads(json_report.render(traces), parse_constant=lambda name: pytest.fail(name))
    assert [f["kind"] for f in doc["findings"]] == [STALE_READ, GRAPH_INPUT_FREED]
    expected = [{**f.to_dict(), "trace": t.path} for t in traces for f in t.result.findings]
    assert doc["findings"] == json.loads(json.dumps(expected))
    writer, reader = doc["findings"][0]["accesses"]
    assert writer["captured"]["graph"] == 1 and reader["captured"]["graph"] == 3
    assert doc["summary"]["replays"] == 3 * ROUNDS + 2


def test_replays_of_a_graph_the_trace_never_captured_are_counted() -> None:
    from streamrace.analysis.core import new_engine

    tb = TraceBuilder()
    main = tb.stream("main")
    tb.replay(7, main)
    engine = new_engine()
    engine.run(tb.trace().events)
    assert (engine.replays, engine.unknown_replays) == (0, 1)
    (note,) = analyze(tb.trace()).notes
    assert note.code == "replays-unknown-graph"
    assert note.message == (
        "1 replay event names a CUDA graph this trace never captured, which a recorder does not write (a hand-made "
        "or edited trace?): it was not analysed"
    )


def test_progress_and_the_summary_count_the_replays() -> None:
    from streamrace.analysis import Progress

    trace = out_of_order_shared_pool(fixed=False).trace()
    events = [*trace.events, {"seq": len(trace.events), "ev": "replay", "graph": 99, "stream": 0}]
    seen: list[Progress] = []
    result = analyze(trace.header, events, progress=seen.append)
    assert seen[-1].replays == result.summary["replays"] == 3 * ROUNDS


# The programs above, and the padded-scatter ones (tests/test_padded_scatter.py), by name, for
# the engine differential (tests/test_core_differential.py) and the fuzzer's seeds.
PROGRAMS: dict[str, Callable[[], TraceBuilder]] = {
    **{f"x1 fixed={fixed}": lambda fixed=fixed: static_output_consumer(fixed) for fixed in (False, True)},
    **{f"x2 fixed={fixed}": lambda fixed=fixed: unwaited_input_staging(fixed) for fixed in (False, True)},
    **{f"x3 fixed={fixed}": lambda fixed=fixed: concurrent_shared_pool(fixed) for fixed in (False, True)},
    **{f"x4 fixed={fixed}": lambda fixed=fixed: out_of_order_shared_pool(fixed) for fixed in (False, True)},
    **{f"x5 {v}": lambda v=v: foreign_input_freed(v) for v in ("buggy", "latent", "fixed", "graph_first")},
    **{f"x6 fixed={fixed}": lambda fixed=fixed: eager_freed_before_use(fixed) for fixed in (False, True)},
    "one graph on two streams": one_graph_on_two_streams,
    "an output block reused by a later graph": output_block_reused_by_a_later_graph,
    "a fresh allocation read": fresh_allocation_read,
    "a block rewritten inside one capture": block_rewritten_inside_one_capture,
    "a replay through a freed output": replay_through_a_freed_output,
    **PADDED_PROGRAMS,
}


def long_capture_consumer(fixed: bool, ops: int = 2500) -> TraceBuilder:
    """X1 in a graph of ``ops`` captured accesses (the C++ engine keeps a program in chunks of
    1,024: records.h's Program), each op writing its own slice of the static output; a
    consumer reads only the last slice, which the next replay's last op overwrites."""
    tb = TraceBuilder()
    main, consumer = tb.stream("main"), tb.stream("consumer")
    width = 256
    static_in = tb.alloc(width, main, at="long.py:10")
    with tb.capture(main) as graph:
        static_out = tb.alloc(ops * width, main, at="long.py:13", pool=(graph, 0))
        for k in range(ops):
            out = tb.span(static_out + k * width, width)
            tb.op("aten::mul", main, [tb.span(static_in, width)], [out], at=f"long.py:{20 + k}")
    consumed = tb.event()
    last = tb.span(static_out + (ops - 1) * width, width)
    for step in range(ROUNDS):
        if fixed and step:
            tb.wait(consumed, main, at="long.py:5019")
        tb.replay(graph, main, at="long.py:5021")
        tb.wait_stream(consumer, main, at="long.py:5022")
        clone = tb.alloc(width, consumer, at="long.py:5025")
        tb.op("aten::clone", consumer, [last], [tb.span(clone, width)], at="long.py:5025")
        tb.record(consumed, consumer, at="long.py:5026")
    return tb


def test_a_replay_runs_every_captured_access_of_a_long_program_in_order() -> None:
    race = only(long_capture_consumer(fixed=False), DATA_RACE)
    clone, replay = race.accesses
    assert (clone.op, clone.location) == ("aten::clone", "long.py:5025")
    assert replay.captured is not None and replay.captured["location"] == "long.py:2519"  # the last op
    assert race.count == ROUNDS - 1
    assert kinds(long_capture_consumer(fixed=True)) == []
