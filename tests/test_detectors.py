"""One detector per finding kind, and every list of kinds derived from them
(streamrace/analysis/detectors/, docs/analysis.md §10)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamrace.analysis import analyze, detectors
from streamrace.analysis.core import new_engine
from streamrace.analysis.describe import Describer
from streamrace.analysis.detectors import DETECTORS, KINDS, detector, detector_of, engine_results
from streamrace.analysis.engine import Race
from streamrace.analysis.findings import Finding
from streamrace.report import TraceResult, sarif
from streamrace.trace import load_trace

REPO = Path(__file__).resolve().parents[1]
FINDINGS_MD = (REPO / "docs" / "findings.md").read_text(encoding="utf-8")
H10 = REPO / "examples" / "traces" / "gallery_H10_buggy.jsonl.gz"


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_detector_has_its_section_in_docs_findings_md() -> None:
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", FINDINGS_MD, re.M)}
    for d in DETECTORS:
        assert d.docs_anchor in anchors, f"{d.kind}: no section #{d.docs_anchor} in docs/findings.md"
        assert f"## `{d.kind}` ({d.severity})" in FINDINGS_MD, f"{d.kind}: its heading names kind and severity"


def test_every_kind_docs_findings_md_describes_has_a_detector() -> None:
    documented = re.findall(r"^## `([a-z-]+)`", FINDINGS_MD, re.M)
    assert sorted(documented) == sorted(KINDS)


def test_kinds_are_unique_and_each_record_has_one_detector() -> None:
    assert len(set(KINDS)) == len(DETECTORS)
    records = [record for d in DETECTORS for record in d.records]
    assert len(set(records)) == len(records)
    for d in DETECTORS:
        assert detector(d.kind) is d
        assert all(detector_of(_bare(record)) is d for record in d.records)


def _bare(record: type) -> object:
    """An instance of a record class, its fields unset (enough to look its detector up)."""
    return object.__new__(record)


def test_every_sarif_rule_comes_from_a_detector() -> None:
    rules = sarif.document([])["runs"][0]["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [d.kind for d in DETECTORS]
    for rule, d in zip(rules, DETECTORS, strict=True):
        assert (rule["name"], rule["shortDescription"]["text"], rule["fullDescription"]["text"]) == (
            d.rule.name,
            d.rule.short,
            d.rule.full,
        )
        assert d.rule.fix in rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] == d.severity


def test_a_result_points_at_its_detectors_rule() -> None:
    result = analyze(load_trace(H10))
    doc = sarif.document([TraceResult("h10", result)])
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    results = doc["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {f.kind for f in result.findings} and len(results) > 1
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["level"] == detector(r["ruleId"]).severity


def test_severity_is_the_detectors() -> None:
    for d in DETECTORS:
        assert Finding(kind=d.kind, hazard=None, accesses=[], message="").severity == d.severity
    with pytest.raises(ValueError, match="no finding kind 'bogus'"):
        _ = Finding(kind="bogus", hazard=None, accesses=[], message="").severity


class Unknown:
    """A detection record no detector describes."""


def test_an_unknown_detection_type_raises_never_a_default() -> None:
    engine = new_engine()
    with pytest.raises(TypeError, match="no detector describes a Unknown detection"):
        detectors.describe([Unknown()], Describer(engine))
    with pytest.raises(TypeError, match="Unknown"):
        engine_results([Unknown()])
    # a subclass of a known record is not that record either
    sub = type("RaceLike", (Race,), {})
    with pytest.raises(TypeError, match="RaceLike"):
        detector_of(_bare(sub))


def test_graph_truth_compares_with_what_the_detectors_call_unordered() -> None:
    """The launches the model calls racing come from the detectors: a race's later access and a
    folded unsafe free's reusing access, in their graph; nothing of eager races or no-ops."""
    trace = load_trace(H10)
    engine = new_engine(trace.stacks, core="python")
    engine.run(trace.events)
    results = engine_results(engine.detections)
    expected: dict[int, set[int]] = {}
    for f in analyze(trace).raw_findings:
        if f.graph is not None and f.kind in ("data-race", "unsafe-free") and f.accesses[1].access != "free":
            expected.setdefault(f.graph, set()).add(f.accesses[1].seq)
    assert expected and {g: set(s) for g, s in results.unordered.items()} == expected
