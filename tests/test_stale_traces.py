"""The real H200 traces of examples/static_outputs.py (tests/gpu/record_stale_fixtures.py),
once committed under examples/traces/: each buggy one has exactly its finding, each fixed twin
none, on both engines (the ``engine`` fixture). Skipped for a pair not yet recorded."""

from __future__ import annotations

import pathlib

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import CAPTURE_ALLOCATION_ESCAPED, STALE_STATIC_OUTPUT
from streamrace.trace.io import load_trace

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"
EXPECTED = {"graphed": STALE_STATIC_OUTPUT, "view": STALE_STATIC_OUTPUT, "workspace": CAPTURE_ALLOCATION_ESCAPED}


@pytest.mark.parametrize("fixed", [False, True], ids=["buggy", "fixed"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_recorded_program_has_exactly_its_finding(engine, name, fixed):
    path = TRACES / f"stale_{name}_{'fixed' if fixed else 'buggy'}.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path.name} is not recorded yet (tests/gpu/record_stale_fixtures.py)")
    kinds = [f.kind for f in analyze(load_trace(path)).findings]
    assert kinds == ([] if fixed else [EXPECTED[name]])
