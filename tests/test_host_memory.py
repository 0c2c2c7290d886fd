"""Pinned host memory as memory (issue 26, item 1; HAZARDS.md M1–M3): the host's own writes and
reads of pinned tensors against the copies still in flight over them, and pinned memory baked
into a graph freed while the graph lives; each bug found, each fixed twin silent. The analysis
is a pass over the events: both engines, one answer (every test runs on both)."""

from __future__ import annotations

import pytest
from analysis_engines import ENGINES, core

from streamrace.analysis import analyze
from streamrace.analysis.detectors import GRAPH_PINNED_FREED, PINNED_READ_BEFORE_COPY, PINNED_WRITE_DURING_COPY
from streamrace.trace.builder import TraceBuilder

N = 4096  # bytes of one staging buffer


def _staging(fix: str | None = None, steps: int = 3):
    """A serving loop stages each step's inputs in one pinned buffer, copies them to the device
    with non_blocking=True and runs; the host fills the buffer for the next step at once.
    ``fix``: "double" (two buffers, each reused only after the copy two steps back was
    synchronized), "sync" (the copy's stream synchronized before the host writes again),
    "event" (an event recorded after the copy, synchronized before the write), "blocking"
    (a copy without non_blocking)."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main, at="serve.py:5 in setup")
    buffers = [b.host_alloc(N, main, at="serve.py:6 in setup")]
    if fix == "double":
        buffers.append(b.host_alloc(N, main, at="serve.py:6 in setup"))
    for step in range(steps):
        buf = buffers[step % len(buffers)]
        if fix == "double" and step >= 2:
            b.stream_sync(main)  # the step two back is done: its buffer is free again
        b.host_op("aten::copy_", writes=[b.span(buf, N)], at="serve.py:10 in stage")
        b.copy(
            main,
            device_writes=[b.span(dev, N)],
            host_reads=[b.span(buf, N)],
            blocking=fix == "blocking",
            at="serve.py:11 in stage",
        )
        if fix == "event":
            done = b.event()
            b.record(done, main)
            b.event_sync(done)
        if fix == "sync":
            b.stream_sync(main)
        b.op("aten::mm", main, reads=[b.span(dev, N)], at="serve.py:12 in step")
    return b.trace()


def _d2h(fix: str | None = None):
    """Sampled tokens copied to pinned memory with non_blocking=True; the host reads them.
    ``fix``: "event" (an event after the copy, synchronized first), "device" (torch.cuda.synchronize())."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main, at="sample.py:5 in setup")
    out = b.host_alloc(N, main, at="sample.py:6 in setup")
    b.op("aten::argmax", main, writes=[b.span(dev, N)], at="sample.py:9 in sample")
    b.copy(main, device_reads=[b.span(dev, N)], host_writes=[b.span(out, N)], at="sample.py:10 in sample")
    if fix == "event":
        done = b.event()
        b.record(done, main)
        b.event_sync(done)
    elif fix == "device":
        b.device_sync()
    b.host_op("aten::_local_scalar_dense", reads=[b.view(out, [1])], at="sample.py:12 in sample")
    return b.trace()


def _replays(fix: str | None = None, steps: int = 3):
    """A graph captured an H2D copy from a static pinned buffer; each step the host writes the
    buffer, then replays. Buggy: the next step's write comes before the last replay is done."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main, at="graph.py:5 in setup")
    buf = b.host_alloc(N, main, at="graph.py:6 in setup")
    with b.capture(main) as graph:
        b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.span(buf, N)], at="graph.py:9 in capture")
        b.op("aten::mm", main, reads=[b.span(dev, N)], at="graph.py:10 in capture")
    for _ in range(steps):
        b.host_op("aten::copy_", writes=[b.span(buf, N)], at="graph.py:14 in step")
        b.replay(graph, main, at="graph.py:15 in step")
        if fix == "sync":
            b.stream_sync(main)
    return b.trace()


def _baked(fix: str | None = None, replay: bool = True, reuse: bool = True):
    """A graph captured an H2D copy from pinned memory allocated before the capture; the pinned
    tensor is freed and the allocator gives the block to the next pinned tensor; the graph is
    replayed. ``fix``: "alive" (no free while the graph lives), "inside" (the pinned tensor
    allocated inside the capture: never handed out again), "gone" (the graph is reset before
    any replay)."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main, at="baked.py:5 in setup")
    src = None if fix == "inside" else b.host_alloc(N, main, at="baked.py:6 in setup")
    with b.capture(main) as graph:
        if fix == "inside":
            src = b.host_alloc(N, main, at="baked.py:8 in capture")
        assert src is not None
        b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.span(src, N)], at="baked.py:9 in capture")
    if fix != "alive":
        b.host_free(src, at="baked.py:12 in drop")
    if reuse and fix != "alive":
        b.host_alloc(N, main, addr=src, at="baked.py:13 in other")
        b.host_op("aten::fill_", writes=[b.span(src, N)], at="baked.py:14 in other")
    if fix == "gone":
        b.reset_graph(graph)
    elif replay:
        b.replay(graph, main, at="baked.py:16 in run")
        b.stream_sync(main)
    return b.trace()


