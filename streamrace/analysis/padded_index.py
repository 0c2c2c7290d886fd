"""The padded-scatter check (docs/analysis.md §8.7, HAZARDS.md H9): per replay, the captured
ops that write through an index read from a static input, and what the program wrote of that
index since the graph's previous replay.

Serving engines capture a graph per batch size and replay it with padded batches: ``n`` real
rows of a captured batch ``bs > n``. The static input ``loc`` (where each row's KV goes) is
refreshed with ``loc[:n].copy_(real)``; unless the padding rows are reset too, they keep the
slots of an earlier step, slots another request owns now, and a captured ``index_copy_`` /
``index_put_`` / ``scatter_`` writes the padded rows there.

The rule, over the events alone (so both engines give the same findings):

* an index operand (an op event's ``index``, trace format 1.2) of a captured op is a
  **static input** of its graph when the graph's program writes none of its bytes: the index
  is what the program outside left there. One the graph computes itself (``torch.where(arange
  < n, loc, reserved)``) is written in the graph and never checked;
* every write that runs (eager, or another graph's replay) into a static index's span is
  noted, clipped to the span, for each graph that reads it, until that graph's next replay;
* at a replay, an index whose noted writes are exactly a **strict prefix** of its bytes (some
  written, from the first byte on, the rest not) and whose **tail** (the rest) is stale is a
  ``PaddedScatter``. A tail byte is stale when its last write came before the capture (what
  the warm-up or an earlier batch left) or was one that also wrote bytes before the tail: the
  rows of an earlier, larger batch. A tail last written by a write of the tail alone (a reset
  to a reserved slot, on an earlier step) is not. Not a finding either: the whole index
  written (the tail reset each step), nothing written (the same batch replayed again), writes
  that are not one prefix (the program is doing something else).

Dense indices only (a strided view of an index has bytes between its elements that tell
nothing), and a write's span counts as written: the check may miss, never make up.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace.analysis.clocks import EAGER
from streamrace.analysis.detectors.padded_scatter import PaddedScatter
from streamrace.analysis.event_order import PROGRAM_HANDLERS, ProgramCheck
from streamrace.analysis.ranges import normalize
from streamrace.analysis.sorted_blocks import SortedBlocks

Span = tuple[int, int, int]  # (device, lo, hi)


@dataclass(frozen=True)
class _Block:
    addr: int
    end: int
    alloc: Mapping[str, Any]


@dataclass
class _Index:
    """One static index span of a graph: the captured ops that write through it, and what was
    written into it since the graph's previous replay."""

    uses: list[tuple[Mapping[str, Any], Mapping[str, Any]]]  # (captured op, its index range)
    alloc: Mapping[str, Any] | None
    written: list[list[int]] = field(default_factory=list)  # merged [lo, hi) intervals
    last: Mapping[str, Any] | None = None  # the last write noted


@dataclass
class _Span:
    """A static index span some graph reads: the last write of its bytes since it was first
    captured, as ``[lo, hi, start]`` segments (sorted, disjoint), ``start`` being where that
    write's bytes in the span begin; bytes in no segment were last written before."""

    graphs: set[int] = field(default_factory=set)  # the graphs capturing or holding it
    last: list[list[int]] = field(default_factory=list)

    def write(self, lo: int, hi: int) -> None:
        kept: list[list[int]] = []
        for seg in self.last:
            if seg[1] <= lo or hi <= seg[0]:
                kept.append(seg)
                continue
            if seg[0] < lo:
                kept.append([seg[0], lo, seg[2]])
            if hi < seg[1]:
                kept.append([hi, seg[1], seg[2]])
        kept.append([lo, hi, lo])
        kept.sort()
        self.last = kept

    def stale(self, lo: int, hi: int) -> bool:
        """Is some byte of ``[lo, hi)`` stale: last written before the span was watched, or by
        a write that began before ``lo``?"""
        at = lo
        for seg in self.last:
            if seg[1] <= at:
                continue
            if seg[0] >= hi:
                break
            if seg[0] > at or seg[2] < lo:
                return True
            at = seg[1]
        return at < hi


@dataclass
class _Program:
    indices: dict[Span, _Index] = field(default_factory=dict)
    writes: list[Span] = field(default_factory=list)  # every span its program writes
    merged: dict[int, list[list[int]]] = field(default_factory=dict)  # device -> merged writes


