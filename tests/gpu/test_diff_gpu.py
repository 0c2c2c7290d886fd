"""``streamrace diff`` on the H200: the DSV4 example in both index dtypes and with overlap off.

The bf16 build corrupts at replay (qkv's freed block goes to q before the join), the fp8 build
and overlap off do not; the diff of the pairs names the block's reuse on one side and shows
the hazard latent, not gone, on the other (HAZARDS.md's story)."""

from __future__ import annotations

import json

import pytest
import record_diff_fixtures as fixtures

from streamrace.analysis.detectors import UNSAFE_FREE


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("diff")
    return {name: fixtures.record(name, out) for name in fixtures.RUNS}


def _diff(runs, a, b):
    proc = fixtures.diff(runs[a][0], runs[b][0], "--format", "json")
    text = fixtures.diff(runs[a][0], runs[b][0])
    assert text.returncode == proc.returncode, text.stderr
    return proc.returncode, json.loads(proc.stdout), text.stdout


def test_bf16_corrupts_fp8_and_overlap_off_do_not(runs):
    assert fixtures.corrupted(runs["dsv4_index_bf16"][1]), runs["dsv4_index_bf16"][1]
    assert not fixtures.corrupted(runs["dsv4_index_fp8"][1]), runs["dsv4_index_fp8"][1]
    assert not fixtures.corrupted(runs["dsv4_index_no_overlap"][1]), runs["dsv4_index_no_overlap"][1]


def test_bf16_to_fp8_the_bug_persists_latent(runs):
    code, doc, text = _diff(runs, "dsv4_index_bf16", "dsv4_index_fp8")
    assert code == 0, text
    assert (doc["appeared"], doc["disappeared"]) == ([], [])
    (entry,) = doc["persisted"]
    assert entry["kind"] == UNSAFE_FREE and entry["aliasing"] == {"a": True, "b": False}
    block = entry["block"]
    assert block["freed"]["pool"] == "small" and block["freed"]["stream_label"] == "main"
    assert block["a"]["hazard"] == "manifest" and block["b"]["hazard"] == "latent"
    taker, same = block["a"]["reused_by"], block["b"]["allocation"]
    assert taker["same_block"] and taker["location"] == same["location"], "q, matched by its call site"
    assert same["pool"] == "large" and not same["same_block"]
    assert "latent in B" in text and "reused" in text, text


def test_fp8_to_bf16_the_latent_bug_turns_manifest(runs):
    code, doc, text = _diff(runs, "dsv4_index_fp8", "dsv4_index_bf16")
    assert code == 0, "the same bug, not a new one"
    (entry,) = doc["persisted"]
    assert entry["aliasing"] == {"a": False, "b": True}
    assert (entry["block"]["a"]["hazard"], entry["block"]["b"]["hazard"]) == ("latent", "manifest")
    assert "latent in A" in text, text


def test_overlap_off_the_bug_disappears_and_comes_back(runs):
    code, doc, text = _diff(runs, "dsv4_index_bf16", "dsv4_index_no_overlap")
    assert code == 0 and doc["persisted"] == [] and doc["appeared"] == [], text
    (gone,) = doc["disappeared"]
    assert gone["kind"] == UNSAFE_FREE and gone["block"]["a"]["hazard"] == "manifest"
    assert gone["block"]["b"]["hazard"] == "absent"
    code, doc, text = _diff(runs, "dsv4_index_no_overlap", "dsv4_index_bf16")
    assert code == 1, f"a new finding fails the gate: {text}"
    (new,) = doc["appeared"]
    assert new["block"]["b"]["hazard"] == "manifest"
