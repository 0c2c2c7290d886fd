"""The pytest plugin without a GPU: small test files run under pytester, "recording" the real
H200 traces committed in examples/traces/ through --streamrace-replay or the recorder hook."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from streamrace import pytest_plugin
from streamrace.analysis import analyze
from streamrace.outcome import EXIT_NOTHING_RECORDED
from streamrace.trace import load_trace

pytest_plugins = ["pytester"]

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
RACE = TRACES / "dsv4_mini_race.jsonl.gz"
FIXED = TRACES / "dsv4_mini_fixed.jsonl.gz"

# A conftest for the inner runs: @pytest.mark.trace("NAME") picks the trace a test "records".
PER_TEST_CONFTEST = f"""
import pytest
from streamrace.pytest_plugin import replay

TRACES = {str(TRACES)!r}

def pytest_configure(config):
    config.addinivalue_line("markers", "trace(name): the committed trace this test records")

@pytest.hookimpl
def pytest_streamrace_recorder(item):
    mark = item.get_closest_marker("trace")
    return replay(f"{{TRACES}}/{{mark.args[0]}}.jsonl.gz") if mark else None
"""


def _signature(path: Path) -> str:
    (finding,) = analyze(load_trace(path)).findings
    return finding.signature


def _summary(result: pytest.RunResult) -> str:
    return next(line for line in result.outlines if re.match(r"streamrace: \d+ tests? recorded", line))


def test_the_plugin_is_a_pytest11_entry_point():
    points = importlib.metadata.entry_points(group="pytest11")
    assert any(p.name == "streamrace" and p.value == "streamrace.pytest_plugin" for p in points)


def test_without_the_flag_it_imports_nothing_heavy(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import sys
        import pytest

        @pytest.mark.streamrace(expect=["unsafe-free"])
        def test_light():
            heavy = [m for m in ("torch", "streamrace.analysis", "streamrace.record", "rich") if m in sys.modules]
            assert heavy == []
            assert "streamrace.pytest_plugin" in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not any(line.startswith("streamrace:") for line in result.outlines)


def test_a_racy_test_fails_with_the_report(pytester: pytest.Pytester):
    pytester.makepyfile("def test_decode():\n    pass\n")
    result = pytester.runpytest(f"--streamrace-replay={RACE}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "streamrace: 1 finding (unsafe-free) in this test's CUDA graph captures" in out
    assert "error unsafe-free WAR aliasing" in out
    assert f"signature     {_signature(RACE)}" in out
    assert "main.wait_stream(kv)" in out, "the fix is in the failure"
    assert _summary(result) == "streamrace: 1 test recorded, 1 with CUDA graph captures, 1 with findings"


def test_streamrace_html_writes_the_report_of_each_test_with_findings(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makeconftest(PER_TEST_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.trace("dsv4_mini_race")
        def test_racy():
            pass

        @pytest.mark.trace("dsv4_mini_fixed")
        def test_clean():
            pass
        """
    )
    reports = tmp_path / "reports"
    result = pytester.runpytest("--streamrace", f"--streamrace-html={reports}")
    result.assert_outcomes(failed=1, passed=1)
    (page,) = reports.iterdir()
    assert page.name == "test_streamrace_html_writes_the_report_of_each_test_with_findings.py_test_racy.html"
    assert f"streamrace: HTML report: {page}" in result.stdout.str()
    text = page.read_text()
    assert '"kind":"unsafe-free"' in text and "aten::mul.Tensor" in text


def test_a_clean_test_passes(pytester: pytest.Pytester):
    pytester.makepyfile("def test_decode():\n    pass\n")
    result = pytester.runpytest(f"--streamrace-replay={FIXED}")
    result.assert_outcomes(passed=1)
    assert _summary(result) == "streamrace: 1 test recorded, 1 with CUDA graph captures, 0 with findings"


