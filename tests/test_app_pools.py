"""The program's own pools (issue 26, item 4; HAZARDS.md M7): ``streamrace.annotate`` records a
pool's logical alloc and free, and a range taken back while another stream may still use it is
a ``pool-unsafe-free``, latent or manifest (then it stands for the data race it causes), with
its fixed twins silent. The analysis is a pass over the events: both engines, one answer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, POOL_UNSAFE_FREE
from streamrace.trace.builder import TraceBuilder

PAGE = 4096


def _step(*, join: str | None = None, reuse: bool = True, free_on: str = "prefill", replayed: bool = False):
    """A decode step on `step` reads a KV page; the scheduler, a step ahead, takes the page back
    from `prefill` and gives it to the next request, whose prefill writes it there. ``join``:
    how the free is ordered after the step ("wait": prefill waits on step; "sync": the host
    synchronizes the device), or None (the bug)."""
    b = TraceBuilder()
    step, prefill = b.stream("step"), b.stream("prefill")
    streams = {"step": step, "prefill": prefill}
    kv = b.alloc(1 << 16, step, at="engine.py:10 in make_cache")
    page = b.span(kv, PAGE)
    b.pool_alloc(kv, PAGE, step, at="engine.py:20 in allocate")
    if replayed:
        with b.capture(step) as graph:
            b.op("aten::mm", step, reads=[page], at="engine.py:30 in decode")
        b.replay(graph, step, at="engine.py:35 in run_step")
    else:
        b.op("aten::mm", step, reads=[page], at="engine.py:30 in decode")
    if join == "wait":
        b.wait_stream(prefill, step, at="engine.py:39 in finish")
    elif join == "sync":
        b.device_sync()
    b.pool_free(kv, streams[free_on], at="engine.py:40 in finish")
    if reuse:
        b.pool_alloc(kv, PAGE, prefill, at="engine.py:20 in allocate")
        b.op("aten::copy_", prefill, writes=[page], at="engine.py:50 in prefill")
    return b.trace()


# Seeds of the trace fuzzer (trace_fuzz.py): the bug, latent and manifest, replayed, and fixed.
POOL_PROGRAMS = {
    "manifest": _step,
    "latent": lambda: _step(reuse=False),
    "replayed": lambda: _step(replayed=True),
    "joined": lambda: _step(join="wait"),
}


def _kinds(trace) -> list[tuple[str, str | None, bool]]:
    return [(f.kind, f.hazard, f.aliasing) for f in analyze(trace).findings]


def test_a_page_given_to_the_next_request_under_the_step_in_flight_is_one_finding():
    [finding] = analyze(_step()).findings
    assert (finding.kind, finding.hazard, finding.aliasing) == (POOL_UNSAFE_FREE, "WAR", True)
    use, racer = finding.accesses
    assert (use.op, use.stream_label, use.location) == ("aten::mm", "step", "engine.py:30")
    assert (racer.op, racer.stream_label, racer.location) == ("aten::copy_", "prefill", "engine.py:50")
    assert "taken back on prefill (engine.py:40)" in finding.message
    assert "`prefill.wait_stream(step)`" in finding.fix
    alloc = finding.allocation
    assert (alloc.alloc_location, alloc.free_location, alloc.size) == ("engine.py:20", "engine.py:40", PAGE)
    assert alloc.reused_by is not None and alloc.reused_by["location"] == "engine.py:50"


def test_without_the_pool_annotation_it_is_a_plain_race():
    """The same program, its pool unannotated: the engine's data race, which the pool's finding
    stands for when the pool says why."""
    trace = _step()
    events = [e for e in trace.events if e["ev"] not in ("pool_alloc", "pool_free")]
    plain = type(trace)(header=trace.header, events=events, stacks=trace.stacks)
    assert _kinds(plain) == [(DATA_RACE, "WAR", False)]


def test_a_free_under_the_step_in_flight_is_latent_before_any_reuse():
    assert _kinds(_step(reuse=False)) == [(POOL_UNSAFE_FREE, "WAR", False)]


@pytest.mark.parametrize("join", ["wait", "sync"])
def test_a_free_after_the_step_is_joined_is_silent(join):
    assert _kinds(_step(join=join)) == []


def test_a_free_on_the_stream_that_used_the_page_is_silent_and_its_reuse_elsewhere_races():
    """Freed on `step`, the page is stream-ordered after the step's read; handed to prefill's
    work all the same, that work races with the read: the engine's data race says so."""
    assert _kinds(_step(free_on="step", reuse=False)) == []
    assert _kinds(_step(free_on="step")) == [(DATA_RACE, "WAR", False)]


