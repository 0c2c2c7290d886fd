"""Pinned host memory (issue 26, item 1; HAZARDS.md M1–M3) on a real GPU: each buggy scenario of
examples/pinned_memory.py really corrupts and its fixed twin is exact; the host allocator's
premises hold (a freed pinned block baked into a graph is handed out again; one with an eager
copy pending is not; one allocated in a capture and used there never is); the recording finds
each bug, and stays silent on the fixed twins and on the two safe look-alikes, with both
sets of hooks."""

from __future__ import annotations

import pytest
import torch
from conftest import load_example

import streamrace
from streamrace.analysis.detectors import GRAPH_PINNED_FREED, PINNED_READ_BEFORE_COPY, PINNED_WRITE_DURING_COPY

EXPECTED = {
    "m1_staging": PINNED_WRITE_DURING_COPY,
    "m1_replay": PINNED_WRITE_DURING_COPY,
    "m2_d2h": PINNED_READ_BEFORE_COPY,
    "m3_baked": GRAPH_PINNED_FREED,
    "serving_async": PINNED_WRITE_DURING_COPY,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_buggy_scenario_really_corrupts_and_its_twin_is_exact(name):
    pinned = load_example("pinned_memory")
    run = pinned.SCENARIOS[name]
    buggy, fixed = run(False), run(True)
    assert buggy.premise and fixed.premise, f"{name}: the host allocator's premise failed"
    assert buggy.corrupted >= 1, f"{name}: the buggy variant did not corrupt ({buggy})"
    assert fixed.corrupted == 0, f"{name}: the fixed twin corrupted ({fixed})"


@pytest.mark.parametrize("name", sorted(["eager_free", "capture_owned"]))
def test_the_safe_look_alikes_are_exact_and_the_allocator_protects_them(name):
    pinned = load_example("pinned_memory")
    outcome = pinned.SAFE[name]()
    assert outcome.premise, f"{name}: the host allocator handed the block out again"
    assert outcome.corrupted == 0


HOOKS = pytest.mark.parametrize("hooks", ["native", "python"])


@HOOKS
@pytest.mark.parametrize("fixed", [False, True], ids=["buggy", "fixed"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_recording_finds_each_bug_and_not_its_twin(name, fixed, hooks):
    pinned = load_example("pinned_memory")
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        pinned.SCENARIOS[name](fixed)
    assert not session.errors
    assert session.trace.header["host_memory"] is True
    kinds = sorted({f.kind for f in session.findings})
    assert kinds == ([] if fixed else [EXPECTED[name]]), [f.message for f in session.findings]


@HOOKS
@pytest.mark.parametrize("name", sorted(["eager_free", "capture_owned"]))
def test_the_safe_look_alikes_give_no_finding(name, hooks):
    pinned = load_example("pinned_memory")
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        outcome = pinned.SAFE[name]()
    assert not session.errors
    assert outcome.premise and outcome.corrupted == 0
    events = [e["ev"] for e in session.trace.events]
    assert "host_alloc" in events and "host_free" in events, "the pinned blocks were seen"
    assert [f.kind for f in session.findings] == [], [f.message for f in session.findings]


@HOOKS
def test_the_recorded_events_name_the_program_s_lines(hooks):
    """m3's finding: the captured copy, the free and the next owner, each at its line of the example."""
    pinned = load_example("pinned_memory")
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        pinned.m3_baked(False)
    (found,) = [f for f in session.findings if f.kind == GRAPH_PINNED_FREED]
    assert found.aliasing, "the next pinned tensor got the block"
    assert found.allocation is not None and found.allocation.reused_by is not None
    lines = [a.location or "" for a in found.accesses]
    assert all(line.startswith("examples/pinned_memory.py") or "pinned_memory.py" in line for line in lines), lines


def test_both_hook_sets_record_the_same_pinned_events():
    """The same program under each set of hooks: the same pinned-memory events, in the same
    order, with the same sizes (addresses differ from run to run)."""
    pinned = load_example("pinned_memory")
    shapes = {}
    for hooks in ("native", "python"):
        torch.cuda.synchronize()
        with streamrace.watch(hooks=hooks) as session:
            pinned.m1_replay(False, steps=2)
        assert not session.errors
        shapes[hooks] = [
            (e["ev"], e.get("op"), e.get("size"), len(e.get("host_reads") or ()), len(e.get("host_writes") or ()))
            for e in session.trace.events
            if e["ev"].startswith("host_") or e.get("host_reads") or e.get("host_writes")
        ]
    assert shapes["native"] == shapes["python"] and shapes["native"]
