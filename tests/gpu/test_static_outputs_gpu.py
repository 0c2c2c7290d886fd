"""Static outputs kept across replays (issue 26, item 2; HAZARDS.md M4) and capture-time
allocations that escape (item 3; M5) on a real GPU: each buggy program of
examples/static_outputs.py really corrupts and is reported with its kind; each fixed twin is
exact and silent. Both hook sets."""

from __future__ import annotations

import pytest
import torch
from conftest import load_example

import streamrace

HOOKS = pytest.mark.parametrize("hooks", ["native", "python"])
NAMES = ["graphed", "view", "workspace"]


def _scenario(name: str):
    return load_example("static_outputs").SCENARIOS[name]


@pytest.mark.parametrize("name", NAMES)
def test_the_buggy_program_really_corrupts_and_its_twin_is_exact(name):
    scenario = _scenario(name)
    buggy, fixed = scenario.run(False), scenario.run(True)
    assert buggy.premise and fixed.premise, "the allocator did what the story needs"
    assert buggy.corrupted >= 1, f"{name}: the kept value was overwritten ({buggy})"
    assert fixed.corrupted == 0, f"{name}: the twin is exact ({fixed})"


@HOOKS
@pytest.mark.parametrize("fixed", [False, True], ids=["buggy", "fixed"])
@pytest.mark.parametrize("name", NAMES)
def test_the_bug_is_reported_with_its_kind_and_the_twin_is_silent(hooks, name, fixed):
    scenario = _scenario(name)
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        outcome = scenario.run(fixed)
    assert not session.errors, session.errors
    found = [(f.kind, f.message) for f in session.findings]
    assert [kind for kind, _ in found] == ([] if fixed else [scenario.finding]), found
    assert (outcome.corrupted == 0) == fixed, outcome
    if name != "workspace":
        views = [e for e in session.trace.events if e["ev"] == "view"]
        assert views, "the values handed out of the static output were recorded"
