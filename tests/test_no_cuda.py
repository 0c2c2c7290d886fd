"""A torch without CUDA (this machine's CPU wheel): recording builds nothing, installs nothing
and says so once, instead of compiling the native hooks for a minute and then failing at
every op (issue 27, item 9)."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import streamrace  # noqa: E402
from streamrace.analysis import header_notes  # noqa: E402
from streamrace.record import installation, native  # noqa: E402

cpu_only = pytest.mark.skipif(torch.version.cuda is not None, reason="needs a torch built without CUDA")


@cpu_only
def test_without_cuda_a_recording_builds_and_installs_no_hooks(monkeypatch):
    def no_build() -> None:
        raise AssertionError("the native hooks were built for a torch without CUDA")

    monkeypatch.setattr(native, "load", no_build)
    with streamrace.watch() as session:
        torch.ones(3) + 1
    assert session.recorder.hooks is None and installation.active() is None
    assert session.trace is not None
    header = session.trace.header
    assert header["no_cuda"] == f"torch {torch.__version__} is built without CUDA"
    assert header["recorder_errors"] == []
    assert [note.code for note in header_notes(header)] == ["no-cuda"]


@cpu_only
def test_run_on_a_torch_without_cuda_says_so_once(tmp_path):
    program = "import torch; x = torch.ones(3)\nfor _ in range(50): x = x + 1\n"
    run = subprocess.run(
        [sys.executable, "-m", "streamrace", "run", "--", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 5, run.stderr
    report = " ".join(run.stdout.split())
    assert report.count("no CUDA here") == 1, run.stdout
    assert f"no CUDA here (torch {torch.__version__} is built without CUDA)" in report
    assert "the recorder failed" not in report
    assert "building the native recorder" not in run.stderr


def test_an_explicit_choice_of_hooks_still_records_without_cuda(monkeypatch):
    """The hooks' own CPU tests choose them explicitly: those record as before."""
    from streamrace.record.recorder import Recorder

    recorder = Recorder(hooks="python")
    recorder.start()
    try:
        assert recorder.no_cuda is None and recorder.hooks_kind == "python"
    finally:
        recorder.stop()


def test_a_build_says_so_on_stderr_before_it_starts(monkeypatch, tmp_path, capsys):
    from torch.utils import cpp_extension

    monkeypatch.setenv(native.ENV_BUILD_DIR, str(tmp_path))
    built = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: built.append(kwargs["name"]) or "module")
    assert native._build(None, "no interposer in this test") == "module"
    assert built == ["streamrace_native_hooks"]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"streamrace: building the native recorder for torch {torch.__version__}")
