"""A finished recording is freed by reference counting, not left to the cyclic GC.

A recording holds every event it made (a PyTorch optimizer test makes 150k). Were the
recorder in a reference cycle (its parts holding it), all of them would stay alive after the
test until a full collection of the cyclic GC found them, and that collection would land, seconds
long, in some later test of the suite: the H200 run of 2026-12-03 saw 650k objects kept across
PyTorch's graph tests and a 1.6 s collection in one of them.
"""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph, Kernels, memcopy  # noqa: E402

import streamrace  # noqa: E402

MAIN = 0x1000


def _program(fake: FakeCuda) -> None:
    """Eager ops, a capture, replays and pinned memory: every part of the recorder has work."""
    with fake.on(MAIN):
        x, out = fake.alloc(), fake.alloc()
        graph = FakeGraph(fake, work=lambda: memcopy(out, x))
        graph.capture_begin()
        torch.add(x, 1.0, out=out)
        graph.capture_end()
        for _ in range(3):
            x.add_(1.0)
            graph.replay()
        staging = fake.pinned(16)
        x[:16].copy_(staging)


def _watched(hooks: str, path: str | None) -> weakref.ref:
    fake = FakeCuda()
    with Kernels(fake), streamrace.watch(path, runtime=fake, hooks=hooks) as session:
        _program(fake)
    assert session.errors == []
    assert session.result is not None
    return weakref.ref(session.recorder)


@pytest.mark.parametrize("to_file", [False, True], ids=["in-memory", "trace-file"])
@pytest.mark.parametrize("hooks", ["native", "python"])
def test_a_finished_recording_is_freed_when_its_session_goes(hooks, to_file, tmp_path):
    if hooks == "native":
        from op_engines import native_module

        native_module()  # or a skip saying why not
    path = str(tmp_path / "t.jsonl.gz") if to_file else None
    _watched(hooks, path)  # the first recording of a process imports and builds (torch keeps frames)
    gc.collect()
    gc.disable()
    try:
        recorder = _watched(hooks, path)
        assert recorder() is None, "the recorder outlived its session: it is in a reference cycle"
    finally:
        gc.enable()
