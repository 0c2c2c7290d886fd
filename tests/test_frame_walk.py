"""csrc/recorder/frame_walk.h against each interpreter's own frames: the native hooks read the
frame stack of CPython 3.11-3.13 through its internal header, without the GIL, so each
version's layout is checked where it can be built. The probe (tests/native_probes/) is built
for this interpreter and for every other CPython found under pyenv (the GPU machines run
3.12), and its walk must be the interpreter's own, frame for frame and line for line."""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PROBES = HERE / "native_probes"
HEADERS = HERE.parent / "csrc" / "recorder"


def _interpreters() -> list[str]:
    found = {os.path.realpath(sys.executable): sys.executable}
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for path in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))):
        name = pathlib.Path(path).parents[1].name  # "3.12.1"; the recorder needs 3.10 or newer
        if tuple(int(part) for part in name.split(".")[:2] if part.isdigit()) >= (3, 10):
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def _ask(python: str, expression: str) -> str:
    return subprocess.run(
        [python, "-c", f"import sysconfig; print({expression})"], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("python", _interpreters(), ids=lambda p: pathlib.Path(p).parents[1].name)
def test_the_walk_is_the_interpreters_own(python, tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    version = tuple(int(part) for part in _ask(python, "__import__('sys').version_info[:2]").strip("()").split(", "))
    include = _ask(python, "sysconfig.get_paths()['include']")
    if not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip(f"no headers for {python}")
    suffix = _ask(python, "sysconfig.get_config_var('EXT_SUFFIX')")
    build = subprocess.run(
        [compiler, "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{include}", f"-I{HEADERS}",
         str(PROBES / "frame_walk_probe.cpp"), "-o", str(tmp_path / f"frame_walk_probe{suffix}")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run(
        [python, str(PROBES / "frame_walk_program.py"), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    walk = "without_gil" if (3, 11) <= version <= (3, 13) else "public_walk"
    ok, ran, built = run.stdout.split()
    assert (ok, ran.split(".")[:2], built) == ("ok", [str(v) for v in version], walk)
