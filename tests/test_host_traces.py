"""The pinned-memory traces recorded on the H200 and committed under examples/traces/
(host_<scenario>_{buggy,fixed}.jsonl.gz, tests/gpu/record_host_fixtures.py): each buggy one is
found with its kind, each fixed one is clean, on both engines. A pair not committed yet is
skipped, by name."""

from __future__ import annotations

import pathlib

import pytest
from analysis_engines import ENGINES, core

from streamrace.analysis import analyze
from streamrace.analysis.detectors import GRAPH_PINNED_FREED, PINNED_READ_BEFORE_COPY, PINNED_WRITE_DURING_COPY
from streamrace.trace import load_trace

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"
EXPECTED = {
    "m1_staging": PINNED_WRITE_DURING_COPY,
    "m1_replay": PINNED_WRITE_DURING_COPY,
    "m2_d2h": PINNED_READ_BEFORE_COPY,
    "m3_baked": GRAPH_PINNED_FREED,
    "serving_async": PINNED_WRITE_DURING_COPY,
}


def _load(name: str):
    path = TRACES / f"host_{name}.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed yet (tests/gpu/record_host_fixtures.py records it)")
    return load_trace(path)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_buggy_is_found_and_fixed_is_clean(scenario, engine):
    with core(engine):
        buggy = analyze(_load(f"{scenario}_buggy"))
        fixed = analyze(_load(f"{scenario}_fixed"))
    assert {f.kind for f in buggy.findings} == {EXPECTED[scenario]}, [f.message for f in buggy.findings]
    assert [f.message for f in fixed.findings] == []


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_the_traces_say_they_recorded_pinned_memory(scenario):
    for variant in ("buggy", "fixed"):
        trace = _load(f"{scenario}_{variant}")
        assert trace.header["host_memory"] is True and trace.header["minor"] >= 5
        assert trace.header["recorder_errors"] == []
        kinds = {e["ev"] for e in trace.events}
        assert "host_alloc" in kinds and "host_op" in kinds


def test_the_pairs_are_the_example_s_scenarios():
    """The fixture recorder writes one pair per scenario of examples/pinned_memory.py: these."""
    import importlib.util
    import sys

    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("pinned_memory", TRACES.parent / "pinned_memory.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules["pinned_memory"] = importlib.util.module_from_spec(spec)  # its dataclass needs it
    spec.loader.exec_module(module)
    assert set(module.SCENARIOS) == set(EXPECTED)
