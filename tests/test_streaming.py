"""Streaming analysis: memory stays bounded however long the trace, and progress is reported.

A trace larger than memory is analysed in one pass (``analyze(header, iter_trace(path))``),
so the engine must not keep what can no longer matter: a capture's clocks, shadow memory and
pending frees go when it ends, covered accesses are forgotten, and a freed block drops the
uses nothing will judge again. Both engines are held to it, counting the access records they
keep alive, capture after capture and iteration after iteration of an eager loop.
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import pathlib
import sys

import pytest
from analysis_engines import ENGINES
from benchmark_traces import synthetic

from streamrace.analysis import Progress, analyze
from streamrace.analysis.core import live_records, live_steps, new_engine
from streamrace.analysis.engine import PROGRESS_EVERY
from streamrace.analysis.shadow import AccessRecord
from streamrace.trace.builder import TraceBuilder

ROOT = pathlib.Path(__file__).resolve().parents[1]


def records_alive(core: str) -> int:
    if core == "cpp":  # a program's accesses are kept as steps there (csrc/records.h)
        return live_records() + live_steps()
    # type(), not isinstance(): isinstance reads __class__, which wakes lazy module proxies.
    return sum(type(obj) is AccessRecord for obj in gc.get_objects())


@pytest.mark.parametrize("core", ENGINES)
def test_capture_after_capture_keeps_only_the_live_graphs_programs(core):
    """A graph's program (its captured accesses, which a replay runs) lives as long as the
    graph; everything else of an ended capture goes with it, and the program with the graph."""
    gc.collect()  # engines of earlier tests
    before = records_alive(core)
    engine = new_engine(core=core)
    alive, program = [], 0
    for ev in synthetic().synthetic_events(layers=2, ops_per_layer=30, captures=12, bug=False):
        engine.feed(ev)
        if ev["ev"] == "op":
            program += len(ev["reads"]) + len(ev["writes"])
        if ev["ev"] == "capture_end":
            alive.append(records_alive(core) - before - program)
            engine.feed({"seq": ev["seq"], "ev": "graph_destroy", "graph": ev["graph"]})
            program = 0
            gc.collect()
            alive.append(records_alive(core) - before)
    assert engine.remembered() == 0, "a capture's shadow memory goes with it"
    assert alive == [0] * 24, "while the graph lives, its program; once it is gone, nothing"


def eager_loop(tb: TraceBuilder, main: int, side: int, steps: int, addr: int | None = None) -> int:
    """A serving loop outside capture: a side stream reads each step's block, joined before
    the free; a host sync every step; the allocator hands out the same block every step."""
    for _ in range(steps):
        x = addr = tb.alloc(4096, main, addr=addr, at="serve.py:1")
        tb.op("aten::fill_", main, writes=[tb.span(x, 4096)], at="serve.py:2")
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.view(x, [16, 16], [32, 2])], at="serve.py:3")
        tb.op("aten::mul", main, reads=[tb.span(x, 2048)], writes=[tb.span(x + 2048, 2048)], at="serve.py:4")
        tb.wait_stream(main, side)
        tb.free(x, at="serve.py:5")
        tb.stream_sync(main)
    return addr


@pytest.mark.parametrize("core", ENGINES)
def test_an_eager_loop_keeps_a_constant_amount(core):
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    addr = eager_loop(tb, main, side, 5)
    warm = len(tb.events)
    eager_loop(tb, main, side, 200, addr)
    gc.collect()
    before = records_alive(core)
    engine = new_engine(core=core)
    engine.run(tb.events[:warm])
    after_warmup = (engine.remembered(), records_alive(core) - before)
    engine.run(tb.events[warm:])
    assert (engine.remembered(), records_alive(core) - before) == after_warmup
    assert engine.detections == []


def _replay_loop():
    spec = importlib.util.spec_from_file_location("replay_loop", ROOT / "benchmarks" / "replay_loop.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports end_to_end
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


@pytest.mark.parametrize("core", ENGINES)
def test_a_serving_loop_of_replays_keeps_a_constant_amount(core):
    """Each replay runs the graph's program through the shadow memory and the last writes: the
    accesses of the previous replay that it covers are forgotten, its writes replace theirs,
    so replay after replay (with eager staging, sampling and fresh allocations between) the
    engine holds the same."""
    events = list(_replay_loop().serving_loop_events(steps=120, layers=3))
    syncs = [i for i, ev in enumerate(events) if ev["ev"] == "stream_sync"]
    warm, end = syncs[4] + 1, syncs[-1] + 1  # after 5 steps; the last step, before the graph's destroy
    assert events[end]["ev"] == "graph_destroy"
    gc.collect()
    before = records_alive(core)
    engine = new_engine(core=core)
    engine.run(events[:warm])
    gc.collect()
    after_warmup = (engine.remembered(), records_alive(core) - before)
    assert after_warmup[0] > 0
    for index in range(warm, end):
        engine.feed(events[index])
        if index in syncs[9::10]:  # the end of every tenth step
            gc.collect()
            assert (engine.remembered(), records_alive(core) - before) == after_warmup, f"event {index}"
    assert engine.replays == 120 and engine.detections == []


@pytest.mark.parametrize("core", ENGINES)
def test_progress_is_reported_every_few_thousand_events_and_at_the_end(core, monkeypatch):
    monkeypatch.setenv("STREAMRACE_CORE", core)
    events = list(synthetic().synthetic_events(layers=3, ops_per_layer=40, captures=5))
    seen: list[Progress] = []
    result = analyze({"format": "streamrace-trace", "version": 1}, iter(events), progress=seen.append)
    assert [p.events for p in seen[:-1]] == [PROGRESS_EVERY * (i + 1) for i in range(len(events) // PROGRESS_EVERY)]
    assert seen[-1] == Progress(len(events), result.summary["ops"], result.summary["accesses"], 5)
    assert all(a.accesses <= b.accesses and a.ops <= b.ops for a, b in itertools.pairwise(seen))


@pytest.mark.parametrize("core", ENGINES)
def test_an_error_in_the_event_stream_propagates(core, monkeypatch):
    monkeypatch.setenv("STREAMRACE_CORE", core)

    def events():
        yield {"seq": 0, "ev": "stream", "stream": 1}
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        analyze({"format": "streamrace-trace", "version": 1}, events())
