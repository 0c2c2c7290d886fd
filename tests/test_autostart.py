"""``streamrace run`` and ``STREAMRACE=1`` on the CPU: real child processes that import torch
record themselves (the whole program, or the captures alone), and write their trace as they
run. With no GPU they record no op, so ``run`` exits 5; what matters here is the trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from streamrace.cli import main
from streamrace.outcome import EXIT_NOTHING_RECORDED
from streamrace.record.autostart import ENV_CAPTURE_ONLY
from streamrace.run_program import child_environment
from streamrace.trace.io import load_trace

IMPORTS_TORCH = [sys.executable, "-c", "import torch"]


@pytest.mark.parametrize(
    ("flags", "recording"),
    [([], "program"), (["--capture-only"], "captures"), (["--eager-ops"], "program")],
    ids=["default", "capture-only", "eager-ops is a no-op"],
)
def test_run_records_the_whole_program_unless_capture_only(tmp_path, capsys, flags, recording):
    kept = tmp_path / "t.jsonl.gz"
    assert main(["run", *flags, "-o", str(kept), "--", *IMPORTS_TORCH]) == EXIT_NOTHING_RECORDED
    header = load_trace(kept).header
    assert header["recording"] == recording and "incomplete" not in header
    assert ("replays_unrecorded" in header) == (recording == "program")


def test_the_environment_names_capture_only_only_when_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(ENV_CAPTURE_ONLY, "1")  # left over from an earlier run
    assert ENV_CAPTURE_ONLY not in child_environment(str(tmp_path))
    assert child_environment(str(tmp_path), capture_only=True)[ENV_CAPTURE_ONLY] == "1"
    assert main(["env", "--capture-only", "--eager-ops", "--trace-dir", str(tmp_path)]) == 0
    assert f"export {ENV_CAPTURE_ONLY}=1" in capsys.readouterr().out
    assert main(["env", "--trace-dir", str(tmp_path)]) == 0
    assert ENV_CAPTURE_ONLY not in capsys.readouterr().out


def test_a_recording_process_has_its_partial_trace_while_it_runs(tmp_path):
    """The partial file is there, and a trace, while the process runs; the whole one at exit."""
    script = (
        "import os, sys, torch\n"
        "from streamrace.trace.io import load_trace\n"
        "partial = [f for f in os.listdir(sys.argv[1]) if f.endswith('.partial')]\n"
        "assert len(partial) == 1, partial\n"
        "header = load_trace(os.path.join(sys.argv[1], partial[0])).header\n"
        "assert header['incomplete'] is True and header['recording'] == 'program', header\n"
    )
    env = child_environment(str(tmp_path))
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, env=env, timeout=300)
    [trace] = list(tmp_path.iterdir())
    assert trace.name.endswith(".jsonl.gz") and "incomplete" not in load_trace(trace).header


def test_run_analyses_the_partial_trace_of_a_process_killed_before_its_exit(tmp_path, capsys):
    """A process that never runs its exit handlers (os._exit, a kill) leaves only its partial
    trace: ``run`` keeps and analyses it, and the report says the recording never finished."""
    kept = tmp_path / "t.jsonl.gz"
    leaves_abruptly = [sys.executable, "-c", "import os, torch; os._exit(0)"]
    assert main(["run", "--format", "json", "-o", str(kept), "--", *leaves_abruptly]) == EXIT_NOTHING_RECORDED
    assert load_trace(kept).header["incomplete"] is True
    report = json.loads(capsys.readouterr().out)
    assert [note["code"] for note in report["notes"]] == ["trace-incomplete", "nothing-recorded"]
