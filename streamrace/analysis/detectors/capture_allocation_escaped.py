"""``capture-allocation-escaped``: a block allocated during a capture, kept after it as the
program's own persistent state (a lazily cached workspace, a semaphore), is written at replay
by a graph of the same pool through its own temporaries, and then read: the state is gone
(docs/findings.md; the rule is docs/analysis.md §8.10; HAZARDS.md M5, ROCm aiter #5393).

The engine sees the read as a ``stale-read``; the pass (streamrace/analysis/escaped_allocations.py)
knows the block is the program's state and reports it at the allocation site instead, naming
the capture it escaped from and the graph that clobbers it. From the engine's detections and
the lifetimes it marked as state, which both engines make alike; it reads no event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamrace.analysis.describe import Describer, at
from streamrace.analysis.detectors.detector import Detector, EngineResults, SarifRule, TracePass
from streamrace.analysis.findings import Finding

if TYPE_CHECKING:
    from streamrace.analysis.event_order import EventWatch

KIND = "capture-allocation-escaped"


@dataclass(eq=False)
class EscapedAllocation:
    """``stale`` (the engine's ``StaleRead``) read a block allocated in the capture of
    ``graph`` and kept as state, whose bytes a replay of ``clobberer`` wrote through another
    allocation."""

    stale: Any
    graph: int
    clobberer: int


class EscapedAllocationPass:
    """The escape check: the engine's stale reads, and the blocks it marked as the program's
    state (``Lifetime.kept``) as the ops went by; it reads no event itself."""

    def __init__(self) -> None:
        self._found: list[EscapedAllocation] = []
        self._explained: set[int] = set()

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
        return events  # handed on as they are: the C++ core may read a trace's lines itself

    def watch(self) -> EventWatch:
        from streamrace.analysis.event_order import EventWatch

        return EventWatch({}, lambda ev: None)  # no event

    def detections(self, results: EngineResults) -> list[object]:
        from streamrace.analysis.escaped_allocations import escapes  # only for traces that need it

        self._found = escapes(list(results.detections))
        self._explained = {id(f.stale) for f in self._found}
        return list(self._found)

    def explains(self, detection: object) -> bool:
        """The engine's stale read of the escaped block: this finding says why."""
        return id(detection) in self._explained


class EscapedAllocationDetector(Detector[EscapedAllocation]):
    kind = KIND
    severity = "error"
    docs_anchor = "capture-allocation-escaped-error"
    records = (EscapedAllocation,)
    pair_unordered = False  # the clobbering replay is ordered before the read
    rule = SarifRule(
        name="CaptureAllocationEscaped",
        short="A buffer allocated during a capture is kept as state, and a graph of its pool overwrites it",
        full=(
            "A buffer first allocated while a graph was being captured comes from the graph's private pool. "
            "The program kept it after the capture as its own persistent state (a cached workspace, a "
            "semaphore), but a graph of that pool used the same bytes for its temporaries, and its replay "
            "wrote them there again: the state read afterwards is that graph's data."
        ),
        fix="Allocate persistent buffers before any capture (outside the graph's pool), and reuse them inside it.",
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """Stale reads need the replays: a trace of the whole program (format 1.1 and later)."""
        if (header.get("minor") or 0) < 1 or header.get("recording") == "captures":
            return None
        return EscapedAllocationPass()

    def describe(self, found: EscapedAllocation, describer: Describer) -> Finding:
        stale = found.stale
        reader, writer = describer.access(stale.reader), describer.access(stale.writer)
        read, wrote = stale.read_lifetime, stale.write_lifetime
        site = describer.site(read.alloc)[1]
        where_made = f" at {site}" if site else ""
        clobber = "its own" if found.clobberer == found.graph else f"graph {found.clobberer}'s"
        message = (
            f"The buffer allocated{where_made} during the capture of graph {found.graph} is kept after the "
            f"capture as the program's state, but it lies in graph {found.graph}'s pool: {clobber} replay"
            f"{at(writer)} writes those bytes through another allocation, and {reader.op}{at(reader)} then "
            "reads that graph's data instead of the state"
        )
        return Finding(
            kind=KIND,
            hazard="RAW",
            accesses=[writer, reader],
            message=message + ".",
            missing_edge=(
                f"the buffer{where_made} and the temporaries of graph {found.clobberer} share a block of one pool"
            ),
            fix=(
                f"allocate the buffer{where_made} before any capture (outside the graph's pool), and reuse it "
                "inside the capture"
            ),
            aliasing=True,
            graph=None,
            allocation=describer.allocation(read, (writer, wrote)),
            count=stale.count,
        )


DETECTOR = EscapedAllocationDetector()
