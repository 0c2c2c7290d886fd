"""The benchmarks' synthetic traces (benchmarks/synthetic.py), for the tests that analyse them:
the generator is loaded from its file, since benchmarks/ is not a package."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from streamrace.trace.io import Trace

SYNTHETIC = Path(__file__).resolve().parents[1] / "benchmarks" / "synthetic.py"


@functools.cache
def synthetic() -> ModuleType:
    """benchmarks/synthetic.py as a module."""
    spec = importlib.util.spec_from_file_location("synthetic", SYNTHETIC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def capture_set() -> Trace:
    """The benchmark's capture set at test size: 4 captures of 3 layers of 40 ops, with its bugs."""
    events = list(synthetic().synthetic_events(layers=3, ops_per_layer=40, captures=4))
    stacks = {ev["id"]: ev["frames"] for ev in events if ev["ev"] == "stack"}
    return Trace(synthetic().header(), events, stacks=stacks)
