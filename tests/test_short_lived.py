"""What the command line leaves to the process's exit (streamrace/short_lived.py): an analysis
asked to retain its engine hands the collector nothing to walk when it turns it back on."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from analysis_engines import core
from benchmark_traces import synthetic

from streamrace import short_lived
from streamrace.analysis import analyze
from streamrace.analysis.core import cpp_available

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")
def test_a_retained_analysis_leaves_no_young_objects_to_collect(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ core pauses the collector while it holds the trace's events, which are made
    during the run and so are all in the youngest generation. Retained to the exit, they must
    be frozen before the collector comes back: else its first collection walks every one."""
    young: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young.append(len(gc.get_objects(generation=0)))

    monkeypatch.setattr(short_lived, "_RETAINED", [])  # as cli.console asks
    gc.collect()
    gc.callbacks.append(watch)
    try:
        with core("cpp"):
            # Streamed, as from a file: the events are made while the collector waits.
            events = synthetic().synthetic_events(layers=10, ops_per_layer=40, captures=4)
            result = analyze(synthetic().header(), events)
            after = gc.get_count()[0]
            gc.collect(0)
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
    assert result.summary["accesses"] > 5_000 and short_lived._RETAINED, "the engine is retained"
    # Thousands of events and range dicts are held; none of them is left for a collection.
    assert max(young, default=0) < 2_000, young
    assert after < 2_000
