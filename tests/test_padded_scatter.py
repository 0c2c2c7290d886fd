"""The padded-scatter check (docs/analysis.md §8.7, HAZARDS.md H9) on hand-built programs of
the shape of examples/padded_scatter.py, on both engines: a graph captured for a batch of
``BS`` rows writes its rows into a KV cache through a static ``loc``, and each step refreshes
only the first ``n`` rows of ``loc`` before the replay."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, PADDED_SCATTER, UNSAFE_FREE
from streamrace.analysis.findings import Finding
from streamrace.trace import load_trace
from streamrace.trace.builder import TraceBuilder

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"

BS, N_REAL, SLOTS, D = 8, 3, 64, 16
ROUNDS = 3
pytestmark = pytest.mark.usefixtures("engine")  # every test on both engines


def padded(variant: str, rounds: int = ROUNDS, real: Callable[[int], int] = lambda step: N_REAL) -> TraceBuilder:
    """``stale``: ``loc[:n]`` refreshed only; ``reserved``: the tail set to a reserved slot
    every step; ``guarded``: the graph indexes with ``where(arange < n, loc, reserved)``,
    computed inside it; ``reset-once``: the tail reset once after the capture, then ``n``
    stays the same; ``reset``: ``stale``, the graph reset before its first replay;
    ``same-batch``: the captured batch replayed again, nothing refreshed."""
    tb = TraceBuilder()
    main = tb.stream("main")
    cache = tb.alloc(SLOTS * D * 4, main, at="padded.py:10")
    loc = tb.alloc(BS * 8, main, at="padded.py:11")
    x = tb.alloc(BS * D * 4, main, at="padded.py:12")
    n_real = tb.alloc(8, main, at="padded.py:13")
    rows = tb.view(x, [BS, D])
    whole_loc = tb.view(loc, [BS], itemsize=8)
    tb.op("aten::arange", main, writes=[whole_loc], at="padded.py:11")
    tb.op("aten::randn", main, writes=[rows], at="padded.py:12")
    tb.op("aten::index_copy_", main, [rows, whole_loc], [tb.span(cache, SLOTS * D * 4)], "padded.py:20", [whole_loc])
    with tb.capture(main) as graph:
        index = whole_loc
        if variant == "guarded":
            derived = tb.alloc(BS * 8, main, at="padded.py:18", pool=(graph, 0))
            index = tb.view(derived, [BS], itemsize=8)
            tb.op("aten::where", main, [whole_loc, tb.span(n_real, 8)], [index], at="padded.py:18")
        tb.op("aten::index_copy_", main, [rows, index], [tb.span(cache, SLOTS * D * 4)], "padded.py:20", [index])
    for step in range(rounds):
        n = real(step)
        if variant != "same-batch":
            tb.op("aten::copy_", main, writes=[tb.view(x, [n, D])], at="padded.py:30")
            tb.op("aten::copy_", main, writes=[tb.view(loc, [n], itemsize=8)], at="padded.py:31")
        tail = tb.view(loc, [BS - n], itemsize=8, offset=n)
        if variant == "reserved" or (variant == "reset-once" and step == 0):
            tb.op("aten::fill_", main, writes=[tail], at="padded.py:32")
        if variant == "guarded":
            tb.op("aten::fill_", main, writes=[tb.span(n_real, 8)], at="padded.py:33")
        if variant == "reset" and step == 0:
            tb.reset_graph(graph, at="padded.py:34")  # the later replays are of no graph
        tb.replay(graph, main, at="padded.py:35")
    return tb


def findings(tb: TraceBuilder) -> list[Finding]:
    return analyze(tb.trace()).findings


def test_a_partly_refreshed_static_index_is_a_padded_scatter() -> None:
    [finding] = findings(padded("stale"))
    assert finding.kind == PADDED_SCATTER and finding.severity == "warning" and finding.hazard is None
    assert finding.count == ROUNDS and finding.graph == 1
    refresh, replay = finding.accesses
    assert (refresh.op, refresh.access, refresh.location) == ("aten::copy_", "write", "padded.py:31")
    assert (replay.op, replay.access, replay.location) == ("aten::index_copy_", "read", "padded.py:35")
    assert replay.captured is not None and replay.captured["location"] == "padded.py:20"
    assert finding.allocation is not None and finding.allocation.alloc_location == "padded.py:11"
    message = finding.message
    assert f"first {N_REAL} of {BS} rows ({N_REAL * 8} of {BS * 8} bytes)" in message, message
    assert "aten::copy_ on main (padded.py:31)" in message and "(padded.py:35" in message
    assert "captured at padded.py:20" in message and "allocated at padded.py:11" in message
    assert message.count("captured at padded.py:20") == 1, message
    assert finding.fix is not None and "reserved" in finding.fix and "torch.where" in finding.fix
    # the example fix uses this replay's rows: the tail from the real count, the captured batch
    assert f"[{N_REAL}:].fill_(reserved)" in finding.fix and f"torch.arange({BS}, " in finding.fix, finding.fix


@pytest.mark.parametrize("variant", ["reserved", "guarded", "reset-once", "same-batch"])
def test_an_index_refreshed_whole_guarded_or_not_refreshed_is_clean(variant: str) -> None:
    assert findings(padded(variant)) == []


def test_a_full_batch_refresh_is_clean() -> None:
    assert findings(padded("stale", real=lambda step: BS)) == []


def test_a_batch_shrinking_after_a_reset_leaves_the_larger_batchs_rows_stale() -> None:
    """The tail was reset once (5 real rows, then 3 reserved), then a batch of 3 leaves rows
    3 and 4 with the first batch's slots."""
    tb = padded("reset-once", rounds=2, real=lambda step: (5, 3)[step])
    [finding] = findings(tb)
    assert finding.kind == PADDED_SCATTER and finding.count == 1
    assert f"first 3 of {BS} rows" in finding.message


