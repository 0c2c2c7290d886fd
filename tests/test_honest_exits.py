"""Exit codes that never lie: an internal error is not "findings", nothing recorded is not
"clean", and `run` keeps the trace it reports on (docs/cli.md, exit codes)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import streamrace.analysis
from streamrace.cli import main
from streamrace.outcome import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_NOTHING_RECORDED,
    EXIT_PROGRAM_FAILED,
)
from streamrace.trace.builder import TraceBuilder

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
RACE = REPO / "examples" / "traces" / "dsv4_mini_race.jsonl.gz"
FIXED = REPO / "examples" / "traces" / "dsv4_mini_fixed.jsonl.gz"


def _empty_trace(path: Path, capture: bool = False) -> Path:
    """A header and a stream; with ``capture``, a capture that ran nothing."""
    tb = TraceBuilder()
    main_s = tb.stream("main")
    if capture:
        with tb.capture(main_s):
            pass
    tb.write(str(path))
    return path


def _one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


def _boom(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("a bug")


# -- internal errors ------------------------------------------------------------------------
def test_an_internal_error_is_one_line_and_its_own_exit_code(monkeypatch, capsys) -> None:
    monkeypatch.delenv("STREAMRACE_DEBUG", raising=False)
    monkeypatch.setattr(streamrace.analysis, "analyze", _boom)
    assert main(["analyze", str(RACE)]) == EXIT_INTERNAL
    out, err = capsys.readouterr()
    line = _one_line(err)
    assert out == ""
    assert line.startswith("streamrace: internal error: ZeroDivisionError: a bug")
    assert "--debug" in line and "report it" in line
    assert EXIT_INTERNAL not in (EXIT_FINDINGS, EXIT_ERROR)


@pytest.mark.parametrize("how", ["flag before the command", "flag after it", "environment"])
def test_debug_shows_the_traceback(monkeypatch, capsys, how: str) -> None:
    monkeypatch.setattr(streamrace.analysis, "analyze", _boom)
    monkeypatch.delenv("STREAMRACE_DEBUG", raising=False)
    args = {
        "flag before the command": ["--debug", "analyze", str(RACE)],
        "flag after it": ["analyze", "--debug", str(RACE)],
        "environment": ["analyze", str(RACE)],
    }[how]
    if how == "environment":
        monkeypatch.setenv("STREAMRACE_DEBUG", "1")
    assert main(args) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError: a bug" in err
    assert err.rstrip().splitlines()[-1].startswith("streamrace: internal error: ZeroDivisionError: a bug")


def test_an_internal_error_in_a_real_process_exits_4_without_a_traceback() -> None:
    program = (
        "import sys, streamrace.cli as c, streamrace.analysis as a\n"
        "def boom(*a, **k): raise KeyError('x')\n"
        "a.analyze = boom\n"
        f"sys.exit(c.main(['analyze', {str(RACE)!r}]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "STREAMRACE_DEBUG"}
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == EXIT_INTERNAL, proc.stderr
    assert _one_line(proc.stderr).startswith("streamrace: internal error: KeyError")


def test_a_bogus_core_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("STREAMRACE_CORE", "bogus")
    assert main(["analyze", str(RACE)]) == EXIT_ERROR
    assert _one_line(capsys.readouterr().err) == (
        "streamrace: error: STREAMRACE_CORE='bogus': expected one of auto, cpp, python"
    )


# -- nothing recorded -----------------------------------------------------------------------
@pytest.mark.parametrize("capture", [False, True], ids=["no capture", "a capture with no op"])
def test_analyze_of_a_trace_with_nothing_in_it_exits_5(tmp_path, capsys, capture: bool) -> None:
    empty = _empty_trace(tmp_path / "empty.jsonl", capture)
    assert main(["analyze", str(empty)]) == EXIT_NOTHING_RECORDED
    out, err = capsys.readouterr()
    line = _one_line(err)
    assert line.startswith("streamrace: nothing recorded: the trace had ")
    assert ("1 CUDA graph capture but no op" in line) if capture else ("no CUDA graph capture and no op" in line)
    assert "no findings" in out, "the report is still printed"


def test_nothing_recorded_needs_every_trace_empty(tmp_path, capsys) -> None:
    empty = _empty_trace(tmp_path / "empty.jsonl")
    assert main(["analyze", str(empty), str(FIXED)]) == EXIT_CLEAN
    assert main(["analyze", str(empty), str(tmp_path / "empty.jsonl")]) == EXIT_NOTHING_RECORDED
    assert "the 2 traces had" in capsys.readouterr().err


def test_exit_zero_accepts_findings_and_nothing_but_not_errors(tmp_path, capsys) -> None:
    empty = _empty_trace(tmp_path / "empty.jsonl")
    assert main(["analyze", "--exit-zero", str(RACE)]) == EXIT_CLEAN
    assert "unsafe-free" in capsys.readouterr().out
    assert main(["analyze", "--exit-zero", str(empty)]) == EXIT_CLEAN
    line = _one_line(capsys.readouterr().err)
    assert "nothing recorded" in line, "the line is still said"
    assert line.endswith("exit code 0 (--exit-zero; 5 without it)"), "it names the exit code it gives"
    assert main(["analyze", "--exit-zero", str(tmp_path / "absent.jsonl")]) == EXIT_ERROR


# -- run ------------------------------------------------------------------------------------
def _copy_program(source: Path | None) -> list[str]:
    """A 'program' that leaves ``source`` where a recording process leaves its trace."""
    if source is None:
        return [sys.executable, "-c", "pass"]
    code = (
        "import os, shutil; "
        f"shutil.copy({str(source)!r}, os.path.join(os.environ['STREAMRACE_TRACE_DIR'], 'streamrace-1.jsonl.gz'))"
    )
    return [sys.executable, "-c", code]


def test_run_keeps_its_trace_and_says_how_to_analyse_it_again(capsys) -> None:
    assert main(["run", "--format", "json", "--", *_copy_program(RACE)]) == EXIT_FINDINGS
    out, err = capsys.readouterr()
    (shown,) = {f["trace"] for f in json.loads(out)["findings"]}
    assert os.path.isfile(shown), "the report names a trace that exists"
    again = err.strip().splitlines()[-1]
    assert again == f"streamrace: trace kept; analyse again with: streamrace analyze {shlex.quote(shown)}"
    assert main(shlex.split(again.split("with: streamrace ", 1)[1])) == EXIT_FINDINGS
    os.remove(shown)
    os.rmdir(os.path.dirname(shown))


def test_run_with_output_moves_the_trace_there(tmp_path, capsys) -> None:
    kept = tmp_path / "kept.jsonl.gz"
    assert main(["run", "-o", str(kept), "--", *_copy_program(FIXED)]) == EXIT_CLEAN
    assert kept.is_file()
    assert capsys.readouterr().err.strip().endswith(f"streamrace analyze {kept}")


def test_run_of_a_program_that_records_nothing_exits_5(tmp_path, capsys) -> None:
    assert main(["run", "--", *_copy_program(None)]) == EXIT_NOTHING_RECORDED
    assert "no process of the program recorded a trace" in _one_line(capsys.readouterr().err)
    empty = _empty_trace(tmp_path / "empty.jsonl.gz")
    kept = tmp_path / "kept.jsonl.gz"
    assert main(["run", "-o", str(kept), "--", *_copy_program(empty)]) == EXIT_NOTHING_RECORDED
    assert "nothing recorded: the program had no CUDA graph capture and no op" in capsys.readouterr().err
    assert main(["run", "--exit-zero", "-o", str(kept), "--", *_copy_program(empty)]) == EXIT_CLEAN
    assert "exit code 0 (--exit-zero; 5 without it)" in capsys.readouterr().err
    assert main(["run", "--exit-zero", "--", *_copy_program(None)]) == EXIT_CLEAN
    assert _one_line(capsys.readouterr().err).endswith("exit code 0 (--exit-zero; 5 without it)")


def test_a_failing_program_is_exit_3_even_when_it_recorded_nothing(capsys) -> None:
    assert main(["run", "--", sys.executable, "-c", "raise SystemExit(7)"]) == EXIT_PROGRAM_FAILED
    assert "exit code 7" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["-o", "--json", "--sarif", "--html", "--perfetto"])
def test_run_refuses_a_path_it_cannot_write_before_the_program_runs(tmp_path, capsys, flag: str) -> None:
    ran = tmp_path / "ran"
    program = ["--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    assert main(["run", flag, str(tmp_path / "no" / "such" / "r.out"), *program]) == EXIT_ERROR
    assert "no such directory" in _one_line(capsys.readouterr().err)
    assert main(["run", flag, str(tmp_path), *program]) == EXIT_ERROR
    assert "is a directory" in _one_line(capsys.readouterr().err)
    assert not ran.exists(), "the program never ran"


def test_source_root_must_be_a_directory(tmp_path, capsys) -> None:
    assert main(["analyze", "--source-root", str(tmp_path / "nope"), str(RACE)]) == EXIT_ERROR
    assert "--source-root" in _one_line(capsys.readouterr().err)


# -- pytest --streamrace --------------------------------------------------------------------
def test_a_session_that_recorded_nothing_fails(pytester: pytest.Pytester, tmp_path) -> None:
    empty = _empty_trace(tmp_path / "empty.jsonl.gz", capture=True)
    pytester.makepyfile("def test_decode():\n    pass\n")
    result = pytester.runpytest(f"--streamrace-replay={empty}")
    result.assert_outcomes(passed=1)
    assert result.ret == EXIT_NOTHING_RECORDED
    assert any(line.startswith("streamrace: nothing recorded: no test ran an op") for line in result.outlines)


def test_a_session_whose_tests_all_skipped_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.skip('no CUDA')\ndef test_gpu():\n    pass\n")
    result = pytester.runpytest(f"--streamrace-replay={RACE}")
    result.assert_outcomes(skipped=1)
    assert result.ret == EXIT_NOTHING_RECORDED


def test_a_session_that_recorded_work_keeps_its_exit_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_decode():\n    pass\n")
    result = pytester.runpytest(f"--streamrace-replay={FIXED}")
    assert result.ret == pytest.ExitCode.OK
    assert not any("nothing recorded" in line for line in result.outlines)
    pytester.makepyfile("def test_decode():\n    assert False\n")
    assert pytester.runpytest(f"--streamrace-replay={FIXED}").ret == pytest.ExitCode.TESTS_FAILED