def test_the_test_s_own_failure_stands_with_the_report_beside_it(pytester: pytest.Pytester):
    pytester.makepyfile("def test_decode():\n    assert 1 == 2, 'wrong logits'\n")
    result = pytester.runpytest(f"--streamrace-replay={RACE}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "AssertionError: wrong logits" in out
    assert "Captured streamrace call" in out and "unsafe-free" in out


def test_expect_marker_passes_only_on_exactly_the_expected_kinds(pytester: pytest.Pytester):
    pytester.makeconftest(PER_TEST_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.trace("dsv4_mini_race")
        @pytest.mark.streamrace(expect=["unsafe-free"])
        def test_expected_found():
            pass

        @pytest.mark.trace("dsv4_mini_fixed")
        @pytest.mark.streamrace(expect=["unsafe-free"])
        def test_expected_missing():
            pass

        @pytest.mark.trace("dsv4_mini_race")
        @pytest.mark.streamrace(expect="data-race")
        def test_other_kind():
            pass

        @pytest.mark.trace("gallery_H10_buggy")
        @pytest.mark.streamrace(expect=["record-stream-noop"])
        def test_expected_and_more():
            pass
        """
    )
    reprec = pytester.inline_run("--streamrace")
    passed, _, failed = reprec.listoutcomes()
    assert [r.head_line for r in passed] == ["test_expected_found"]
    why = {r.head_line: r.longreprtext.splitlines()[0] for r in failed}
    assert why == {
        "test_expected_missing": "streamrace: expected unsafe-free, not found in this test's CUDA graph captures",
        "test_other_kind": "streamrace: expected data-race, not found; 1 finding (unsafe-free) in this test's "
        "CUDA graph captures",
        "test_expected_and_more": "streamrace: 1 finding (unsafe-free) in this test's CUDA graph captures",
    }


def test_skip_marker_opts_a_test_out(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamrace(skip=True)
        def test_opted_out():
            pass

        def test_recorded():
            pass
        """
    )
    result = pytester.runpytest(f"--streamrace-replay={RACE}")
    result.assert_outcomes(passed=1, failed=1)
    assert "FAILED test_skip_marker_opts_a_test_out.py::test_recorded" in result.stdout.str()
    assert _summary(result).startswith("streamrace: 1 test recorded")


def test_a_wrong_marker_fails_the_test_saying_why(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.streamrace(expect=["unsafe_free"])
        def test_typo():
            pass

        @pytest.mark.streamrace(skp=True)
        def test_unknown_argument():
            pass
        """
    )
    result = pytester.runpytest(f"--streamrace-replay={FIXED}")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "unknown finding kind 'unsafe_free'" in out
    assert "takes only expect=[kinds] and skip=True" in out


def test_suppressions_accept_a_finding_and_stale_ones_are_named(pytester: pytest.Pytester):
    pytester.makepyfile("def test_decode():\n    pass\n")
    pytester.path.joinpath("streamrace.toml").write_text(
        f'[[suppress]]\nsignature = "{_signature(RACE)}"\nreason = "SGLang #36547, fix pending"\n\n'
        '[[suppress]]\nlocation = "gone.py:1"\nreason = "old"\n'
    )
    result = pytester.runpytest(f"--streamrace-replay={RACE}", "--streamrace-suppressions=streamrace.toml")
    result.assert_outcomes(passed=1)
    assert _summary(result).endswith("0 with findings, 1 finding suppressed")
    assert "streamrace.toml: suppression 2 (location gone.py:1) matched no finding" in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--streamrace-replay=missing.jsonl.gz"], "missing.jsonl.gz: no such trace file"),
        (["--streamrace", "--streamrace-suppressions=nope.toml"], "nope.toml: no such suppressions file"),
    ],
)
def test_bad_input_is_a_usage_error(pytester: pytest.Pytester, args: list[str], message: str):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_without_torch_recording_is_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pytest_plugin, "_torch_available", lambda: False)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--streamrace")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--streamrace records with torch, which is not installed here" in result.stderr.str()
    pytester.makeconftest(PER_TEST_CONFTEST)  # a conftest that records: torch is its business
    # (test_x picks no trace, so streamrace.watch() records it, and it captures nothing)
    assert pytester.runpytest("--streamrace").ret == EXIT_NOTHING_RECORDED


GALLERY = ["H2", "H3", "H4", "H5", "H6", "H10"]


def test_under_xdist_each_worker_records_its_tests_and_the_summary_adds_up(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    pytester.makeconftest(
        PER_TEST_CONFTEST
        + """
def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.trace("gallery_{hazard}_{variant}".format(**item.callspec.params)))
"""
    )
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.parametrize("variant", ["buggy", "fixed"])
        @pytest.mark.parametrize("hazard", {GALLERY!r})
        def test_gallery(hazard, variant):
            pass
        """
    )
    result = pytester.runpytest_subprocess("--streamrace", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(GALLERY), failed=len(GALLERY))
    out = result.stdout.str()
    failed = sorted(re.findall(r"^FAILED \S+::test_gallery\[(\w+)-(\w+)\]", out, re.M))
    assert failed == sorted((h, "buggy") for h in GALLERY), "exactly the buggy variants fail"
    assert "[gw0]" in out and "[gw1]" in out, "both workers ran tests"
    n = 2 * len(GALLERY)
    assert (
        _summary(result)
        == f"streamrace: {n} tests recorded, {n} with CUDA graph captures, {len(GALLERY)} with findings"
    )


def test_streamrace_traces_keeps_each_recorded_test_s_trace(pytester: pytest.Pytester, tmp_path: Path):
    """--streamrace-traces DIR: one trace per recorded test, named after its id (never a
    hidden file, whatever the id starts with), loadable by streamrace analyze."""
    pytest.importorskip("torch")
    pytester.makepyfile(
        test_traced="""
        import torch

        def test_adds():
            assert torch.ones(2).add(1).sum().item() == 4
        """
    )
    traces = tmp_path / "traces"
    pytester.runpytest_subprocess("--streamrace", f"--streamrace-traces={traces}", "-p", "no:cacheprovider")
    (kept,) = traces.iterdir()
    assert kept.name == "test_traced.py_test_adds.jsonl.gz"
    from streamrace.trace import load_trace

    assert load_trace(str(kept)).header["format"] == "streamrace-trace"
