"""Capture-time allocations that escape their capture and are clobbered (docs/analysis.md
§8.10, HAZARDS.md M5), as a pass over the events and the engine's stale reads.

A block allocated while a graph was being captured comes from the graph's private pool, and
stays in it: a graph of that pool (the same one, or another sharing it) may have used the
block for its own temporaries, freed inside its capture, and its replay writes them there
again. A graph's static outputs live with that (the legal shared-pool pattern: consumed
before the next replay of a graph that reuses their bytes; when not, the engine's
``stale-read``, §8.4). A block the program uses as its **own persistent state** (a lazily
cached workspace, a semaphore: written by eager work or by another graph's program through
it) must not: when a replay writes it through another allocation and it is read afterwards,
the engine's stale read is this escape, and is reported as one (``EscapedAllocation``) at the
allocation site, naming the capture it escaped from and the graph that clobbers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.clocks import EAGER
from streamrace.analysis.core import MIRRORS
from streamrace.analysis.detectors.capture_allocation_escaped import EscapedAllocation
from streamrace.analysis.engine import StaleRead
from streamrace.analysis.event_order import ORDER_HANDLERS, EventOrderCheck
from streamrace.analysis.ranges import normalize
from streamrace.analysis.sorted_blocks import SortedBlocks


@dataclass(eq=False)
class _Block:
    """A live block allocated in a capture; ``state``: written since by eager work or by
    another graph's program (the program keeps its own data there)."""

    addr: int
    end: int
    graph: int
    alloc: Mapping[str, Any]
    state: bool = False


class EscapedAllocationCheck(EventOrderCheck):
    """Fed every event in order; then ``reclassify`` the engine's stale reads."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, SortedBlocks[_Block]] = {}  # device -> blocks allocated in a capture
        self._state: dict[int, _Block] = {}  # alloc seq -> a block the program kept state in

    def _alloc(self, ev: Mapping[str, Any]) -> None:
        stream = ev["stream"]
        device = self._devices.of(ev, stream)
        blocks = self._live.setdefault(device, SortedBlocks())
        for old in blocks.ending_after(ev["addr"] + ev["size"], ev["addr"]):
            blocks.pop(blocks.bisect_left(old.addr))  # a malformed trace: the overlapped block ends
        graph = self._hb.domain(stream)
        if graph is not EAGER:
            blocks.insert(_Block(ev["addr"], ev["addr"] + ev["size"], graph, ev))

    def _free(self, ev: Mapping[str, Any]) -> None:
        blocks = self._live.get(self._devices.of(ev, ev.get("stream")))
        if blocks is None:
            return
        pos = blocks.bisect_left(ev["addr"])
        if pos != blocks.end and blocks.start(pos) == ev["addr"]:
            blocks.pop(pos)

    def _op(self, ev: Mapping[str, Any]) -> None:
        stream = ev.get("stream")
        if stream is None or not ev["writes"]:
            return
        blocks = self._live.get(self._devices.of(ev, stream))
        if not blocks:
            return
        domain = self._hb.domain(stream)
        for raw in ev["writes"]:
            rng = normalize(raw)
            if rng.empty:
                continue
            for block in blocks.ending_after(rng.hi, rng.lo):
                if domain is EAGER or domain != block.graph:
                    block.state = True
                    self._state[block.alloc["seq"]] = block

    def reclassify(self, detections: list[object]) -> list[EscapedAllocation]:
        """The engine's stale reads of a block the program kept its state in, clobbered by a
        replay: each is an escape."""
        found = []
        for d in detections:
            if MIRRORS.get(type(d), type(d)) is not StaleRead:
                continue
            stale: Any = d
            block = self._state.get(stale.read_lifetime.alloc["seq"])
            replay = stale.writer.replay
            if block is None or replay is None:
                continue
            found.append(EscapedAllocation(stale, block.graph, replay["graph"]))
        return found


EscapedAllocationCheck.HANDLERS = {
    **ORDER_HANDLERS,
    "alloc": EscapedAllocationCheck._alloc,
    "free": EscapedAllocationCheck._free,
    "op": EscapedAllocationCheck._op,
}