def _eager_free():
    """An eager non_blocking H2D from pinned memory, the pinned tensor freed at once and the block
    given to the next pinned tensor, which the host fills: the allocator waited for the copy's
    event before handing the block out, so this is safe."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main, at="free.py:5 in setup")
    src = b.host_alloc(N, main, at="free.py:6 in stage")
    b.host_op("aten::copy_", writes=[b.span(src, N)], at="free.py:7 in stage")
    b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.span(src, N)], at="free.py:8 in stage")
    b.host_free(src, at="free.py:9 in stage")
    b.host_alloc(N, main, addr=src, at="free.py:6 in stage")
    b.host_op("aten::copy_", writes=[b.span(src, N)], at="free.py:7 in stage")
    return b.trace()


# Seeds of the trace fuzzer (trace_fuzz.py): each bug and a fixed twin.
HOST_PROGRAMS = {
    "staging": _staging,
    "staging_double": lambda: _staging("double"),
    "d2h": _d2h,
    "d2h_event": lambda: _d2h("event"),
    "replays": _replays,
    "baked": _baked,
    "baked_inside": lambda: _baked("inside"),
    "eager_free": _eager_free,
}


def _kinds(trace) -> list[tuple[str, int]]:
    return [(f.kind, f.count) for f in analyze(trace).findings]


@pytest.fixture(params=ENGINES)
def engine(request):
    with core(request.param):
        yield request.param


def test_m1_host_rewrites_a_pending_staging_copy(engine):
    findings = analyze(_staging()).findings
    assert [(f.kind, f.hazard, f.count) for f in findings] == [(PINNED_WRITE_DURING_COPY, "WAR", 2)]
    f = findings[0]
    assert f.accesses[0].location == "serve.py:11" and f.accesses[1].location == "serve.py:10"
    assert f.accesses[1].stream_label == "the host"
    assert "double-buffer" in (f.fix or "") and f.allocation is not None and f.allocation.alloc_location == "serve.py:6"


@pytest.mark.parametrize("fix", ["double", "sync", "event", "blocking"])
def test_m1_fixed_twins_are_silent(engine, fix):
    assert _kinds(_staging(fix)) == []


def test_m1_double_buffering_without_its_sync_is_found(engine):
    """Two buffers do not help when nothing waits for the copy two steps back."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main)
    bufs = [b.host_alloc(N, main), b.host_alloc(N, main)]
    for step in range(3):
        buf = bufs[step % 2]
        b.host_op("aten::copy_", writes=[b.span(buf, N)], at="serve.py:10 in stage")
        b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.span(buf, N)], at="serve.py:11 in stage")
    assert _kinds(b.trace()) == [(PINNED_WRITE_DURING_COPY, 1)]


