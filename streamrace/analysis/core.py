"""Which engine runs the analysis: the pure-Python reference or the C++ core from csrc/.

Both implement docs/analysis.md and give byte-identical findings (tests/test_core_differential.py
checks it); the C++ core is an optional extension built by ``pip install`` where a C++
compiler is available, and is ten times faster or more. ``STREAMRACE_CORE`` picks one:

* ``auto`` (the default): the C++ core when it was built, else Python;
* ``cpp``: the C++ core, and an error when it was not built;
* ``python``: the reference engine.

The C++ core hands back its detections as objects of its own classes that mirror the Python
engine's records, name for name and field for field (``MIRRORS``; csrc/core.cpp binds them), so
the same detectors describe both engines' detections.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamrace.analysis.engine import (
    PROGRESS_EVERY,
    AnalysisEngine,
    Detection,
    Engine,
    GraphInputFreed,
    Progress,
    Race,
    RecordStreamNoop,
    StaleRead,
    UnsafeFree,
)
from streamrace.analysis.event_order import seen
from streamrace.analysis.lifetimes import Lifetime
from streamrace.analysis.shadow import AccessRecord
from streamrace.errors import TraceLimitError, UsageError
from streamrace.trace.io import TraceEvents

if TYPE_CHECKING:
    from streamrace.analysis.event_order import EventWatch

try:
    import streamrace._core as _core
except ImportError:  # not built: no compiler at install time, or a source checkout
    _core = None

CORE_ENV = "STREAMRACE_CORE"
CORES = ("auto", "cpp", "python")

# The C++ core's record classes, each with the Python record it mirrors (the same name, and
# the same fields but for what only the Python engine keeps: tests/test_core_records.py).
MIRRORS: dict[type, type] = (
    {}
    if _core is None
    else {
        _core.AccessRecord: AccessRecord,
        _core.Lifetime: Lifetime,
        _core.Race: Race,
        _core.UnsafeFree: UnsafeFree,
        _core.RecordStreamNoop: RecordStreamNoop,
        _core.StaleRead: StaleRead,
        _core.GraphInputFreed: GraphInputFreed,
    }
)


def cpp_available() -> bool:
    """Was the C++ core built and importable?"""
    return _core is not None


def selected_core() -> str:
    """``"cpp"`` or ``"python"``: what ``STREAMRACE_CORE`` asks for, given what is built."""
    wanted = os.environ.get(CORE_ENV, "auto").strip().lower() or "auto"
    if wanted not in CORES:
        raise UsageError(f"{CORE_ENV}={wanted!r}: expected one of {', '.join(CORES)}")
    if wanted == "cpp" and _core is None:
        raise UsageError(
            f"{CORE_ENV}=cpp but the C++ core is not built: reinstall streamrace with a C++ compiler "
            f"available (pip install -e .), or set {CORE_ENV}=python"
        )
    if wanted == "auto":
        return "cpp" if _core is not None else "python"
    return wanted


def new_graph_collector() -> Any | None:
    """The C++ core's side of the graph check (streamrace/analysis/graph_truth.py) when the C++
    core is the selected one, else None."""
    return _core.GraphCollector() if selected_core() == "cpp" else None


def new_engine(
    stacks: Mapping[int, list[list[Any]]] | None = None, core: str | None = None, *, events_kept: bool = False
) -> AnalysisEngine:
    """A fresh engine of the selected core (``core`` overrides the environment).
    ``events_kept``: the caller keeps every event alive for the analysis (a list in memory),
    so the C++ core holds captured events as they are instead of copying them."""
    if (core or selected_core()) == "cpp":
        return CppEngine(stacks, events_kept=events_kept)
    return Engine(stacks)


class CppEngine:
    """The C++ core behind the Python engine's interface (feed, run, counters, detections)."""

    def __init__(self, stacks: Mapping[int, list[list[Any]]] | None = None, *, events_kept: bool = False) -> None:
        if _core is None:
            raise RuntimeError("the C++ core is not built")
        self._core = _core.Core(dict(stacks or {}), copy_events=not events_kept)
        self.feed: Callable[[Mapping[str, Any]], None] = self._core.feed

    def run(
        self,
        events: Iterable[Mapping[str, Any]],
        progress: Callable[[Progress], None] | None = None,
        watches: Sequence[EventWatch] = (),
    ) -> None:
        """Feed every event; ``progress`` as for ``Engine.run``. A range the analysis cannot
        take is a ``TraceLimitError``, as in the Python engine. ``watches``: passes that take
        the events one at a time (``TracePass.watch``), each given those it reads before the
        engine reads them; where the core reads a trace's lines itself, it makes only those
        into Python objects."""
        # Merged over the passes: kind -> None (every event of it) or the fields one of which an
        # event needs, for the core; kind -> the passes that read it, one lookup an event.
        reads: dict[str, tuple[str, ...] | None] = {}
        readers: dict[str, list[Callable[[Mapping[str, Any]], None]]] = {}
        for watch in watches:
            for kind, needs in watch.reads.items():
                readers.setdefault(kind, []).append(watch.handlers.get(kind, watch.see))
                if kind in reads and reads[kind] is None:
                    continue  # another pass reads every event of it
                reads[kind] = None if needs is None else (*(reads.get(kind) or ()), *needs)

        def see(ev: Mapping[str, Any]) -> None:
            for read in readers.get(ev["ev"], ()):
                read(ev)

        report: Callable[[int, int, int, int, int], None] | None = None
        if progress is not None:

            def report(events: int, ops: int, accesses: int, graphs: int, replays: int) -> None:
                progress(Progress(events, ops, accesses, graphs, replays))

        try:
            # The direct reader: the core reads the trace's lines itself (csrc/core.cpp,
            # run_lines), the graph check's collector beside it when it watches them.
            watched = _core.observed_source(events)
            source = events if watched is None else watched
            observer = None if watched is None else events
            if isinstance(source, TraceEvents) and source.can_hand_over():
                core = self._core
                watched = (reads, see) if watches else (None, None)
                source.hand_over(lambda lines: core.run_lines(lines, report, PROGRESS_EVERY, observer, *watched))
            else:
                self._core.run(seen(events, see) if watches else events, report, PROGRESS_EVERY)
            if report is not None:
                self._core.report(report)
        except _core.RangeLimit as exc:
            raise TraceLimitError(str(exc)) from None

    @property
    def events(self) -> int:
        return self._core.events

    @property
    def graphs(self) -> int:
        return self._core.graphs

    @property
    def ops(self) -> int:
        return self._core.ops

    @property
    def accesses(self) -> int:
        return self._core.accesses

    @property
    def replays(self) -> int:
        return self._core.replays

    @property
    def unknown_replays(self) -> int:
        return self._core.unknown_replays

    @property
    def stacks(self) -> dict[int, list[list[Any]]]:
        return self._core.stacks()

    @property
    def names(self) -> dict[int, str]:
        return self._core.names()

    @property
    def library_calls(self) -> list[Mapping[str, Any]]:
        return self._core.library_calls()

    @property
    def appearance(self) -> dict[int, int]:
        return self._core.appearance()

    @property
    def captures(self) -> dict[int, list[int]]:
        return self._core.captures()

    def remembered(self) -> int:
        """Accesses the shadow memories still hold (not forgotten)."""
        return self._core.remembered()

    @property
    def detections(self) -> list[Detection]:
        """The detections, in detection order: the core's mirrors of the Python records."""
        return self._core.detections()


def live_records() -> int:
    """Access records alive in the C++ core (0 when it is not built); for memory tests."""
    return _core.live_records() if _core is not None else 0


def live_steps() -> int:
    """Captured accesses the C++ core keeps for replays (0 when it is not built); for memory tests."""
    return _core.live_steps() if _core is not None else 0