class PaddedIndexCheck(ProgramCheck[_Program]):
    """Fed every event in order; ``found`` holds the detections."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, SortedBlocks[_Block]] = {}  # device -> live blocks
        self._watched: dict[Span, _Span] = {}  # index spans of the captures and programs
        self.found: list[PaddedScatter] = []

    # -- streams and captures ------------------------------------------------------------------
    def _new_program(self, graph: int) -> _Program:
        return _Program()  # its index facts

    def _kept(self, graph: int, program: _Program) -> None:
        for device in {span[0] for span in program.writes}:
            program.merged[device] = _merge(sorted((lo, hi) for d, lo, hi in program.writes if d == device))
        program.writes = []
        # An index the program writes itself is computed in the graph: not a static input.
        program.indices = {
            span: index for span, index in program.indices.items() if not _meets(program.merged.get(span[0], []), span)
        }
        for span in {span for span in self._watched if graph in self._watched[span].graphs} - set(program.indices):
            self._leave(span, graph)

    def _dropped(self, graph: int, program: _Program) -> None:
        for span in program.indices:
            self._leave(span, graph)

    def _leave(self, span: Span, graph: int) -> None:
        watched = self._watched[span]
        watched.graphs.discard(graph)
        if not watched.graphs:
            del self._watched[span]

    # -- memory --------------------------------------------------------------------------------
    def _alloc(self, ev: Mapping[str, Any]) -> None:
        blocks = self._live.setdefault(self._devices.of(ev, ev["stream"]), SortedBlocks())
        blocks.insert(_Block(ev["addr"], ev["addr"] + ev["size"], ev))

    def _free(self, ev: Mapping[str, Any]) -> None:
        blocks = self._live.get(self._devices.of(ev, ev.get("stream")))
        if blocks is None:
            return
        pos = blocks.bisect_left(ev["addr"])
        if pos != blocks.end and blocks.start(pos) == ev["addr"]:
            blocks.pop(pos)

    def _block_of(self, device: int, lo: int, hi: int) -> Mapping[str, Any] | None:
        blocks = self._live.get(device)
        block = blocks.last_at_or_before(lo) if blocks is not None else None
        return block.alloc if block is not None and hi <= block.end else None

    # -- work ----------------------------------------------------------------------------------
    def _op(self, ev: Mapping[str, Any]) -> None:
        stream = ev.get("stream")
        if stream is None:
            return
        device = self._devices.of(ev, stream)
        domain = self._hb.domain(stream)
        if domain is EAGER:
            if self._watched:
                for raw in ev["writes"]:
                    rng = normalize(raw)
                    if not rng.empty:
                        self._written(device, rng.lo, rng.hi, ev)
            return
        program = self._capturing.get(domain)
        if program is None:
            return
        for raw in ev["writes"]:
            rng = normalize(raw)
            if not rng.empty:
                program.writes.append((device, rng.lo, rng.hi))
        for raw in ev.get("index") or ():
            rng = normalize(raw)
            if rng.empty or not rng.dense:
                continue
            span = (device, rng.lo, rng.hi)
            index = program.indices.get(span)
            if index is None:
                index = program.indices[span] = _Index([], self._block_of(device, rng.lo, rng.hi))
                self._watched.setdefault(span, _Span()).graphs.add(domain)
            index.uses.append((ev, raw))

    def _written(self, device: int, lo: int, hi: int, ev: Mapping[str, Any]) -> None:
        """A write that runs: note it in every watched index span it meets."""
        for span, watched in self._watched.items():
            if span[0] != device or hi <= span[1] or span[2] <= lo:
                continue
            clipped = (max(lo, span[1]), min(hi, span[2]))
            watched.write(*clipped)
            for graph in watched.graphs:
                program = self._programs.get(graph)
                index = program.indices.get(span) if program is not None else None
                if index is not None:
                    index.written = _merge(sorted([(lo, hi) for lo, hi in index.written] + [clipped]))
                    index.last = ev

    def _replay(self, ev: Mapping[str, Any]) -> None:
        graph, stream = ev["graph"], ev["stream"]
        program = self._programs.get(graph)
        if program is None or graph in self._capturing or self._hb.domain(stream) is not EAGER:
            return
        for span, index in program.indices.items():
            written, index.written, last = index.written, [], index.last
            lo, hi = span[1], span[2]
            if len(written) != 1 or written[0][0] != lo or written[0][1] >= hi or last is None:
                continue
            if not self._watched[span].stale(written[0][1], hi):
                continue  # the tail was reset on its own since the capture
            use, raw = index.uses[0]
            refreshed = written[0][1] - lo
            self.found.append(
                PaddedScatter(
                    graph=graph,
                    use=use,
                    more=len(index.uses) - 1,
                    index=raw,
                    replay=ev,
                    refresh=last,
                    refreshed=refreshed,
                    nbytes=hi - lo,
                    rows=_rows(raw, refreshed),
                    alloc=index.alloc,
                )
            )
        # What the replay writes runs too: another graph's static index may be among it.
        if self._watched:
            for device, merged in program.merged.items():
                for lo, hi in merged:
                    self._written(device, lo, hi, ev)


def _merge(intervals: list[tuple[int, int]]) -> list[list[int]]:
    """Sorted intervals joined where they touch or overlap."""
    out: list[list[int]] = []
    for lo, hi in intervals:
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _meets(merged: list[list[int]], span: Span) -> bool:
    """Does a merged (sorted, disjoint) interval list meet ``span``'s bytes?"""
    i = bisect_left(merged, [span[2]])  # the first interval starting at or past the span's end
    return i > 0 and merged[i - 1][1] > span[1]


def _rows(raw: Mapping[str, Any], refreshed: int) -> tuple[int, int] | None:
    """(rows refreshed, rows captured) of a dense index with a shape; None without rows."""
    shape, stride, itemsize = raw.get("shape"), raw.get("stride"), raw.get("itemsize")
    if not shape or not stride or stride[0] <= 0:
        return None
    row = stride[0] * itemsize
    return refreshed // row, shape[0]


PaddedIndexCheck.HANDLERS = {
    **PROGRAM_HANDLERS,
    "alloc": PaddedIndexCheck._alloc,
    "free": PaddedIndexCheck._free,
    "op": PaddedIndexCheck._op,
    "kernel": PaddedIndexCheck._op,
    "replay": PaddedIndexCheck._replay,
}
