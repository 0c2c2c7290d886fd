"""``streamrace diff A B`` on hand-built traces: appear, disappear, persist, the aliasing flip
and its explanation from the allocator's rules, exit codes, the JSON schema, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, UNSAFE_FREE
from streamrace.cli import main
from streamrace.diff import bug_signature
from streamrace.diff.blocks import rounded, size_class
from streamrace.outcome import EXIT_NOTHING_RECORDED
from streamrace.trace.builder import TraceBuilder

QKV = 16384  # the freed tensor: small pool
LARGE = 8 << 20  # the next allocation in the latent run: large pool
POOL = (0, 1)  # a pool shared by the captures (torch.cuda.graph_pool_handle())


def freed_before_join(next_size: int = QKV, reuse: bool = True, join_first: bool = False, race: bool = False):
    """The DSV4 shape: qkv made on main, read on kv, freed on main before the join; q is the
    next main-stream allocation, of ``next_size`` bytes, on qkv's block when ``reuse``."""
    tb = TraceBuilder()
    main, kv = tb.stream("main"), tb.stream("kv")
    with tb.capture(main):
        qkv = tb.alloc(QKV, main, at="model.py:10", pool=POOL)
        tb.op("aten::mm", main, writes=[tb.span(qkv, QKV)], at="model.py:10")
        tb.wait_stream(kv, main, at="model.py:11")
        tb.op("aten::mul", kv, reads=[tb.span(qkv, QKV)], at="model.py:12")
        if join_first:
            tb.wait_stream(main, kv, at="model.py:13")
        tb.free(qkv, at="model.py:14")
        q = tb.alloc(next_size, main, addr=qkv if reuse else None, at="model.py:15", pool=POOL)
        tb.op("aten::mm", main, writes=[tb.span(q, min(next_size, QKV))], at="model.py:15")
        if race:  # a second bug: kv writes a buffer main reads, unjoined
            buf = tb.alloc(512, main, at="model.py:20")
            tb.op("aten::fill_", kv, writes=[tb.span(buf, 512)], at="model.py:21")
            tb.op("aten::sum", main, reads=[tb.span(buf, 512)], at="model.py:22")
        tb.wait_stream(main, kv, at="model.py:16")
    return tb


def _write(tmp_path: Path, name: str, tb: TraceBuilder) -> str:
    path = tmp_path / f"{name}.jsonl"
    tb.write(str(path))
    return str(path)


def _diff(capsys, *args: str) -> tuple[int, str, str]:
    """The exit code, stdout with its wrapping undone (one space between words), stderr."""
    code = main(["diff", *args])
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), err


@pytest.fixture
def runs(tmp_path):
    return {
        "manifest": _write(tmp_path, "manifest", freed_before_join()),
        "latent": _write(tmp_path, "latent", freed_before_join(LARGE, reuse=False)),
        "other_block": _write(tmp_path, "other_block", freed_before_join(QKV, reuse=False)),
        "fixed": _write(tmp_path, "fixed", freed_before_join(join_first=True)),
        "two_bugs": _write(tmp_path, "two_bugs", freed_before_join(race=True)),
    }


def test_the_allocators_rounding_and_pools():
    assert [rounded(n) for n in (1, 512, 513, 16384, 16385)] == [512, 512, 1024, 16384, 16896]
    assert size_class(1 << 20) == "small" and size_class((1 << 20) + 1) == "large"
    assert size_class((1 << 20) - 100) == "small", "rounded up to 1 MiB, still small"


def test_an_aliasing_unsafe_free_signs_as_its_latent_form():
    (manifest,) = analyze(freed_before_join().trace()).findings
    (latent,) = analyze(freed_before_join(LARGE, reuse=False).trace()).findings
    assert manifest.aliasing and not latent.aliasing
    assert manifest.signature != latent.signature, "the folded finding's later access is the reusing write"
    assert bug_signature(manifest) == latent.signature == bug_signature(latent)


def test_manifest_to_latent_persists_and_says_why(capsys, runs):
    code, out, err = _diff(capsys, runs["manifest"], runs["latent"])
    assert (code, err) == (0, "")
    assert "persisted: error unsafe-free WAR, aliasing in A only" in out
    assert "in A the block was reused by the allocation at model.py:15 (16,384 bytes requested" in out
    assert "in B the allocation at model.py:15 (8,388,608 bytes requested, 8,388,608 rounded, large pool)" in out
    assert "came from the large pool: the hazard is latent in B" in out
    assert "the freed block: 16,384 bytes requested, 16,384 rounded, small pool; stream main, user pool (0, 1)" in out
    assert out.endswith(
        "summary: 0 appeared, 0 disappeared, 1 persisted (1 with its aliasing flipped); no finding in B that A lacks"
    )


def test_latent_to_manifest_is_the_same_bug_not_a_new_one(capsys, runs):
    code, out, _ = _diff(capsys, runs["latent"], runs["manifest"])
    assert code == 0
    assert "the hazard is latent in A" in out and "the hazard is manifest in B" in out


def test_another_block_of_the_same_pool(capsys, runs):
    code, out, _ = _diff(capsys, runs["manifest"], runs["other_block"])
    assert code == 0
    assert "(16,384 bytes requested, 16,384 rounded, small pool) came from another block of the small pool" in out


def test_a_new_finding_fails_and_a_gone_one_does_not(capsys, runs):
    code, out, _ = _diff(capsys, runs["fixed"], runs["manifest"])
    assert code == 1
    assert "appeared: error unsafe-free WAR aliasing" in out
    assert "in A there is no such finding; the allocation at model.py:15 got 16,384 bytes requested" in out
    assert "B has a finding A lacks" in out
    code, out, _ = _diff(capsys, runs["manifest"], runs["fixed"])
    assert code == 0 and "disappeared: error unsafe-free WAR aliasing" in out