def test_m1_disjoint_rows_of_one_buffer_do_not_conflict(engine):
    """The host fills row 1 while the copy of row 0 is in flight: no byte in common."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main)
    buf = b.host_alloc(2 * N, main)
    b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.view(buf, [N // 4])])
    b.host_op("aten::copy_", writes=[b.view(buf, [N // 4], offset=N // 4)])
    assert _kinds(b.trace()) == []
    b.host_op("aten::fill_", writes=[b.view(buf, [2, N // 8], stride=[N // 4, 1])])  # meets row 0
    assert _kinds(b.trace()) == [(PINNED_WRITE_DURING_COPY, 1)]


def test_m1_across_replays(engine):
    findings = analyze(_replays()).findings
    assert [(f.kind, f.count) for f in findings] == [(PINNED_WRITE_DURING_COPY, 2)]
    use = findings[0].accesses[0]
    assert use.location == "graph.py:15" and use.captured is not None and use.captured["location"] == "graph.py:9"
    assert _kinds(_replays("sync")) == []


def test_m2_host_reads_a_d2h_destination_before_it_landed(engine):
    findings = analyze(_d2h()).findings
    assert [(f.kind, f.hazard) for f in findings] == [(PINNED_READ_BEFORE_COPY, "RAW")]
    assert "synchronize()" in (findings[0].fix or "")


@pytest.mark.parametrize("fix", ["event", "device"])
def test_m2_fixed_twins_are_silent(engine, fix):
    assert _kinds(_d2h(fix)) == []


def test_m2_an_event_recorded_before_the_copy_does_not_order_it(engine):
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main)
    out = b.host_alloc(N, main)
    early = b.event()
    b.record(early, main)
    b.copy(main, device_reads=[b.span(dev, N)], host_writes=[b.span(out, N)])
    b.event_sync(early)
    b.host_op("aten::_local_scalar_dense", reads=[b.span(out, 4)])
    assert _kinds(b.trace()) == [(PINNED_READ_BEFORE_COPY, 1)]


def test_m3_pinned_baked_into_a_graph_freed_and_reused(engine):
    findings = [f for f in analyze(_baked()).findings if f.kind == GRAPH_PINNED_FREED]
    assert len(findings) == 1
    f = findings[0]
    assert f.aliasing and f.graph is not None
    assert f.allocation is not None and f.allocation.reused_by is not None
    assert f.allocation.reused_by["location"] == "baked.py:13"
    assert "alive as long as graph" in (f.fix or "")


def test_m3_latent_without_replay(engine):
    assert GRAPH_PINNED_FREED in [k for k, _ in _kinds(_baked(replay=False, reuse=False))]


@pytest.mark.parametrize("fix", ["alive", "inside", "gone"])
def test_m3_fixed_twins_are_silent(engine, fix):
    assert _kinds(_baked(fix)) == []


def test_eager_free_with_a_pending_copy_is_safe(engine):
    """torch's host allocator records an event for the copy and waits for it before reuse."""
    assert _kinds(_eager_free()) == []


def test_a_trace_that_recorded_no_host_memory_gets_no_pass(engine):
    trace = _staging()
    trace.header["host_memory"] = False
    assert _kinds(trace) == []


def test_a_recording_that_made_no_host_event_gets_no_pass(engine):
    """``host_events: 0`` (1.6): the recorder saw no pinned memory, so the pass, which reads
    every synchronization and event of the trace, is not run; a trace that does not say gets it."""
    trace = _staging()
    assert _kinds(trace) != []
    trace.header["host_events"] = 0
    assert _kinds(trace) == []


def test_a_block_seen_again_without_its_free_replaces_the_old_one(engine):
    """A host_alloc over a live block (its free was not recorded): the old one is forgotten,
    its graph uses with it, and nothing is made up."""
    b = TraceBuilder()
    main = b.stream("main")
    dev = b.alloc(N, main)
    src = b.host_alloc(N, main)
    with b.capture(main) as graph:
        b.copy(main, device_writes=[b.span(dev, N)], host_reads=[b.span(src, N)])
    b.host_alloc(N, main, addr=src)
    b.host_free(src)
    b.replay(graph, main)
    assert _kinds(b.trace()) == []


def test_a_malformed_host_event_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    b = TraceBuilder()
    b.host_alloc(N, b.stream("main"))
    path = tmp_path / "bad.jsonl"
    b.write(str(path))
    with open(path, "a") as out:
        out.write('{"seq": 99, "ev": "host_op", "op": "aten::fill_", "writes": []}\n')
    done = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "reads" in done.stderr


def test_engines_agree_on_every_seed():
    for name, made in HOST_PROGRAMS.items():
        answers = []
        for engine_name in [e if isinstance(e, str) else e.values[0] for e in ENGINES]:
            with core(engine_name):
                answers.append([f.to_dict() for f in analyze(made()).findings])
        assert all(a == answers[0] for a in answers), name


torch = pytest.importorskip("torch")


