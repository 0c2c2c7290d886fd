"""Replays, resets and destructions of captured graphs, recorded on the CPU (fake_cuda.py), with
both sets of hooks: which graph and stream each replay names, what is counted instead of
recorded, and that the recorder keeps no graph alive and changes nothing the program does."""

from __future__ import annotations

import ctypes
import gc
import weakref
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph, Kernels, memcopy  # noqa: E402
from op_engines import native_module  # noqa: E402

from streamrace.record.recorder import Recorder  # noqa: E402
from streamrace.record.traces import build_trace  # noqa: E402

MAIN, SIDE, COPY = 0x1000, 0x2000, 0x3000
HOOKS = pytest.mark.parametrize("kind", ["native", "python"])


def record(kind: str, program: Callable[[FakeCuda], object], fake: FakeCuda | None = None, **options) -> Recorder:
    """``program`` run on a fake CUDA under a recorder with one set of hooks."""
    if kind == "native":
        native_module()
    fake = fake or FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake, **options)
        recorder.start()
        try:
            program(fake)
        finally:
            recorder.stop()
    assert recorder.errors == []
    return recorder


def captured(fake: FakeCuda, out: torch.Tensor, src: torch.Tensor, stream: int = MAIN) -> FakeGraph:
    """A graph on ``stream`` that writes ``out`` from ``src``: out = src + 1 at capture, and a
    copy of ``src`` into ``out`` at each replay."""
    graph = FakeGraph(fake, work=lambda: memcopy(out, src))
    with fake.on(stream):
        graph.capture_begin()
        torch.add(src, 1.0, out=out)
        graph.capture_end()
    return graph


def of_kind(recorder: Recorder, *kinds: str) -> list[dict]:
    return [e for e in recorder.trace_events() if e["ev"] in kinds]


@HOOKS
def test_a_replay_names_its_graph_stream_device_and_line(kind):
    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = captured(fake, out, x)
        with fake.on(SIDE):
            graph.replay()  # the replay line
        x.fill_(2.0)
        with fake.on(MAIN):
            graph.replay()

    recorder = record(kind, program)
    events = recorder.trace_events()
    [begin] = [e for e in events if e["ev"] == "capture_begin"]
    replays = [e for e in events if e["ev"] == "replay"]
    assert [(r["graph"], r["stream"], r["device"]) for r in replays] == [
        (begin["graph"], SIDE, 0),
        (begin["graph"], MAIN, 0),
    ]
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    assert stacks[replays[0]["stack"]][0][2] == "program" and stacks[replays[0]["stack"]][0][0].endswith(
        "test_replays.py"
    )
    seqs = {e["seq"]: e for e in events}
    declared = [e["seq"] for e in events if e["ev"] == "stream" and e["stream"] == SIDE]
    assert declared and declared[0] < replays[0]["seq"], "the replay's stream is declared before it"
    fill = next(e for e in events if e.get("op") == "aten::fill_.Scalar")
    assert replays[0]["seq"] < fill["seq"] < replays[1]["seq"], "in program order with the eager op"
    assert len(seqs) == len(events), "every seq once"


def test_both_hook_sets_walk_a_replays_stack_alike_up_to_the_walk_limit():
    """A replay under library frames, at every depth around the walk limit (128 frames): the
    two hook sets keep the same user frames (the native replay walks from the caller's frame,
    so the Python one must too)."""
    import os

    source = "def deep(n, graph):\n    if n:\n        return deep(n - 1, graph)\n    graph.replay()\n"
    library: dict = {}  # a module of torch's, as stacks.py sees it: library frames
    exec(compile(source, os.path.join(os.path.dirname(torch.__file__), "streamrace_test_deep.py"), "exec"), library)

    def stack_of_replay(kind: str, n: int) -> list:
        def program(fake):
            x, out = fake.alloc(), fake.alloc()
            library["deep"](n, captured(fake, out, x))

        events = record(kind, program).trace_events()
        [replay] = [e for e in events if e["ev"] == "replay"]
        return next((e["frames"] for e in events if e["ev"] == "stack" and e["id"] == replay.get("stack")), [])

    depths = range(110, 130)  # the walk starts a few frames above deep's innermost call
    stacks = {n: (stack_of_replay("native", n), stack_of_replay("python", n)) for n in depths}
    assert all(native == python for native, python in stacks.values()), stacks
    kept = {len(native) for native, _ in stacks.values()}
    assert len(kept) > 1, "the depths reach the limit: outer user frames fall off"


