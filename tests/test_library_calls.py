"""The work done inside torch's own entry points, recorded on the CPU (fake_cuda.py) with both
sets of hooks, and set aside by the library protocols: torch's generator-state prologue is
torch's, while the same fills written by the program stay the program's findings. Also: the
recorder keeps no code object of the program alive (a compiled function's code holds its
graphs, and their CUDA-graph pools' blocks)."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeGraph, memcopy  # noqa: E402
from test_replays import record as record_on_fake  # noqa: E402

from streamrace.analysis import analyze  # noqa: E402
from streamrace.record.traces import build_trace  # noqa: E402

MAIN, SIDE, REPLAY = 0x1000, 0x2000, 0x3000
HOOKS = pytest.mark.parametrize("kind", ["native", "python"])


def record(kind, program):
    """``program`` recorded on a fake CUDA with one set of hooks, as a trace."""
    return build_trace(record_on_fake(kind, program))


def rng_program(in_prologue: bool):
    """A graph captured on SIDE and replayed on REPLAY, with an 8-byte 'seed' filled on the
    capture stream at capture_begin and on the replay stream at each replay, the way torch's
    generator-state prologue does; ``in_prologue=False``: the program writes those fills itself
    around the calls."""

    def program(fake):
        seed = fake.alloc(8)[:2]  # 8 bytes, as torch's seed and offset are
        x, out = fake.alloc(), fake.alloc()

        def prologue():
            seed.fill_(7.0)

        graph = FakeGraph(fake, work=lambda: memcopy(out, x), prologue=prologue if in_prologue else None)
        with fake.on(SIDE):
            if not in_prologue:
                prologue()
            graph.capture_begin()
            torch.add(x, seed[0], out=out)
            graph.capture_end()
        with fake.on(REPLAY):
            if not in_prologue:
                prologue()
            graph.replay()

    return program


@HOOKS
def test_the_work_inside_capture_begin_and_replay_is_marked(kind):
    trace = record(kind, rng_program(in_prologue=True))
    calls = [e for e in trace.events if e["ev"] == "library_call"]
    assert [c["call"] for c in calls] == ["CUDAGraph.capture_begin", "CUDAGraph.replay"]
    fills = [e for e in trace.events if e.get("op") == "aten::fill_.Scalar"]
    assert len(fills) == 2
    for call, fill in zip(calls, fills, strict=True):
        assert call["first"] <= fill["seq"] < call["seq"], "each fill inside its call's range"


@HOOKS
def test_torchs_prologue_race_is_set_aside_and_the_programs_own_is_not(kind):
    torchs = analyze(record(kind, rng_program(in_prologue=True)))
    assert torchs.findings == []
    assert {(f.kind, f.protocol) for f in torchs.library_findings} == {("data-race", "torch-graph-rng-state")}
    own = analyze(record(kind, rng_program(in_prologue=False)))
    assert {f.kind for f in own.findings} == {"data-race"}, "the same fills, written by the program"
    assert own.library_findings == []


@HOOKS
def test_a_call_that_records_nothing_writes_no_event(kind):
    def program(fake):
        x, out = fake.alloc(), fake.alloc()
        graph = FakeGraph(fake, work=lambda: memcopy(out, x))
        with fake.on(MAIN):
            graph.capture_begin()
            torch.add(x, 1.0, out=out)
            graph.capture_end()
            graph.replay()

    trace = record(kind, program)
    assert [e for e in trace.events if e["ev"] == "library_call"] == []


@HOOKS
def test_the_recorder_keeps_no_code_object_of_the_program_alive(kind):
    """A strong reference kept every compiled function's code alive while recording, and with
    it what dynamo hangs on the code (the compiled graphs and their pools' blocks):
    cudagraph trees' own tear-down check found a block alive that the program had freed."""
    dead = []

    def program(fake):
        namespace = {}
        exec(compile("def user_step(t):\n    return t + 1.0\n", "user_model.py", "exec"), namespace)
        x = fake.alloc()
        namespace["user_step"](x)  # an op whose stack holds user_step's frame
        code = weakref.ref(namespace["user_step"].__code__)
        del namespace
        gc.collect()
        dead.append(code() is None)  # while the recording still runs

    trace = record(kind, program)
    assert any(f[2] == "user_step" for e in trace.events if e["ev"] == "stack" for f in e["frames"])
    assert dead == [True]
