"""benchmarks/peer_suites.py, the tool that runs PyTorch's graph tests plain and recorded, on a
small suite of its own (CPU: the plugin records nothing, the verdicts still come from junit).

A verdict that changes under ``--streamrace`` is run again by itself, plain and recorded: a
change that comes back is the recording's; one that does not came from the run around it
(here, a test that fails only after another one ran in its process).
"""

from __future__ import annotations

import pytest
from benchmark_traces import peer_suites

pytest.importorskip("torch")  # the plugin imports it

SUITE = """
import pytest

RAN = []


def recorded(request):
    return request.config.getoption("streamrace", default=False)


def test_first():
    RAN.append("first")


def test_after_another(request):
    if recorded(request) and RAN:
        pytest.fail("an order effect: another test ran before me in this process")


class TestGroup:
    def test_always_under_streamrace(self, request):
        assert not recorded(request), "fails whenever recorded"
"""


def test_a_changed_verdict_is_run_again_by_itself(tmp_path, capsys, monkeypatch):
    # The whole suite in one process, where the order effect shows (CI's -n auto would spread
    # it over workers); the recheck drops PYTEST_ADDOPTS itself.
    monkeypatch.setenv("PYTEST_ADDOPTS", "")
    suite = tmp_path / "test_tiny_suite.py"
    suite.write_text(SUITE)
    assert peer_suites().main([str(suite), "--json", str(tmp_path / "runs.json")]) == 0
    out = capsys.readouterr().out
    lines = {line.split(": ")[1]: line for line in out.splitlines() if line.startswith("test_tiny_suite.py: test_")}
    order = lines["test_tiny_suite::test_after_another"]
    assert "passed plain, failed under streamrace" in order
    assert "[by itself: passed plain, passed under streamrace; it does not come back]" in order, order
    always = lines["test_tiny_suite.TestGroup::test_always_under_streamrace"]
    assert "[by itself: passed plain, failed under streamrace; the change comes back]" in always, always
    assert "test_tiny_suite::test_first" not in lines  # unchanged: not run again


def test_node_ids_from_junit_names():
    node_id = peer_suites().node_id
    assert node_id("/x/.peer/test_cuda_graphs.py", ".peer.test_cuda_graphs.TestCuda::test_a[p::q]") == (
        "test_cuda_graphs.py::TestCuda::test_a[p::q]"
    )
    assert node_id("/x/test_m.py", "test_m::test_f") == "test_m.py::test_f"
    assert node_id("/x/test_m.py", "pkg.test_m.Outer.Inner::test_g") == "test_m.py::Outer::Inner::test_g"
