"""``STREAMRACE=1``: record an unmodified program, one trace per process.

``streamrace run`` puts ``_site/`` on PYTHONPATH; its ``sitecustomize`` calls
``install_from_env()`` in every Python process. The recorder starts when the program first
imports torch (a process that never does costs nothing) and writes its trace into
``STREAMRACE_TRACE_DIR``, named by pid and rank: as the program runs (``NAME.partial``, a
valid trace of what has been flushed), and whole at exit. It records the whole program;
``STREAMRACE_CAPTURE_ONLY=1`` records the captures alone. ``STREAMRACE_EAGER_OPS``, which
asked for eager ops, is ignored: they are recorded by default.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import os
import sys
from typing import Any

ENV_ENABLE = "STREAMRACE"
ENV_DIR = "STREAMRACE_TRACE_DIR"
ENV_CAPTURE_ONLY = "STREAMRACE_CAPTURE_ONLY"


def trace_file_name(pid: int, rank: str | None) -> str:
    return f"streamrace-{pid}" + (f"-rank{rank}" if rank else "") + ".jsonl.gz"


def _start() -> None:
    from streamrace.record.recorder import Recorder
    from streamrace.record.traces import finish_trace

    pid = os.getpid()
    directory = os.environ.get(ENV_DIR) or "."
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK")
    path = os.path.join(directory, trace_file_name(pid, rank))
    recorder = Recorder(capture_only=os.environ.get(ENV_CAPTURE_ONLY) == "1", trace=path)
    recorder.start()

    def finish() -> None:
        if os.getpid() != pid:  # a forked child inherited the handler, not the recording
            return
        try:
            recorder.stop()
            finish_trace(recorder)
        except Exception as exc:  # the program has finished; never turn its exit into a crash
            print(f"streamrace: could not write the trace: {exc}", file=sys.stderr)

    atexit.register(finish)


class _StartAfterTorchImport(importlib.abc.MetaPathFinder):
    """Start recording right after ``import torch`` finishes."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_start(module: Any) -> None:
            exec_module(module)
            try:
                _start()
            except Exception as exc:  # recording is a guest in this process
                print(f"streamrace: recorder not started: {exc}", file=sys.stderr)

        spec.loader.exec_module = exec_then_start  # type: ignore[method-assign]
        return spec


_installed = False


def install_from_env() -> None:
    """Called by the site hook in every process; does something only with STREAMRACE=1, once."""
    global _installed
    if os.environ.get(ENV_ENABLE) != "1" or _installed:
        return
    _installed = True
    if "torch" in sys.modules:
        _start()
    else:
        sys.meta_path.insert(0, _StartAfterTorchImport())
