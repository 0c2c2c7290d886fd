"""The finding kinds: one detector module each, and every list of kinds derived from them.

``DETECTORS`` is the one list: the kinds and their severities, the SARIF rules (in this order), which detector
describes which detection record (the Python engine's, the C++ core's mirrors of them, a
pass's), the whole-trace passes a trace needs and what they read of the engine's results all
come from it. A new kind is a module here added to ``DETECTORS`` and a section in
docs/findings.md (docs/analysis.md §10 lists the rest).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from streamrace.analysis.core import MIRRORS
from streamrace.analysis.dedup import deduplicate_in_graphs
from streamrace.analysis.describe import Describer, Suggestion
from streamrace.analysis.detectors import (
    capture_allocation_escaped,
    data_race,
    graph_input_freed,
    graph_pinned_freed,
    model_disagreement,
    padded_scatter,
    pinned_read_before_copy,
    pinned_write_during_copy,
    pool_unsafe_free,
    record_stream_noop,
    stale_read,
    stale_static_output,
    unsafe_free,
)
from streamrace.analysis.detectors.detector import Detector, EngineResults, SarifRule, Severity, TracePass
from streamrace.analysis.findings import Finding

DETECTORS: tuple[Detector[Any], ...] = (
    data_race.DETECTOR,
    unsafe_free.DETECTOR,
    stale_read.DETECTOR,
    graph_input_freed.DETECTOR,
    record_stream_noop.DETECTOR,
    padded_scatter.DETECTOR,
    pool_unsafe_free.DETECTOR,
    pinned_write_during_copy.DETECTOR,
    pinned_read_before_copy.DETECTOR,
    graph_pinned_freed.DETECTOR,
    stale_static_output.DETECTOR,
    capture_allocation_escaped.DETECTOR,
    model_disagreement.DETECTOR,
)

DATA_RACE = data_race.KIND
UNSAFE_FREE = unsafe_free.KIND
STALE_READ = stale_read.KIND
GRAPH_INPUT_FREED = graph_input_freed.KIND
RECORD_STREAM_NOOP = record_stream_noop.KIND
MODEL_DISAGREEMENT = model_disagreement.KIND
PADDED_SCATTER = padded_scatter.KIND
POOL_UNSAFE_FREE = pool_unsafe_free.KIND
PINNED_WRITE_DURING_COPY = pinned_write_during_copy.KIND
PINNED_READ_BEFORE_COPY = pinned_read_before_copy.KIND
GRAPH_PINNED_FREED = graph_pinned_freed.KIND
STALE_STATIC_OUTPUT = stale_static_output.KIND
CAPTURE_ALLOCATION_ESCAPED = capture_allocation_escaped.KIND

KINDS: tuple[str, ...] = tuple(d.kind for d in DETECTORS)

_BY_KIND: dict[str, Detector[Any]] = {d.kind: d for d in DETECTORS}
_BY_RECORD: dict[type, Detector[Any]] = {record: d for d in DETECTORS for record in d.records}
_BY_RECORD.update({cpp: _BY_RECORD[python] for cpp, python in MIRRORS.items() if python in _BY_RECORD})


def detector(kind: str) -> Detector[Any]:
    """The detector of a finding kind; ValueError for a kind no detector has."""
    found = _BY_KIND.get(kind)
    if found is None:
        raise ValueError(f"no finding kind {kind!r}; kinds are {', '.join(KINDS)}")
    return found


def detector_of(detection: object) -> Detector[Any]:
    """The detector that describes a detection record; TypeError for a record none does."""
    found = _BY_RECORD.get(type(detection))
    if found is None:
        raise TypeError(f"no detector describes a {type(detection).__qualname__} detection")
    return found


def describe(detections: Iterable[object], describer: Describer) -> list[Finding]:
    """One finding per detection, by its detector, in order."""
    return [detector_of(d).describe(d, describer) for d in detections]


def deduplicated(detections: Iterable[object], describer: Describer) -> list[Finding]:
    """``deduplicate(describe(detections, describer))``, describing only the first detection
    of each dedup key (Detector.dedup_key): a bug repeated in every layer of every captured
    batch size is described once, not thousands of times."""
    first: dict[tuple[str, Hashable], Finding] = {}
    raw: list[tuple[Finding, int | None]] = []
    for d in detections:
        found = detector_of(d)
        keyed = found.dedup_key(d)
        if keyed is None:
            finding = found.describe(d, describer)
            raw.append((finding, finding.graph))
            continue
        key, graph = keyed
        described = first.get((found.kind, key))
        if described is None:
            described = first[(found.kind, key)] = found.describe(d, describer)
            raw.append((described, described.graph))
        else:  # stands in for its own finding: the same signature and count, its own graph
            raw.append((described, graph))
    return deduplicate_in_graphs(raw)


def trace_passes(header: Mapping[str, Any]) -> list[TracePass]:
    """The whole-trace passes a trace with this header gets, in detector order."""
    return [p for p in (d.trace_pass(header) for d in DETECTORS) if p is not None]


def engine_results(detections: Iterable[object]) -> EngineResults:
    """The engine's detections as the passes read them."""
    detections = list(detections)
    unordered: dict[int, set[int]] = {}
    for d in detections:
        launch = detector_of(d).unordered_launch(d)
        if launch is not None and launch[0] is not None:
            unordered.setdefault(launch[0], set()).add(launch[1])
    return EngineResults(detections, {graph: frozenset(seqs) for graph, seqs in unordered.items()})


def suggestion(finding: Finding) -> Suggestion | None:
    """The fix of a finding as code at a source line, where its kind says where (a race: a
    join just before the later access; an unsafe free: just before the free)."""
    return detector(finding.kind).suggestion(finding)


__all__ = [
    "CAPTURE_ALLOCATION_ESCAPED",
    "DATA_RACE",
    "DETECTORS",
    "GRAPH_INPUT_FREED",
    "KINDS",
    "MODEL_DISAGREEMENT",
    "PADDED_SCATTER",
    "POOL_UNSAFE_FREE",
    "RECORD_STREAM_NOOP",
    "STALE_READ",
    "STALE_STATIC_OUTPUT",
    "UNSAFE_FREE",
    "Detector",
    "EngineResults",
    "SarifRule",
    "Severity",
    "TracePass",
    "describe",
    "detector",
    "detector_of",
    "engine_results",
    "suggestion",
    "trace_passes",
]