@HOOKS
def test_a_replay_the_stop_overtakes_on_another_thread_is_no_recorder_error(kind):
    """A worker's replay whose recording stops (and lets the hooks' Python go) between the
    launch and its event: the replay is after the recording, and nothing fails."""
    import threading

    looked_up, stopped = threading.Event(), threading.Event()
    workers: list[threading.Thread] = []

    class StopsHere(dict):  # the worker has found its graph when the stop runs
        def get(self, key, default=None):
            value = dict.get(self, key, default)
            if threading.current_thread().name == "replayer":
                looked_up.set()
                stopped.wait(10)
            return value

    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = captured(fake, out, x)
        replays = Recorder.active().replays
        replays._objects = StopsHere(replays._objects)
        workers.append(threading.Thread(target=graph.replay, name="replayer"))
        workers[0].start()
        assert looked_up.wait(10)

    recorder = record(kind, program)  # stops while the worker waits inside its replay
    stopped.set()
    workers[0].join(10)
    assert not workers[0].is_alive()
    assert recorder.errors == []


@HOOKS
def test_replays_of_graphs_captured_before_recording_are_counted_not_recorded(kind):
    fake = FakeCuda()
    x, out = fake.alloc(), fake.alloc()
    with Kernels(fake):
        earlier = captured(fake, out, x)  # no recorder yet
    handle = earlier._graph

    def program(fake):
        earlier.replay()
        earlier.replay()
        earlier.reset()  # nothing to say about a graph the trace never had

    recorder = record(kind, program, fake)
    assert of_kind(recorder, "replay", "graph_reset", "graph_destroy") == []
    header = build_trace(recorder).header
    assert header["replays_unrecorded"] == 2 and header["replays_in_capture"] == 0
    assert header["recording"] == "program"
    assert [g for g, _ in fake.graph_launches] == [handle] * 2, "the replays still ran"


@HOOKS
def test_a_replay_into_a_capturing_stream_is_counted_and_nothing_breaks(kind):
    def program(fake):
        x, out, other = fake.alloc(), fake.alloc(), fake.alloc()
        inner = captured(fake, out, x)
        outer = FakeGraph(fake)
        with fake.on(SIDE):
            outer.capture_begin()
            inner.replay()  # nested as a child graph node of the capture
            other.fill_(1.0)
            outer.capture_end()
            outer.replay()

    recorder = record(kind, program)
    replays = of_kind(recorder, "replay")
    assert [r["graph"] for r in replays] == [2], "only the outer graph's replay, after its capture"
    assert build_trace(recorder).header["replays_in_capture"] == 1
    outer_graph = next(e for e in of_kind(recorder, "graph") if e["graph"] == 2)
    assert [n["type"] for n in outer_graph["nodes"]] == ["graph", "kernel"]


@HOOKS
def test_reset_then_capture_again_takes_a_new_graph_id(kind):
    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = FakeGraph(fake, work=lambda: memcopy(out, x))
        with fake.on(MAIN):
            for _ in range(2):
                graph.capture_begin()
                torch.add(x, 1.0, out=out)
                graph.capture_end()
                graph.replay()
                graph.reset()
            graph.capture_begin()
            torch.add(x, 2.0, out=out)
            graph.capture_end()
            graph.replay()

    recorder = record(kind, program)
    lifetime = [(e["ev"], e["graph"]) for e in of_kind(recorder, "replay", "graph_reset", "graph_destroy")]
    assert lifetime == [
        ("replay", 1),
        ("graph_reset", 1),
        ("replay", 2),
        ("graph_reset", 2),
        ("replay", 3),
        ("graph_destroy", 3),  # the program returned while recording: the object went
    ]
    resets = of_kind(recorder, "graph_reset")
    assert all("stack" in r for r in resets)


