"""`pytest --streamrace` on the H200: a suite of real tests built from the hazard gallery and
the DSV4 example, recorded for real; exactly the racy tests fail, each with its report."""

from __future__ import annotations

import importlib.metadata
import re

import pytest
from conftest import load_example

pytest_plugins = ["pytester"]

HAZARDS = ["H2", "H3", "H4", "H5", "H6", "H10"]
# Installed, the plugin comes through its entry point; from a source tree (the GPU machine runs
# the checkout as it is), it must be named.
_INSTALLED = any(ep.name == "streamrace" for ep in importlib.metadata.entry_points(group="pytest11"))
PLUGIN = () if _INSTALLED else ("-p", "streamrace.pytest_plugin")

SUITE = f"""
import pytest

# Loaded by the outer test through tests/gpu/conftest.py's load_example (examples are scripts).
import dsv4_mini_decode
import hazard_gallery


@pytest.mark.parametrize("variant", ["buggy", "fixed"])
@pytest.mark.parametrize("hazard", {HAZARDS!r})
def test_gallery(hazard, variant):
    hazard_gallery.run(hazard, fixed=variant == "fixed", replays=1)


@pytest.mark.streamrace(expect=["unsafe-free"])
def test_dsv4_bug_is_expected():
    dsv4_mini_decode.run("bug")


def test_dsv4_keep_alive():
    dsv4_mini_decode.run("keep-alive")


@pytest.mark.streamrace(skip=True)
def test_dsv4_bug_opted_out():
    dsv4_mini_decode.run("bug")
"""


@pytest.fixture(scope="module", autouse=True)
def _examples():
    load_example("hazard_gallery")
    load_example("dsv4_mini_decode")


def test_exactly_the_racy_tests_fail(pytester: pytest.Pytester):
    pytester.makepyfile(test_suite=SUITE)
    # In process (the inner tests import the examples this module loaded), and once: a second
    # in-process run re-imports torch modules that may register a library only once.
    result = pytester.runpytest_inprocess(*PLUGIN, "--streamrace", "-p", "no:cacheprovider")
    out = result.stdout.str()
    failed = sorted(re.findall(r"^FAILED test_suite.py::(\S+?)(?: - .*)?$", out, re.M))
    assert failed == sorted(f"test_gallery[{h}-buggy]" for h in HAZARDS), out
    result.assert_outcomes(failed=len(HAZARDS), passed=len(HAZARDS) + 3)
    for hazard in HAZARDS:
        assert re.search(rf"_ test_gallery\[{hazard}-buggy\] _+\n+streamrace: \d+ findings? \(", out), hazard
    # The late-join failure names the race, the example's source lines and the join to add.
    late_join = out[out.index("_ test_gallery[H2-buggy] _") :]
    assert "error data-race RAW" in late_join and "hazard_gallery.py:" in late_join
    assert "wait_stream(side)" in late_join
    summary = next(line for line in result.outlines if re.match(r"streamrace: \d+ tests? recorded", line))
    n = 2 * len(HAZARDS) + 2
    assert summary == f"streamrace: {n} tests recorded, {n} with CUDA graph captures, {len(HAZARDS) + 1} with findings"
