"""The execution view on the H200 (HAZARDS.md X1-X6): each whole program of
examples/execution_gallery.py recorded with the default (whole-program) recording. The buggy
variant is flagged with its kind and really corrupts at replay; its fixed twin and the correct
patterns (PyTorch's documented side-stream warm-up, capturable Adam with a side branch) are
clean and exact, with every eager allocation's exact size in the trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, load_example

from streamrace.analysis.detectors import UNSAFE_FREE

BUGGY = ["X1", "X2", "X3", "X4", "X5", "X6"]


@pytest.fixture(scope="module")
def gallery():
    return load_example("execution_gallery")


@pytest.mark.parametrize("key", BUGGY)
def test_buggy_is_flagged_and_corrupts(gallery, key):
    session, outcome = gallery.record(key, fixed=False)
    assert outcome.premise, f"{key}: the allocator did not do what the scenario needs"
    assert outcome.corrupted > 0, f"{key}: the buggy variant should corrupt at replay"
    assert {f.kind for f in session.findings} == {gallery.SCENARIOS[key].finding}, session.report()
    assert not session.errors


@pytest.mark.parametrize("key", [*BUGGY, "E1", "E2"])
def test_fixed_and_correct_patterns_are_clean_and_exact(gallery, key):
    session, outcome = gallery.record(key, fixed=True)
    assert outcome.premise and outcome.corrupted == 0
    assert session.findings == [], session.report()
    assert session.trace is not None and session.trace.header["allocations_dropped"] == 0, "exact eager sizes"
    assert not session.errors


def test_replays_and_eager_work_are_in_the_trace(gallery):
    session, _ = gallery.record("X2", fixed=True)
    events = session.trace.events
    replays = [e for e in events if e["ev"] == "replay"]
    captured = {e["graph"] for e in events if e["ev"] == "capture_begin"}
    assert len(replays) == gallery.ROUNDS and {e["graph"] for e in replays} == captured
    eager_ops = [e for e in events if e["ev"] == "op" and e["op"].startswith("aten::copy_")]
    assert eager_ops, "the copy stream's staging is recorded"
    assert session.trace.header["recording"] == "program"


def test_dsv4_run_whole_reports_the_freed_before_join_and_nothing_else(tmp_path):
    """Warm-ups, captures, replays and the eager reference run, under `streamrace run`."""
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "streamrace", "run", "--json", str(report), "--"]
    cmd += [sys.executable, "examples/dsv4_mini_decode.py", "--check"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    kinds = [(f["kind"], f["aliasing"]) for f in doc["findings"]]
    assert kinds == [(UNSAFE_FREE, True)], proc.stdout
    assert doc["summary"]["replays"] == 9
