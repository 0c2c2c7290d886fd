"""The native hooks against the Python reference on real captures: the same trace, event for
event, from the same program; and either set's failure leaves the user's capture exact. On the
CPU, tests/test_hooks_differential.py compares the two on a scripted capture."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT, load_example
from hook_traces import canonical, first_difference

from streamrace.trace import load_trace

HERE = pathlib.Path(__file__).resolve().parent


def _record(kind: str, out: pathlib.Path) -> dict[str, list[dict]]:
    subprocess.run([sys.executable, str(HERE / "record_with_hooks.py"), kind, str(out)], check=True, cwd=ROOT)
    return {p.name: canonical(load_trace(p).events) for p in sorted(out.iterdir())}


def test_native_hooks_record_what_the_python_hooks_record(tmp_path):
    native, python = _record("native", tmp_path / "native"), _record("python", tmp_path / "python")
    assert sorted(native) == sorted(python) and len(native) == 17
    for name in native:
        difference = first_difference(native[name], python[name])
        assert difference is None, f"{name}: {difference}"
        assert any(e["ev"] == "op" for e in native[name]), name


@pytest.mark.parametrize("kind", ["native", "python"])
def test_a_broken_recorder_leaves_the_capture_exact(monkeypatch, kind):
    gallery = load_example("hazard_gallery")

    def broken(self, code):
        raise RuntimeError("simulated recorder bug")

    monkeypatch.setenv("STREAMRACE_HOOKS", kind)
    monkeypatch.setattr("streamrace.record.stacks.UserCode.shown_path", broken)
    session, (corrupted, replays) = gallery.run("H2", fixed=True)
    assert session.recorder.hooks_kind == kind
    assert corrupted == 0 and replays == 3, "the user's graph must still be right"
    assert session.errors and "simulated recorder bug" in session.errors[0]
    assert any(e["ev"] == "recorder_error" for e in session.trace.events)


def test_torchs_trace_calls_reach_the_native_hooks_from_cpp():
    """On a CUDA torch the interposer builds and serves every registry: the recording's events
    come without a Python callback of its own, others' callbacks still run, and torch's own
    interpreter is back after it."""
    import torch
    from torch.cuda import _gpu_trace

    import streamrace

    seen: list[tuple[int, int]] = []
    stream = torch.cuda.Stream()
    with streamrace.watch(hooks="native") as session:
        assert session.recorder.hooks.interposer_unavailable == ""
        assert _gpu_trace.EventRecordCallbacks.callback_list == [], "none of the recorder's"
        _gpu_trace.register_callback_for_event_record(lambda event, s: seen.append((event, s)))
        x = torch.ones(1024, device="cuda")
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            y = x * 2
        torch.cuda.current_stream().wait_stream(stream)
        y.add_(1)
        torch.cuda.synchronize()
    try:
        kinds = {e["ev"] for e in session.trace.events}
        assert {"alloc", "event_record", "event_wait", "device_sync", "op"} <= kinds, kinds
        assert len(seen) == 2, "the program's two event records reached the other callback"
        torch.cuda.Event().record()
        assert len(seen) == 3, "torch's own interpreter serves the registry again"
        assert session.findings == [], session.report()
    finally:
        _gpu_trace.EventRecordCallbacks.callback_list.clear()
