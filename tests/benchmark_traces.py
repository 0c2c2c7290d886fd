"""The benchmarks' traces, for the tests that analyse them: benchmarks/synthetic.py's capture
set and benchmarks/python_engine_scale.py's shapes. Their builders are loaded from their files,
since benchmarks/ is not a package (as is benchmarks/peer_suites.py, for its own test)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from streamrace.trace.io import Trace

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@functools.cache
def _benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module, in sys.modules under its name (dataclasses look their
    module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def synthetic() -> ModuleType:
    """benchmarks/synthetic.py as a module."""
    return _benchmark("synthetic")


def peer_suites() -> ModuleType:
    """benchmarks/peer_suites.py as a module: the tool that runs PyTorch's graph tests plain and
    recorded."""
    return _benchmark("peer_suites")


def engine_scale() -> ModuleType:
    """benchmarks/python_engine_scale.py as a module: the shapes that once made the Python
    engine quadratic (issue 27), each a builder ``(tb, count, ...)``."""
    return _benchmark("python_engine_scale")


def capture_set() -> Trace:
    """The benchmark's capture set at test size: 4 captures of 3 layers of 40 ops, with its bugs."""
    events = list(synthetic().synthetic_events(layers=3, ops_per_layer=40, captures=4))
    stacks = {ev["id"]: ev["frames"] for ev in events if ev["ev"] == "stack"}
    return Trace(synthetic().header(), events, stacks=stacks)
