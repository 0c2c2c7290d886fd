"""Suppressions and baselines through the CLI: accepted findings are listed and do not fail
the gate; stale suppressions are named; a bad file is one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamrace.analysis import analyze
from streamrace.cli import main
from streamrace.suppressions import load_suppressions
from streamrace.trace import load_trace

REPO = Path(__file__).resolve().parents[1]
RACE = "examples/traces/dsv4_mini_race.jsonl.gz"
H10 = "examples/traces/gallery_H10_buggy.jsonl.gz"


@pytest.fixture(autouse=True)
def _from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


@pytest.fixture(scope="module")
def race():
    (finding,) = analyze(load_trace(REPO / RACE)).findings
    return finding


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "streamrace.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_suppressing_the_race_by_signature_exits_0_and_says_so(tmp_path, race, capsys):
    rules = _toml(tmp_path, f'[[suppress]]\nsignature = "{race.signature}"\nreason = "SGLang #36547, fix pending"\n')

    assert main(["analyze", RACE, "--suppressions", rules]) == 0

    out, err = capsys.readouterr()
    assert err == ""
    assert f"suppressed: unsafe-free WAR at {race.accesses[1].location} {race.signature}" in out
    assert "(suppression 1 by signature: SGLang #36547, fix pending)" in " ".join(out.split()), "wrapped at 100"
    assert "summary: no findings, 1 suppressed; analysed" in out
    assert "[1] error" not in out, "an accepted finding is not reported in full"


@pytest.mark.parametrize("which", [0, 1])
def test_a_location_of_either_access_suppresses(tmp_path, race, capsys, which):
    location = race.accesses[which].location
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{location}"\nreason = "tracked in #12"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    assert "1 suppressed" in capsys.readouterr().out


@pytest.mark.parametrize("frame", [1, 2])
def test_a_location_of_a_caller_frame_suppresses(tmp_path, race, capsys, frame):
    """A report points at the caller's line when the innermost frame is a shared helper
    (``dsv4_mini_decode.py:115 via rms_norm``): that line, or any frame further out, matches."""
    filename, line, _ = race.accesses[0].stack[frame]
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{filename}:{line}"\nreason = "tracked in #12"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    out, err = capsys.readouterr()
    assert "1 suppressed" in out and "matched no finding" not in err


@pytest.mark.parametrize(
    "written",
    [
        "./examples/dsv4_mini_decode.py:115",  # as a shell completes it
        str(REPO / "examples/dsv4_mini_decode.py") + ":115",  # a path through the working directory
        "examples/dsv4_mini_decode.py:115 via rms_norm",  # as the report prints it
    ],
)
def test_a_location_is_read_as_the_report_prints_it(tmp_path, race, capsys, written):
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{written}"\nreason = "tracked in #12"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    out, err = capsys.readouterr()
    assert "1 suppressed" in out and "matched no finding" not in err


@pytest.mark.parametrize("site", ["alloc", "free"])
def test_the_allocation_and_the_free_the_message_names_suppress(tmp_path, race, capsys, site):
    """The message begins with where the block was allocated and freed: those lines are in
    stacks the finding shows too."""
    location = race.allocation.alloc_location if site == "alloc" else race.allocation.free_location
    assert location in race.message
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{location}"\nreason = "tracked in #12"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    assert "1 suppressed" in capsys.readouterr().out


def test_the_via_line_the_message_names_suppresses(tmp_path, race, capsys):
    assert race.accesses[0].site == "examples/dsv4_mini_decode.py:115", "the helper's caller"
    assert f"({race.accesses[0].site} via rms_norm)" in race.message
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{race.accesses[0].site}"\nreason = "tracked in #12"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    assert "matched no finding" not in capsys.readouterr().err


def test_kind_narrows_a_suppression(tmp_path, race, capsys):
    location = race.accesses[0].location
    rules = _toml(tmp_path, f'[[suppress]]\nlocation = "{location}"\nkind = "data-race"\nreason = "x"\n')
    assert main(["analyze", RACE, "--suppressions", rules]) == 1
    assert "matched no finding" in capsys.readouterr().err


def test_stale_suppressions_are_named_on_stderr(tmp_path, race, capsys):
    rules = _toml(
        tmp_path,
        f'[[suppress]]\nsignature = "{race.signature}"\nreason = "known"\n\n'
        '[[suppress]]\nlocation = "model.py:3"\nreason = "fixed long ago"\n',
    )
    assert main(["analyze", RACE, "--suppressions", rules]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"streamrace: warning: {rules}: suppression 2 (location model.py:3) matched no finding; "
        "remove it if the bug is fixed (reason given: fixed long ago)"
    ]


def test_only_unsuppressed_findings_count(tmp_path, capsys):
    """H10 has two findings; suppressing one leaves the other failing the gate."""
    findings = analyze(load_trace(REPO / H10)).findings
    assert len(findings) == 2
    rules = _toml(tmp_path, f'[[suppress]]\nsignature = "{findings[0].signature}"\nreason = "r"\n')
    assert main(["analyze", H10, "--suppressions", rules, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [f["signature"] for f in doc["findings"]] == [findings[1].signature]
    assert [f["signature"] for f in doc["suppressed"]] == [findings[0].signature]
    assert doc["suppressed"][0]["suppressed_by"] == {"by": "signature", "reason": "r", "entry": 1}
    assert (doc["summary"]["findings"], doc["summary"]["suppressed"], doc["summary"]["baselined"]) == (1, 1, 0)


def test_baseline_fails_only_on_new_findings(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    assert main(["analyze", RACE, "--format", "json", "-o", str(baseline)]) == 1

    assert main(["analyze", RACE, "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    assert "known: unsafe-free WAR at" in out and f"in the baseline {baseline}" in " ".join(out.split())
    assert "summary: no findings, 1 known from the baseline" in out

    # a different bug is new: the gate fails on it, the known one stays accepted
    assert main(["analyze", RACE, H10, "--baseline", str(baseline), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {f["trace"] for f in doc["findings"]} == {H10}
    assert doc["summary"]["baselined"] == 1 and doc["suppressed"][0]["suppressed_by"]["by"] == "baseline"


def test_run_takes_the_gate_flags_too(tmp_path, race):
    rules = _toml(tmp_path, f'[[suppress]]\nsignature = "{race.signature}"\nreason = "known"\n')
    program = (
        f"import shutil, os; shutil.copy({RACE!r}, os.path.join(os.environ['STREAMRACE_TRACE_DIR'], 'x.jsonl.gz'))"
    )
    # the 'program' leaves a trace where a recording process would
    kept = str(tmp_path / "kept.jsonl.gz")
    code = main(["run", "--suppressions", rules, "-o", kept, "--", sys.executable, "-c", program])
    assert code == 0


BAD_TOML = {
    "missing reason": ('[[suppress]]\nsignature = "0123456789abcdef"\n', "suppression 1: missing 'reason'"),
    "empty reason": ('[[suppress]]\nsignature = "0123456789abcdef"\nreason = " "\n', "missing 'reason'"),
    "neither": ('[[suppress]]\nreason = "r"\n', "give exactly one of 'signature' or 'location'"),
    "both": (
        '[[suppress]]\nsignature = "0123456789abcdef"\nlocation = "a.py:1"\nreason = "r"\n',
        "exactly one of",
    ),
    "typo": ('[[suppress]]\nsignature = "0123456789abcdef"\nreson = "r"\n', "unknown key 'reson'"),
    "bad signature": ('[[suppress]]\nsignature = "b6f65c"\nreason = "r"\n', "is not 16 lowercase hex digits"),
    "bad location": ('[[suppress]]\nlocation = "model.py"\nreason = "r"\n', "is not 'file:line'"),
    "bad kind": ('[[suppress]]\nlocation = "a.py:1"\nkind = "race"\nreason = "r"\n', "kind 'race' is not one of"),
    "not a string": ('[[suppress]]\nlocation = "a.py:1"\nreason = 3\n', "'reason' must be a string"),
    "not toml": ("[[suppress]\n", "invalid TOML"),
    "a table, not an array": ('[suppress]\nreason = "r"\n', "must be an array of tables"),
    "unknown table": ('[[suppres]]\nreason = "r"\n', "unknown table or key 'suppres'"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOML))
def test_bad_suppressions_file_is_one_line_exit_2(tmp_path, case):
    text, expected = BAD_TOML[case]
    rules = _toml(tmp_path, text)
    proc = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", RACE, "--suppressions", rules],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"streamrace: error: {rules}: "), proc.stderr
    assert expected in lines[0]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such baseline file"),
        ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1)"),
        ('{"findings": []}', "not a streamrace JSON report"),
        ('{"streamrace": "0.1.0", "findings": [{"kind": "data-race"}]}', "finding 1 has no 'signature'"),
        ("[1, 2]", "not a streamrace JSON report"),
    ],
)
def test_bad_baseline_is_one_line_exit_2(tmp_path, capsys, content, expected):
    baseline = tmp_path / "baseline.json"
    if content is not None:
        baseline.write_text(content, encoding="utf-8")
    assert main(["analyze", RACE, "--baseline", str(baseline)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"streamrace: error: {baseline}: ") and err.count("\n") == 1
    assert expected in err


def test_missing_suppressions_file(capsys):
    assert main(["analyze", RACE, "--suppressions", "nope.toml"]) == 2
    assert capsys.readouterr().err == "streamrace: error: nope.toml: no such suppressions file\n"


def test_entries_are_numbered_from_one_in_file_order(tmp_path):
    rules = _toml(
        tmp_path,
        '# accepted findings\n[[suppress]]\nlocation = "a.py:1"\nreason = "first"\n\n'
        '[[suppress]]\nsignature = "0123456789abcdef"\nkind = "unsafe-free"\nreason = "second"\n',
    )
    first, second = load_suppressions(rules)
    assert (first.number, first.by, first.location) == (1, "location", "a.py:1")
    assert (second.number, second.by, second.kind) == (2, "signature", "unsafe-free")


def test_the_example_suppressions_file_accepts_the_example_race(capsys):
    """docs/ci.md's demonstration: the committed file suppresses the committed race."""
    assert main(["analyze", RACE, "--suppressions", "examples/ci/suppressions.toml"]) == 0
    out, err = capsys.readouterr()
    assert "summary: no findings, 1 suppressed" in out and err == ""