def test_a_replayed_step_uses_the_page_until_the_replay_is_joined():
    [finding] = analyze(_step(replayed=True)).findings
    assert (finding.kind, finding.aliasing) == (POOL_UNSAFE_FREE, True)
    assert finding.accesses[0].op == "replay of graph 1" and finding.accesses[0].location == "engine.py:35"
    assert _kinds(_step(replayed=True, join="wait")) == []


def test_a_free_of_a_range_no_pool_gave_out_is_no_finding():
    b = TraceBuilder()
    step, prefill = b.stream("step"), b.stream("prefill")
    kv = b.alloc(1 << 16, step)
    b.op("aten::mm", step, reads=[b.span(kv, PAGE)])
    b.pool_free(kv, prefill)
    assert _kinds(b.trace()) == []


def test_a_recording_that_made_no_annotation_skips_the_check():
    """``app_pools: 0`` in the header: the pool check (as costly as the engine on eager work)
    is not run; a trace that does not say gets it."""
    trace = _step()
    assert trace.header["app_pools"] == 3
    header = {**trace.header, "app_pools": 0}
    assert _kinds(type(trace)(header=header, events=trace.events, stacks=trace.stacks)) == [(DATA_RACE, "WAR", False)]
    del header["app_pools"]
    assert _kinds(type(trace)(header=header, events=trace.events, stacks=trace.stacks))[0][0] == POOL_UNSAFE_FREE


def test_annotate_imports_nothing_and_costs_nothing_outside_a_recording():
    code = (
        "import sys\n"
        "from streamrace import annotate\n"
        "annotate.alloc((4096, 64), pool='kv'); annotate.free((4096, 64), pool='kv')\n"
        "assert 'torch' not in sys.modules and 'streamrace.record.recorder' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", ["native", "python"])
def test_the_recorder_writes_the_pool_events_where_the_program_made_them(kind):
    """On the fake CUDA, with both hook sets: each annotation is an event on the stream given
    (or the current one), with the line that made it; the analysis finds the bug from them."""
    from fake_cuda import FakeCuda, Kernels
    from op_engines import native_module

    from streamrace import annotate
    from streamrace.record.recorder import Recorder
    from streamrace.record.traces import build_trace

    if kind == "native":
        native_module()
    main, side = 0x1000, 0x2000
    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake)
        recorder.start()
        try:
            with fake.on(main):
                kv = fake.alloc()
                annotate.alloc(kv[:16], pool="kv")
            with fake.on(side):
                torch.mul(kv[:16], 2.0)  # the step in flight reads the page
            with fake.on(main):
                annotate.free(kv[:16], pool="kv")  # taken back with no join
                annotate.alloc(kv[:16], pool="kv")
                kv[:16].fill_(0.0)  # the next owner writes it
        finally:
            recorder.stop()
    assert recorder.errors == []
    trace = build_trace(recorder)
    pool = [e for e in trace.events if e["ev"].startswith("pool_")]
    assert [(e["ev"], e["stream"], e["name"]) for e in pool] == [
        ("pool_alloc", main, "kv"),
        ("pool_free", main, "kv"),
        ("pool_alloc", main, "kv"),
    ]
    assert pool[0]["addr"] == kv.data_ptr() and pool[0]["size"] == 16 * kv.element_size()
    assert trace.header["app_pools"] == 3, "the header counts them: 0 would skip the check"
    frames = trace.stacks[pool[1]["stack"]]
    assert (
        frames[0][0].endswith("test_app_pools.py")
        and frames[0][2] == "test_the_recorder_writes_the_pool_events_where_the_program_made_them"
    )
    assert _kinds(trace) == [(POOL_UNSAFE_FREE, "WAR", True)]


def test_a_failing_annotation_is_the_recorder_s_error_never_the_program_s():
    from fake_cuda import FakeCuda, Kernels

    from streamrace import annotate
    from streamrace.record.recorder import Recorder

    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks="python", runtime=fake)
        recorder.start()
        try:
            annotate.alloc(("not", "a range"), pool="kv")  # type: ignore[arg-type]
        finally:
            recorder.stop()
    assert len(recorder.errors) == 1 and recorder.errors[0].startswith("pool annotation: TypeError")
