"""The examples on the H200: the detector flags each hazard from the capture, and the buggy
variant really corrupts at replay while its fixed twin is exact (proven twice)."""

from __future__ import annotations

import pytest
from conftest import load_example

from streamrace.analysis.detectors import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE


@pytest.fixture(scope="module")
def dsv4():
    return load_example("dsv4_mini_decode")


@pytest.fixture(scope="module")
def gallery():
    return load_example("hazard_gallery")


def test_dsv4_freed_before_join_is_flagged_and_corrupts(dsv4):
    session, (corrupted, total) = dsv4.run("bug", check=True)
    unsafe = [f for f in session.findings if f.kind == UNSAFE_FREE]
    assert len(unsafe) == 1, session.report()
    finding = unsafe[0]
    assert finding.aliasing, "qkv's block was reused by q in this capture"
    assert finding.count == 3 and sorted(finding.graphs) == [1, 2, 3], "one bug, every captured batch size"
    use = finding.accesses[0]
    assert use.stream_label == "kv" and use.access == "read"
    assert use.location.startswith("examples/dsv4_mini_decode.py:") or "dsv4_mini_decode.py:" in use.location
    reuse = finding.allocation.reused_by
    assert reuse is not None and reuse["stream_label"] == "main" and reuse["op"].startswith("aten::mm")
    assert finding.allocation.stream_label == "main"
    assert corrupted > 0, f"the bug should corrupt replays, {corrupted}/{total}"
    assert not session.errors


def test_dsv4_latent_twin_is_flagged_without_reuse(dsv4):
    session, (corrupted, _) = dsv4.run("bug", latent=True, check=True)
    unsafe = [f for f in session.findings if f.kind == UNSAFE_FREE]
    assert len(unsafe) == 1 and not unsafe[0].aliasing, session.report()
    assert unsafe[0].allocation.reused_by is None
    assert corrupted == 0, "no reuse this time: the latent bug does not corrupt yet"


@pytest.mark.parametrize("variant", ["keep-alive", "record-stream", "join-then-free", "no-overlap"])
def test_dsv4_fixes_are_clean_and_exact(dsv4, variant):
    session, (corrupted, total) = dsv4.run(variant, check=True)
    assert session.findings == [], session.report()
    assert corrupted == 0 and total == 9
    assert not session.errors


EXPECTED_HAZARDS = {"H2": {"RAW"}, "H3": {"WAR"}, "H4": {"RAW"}, "H5": {"WAR"}, "H6": {"RAW", "WAR", "WAW"}}


@pytest.mark.parametrize("hazard", ["H2", "H3", "H4", "H5", "H6", "H10"])
def test_gallery_buggy_is_flagged_and_corrupts(gallery, hazard):
    session, (corrupted, _replays) = gallery.run(hazard, fixed=False)
    kinds = {f.kind for f in session.findings}
    if hazard == "H10":
        assert {RECORD_STREAM_NOOP, UNSAFE_FREE} <= kinds, session.report()
    else:
        races = [f for f in session.findings if f.kind == DATA_RACE]
        assert races and {f.hazard for f in races} <= EXPECTED_HAZARDS[hazard], session.report()
        assert {a.stream_label for a in races[0].accesses} == {"main", "side"}
    assert corrupted > 0, f"{hazard}: the buggy variant should corrupt at replay"
    assert not session.errors


@pytest.mark.parametrize("hazard", ["H2", "H3", "H4", "H5", "H6", "H10"])
def test_gallery_fixed_is_clean_and_exact(gallery, hazard):
    session, (corrupted, _replays) = gallery.run(hazard, fixed=True)
    assert session.findings == [], session.report()
    assert corrupted == 0
    assert not session.errors
