"""The C++ core's detections cross into Python as objects of its own classes, which mirror the
Python engine's records name for name and field for field (csrc/core.cpp, MIRRORS in
streamrace/analysis/core.py): no positional decoding, and the same detectors read both."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest

from streamrace.analysis import analyze, detectors
from streamrace.analysis.core import MIRRORS, CppEngine, cpp_available, new_engine
from streamrace.analysis.describe import Describer
from streamrace.analysis.detectors import detector_of
from streamrace.analysis.engine import GraphInputFreed, Race, RecordStreamNoop, StaleRead, UnsafeFree
from streamrace.trace import load_trace
from streamrace.trace.io import Trace

pytestmark = pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces"
# Between them: races, unsafe frees folded and not, and record_stream no-ops.
ALL_KINDS = [
    TRACES / f"{name}.jsonl.gz"
    for name in ("gallery_H10_buggy", "gallery_H2_buggy", "dsv4_mini_race", "dsv4_mini_latent")
]
# And the execution view's (tests/test_execution_view.py): stale reads, and freed graph inputs
# replayed after the free (with the write through the allocation that took the block), latent,
# and in a loop (two graphs).
EXECUTION_VIEW = ["x4 fixed=False", "x5 buggy", "x5 latent", "x1 fixed=False", "x3 fixed=False"]
# What only the Python engine keeps of a record, for its own bookkeeping.
PYTHON_ONLY = {"rng", "lifetimes", "forgotten", "recorded", "last_use"}


def _public(cls: type) -> set[str]:
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return names | {name for name, value in vars(cls).items() if isinstance(value, property)}


def test_each_cpp_record_mirrors_a_python_one_name_for_name_and_field_for_field() -> None:
    assert {python.__name__ for python in MIRRORS.values()} >= {
        "Race",
        "UnsafeFree",
        "RecordStreamNoop",
        "StaleRead",
        "GraphInputFreed",
    }
    for cpp, python in MIRRORS.items():
        assert cpp.__name__ == python.__name__
        assert _public(cpp) == _public(python) - PYTHON_ONLY, python.__name__


def _trace(source: Path | str) -> Trace:
    if isinstance(source, Path):
        return load_trace(source)
    from test_execution_view import PROGRAMS

    return PROGRAMS[source]().trace()


def _both(source: Path | str) -> tuple[list[Any], list[Any]]:
    trace = _trace(source)
    out = []
    for core in ("python", "cpp"):
        engine = new_engine(trace.stacks, core=core)
        engine.run(trace.events)
        out.append(list(engine.detections))
    return out[0], out[1]


def _same(python: Any, cpp: Any, path: str) -> None:
    """Field by field, records within records."""
    if type(cpp) in MIRRORS:
        assert MIRRORS[type(cpp)] is type(python), path
        for name in _public(type(cpp)):
            _same(getattr(python, name), getattr(cpp, name), f"{path}.{name}")
    elif isinstance(python, list) and python and type(python[0]) in MIRRORS.values():
        assert len(python) == len(cpp), path
        for i, (a, b) in enumerate(zip(python, cpp, strict=True)):
            _same(a, b, f"{path}[{i}]")
    else:
        assert python == cpp and type(python) is type(cpp), path


@pytest.mark.parametrize("path", ALL_KINDS + EXECUTION_VIEW, ids=lambda p: getattr(p, "name", p))
def test_both_engines_detect_the_same_records(path: Path | str) -> None:
    python, cpp = _both(path)
    assert python and len(python) == len(cpp)
    for i, (a, b) in enumerate(zip(python, cpp, strict=True)):
        assert detector_of(b) is detector_of(a)
        _same(a, b, f"detections[{i}]")


def test_the_traces_hold_every_engine_record() -> None:
    kinds = {type(d) for path in ALL_KINDS for d in _both(path)[0]}
    folded = [d for path in ALL_KINDS for d in _both(path)[0] if isinstance(d, UnsafeFree) and d.racer]
    assert kinds == {Race, UnsafeFree, RecordStreamNoop} and folded
    found = [d for name in EXECUTION_VIEW for d in _both(name)[0]]
    assert {type(d) for d in found} == {Race, StaleRead, GraphInputFreed}
    freed = [d for d in found if isinstance(d, GraphInputFreed)]
    assert any(d.replay and d.clobbered for d in freed) and any(d.replay is None for d in freed)
    assert any(isinstance(d, StaleRead) and d.count > 1 for d in found)
    assert any(isinstance(d, Race) and d.later.replay and d.earlier.replay for d in found)


def test_a_cpp_record_outlives_the_engine_that_made_it() -> None:
    trace = load_trace(ALL_KINDS[0])
    engine = CppEngine(trace.stacks)
    engine.run(trace.events)
    describer = Describer(engine)
    found = engine.detections
    del engine
    gc.collect()
    assert detectors.describe(found, describer) == analyze(trace).raw_findings
