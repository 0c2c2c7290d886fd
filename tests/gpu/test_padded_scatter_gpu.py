"""The padded-scatter check on the H200 (HAZARDS.md H9): padded batches replayed through a
static index, recorded whole. The stale variant is flagged and really corrupts a live slot at
replay; the reserved-slot and guarded twins are clean and exact. In the DSV4 decode the
padding bug and the freed-before-join race are independent: each is reported, with its own
fix, exactly when its variant is chosen, and each corrupts what it should."""

from __future__ import annotations

import pytest
from conftest import load_example

from streamrace.analysis.detectors import PADDED_SCATTER, UNSAFE_FREE


@pytest.fixture(scope="module")
def padded():
    return load_example("padded_scatter")


@pytest.fixture(scope="module")
def dsv4():
    return load_example("dsv4_mini_decode")


def test_stale_padding_is_flagged_and_corrupts_a_live_slot(padded):
    session, outcome = padded.record("stale")
    assert outcome.corrupted == outcome.rounds, "every padded replay writes the warm-up's slots"
    [finding] = session.findings
    assert finding.kind == PADDED_SCATTER and finding.count == padded.ROUNDS, session.report()
    refresh, replay = finding.accesses
    assert "padded_scatter.py:" in (refresh.location or "") and refresh.op.startswith("aten::copy_")
    assert replay.op.startswith("aten::index_put") and replay.captured is not None
    assert f"first {padded.N_REAL} of {padded.BS} rows" in finding.message, finding.message
    assert "allocated at examples/padded_scatter.py:" in finding.message or "padded_scatter.py:" in finding.message
    assert not session.errors


@pytest.mark.parametrize("variant", ["reserved", "guarded"])
def test_reserved_and_guarded_padding_are_clean_and_exact(padded, variant):
    session, outcome = padded.record(variant)
    assert outcome.corrupted == 0
    assert session.findings == [], session.report()
    assert session.trace is not None and any(e.get("index") for e in session.trace.events), "index operands recorded"
    assert not session.errors


@pytest.mark.parametrize(
    ("variant", "padding", "kinds"),
    [
        ("keep-alive", "stale", [PADDED_SCATTER]),
        ("bug", "reserved", [UNSAFE_FREE]),
        ("bug", "stale", [UNSAFE_FREE, PADDED_SCATTER]),
        ("keep-alive", "reserved", []),
        ("keep-alive", "guarded", []),
    ],
)
def test_dsv4_padding_and_race_are_reported_apart(dsv4, variant, padding, kinds):
    session, check = dsv4.run_padded(variant, padding)
    assert sorted(f.kind for f in session.findings) == sorted(kinds), session.report()
    assert (check.clobbered > 0) == (padding == "stale"), f"live slots clobbered in {check.clobbered}/{check.total}"
    assert (check.wrong > 0) == (variant == "bug"), f"real rows wrong in {check.wrong}/{check.total}"
    for finding in session.findings:
        if finding.kind == PADDED_SCATTER:
            assert finding.count == check.total and "reserved" in (finding.fix or "")
            assert "dsv4_mini_decode.py:" in (finding.accesses[1].location or "")
        else:
            assert "reserved" not in (finding.fix or ""), "the race's fix is its own"
    assert not session.errors
