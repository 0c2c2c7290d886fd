"""The native hooks against the Python reference on real captures: the same trace, event for
event, from the same program; and either set's failure leaves the user's capture exact."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT, load_example

from streamrace.trace import load_trace

HERE = pathlib.Path(__file__).resolve().parent


def _record(kind: str, out: pathlib.Path) -> dict[str, list[dict]]:
    subprocess.run([sys.executable, str(HERE / "record_with_hooks.py"), kind, str(out)], check=True, cwd=ROOT)
    return {p.name: _canonical(load_trace(p).events) for p in sorted(out.iterdir())}


def _canonical(events: list[dict]) -> list[dict]:
    """Addresses, stream and event handles differ between processes: number each by its
    first appearance, so that two recordings of one program compare equal. CUDA hands a
    destroyed event's handle out again: a created event is a new one."""
    labels: dict[str, dict[int, int]] = {"addr": {}, "stream": {}, "event": {}}
    created = 0

    def walk(value):
        if isinstance(value, dict):
            return {
                k: labels[k].setdefault(v, len(labels[k])) if k in labels and isinstance(v, int) else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = []
    for event in events:
        if event["ev"] == "event_create":
            created += 1
            labels["event"][event["event"]] = f"event{created}"
        out.append(walk(event))
    return out


def test_native_hooks_record_what_the_python_hooks_record(tmp_path):
    native, python = _record("native", tmp_path / "native"), _record("python", tmp_path / "python")
    assert sorted(native) == sorted(python) and len(native) == 17
    for name in native:
        ours, reference = native[name], python[name]
        for i, (got, want) in enumerate(zip(ours, reference, strict=False)):
            assert got == want, f"{name}: event {i} differs:\n native {got}\n python {want}"
        assert len(ours) == len(reference), name
        assert any(e["ev"] == "op" for e in ours), name


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
