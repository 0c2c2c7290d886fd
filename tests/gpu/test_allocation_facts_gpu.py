"""Eager allocations with exact facts on a real GPU: PyTorch's documented side-stream warm-up
then a capture (execution_gallery E1) and a capturable-Adam step with a side-stream branch
(E2), recorded with each set of hooks in a fresh process, CUDA initialized before or inside
the recording. Every allocation must be in the trace with the allocator's own requested size,
the stream current when it was made (its block's stream too) and its private pool; the
analysis must find nothing in these correct programs. And the native build on a CUDA torch
must really have the allocator trace tracker. On the CPU: tests/test_allocation_facts.py.

    python -m pytest tests/gpu/test_allocation_facts_gpu.py -q
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT

HERE = pathlib.Path(__file__).resolve().parent


def _record(kind: str, scenario: str, start: str) -> dict:
    env = {**os.environ, "STREAMRACE_HOOKS": kind}
    args = [sys.executable, str(HERE / "record_allocation_facts.py"), scenario, start]
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def _by_address(rows: list) -> dict[int, list]:
    facts: dict[int, list] = {}
    for addr, *rest in rows:
        facts.setdefault(addr, []).append(rest)
    return facts


@pytest.mark.parametrize("start", ["fresh", "initialized"])
@pytest.mark.parametrize("scenario", ["E1", "E2"])
@pytest.mark.parametrize("kind", ["native", "python"])
def test_every_eager_allocation_has_its_own_facts(kind, scenario, start):
    run = _record(kind, scenario, start)
    assert run["hooks"] == kind and run["errors"] == [], run["errors"]
    assert run["corrupted"] == 0
    assert run["dropped"] == 0, "no allocation left out for an unknown size"
    observed = run["observed"]
    assert len(observed) > 50, "the premise: the warm-up, the capture and the replays allocate"
    assert all(size > 0 for _, size, *_ in observed), "the observer found every new block"
    assert all(segment == current for _, _, segment, current, _ in observed), "blocks belong to the current stream"
    truth = _by_address([(addr, size, current, pool) for addr, size, _, current, pool in observed])
    recorded = _by_address(run["recorded"])
    assert recorded == truth, "each allocation's requested size, current stream and pool, in order"
    assert run["findings"] == [], "a correct program: nothing to report"
    expected = "allocator trace tracker" if kind == "native" else "allocator history"
    assert run["facts"]["source"] == expected, run["facts"]


def test_the_native_build_has_the_allocator_trace_tracker():
    import torch

    from streamrace.record import native

    module = native.load()
    assert torch.version.cuda is not None
    assert native.tracker_unavailable is None, native.tracker_unavailable
    assert module.allocator_tracker_built is True
    include = native.cuda_include_dir()
    assert include is not None and (include / "cuda_runtime_api.h").is_file()