def test_an_unchanged_finding_persists_without_explanation(capsys, runs):
    code, out, _ = _diff(capsys, runs["manifest"], runs["manifest"])
    assert code == 0
    assert "persisted: error unsafe-free WAR aliasing" in out and "the freed block" not in out


def test_a_new_race_beside_a_persisting_bug(capsys, runs):
    code, out, _ = _diff(capsys, runs["manifest"], "--format", "json", runs["two_bugs"])
    doc = json.loads(out)
    assert code == 1
    assert [e["kind"] for e in doc["appeared"]] == [DATA_RACE] and doc["appeared"][0]["block"] is None
    assert [e["kind"] for e in doc["persisted"]] == [UNSAFE_FREE]
    assert doc["summary"] == {"appeared": 1, "disappeared": 0, "persisted": 1, "flipped": 0}


def test_json_schema(capsys, runs, tmp_path):
    report = tmp_path / "diff.json"
    code, out, _ = _diff(capsys, runs["manifest"], runs["latent"], "--format", "json", "-o", str(report))
    assert (code, out) == (0, "")
    doc = json.loads(report.read_text())
    assert list(doc) == ["streamrace", "a", "b", "appeared", "disappeared", "persisted", "summary", "notes"]
    assert (doc["a"], doc["b"]) == (runs["manifest"], runs["latent"])
    (entry,) = doc["persisted"]
    assert list(entry) == ["kind", "severity", "hazard", "signature", "aliasing", "a", "b", "block"]
    assert entry["aliasing"] == {"a": True, "b": False}
    assert entry["signature"] == {"a": entry["a"]["signature"], "b": entry["b"]["signature"]}
    block = entry["block"]
    assert list(block) == ["freed", "a", "b", "explanation"]
    assert block["freed"] == {
        "alloc_location": "model.py:10",
        "free_location": "model.py:14",
        "stream_label": "main",
        "requested": QKV,
        "rounded": QKV,
        "pool": "small",
        "graph_pool": [0, 1],
    }
    taker = block["a"]["reused_by"]
    assert block["a"]["hazard"] == "manifest" and taker == block["a"]["allocation"]
    assert (taker["location"], taker["pool"], taker["same_block"], taker["stream_label"]) == (
        "model.py:15",
        "small",
        True,
        "main",
    )
    b = block["b"]
    assert (b["hazard"], b["reused_by"]) == ("latent", None)
    assert (b["allocation"]["requested"], b["allocation"]["pool"], b["allocation"]["same_block"]) == (
        LARGE,
        "large",
        False,
    )
    assert len(block["explanation"]) == 3 and block["explanation"][2].endswith("the hazard is latent in B")


@pytest.mark.parametrize(
    "problem, expected",
    [
        ("missing", "absent.jsonl: no such file"),
        ("invalid", ":2: 'alloc' event is missing field 'size'"),
        ("one", "the following arguments are required: B"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, runs, tmp_path, problem, expected):
    invalid = tmp_path / "invalid.jsonl"
    lines = Path(runs["manifest"]).read_text().splitlines()
    invalid.write_text(lines[0] + '\n{"seq":0,"ev":"alloc","addr":1,"stream":0}\n')
    args = {
        "missing": [runs["manifest"], str(tmp_path / "absent.jsonl")],
        "invalid": [str(invalid), runs["manifest"]],
        "one": [runs["manifest"]],
    }[problem]
    code, out, err = _diff(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("streamrace: error: ") and expected in err and err.count("\n") == 1, err


def test_a_trace_that_recorded_nothing_compares_with_nothing(capsys, runs, tmp_path):
    empty = _write(tmp_path, "empty", TraceBuilder())
    code, out, err = _diff(capsys, runs["manifest"], empty)
    assert code == 5 and out == ""
    assert err.startswith("streamrace: nothing recorded: the trace ") and err.count("\n") == 1


def test_trace_strings_are_escaped_in_the_text(capsys, tmp_path):
    """A trace is input: a file name with an escape sequence cannot rewrite the terminal."""
    tb = TraceBuilder()
    main_stream, kv = tb.stream("main\x1b[2J"), tb.stream("kv")
    with tb.capture(main_stream):
        qkv = tb.alloc(QKV, main_stream, at="evil\x1b[31m.py:10", pool=POOL)
        tb.wait_stream(kv, main_stream, at="evil.py:11")
        tb.op("aten::mul", kv, reads=[tb.span(qkv, QKV)], at="evil.py:12")
        tb.free(qkv, at="evil.py:14")
        q = tb.alloc(QKV, main_stream, addr=qkv, at="evil\u202e.py:15", pool=POOL)
        tb.op("aten::mm", main_stream, writes=[tb.span(q, QKV)], at="evil.py:15")
        tb.wait_stream(main_stream, kv, at="evil.py:16")
    evil = _write(tmp_path, "evil", tb)
    fixed = _write(tmp_path, "fixed", freed_before_join(join_first=True))
    code, out, _ = _diff(capsys, fixed, evil)
    assert code == 1
    assert "\x1b" not in out and "\u202e" not in out
    assert "evil\\x1b[31m.py:10" in out and "evil\\u202e.py:15" in out and "main\\x1b[2J" in out


def test_diff_has_its_own_exit_codes_and_no_exit_zero_hint(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"format": "streamrace-trace", "version": 1}\n')
    assert main(["diff", str(empty), str(empty)]) == EXIT_NOTHING_RECORDED
    assert "--exit-zero" not in capsys.readouterr().err
    assert main(["diff", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "B has a finding that A lacks" in help_text and "--exit-zero" not in help_text