def _record(program, hooks="python"):
    from fake_cuda import FakeCuda, Kernels
    from op_engines import native_module

    from streamrace.record.recorder import Recorder
    from streamrace.record.traces import build_trace

    if hooks == "native":
        native_module()  # or a skip saying why not
    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks=hooks, runtime=fake)
        recorder.start()
        try:
            program(fake)
        finally:
            recorder.stop()
    assert recorder.errors == []
    return build_trace(recorder)


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_the_hooks_record_pinned_memory_where_the_program_touched_it(hooks):
    """On the fake CUDA, with both hook sets: the pinned block is seen where the program pinned
    it (host_alloc), the H2D copy carries its host bytes, the host's fill_ and item are
    host_ops, the free is the storage's death; the analysis finds M1 and M2 from them."""
    main = 0x1000
    held = {}

    def program(fake):
        with fake.on(main):
            dev = fake.alloc()
            staging = fake.pinned(16)
            dev[:16].copy_(staging, non_blocking=True)  # H2D, pending
            staging.fill_(1.0)  # the host rewrites it: M1
            out = fake.pinned(16)
            out.copy_(dev[:16], non_blocking=True)  # D2H, pending
            out[3].item()  # the host reads it: M2
            dev[:16].copy_(staging)  # a blocking copy: the host waits
            staging.fill_(2.0)  # after a blocking copy: fine
            held["addr"] = staging.untyped_storage().data_ptr()
            held["out"] = out.untyped_storage().data_ptr()
            del staging
            del out

    trace = _record(program, hooks)
    assert trace.header["host_memory"] is True
    assert trace.header["host_events"] == sum(e["ev"].startswith("host_") for e in trace.events) == 7
    kinds = [
        (e["ev"], e.get("op"))
        for e in trace.events
        if e["ev"].startswith("host_") or e.get("host_reads") or e.get("host_writes")
    ]
    assert kinds == [
        ("host_alloc", None),
        ("op", "aten::copy_"),
        ("host_op", "aten::fill_.Scalar"),
        ("host_alloc", None),
        ("op", "aten::copy_"),
        ("host_op", "aten::_local_scalar_dense"),
        ("op", "aten::copy_"),
        ("host_op", "aten::fill_.Scalar"),
        ("host_free", None),
        ("host_free", None),
    ]
    alloc = next(e for e in trace.events if e["ev"] == "host_alloc")
    assert alloc["addr"] == held["addr"] and alloc["size"] == 64 and alloc["stream"] == main
    frees = [e for e in trace.events if e["ev"] == "host_free"]
    assert [e["addr"] for e in frees] == [held["addr"], held["out"]]
    blocking = [e.get("host_blocking") for e in trace.events if e.get("op") == "aten::copy_"]
    assert blocking == [None, None, True]
    assert sorted(f.kind for f in analyze(trace).findings) == [PINNED_READ_BEFORE_COPY, PINNED_WRITE_DURING_COPY]


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_the_recorder_leaves_pinned_memory_alone_with_no_pinned_tensor(hooks):
    """A program with no pinned memory gets no host event and no host field."""
    main = 0x1000

    def program(fake):
        with fake.on(main):
            dev = fake.alloc()
            dev[:16].add_(1.0)
            dev[:16].copy_(torch.ones(16), non_blocking=True)

    trace = _record(program, hooks)
    assert not [e for e in trace.events if e["ev"].startswith("host_") or "host_reads" in e or "host_writes" in e]
    assert trace.header["host_events"] == 0, "so the analysis skips the pinned-memory pass"


def test_a_host_write_meeting_two_pending_copies_counts_once(engine):
    """One buffer copied to the device on two streams from one line, then one host write: it
    meets both pending copies, and counts once."""
    b = TraceBuilder()
    one, two = b.stream("one"), b.stream("two")
    dev = b.alloc(2 * N, one)
    buf = b.host_alloc(N, one)
    for stream, offset in ((one, 0), (two, N)):
        b.copy(stream, device_writes=[b.span(dev + offset, N)], host_reads=[b.span(buf, N)], at="io.py:3 in stage")
    b.host_op("aten::fill_", writes=[b.span(buf, N)], at="io.py:5 in stage")
    assert _kinds(b.trace()) == [(PINNED_WRITE_DURING_COPY, 1)]