@HOOKS
def test_the_recorder_keeps_no_graph_alive(kind):
    alive: dict[str, weakref.ref] = {}
    seqs: dict[str, int] = {}

    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = captured(fake, out, x)
        graph.replay()
        alive["graph"] = weakref.ref(graph)
        del graph  # the last reference: collected here, with no garbage collection run
        assert alive["graph"]() is None, "the recorder holds the graph"
        seqs["after"] = fake_recorder().position()
        cyclic = captured(fake, out, x)
        cyclic.me = cyclic  # a cycle: collected only by the garbage collector
        alive["cyclic"] = weakref.ref(cyclic)
        del cyclic
        gc.collect()
        assert alive["cyclic"]() is None

    def fake_recorder() -> Recorder:
        return Recorder.active()

    recorder = record(kind, program)
    destroys = of_kind(recorder, "graph_destroy")
    assert [d["graph"] for d in destroys] == [1, 2]
    assert destroys[0]["seq"] < seqs["after"], "emitted when the object was collected"


@HOOKS
def test_a_graph_collected_after_recording_says_nothing_and_keeps_no_recorder(kind):
    keep = {}

    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        keep["graph"] = captured(fake, out, x)
        keep["graph"].replay()

    recorder = record(kind, program)
    before = len(recorder.trace_events())
    finished = weakref.ref(recorder)
    del keep["graph"]
    assert len(recorder.trace_events()) == before
    del recorder
    gc.collect()
    assert finished() is None, "a finalizer outlived the recording and kept the recorder"


@HOOKS
def test_capture_only_records_no_replay_and_no_eager_op_but_the_graphs_lifetime(kind):
    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = captured(fake, out, x)
        x.fill_(3.0)
        graph.replay()
        graph.reset()

    recorder = record(kind, program, capture_only=True)
    events = recorder.trace_events()
    assert not [e for e in events if e["ev"] == "replay"]
    assert [e["ev"] for e in events if e["ev"] in ("graph_reset", "graph_destroy")] == ["graph_reset"], (
        "the graph's lifetime is recorded: frees are judged against it"
    )
    assert [e["op"] for e in events if e["ev"] == "op"] == ["aten::add.out"], "the captured op only"
    header = build_trace(recorder).header
    assert header["recording"] == "captures" and "replays_unrecorded" not in header
    assert FakeGraph.replay.__qualname__ == "FakeGraph.replay", "the patches came off"


@HOOKS
@pytest.mark.parametrize("graph_dies", [True, False], ids=["graph-collected", "graph-alive"])
def test_capture_only_judges_a_freed_input_by_the_graphs_recorded_life(kind, graph_dies):
    """PyTorch's optimizer graph tests under --streamrace-capture-only: the graph captured in
    one round is dropped, then the round's inputs are freed. Without the graph's end in the
    trace each free looked like one under a live graph (graph-input-freed, latent); with it,
    only a graph still alive when its input is freed is reported."""
    from streamrace.analysis import analyze

    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        keep = {"graph": captured(fake, out, x)}
        if graph_dies:
            del keep["graph"]
            gc.collect()
        fake.free(x)
        return keep

    kept = {}
    recorder = record(kind, lambda fake: kept.update(program(fake)), capture_only=True)
    kinds = [f.kind for f in analyze(build_trace(recorder)).findings]
    assert kinds == ([] if graph_dies else ["graph-input-freed"])


def test_every_patch_comes_off_in_reverse_order():
    """Two parts wrap capture_end; the later one's wrapper must come off first, or the earlier
    wrapper stays installed after the recording."""
    originals = {name: FakeGraph.__dict__[name] for name in ("capture_begin", "capture_end", "replay", "reset")}
    record("python", lambda fake: captured(fake, fake.alloc(), fake.alloc()).replay())
    assert {name: FakeGraph.__dict__[name] for name in originals} == originals