def test_a_trace_of_format_1_1_has_no_index_facts_and_gets_no_check() -> None:
    tb = padded("stale")
    tb.header["minor"] = 1
    assert findings(tb) == []


def test_a_recording_that_saw_no_index_op_skips_the_check() -> None:
    """``index_ops: 0`` in the header: the padded-scatter check (a pass over every event) is
    not run; the builder counts its index ops as the recorder does, and a trace that does not
    say gets the check."""
    tb = padded("stale")
    assert tb.header["index_ops"] == 2, "the warm-up's index_copy_ and the captured one"
    tb.header["index_ops"] = 0
    assert findings(tb) == []
    del tb.header["index_ops"]
    assert [f.kind for f in findings(tb)] == [PADDED_SCATTER]


def test_a_graph_reset_before_its_replay_is_not_checked() -> None:
    assert findings(padded("reset")) == []


def test_the_padded_scatter_and_a_race_are_reported_apart() -> None:
    """A side stream reads the cache the replay writes, unordered: the race and the padded
    scatter are two findings with two fixes."""
    tb = padded("stale", rounds=1)
    side = tb.stream("side")
    cache = tb.events[[e["ev"] for e in tb.events].index("alloc")]["addr"]
    tb.op("aten::sum", side, [tb.span(cache, SLOTS * D * 4)], [], at="padded.py:40")
    got = findings(tb)
    assert sorted(f.kind for f in got) == sorted([DATA_RACE, PADDED_SCATTER])
    race = next(f for f in got if f.kind == DATA_RACE)
    assert "wait_stream" in (race.fix or "") and "reserved" not in (race.fix or "")


# The real traces (tests/gpu/record_fixtures.py OUTDIR padded, on the H200), each with the
# kinds it must give and the padded-scatter's count.
FIXTURES = {
    "padded_stale": ([PADDED_SCATTER], 4),
    "padded_reserved": ([], 0),
    "padded_guarded": ([], 0),
    "dsv4_padded_race": ([PADDED_SCATTER, UNSAFE_FREE], 3),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_real_padded_traces(name: str) -> None:
    path = TRACES / f"{name}.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path.name} is not recorded yet: python tests/gpu/record_fixtures.py examples/traces padded")
    kinds, count = FIXTURES[name]
    found = analyze(load_trace(path)).findings
    assert sorted(f.kind for f in found) == kinds, [f.message for f in found]
    for finding in found:
        if finding.kind == PADDED_SCATTER:
            assert finding.count == count and finding.accesses[1].captured is not None
            assert "first 3 of 8 rows" in finding.message, finding.message
        else:
            assert "reserved" not in (finding.fix or ""), "the race keeps its own fix"


# The programs above, by name, for the engine differential and the fuzzer's seeds.
PROGRAMS: dict[str, Callable[[], TraceBuilder]] = {
    f"padded {variant}": lambda variant=variant: padded(variant)
    for variant in ("stale", "reserved", "guarded", "reset-once", "same-batch")
}


@pytest.mark.parametrize("kind", ["native", "python"])
def test_the_recorder_counts_the_ops_that_write_through_an_index(kind: str) -> None:
    """On the fake CUDA, with both hook sets: the header's ``index_ops`` counts the op events
    with index operands, so a recording with none skips the padded-scatter check."""
    torch = pytest.importorskip("torch")
    from fake_cuda import FakeCuda, Kernels
    from op_engines import native_module

    from streamrace.record.recorder import Recorder
    from streamrace.record.traces import build_trace

    if kind == "native":
        native_module()
    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake)
        recorder.start()
        try:
            with fake.on(0x1000):
                cache, rows = fake.alloc(), fake.alloc()
                torch.mul(rows[:8], 2.0)
                loc = torch.tensor([1, 0])
                counts = [build_trace(recorder).header["index_ops"]]
                cache[:8].view(2, 4).index_copy_(0, loc, rows[:8].view(2, 4))
        finally:
            recorder.stop()
    assert recorder.errors == []
    trace = build_trace(recorder)
    counts.append(trace.header["index_ops"])
    assert counts == [0, len([e for e in trace.events if e["ev"] == "op" and "index" in e])]
    assert counts[1] >= 1
