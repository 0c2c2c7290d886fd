"""``streamrace diff`` on real H200 traces of the DSV4 example (examples/traces/).

The ``dsv4_index_*`` traces (bf16 and fp8 index-K builds, overlap off) are recorded by
``python tests/gpu/record_diff_fixtures.py examples/traces`` on the GPU machine; until they are
committed those tests skip. The race/latent pair of the original recording is here already.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamrace.analysis.detectors import UNSAFE_FREE
from streamrace.cli import main

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
EXAMPLE = "examples/dsv4_mini_decode.py"
INDEX_TRACES = ("dsv4_index_bf16", "dsv4_index_fp8", "dsv4_index_no_overlap")


def _trace(name: str) -> str:
    path = TRACES / f"{name}.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path.name} is not committed yet: record it with python tests/gpu/record_diff_fixtures.py")
    return str(path)


def _diff(capsys, a: str, b: str) -> tuple[int, dict, str]:
    code = main(["diff", _trace(a), _trace(b), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert main(["diff", _trace(a), _trace(b)]) == code
    return code, doc, capsys.readouterr().out


def _flipped(doc: dict, manifest: str) -> dict:
    assert (doc["appeared"], doc["disappeared"]) == ([], [])
    (entry,) = doc["persisted"]
    assert entry["kind"] == UNSAFE_FREE
    assert entry["aliasing"] == {"a": manifest == "a", "b": manifest == "b"}
    block = entry["block"]
    assert block["freed"]["alloc_location"] == f"{EXAMPLE}:105" and block["freed"]["pool"] == "small"
    latent = "b" if manifest == "a" else "a"
    taker, same = block[manifest]["reused_by"], block[latent]["allocation"]
    assert (block[manifest]["hazard"], block[latent]["hazard"]) == ("manifest", "latent")
    assert taker["same_block"] and taker["location"] == f"{EXAMPLE}:120" == same["location"]
    assert taker["pool"] == "small" and same["pool"] == "large" and not same["same_block"]
    return block


@pytest.mark.parametrize("names", [("dsv4_mini_race", "dsv4_mini_latent"), ("dsv4_index_bf16", "dsv4_index_fp8")])
def test_the_reused_block_and_the_latent_twin(capsys, names):
    code, doc, text = _diff(capsys, *names)
    assert code == 0, text
    _flipped(doc, manifest="a")
    assert f"in A the block was reused by the allocation at {EXAMPLE}:120" in text
    assert "came from the large pool: the hazard is latent in B" in text
    code, doc, text = _diff(capsys, *reversed(names))
    assert code == 0, "the same bug, latent in A: not a new finding"
    _flipped(doc, manifest="b")
    assert "the hazard is latent in A" in text and "the hazard is manifest in B" in text


def test_overlap_off_the_bug_is_gone_and_comes_back(capsys):
    code, doc, text = _diff(capsys, "dsv4_index_bf16", "dsv4_index_no_overlap")
    assert code == 0 and doc["persisted"] == [] and doc["appeared"] == [], text
    (gone,) = doc["disappeared"]
    assert (gone["kind"], gone["block"]["a"]["hazard"], gone["block"]["b"]["hazard"]) == (
        UNSAFE_FREE,
        "manifest",
        "absent",
    )
    assert "in B there is no such finding" in text
    code, doc, text = _diff(capsys, "dsv4_index_no_overlap", "dsv4_index_bf16")
    assert code == 1, text
    (new,) = doc["appeared"]
    assert new["block"]["b"]["hazard"] == "manifest" and "B has a finding A lacks" in text


@pytest.mark.parametrize("name", INDEX_TRACES)
def test_the_index_traces_come_from_the_h200(name):
    from streamrace.trace import load_trace

    header = load_trace(_trace(name)).header
    assert header["devices"][0]["name"] == "NVIDIA H200" and header["recorder_errors"] == []


def test_diff_text_is_wrapped_at_100_columns(capsys):
    """As the text report: plain text at 100 columns, each continuation indented under its
    text, and no word cut (an escaped path or a signature stays whole)."""
    code, _, text = _diff(capsys, "dsv4_index_bf16", "dsv4_index_fp8")
    assert code == 0
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, [line for line in lines if len(line) > 100]
    assert lines[0].startswith("streamrace diff: A ") and all(line.startswith("  ") for line in lines[1:-2])
    joined = " ".join(text.split())
    assert (
        "the freed block: 16,384 bytes requested, 16,384 rounded, small pool; stream main, user pool (0, 1);" in joined
    )
    assert joined.endswith("1 persisted (1 with its aliasing flipped); no finding in B that A lacks")


def test_diff_text_cuts_an_enormous_name_as_analyze_does(tmp_path, capsys):
    """A 1,000,000-character stream name (no space) in both traces: the diff shows 500
    characters of it and how many more, as the text report does, not megabytes of it."""
    from streamrace.trace.builder import TraceBuilder

    paths = []
    for name in ("a", "b"):
        tb = TraceBuilder()
        main_s, side = tb.stream("q" * 1_000_000), tb.stream("side")
        x = tb.alloc(4096, main_s, at="m.py:1")
        tb.op("aten::fill_", main_s, writes=[tb.span(x, 4096)], at="m.py:2")
        tb.op("aten::sum", side, reads=[tb.span(x, 4096)], at="m.py:3")
        path = tmp_path / f"{name}.jsonl"
        tb.write(str(path))
        paths.append(str(path))
    capsys.readouterr()
    assert main(["diff", *paths]) == 0
    text = capsys.readouterr().out
    assert "q" * 500 + "… (999,500 more characters)" in " ".join(text.split()) and "q" * 501 not in text
    assert len(text) < 100_000
