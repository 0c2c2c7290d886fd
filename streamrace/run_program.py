"""``streamrace run -- CMD ARGS...``: record an unmodified program, then analyse.

The program runs with ``STREAMRACE=1`` and ``streamrace/record/_site`` first on PYTHONPATH, so
every Python process it starts (a launcher's workers too) records itself and leaves one trace
per process in a private directory, which is kept (``run`` prints the ``analyze`` command
that reads the traces again). ``run`` then analyses them all, like ``analyze``. This module
imports no torch: the recording happens in the child processes.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import streamrace
from streamrace.errors import UsageError
from streamrace.record.autostart import ENV_CAPTURE_ONLY, ENV_DIR, ENV_ENABLE
from streamrace.trace.incremental import PARTIAL_SUFFIX

_SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record", "_site")
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(streamrace.__file__)))


def child_environment(trace_dir: str, capture_only: bool = False) -> dict[str, str]:
    """The environment that makes every Python process record itself into ``trace_dir``."""
    env = dict(os.environ)
    env[ENV_ENABLE] = "1"
    env[ENV_DIR] = trace_dir
    if capture_only:
        env[ENV_CAPTURE_ONLY] = "1"
    else:
        env.pop(ENV_CAPTURE_ONLY, None)
    paths = [_SITE_DIR, _PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def record_program(command: Sequence[str], capture_only: bool = False) -> tuple[int, list[str]]:
    """Run ``command`` with recording on; (its exit code, the traces). The traces stay in a
    fresh temporary directory; it is removed only when the program left none there."""
    if not command:
        raise UsageError("no program to run: give it after '--', e.g. streamrace run -- python serve.py")
    trace_dir = tempfile.mkdtemp(prefix="streamrace-run-")
    try:
        returncode = subprocess.call(list(command), env=child_environment(trace_dir, capture_only))
    except FileNotFoundError:
        shutil.rmtree(trace_dir, ignore_errors=True)
        raise UsageError(f"{command[0]}: no such program") from None
    except PermissionError:
        shutil.rmtree(trace_dir, ignore_errors=True)
        raise UsageError(f"{command[0]}: not executable") from None
    traces = sorted(glob.glob(os.path.join(trace_dir, "*.jsonl.gz")))
    # A process that never ran its exit handlers (killed, os._exit) leaves only its partial
    # trace: what it flushed. It is analysed too; its header makes the report say so.
    traces += sorted(
        partial
        for partial in glob.glob(os.path.join(trace_dir, "*.jsonl.gz" + PARTIAL_SUFFIX))
        if partial.removesuffix(PARTIAL_SUFFIX) not in traces
    )
    if not traces:
        shutil.rmtree(trace_dir, ignore_errors=True)
    return returncode, traces


def keep_traces(traces: list[str], output: str) -> list[str]:
    """Move the traces to ``output`` (one process) or ``output`` with the pid inserted (several)."""
    if len(traces) == 1:
        destinations = [output]
    else:
        stem, ext = (output[: -len(".jsonl.gz")], ".jsonl.gz") if output.endswith(".jsonl.gz") else (output, "")
        destinations = [f"{stem}.{os.path.basename(t).split('.')[0].removeprefix('streamrace-')}{ext}" for t in traces]
    for source, destination in zip(traces, destinations, strict=True):
        try:
            shutil.move(source, destination)
        except OSError as exc:
            raise UsageError(f"{destination}: cannot write the trace: {exc.strerror or exc}") from None
    directory = os.path.dirname(traces[0])
    if not os.listdir(directory):  # every trace moved out: the temporary directory goes
        os.rmdir(directory)
    return destinations


def program_failed_note(returncode: int) -> str:
    how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    return f"streamrace: the program failed ({how}); the report covers what was recorded before that"


def warn(message: str) -> None:
    print(message, file=sys.stderr)