def test_a_failing_replay_hook_is_the_recorders_failure_not_the_programs(monkeypatch):
    from streamrace.record import replays

    def broken(self, cuda_graph):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(replays.GraphReplays, "on_replay", broken)
    fake = FakeCuda()
    x, out = fake.alloc(), fake.alloc()
    with Kernels(fake):
        recorder = Recorder(hooks="python", runtime=fake)
        recorder.start()
        try:
            captured(fake, out, x).replay()
        finally:
            recorder.stop()
    assert recorder.errors == ["graph replay: RuntimeError: broken on purpose"]
    assert len(fake.graph_launches) == 1, "the replay ran"


def _serving_program(fake: FakeCuda, steps: int) -> list[bytes]:
    """Warm-up, capture, then steps of: stage the next input on COPY, MAIN waits for it and
    replays, an eager op samples the output; a graph is reset, another collected. The output
    bytes after each step."""
    static_in, static_out, sample = fake.alloc(), fake.alloc(), fake.alloc()
    staged_ready = fake.event()
    with fake.on(MAIN):
        torch.add(static_in, 1.0, out=static_out)  # warm-up
    graph = captured(fake, static_out, static_in)
    spare = captured(fake, sample, static_in, stream=SIDE)
    outputs = []
    for step in range(steps):
        with fake.on(COPY):
            staged = fake.alloc()
            staged.fill_(float(step))
            fake.record(staged_ready)
        with fake.on(MAIN):
            fake.wait(staged_ready)
            static_in.copy_(staged)
            graph.replay()
            torch.mul(static_out, 2.0, out=sample)
        fake.free(staged)
        outputs.append(_bytes(sample))
        if step == 1:
            spare.reset()
        if step == 2:
            del graph
            graph = captured(fake, static_out, static_in)
    outputs.append(_bytes(fake._arena))
    return outputs


def _bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes, read where no dispatcher sees it."""
    return ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size())


@HOOKS
def test_recording_does_not_change_what_the_program_does(kind):
    """Non-perturbation on the CPU: the same outputs, memory, allocations, launches and graph
    lifetimes with and without the recorder (tests/gpu/test_recorder_gpu.py does it on a GPU)."""
    plain = FakeCuda()
    with Kernels(plain):
        want = _serving_program(plain, 5)
    fake = FakeCuda()
    got = {}
    recorder = record(kind, lambda f: got.setdefault("outputs", _serving_program(f, 5)), fake)
    assert got["outputs"] == want, "outputs or memory differ with the recorder"
    assert fake.handed_out == plain.handed_out and fake._freed == plain._freed, "other allocations"
    assert [g - min(g for g, _ in fake.graph_launches) for g, _ in fake.graph_launches] == [
        g - min(g for g, _ in plain.graph_launches) for g, _ in plain.graph_launches
    ]
    assert [s for _, s in fake.graph_launches] == [s for _, s in plain.graph_launches]
    assert len(of_kind(recorder, "replay")) == 5
    assert [(e["ev"], e["graph"]) for e in of_kind(recorder, "graph_reset", "graph_destroy")] == [
        ("graph_reset", 2),
        ("graph_destroy", 1),
        ("graph_destroy", 3),
    ]


@HOOKS
def test_an_op_that_raises_through_python_keeps_its_own_exception(kind):
    """The op's Python dispatch (here the fake's kernel mode) raises, and the hooks end the op
    while that error is in flight: calling Python then (the current stream, a new code
    object's path) turned it into a SystemError the program never raised."""
    caught = []

    def program(fake):
        x = fake.alloc()
        with pytest.raises(RuntimeError, match="must match the size") as raised:
            torch.add(x, x[:2])
        caught.append(raised.type)

    record(kind, program)
    assert caught == [RuntimeError]
