"""The SARIF 2.1.0 report: valid against the OASIS schema (shipped in tests/data, no network),
locations at the right source lines, rules that say what docs/findings.md says."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from streamrace.analysis import AnalysisResult, analyze
from streamrace.analysis.detectors import DETECTORS, KINDS, MODEL_DISAGREEMENT
from streamrace.analysis.findings import Finding
from streamrace.cli import main
from streamrace.report import TraceResult, sarif
from streamrace.suppressions import Gate, Suppression
from streamrace.trace import load_trace

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
RACE = REPO / "examples" / "traces" / "dsv4_mini_race.jsonl.gz"
EXAMPLE = REPO / "examples" / "dsv4_mini_decode.py"


def _validate(doc: dict) -> None:
    jsonschema.Draft4Validator(SCHEMA).validate(doc)


@pytest.fixture(autouse=True)
def _from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # trace paths are relative to the repository root


@pytest.fixture
def race_sarif(tmp_path: Path) -> dict:
    out = tmp_path / "race.sarif"
    assert main(["analyze", str(RACE.relative_to(REPO)), "--format", "sarif", "-o", str(out)]) == 1
    return json.loads(out.read_text(encoding="utf-8"))


def _line(location: dict) -> tuple[str, int]:
    physical = location["physicalLocation"]
    return physical["artifactLocation"]["uri"], physical["region"]["startLine"]


def _source(line: int) -> str:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()[line - 1]


def test_the_schema_is_the_oasis_one_and_catches_mistakes(race_sarif: dict) -> None:
    assert SCHEMA["id"].endswith("/sarif-schema-2.1.0.json") and "2.1.0" in SCHEMA["title"]
    broken = copy.deepcopy(race_sarif)
    broken["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        _validate(broken)


def test_race_trace_sarif_is_valid_with_the_right_lines(race_sarif: dict) -> None:
    _validate(race_sarif)
    assert race_sarif["version"] == "2.1.0"
    (run,) = race_sarif["runs"]
    (finding,) = analyze(load_trace(RACE)).findings
    (result,) = run["results"]
    assert result["ruleId"] == "unsafe-free" and result["level"] == "error"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "unsafe-free"
    assert result["partialFingerprints"] == {sarif.FINGERPRINT: finding.signature}
    # primary: the later access, the new owner's write (line 120: q = q_lora @ self.w_qb)
    (primary,) = result["locations"]
    uri, line = _line(primary)
    assert uri == "examples/dsv4_mini_decode.py" and f"{uri}:{line}" == finding.accesses[1].location
    assert "q_lora @ self.w_qb" in _source(line)
    assert primary["physicalLocation"]["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    # related: the kv stream's read, the allocation, the free
    related = {loc["message"]["text"]: _line(loc)[1] for loc in result["relatedLocations"]}
    assert related == {
        "read by aten::mul.Tensor on stream kv": int(finding.accesses[0].location.rsplit(":", 1)[1]),
        "allocated on stream main": int(finding.allocation.alloc_location.rsplit(":", 1)[1]),
        "freed on stream main": int(finding.allocation.free_location.rsplit(":", 1)[1]),
    }
    assert "rsqrt" in _source(related["read by aten::mul.Tensor on stream kv"])
    assert "qkv = x @ self.w_qkv" in _source(related["allocated on stream main"])
    assert "del qkv" in _source(related["freed on stream main"])
    assert [loc["id"] for loc in result["relatedLocations"]] == [1, 2, 3]
    # the message carries the fix, the stacks carry the call chains
    assert "main.wait_stream(s.kv)" in result["message"]["text"], "as the source writes it"
    assert result["stacks"][0]["frames"][0]["location"]["logicalLocations"][0]["name"] == "rms_norm"
    assert len(result["stacks"][0]["frames"]) == len(finding.accesses[0].stack)


def test_clean_trace_is_a_valid_empty_run(tmp_path: Path) -> None:
    out = tmp_path / "fixed.sarif"
    assert main(["analyze", "examples/traces/dsv4_mini_fixed.jsonl.gz", "--format", "sarif", "-o", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    _validate(doc)
    assert doc["runs"][0]["results"] == []
    assert [rule["id"] for rule in doc["runs"][0]["tool"]["driver"]["rules"]] == list(KINDS)


def test_clean_trace_is_a_successful_run(tmp_path: Path) -> None:
    out = tmp_path / "fixed.sarif"
    main(["analyze", "examples/traces/dsv4_mini_fixed.jsonl.gz", "--format", "sarif", "-o", str(out)])
    (invocation,) = json.loads(out.read_text(encoding="utf-8"))["runs"][0]["invocations"]
    assert invocation == {"executionSuccessful": True}


def test_nothing_recorded_is_a_notification_and_not_a_clean_run(tmp_path: Path) -> None:
    """Zero results from a trace with no op look like a clean run to code scanning, more so
    with --exit-zero, which hides exit code 5: the log says the analysis had nothing."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"format": "streamrace-trace", "version": 1}\n', encoding="utf-8")
    out = tmp_path / "empty.sarif"
    assert main(["analyze", str(empty), "--format", "sarif", "-o", str(out), "--exit-zero"]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    _validate(doc)
    (invocation,) = doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["descriptor"]["id"] == "nothing-recorded" and note["level"] == "error"
    assert note["message"]["text"].startswith(f"{empty}: nothing recorded: the trace had no CUDA graph capture")


def test_suppressed_and_baselined_findings_are_marked_not_dropped() -> None:
    result = analyze(load_trace(RACE))
    signature = result.findings[0].signature
    suppressed = Gate((Suppression(1, "known, SGLang #36547", signature=signature),)).apply([TraceResult("r", result)])
    known = Gate(baseline=frozenset({signature}), baseline_path="old.json").apply([TraceResult("r", result)])
    for items, key in ((suppressed, "suppressions"), (known, "baselineState")):
        doc = sarif.document(items)
        _validate(doc)
        (res,) = doc["runs"][0]["results"]
        assert key in res
    (s_res,) = sarif.document(suppressed)["runs"][0]["results"]
    assert s_res["suppressions"] == [
        {"kind": "external", "status": "accepted", "justification": "known, SGLang #36547"}
    ]
    (b_res,) = sarif.document(known)["runs"][0]["results"]
    assert b_res["baselineState"] == "unchanged"


def test_trace_notes_are_tool_notifications() -> None:
    trace = load_trace(RACE)
    trace.header["allocator"] = {"backend": "cudaMallocAsync", "caching": True}
    doc = sarif.document([TraceResult("r.jsonl.gz", analyze(trace))])
    _validate(doc)
    (note,) = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["descriptor"]["id"] == "allocator-model" and "cudaMallocAsync" in note["message"]["text"]


def test_rules_say_what_docs_findings_md_says() -> None:
    docs = " ".join((REPO / "docs" / "findings.md").read_text(encoding="utf-8").split())
    for detector in DETECTORS:
        kind, rule = detector.kind, detector.rule
        assert f"## `{kind}`" in docs, kind
        assert " ".join(rule.full.split()) in docs, f"{kind}: fullDescription is not docs/findings.md's text"
        for code in re.findall(r"`([^`]+)`", rule.fix):
            assert f"`{code}`" in docs, f"{kind}: the fix's `{code}` is not in docs/findings.md"


def test_absolute_paths_become_file_uris() -> None:
    location = sarif._location("/opt/app/model v2.py:7")
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "file:///opt/app/model%20v2.py"}
    assert sarif._location("model.py:0") is None and sarif._location(None) is None


def test_a_finding_without_accesses_is_a_result_without_locations() -> None:
    finding = Finding(kind=MODEL_DISAGREEMENT, hazard=None, accesses=[], message="model and graph 1 disagree")
    result = AnalysisResult(findings=[finding], raw_findings=[finding], summary={"findings": 1})
    doc = sarif.document([TraceResult("t.jsonl", result)])
    _validate(doc)
    (res,) = doc["runs"][0]["results"]
    assert res["ruleId"] == MODEL_DISAGREEMENT and res["locations"] == [] and res["level"] == "error"
