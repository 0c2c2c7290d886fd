"""The application pool (issue 26, item 4; HAZARDS.md M7) on a real GPU: the paged-KV example's
buggy variant really corrupts request A's decode and is reported at the free, with the next
owner's racing write; its fixed twin is exact and silent. Both hook sets."""

from __future__ import annotations

import pytest
import torch
from conftest import load_example

import streamrace
from streamrace.analysis.detectors import POOL_UNSAFE_FREE

HOOKS = pytest.mark.parametrize("hooks", ["native", "python"])


def test_the_buggy_pool_really_corrupts_and_the_fixed_one_does_not():
    pool = load_example("paged_kv_pool")
    buggy, fixed = pool.run(fixed=False), pool.run(fixed=True)
    assert buggy.premise and fixed.premise, "the pool gave B A's page"
    assert buggy.corrupted >= 1, "B's prefill write landed under A's decode read"
    assert fixed.corrupted == 0


@HOOKS
@pytest.mark.parametrize("fixed", [False, True], ids=["buggy", "fixed"])
def test_the_pool_s_free_is_reported_where_it_is_unsafe(hooks, fixed):
    pool = load_example("paged_kv_pool")
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        pool.run(fixed=fixed, rounds=2)
    assert not session.errors
    found = [(f.kind, f.hazard, f.aliasing) for f in session.findings]
    assert found == ([] if fixed else [(POOL_UNSAFE_FREE, "WAR", True)])
    pool_events = [e for e in session.trace.events if e["ev"] in ("pool_alloc", "pool_free")]
    assert len(pool_events) == 8, "two allocs and two frees a round"
