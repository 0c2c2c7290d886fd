"""Deduplicating without describing every instance (detectors.deduplicated, Detector.dedup_key):
the command line describes one detection per key instead of thousands, and must report what
describing them all and deduplicating gives, on every committed trace and on the benchmark's
capture set, with either engine."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from benchmark_traces import capture_set

from streamrace.analysis import analyze, detectors
from streamrace.analysis.core import new_engine
from streamrace.analysis.describe import Describer
from streamrace.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "examples" / "traces").glob("*.jsonl.gz"))


def _traces() -> list[pytest.param]:
    return [pytest.param(lambda p=p: load_trace(p), id=p.name) for p in TRACES] + [
        pytest.param(capture_set, id="benchmark capture set")
    ]


@pytest.mark.parametrize("make", _traces())
def test_the_findings_are_those_of_describing_every_instance(engine, make):
    trace = make()
    everything = analyze(trace)
    lean = analyze(trace, keep_raw=False)
    assert [f.to_dict() for f in lean.findings] == [f.to_dict() for f in everything.findings]
    assert lean.raw_findings == [] and lean.summary == everything.summary


@pytest.mark.parametrize("make", _traces())
def test_detections_with_one_key_describe_to_one_signature(engine, make):
    """The promise dedup_key makes, checked on real detections: equal keys, equal signatures,
    counts and kinds (a key too coarse would merge two bugs into one finding)."""
    trace = make()
    found = new_engine(trace.stacks)
    found.run(trace.events)
    describer = Describer(found, None)
    by_key: dict[object, set[tuple[str, str, int]]] = defaultdict(set)
    for d in found.detections:
        keyed = detectors.detector_of(d).dedup_key(d)
        if keyed is None:
            continue
        finding = detectors.detector_of(d).describe(d, describer)
        assert keyed[1] == finding.graph
        by_key[(finding.kind, keyed[0])].add((finding.kind, finding.signature, finding.count))
    assert all(len(described) == 1 for described in by_key.values()), by_key


def test_the_capture_set_has_keys_to_share():
    """The benchmark's unsafe frees repeat in every layer of every captured batch size: most
    are described only once."""
    trace = capture_set()
    engine = new_engine(trace.stacks)
    engine.run(trace.events)
    keys = [detectors.detector_of(d).dedup_key(d) for d in engine.detections]
    assert len(keys) > 3 * len({k[0] for k in keys if k is not None})
