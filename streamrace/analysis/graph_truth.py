"""Check the modelled happens-before against the captured graph's own edges.

Inside a capture, CUDA's graph is the truth: at replay two nodes run in the order a path
between them imposes, and in any order otherwise. The recorder reads each graph back (the
``graph`` event: nodes tied to the op or kernel event that created them, and edges). This
module finds every pair of accesses to the same bytes from two launches of one capture, at
least one a write, that the graph leaves unordered (no node of the earlier launch reaches a
node of the later one), and compares them with the races the clock model reported. Any
difference is a fault in streamrace or in the recording, a ``Disagreement`` that the
model-disagreement detector reports loudly (streamrace/analysis/detectors/model_disagreement.py,
which declares the record and runs this check as a pass over the engine's results): the two
must never disagree silently.

The pairs are found with the engine's covering rule, reachability (streamrace/analysis/
graph_reach.py) in place of clocks, so a graph that orders what it should costs time linear in
its accesses (docs/analysis.md §9): only pairs the rule cannot rule out are looked at one by
one. Programmatic (dependent-launch) edges do not order completion and are left out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from streamrace.analysis.core import new_graph_collector
from streamrace.analysis.detectors.model_disagreement import MISSED, SAME_STREAM, UNFOUNDED, Disagreement
from streamrace.analysis.graph_reach import GraphReach, LaunchReach, reaches
from streamrace.analysis.ranges import ByteRange, Overlap, normalize, overlaps

_LAUNCHES = ("op", "kernel")


class NodesOf(Protocol):
    """Launch seq -> the ids of the graph nodes it created (a dict, or the C++ core's index)."""

    def __contains__(self, seq: object) -> bool: ...

    def __getitem__(self, seq: int) -> list[int]: ...


class GraphTruth:
    """Fed every event in order; keeps one capture's launches until its graph arrives."""

    def __init__(self) -> None:
        self._open: dict[int, list[Mapping[str, Any]]] = {}  # graph -> its launches so far
        self.unordered: dict[int, set[tuple[int, int]]] = {}  # graph -> conflicting (earlier, later) seqs
        self.same_stream_unordered: dict[int, set[tuple[int, int]]] = {}
        self.nodes_of: dict[int, NodesOf] = {}  # graph -> seq -> node ids
        self.checked_graphs: set[int] = set()
        self.launches: dict[int, Mapping[str, Any]] = {}  # seq -> launch, for those in unordered pairs
        # With the C++ core, it collects the launches and does the check's work in C++.
        self._native = new_graph_collector()

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """Pass the events through, looking at each on the way (the engine reads them once)."""
        if self._native is not None:
            return self._native.observe(events, self._check)
        return self._observe(events)

    def _observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for ev in events:
            self.feed(ev)
            yield ev

    def feed(self, ev: Mapping[str, Any]) -> None:
        if self._native is not None:
            self._native.feed(ev, self._check)
            return
        kind = ev["ev"]
        if kind == "capture_begin":
            self._open[ev["graph"]] = []
        elif kind in _LAUNCHES and ev.get("stream") is not None:
            # A kernel names its graph; an op's capture is the one open, if only one is.
            graph = ev.get("graph") if kind == "kernel" else None
            if graph is None:
                graph = next(iter(self._open)) if len(self._open) == 1 else None
            if graph in self._open:
                self._open[graph].append(ev)
        elif kind == "graph":
            launches = self._open.pop(ev["graph"], None)
            if launches is not None:
                self._check(ev["graph"], launches, ev)

    def _check(
        self,
        graph: int,
        launches: list[Mapping[str, Any]],
        graph_ev: Mapping[str, Any],
        native: tuple[NodesOf, list[tuple[int, int]]] | None = None,
    ) -> None:
        """One capture's launches against its graph. ``native``: the C++ core's answer, when it
        had one (it leaves a malformed graph, or ids beyond 64 bits, to this reference)."""
        nodes_of: NodesOf
        pairs: Iterable[tuple[int, int]]
        if native is not None:
            nodes_of, pairs = native
            positions = launches
        else:
            reach = GraphReach(graph_ev, {ev["seq"]: ev["stream"] for ev in launches})
            nodes_of = reach.nodes_of
            positions = [ev for ev in launches if ev["seq"] in nodes_of]
            pairs = unordered_conflicts(positions, [reach.launch(ev["seq"]) for ev in positions])
        self.nodes_of[graph] = nodes_of
        self.checked_graphs.add(graph)
        unordered: set[tuple[int, int]] = set()
        same_stream: set[tuple[int, int]] = set()
        for a, b in pairs:
            first, second = positions[a], positions[b]
            pair = (first["seq"], second["seq"])
            (same_stream if first["stream"] == second["stream"] else unordered).add(pair)
            self.launches[pair[0]], self.launches[pair[1]] = first, second
        self.unordered[graph] = unordered
        self.same_stream_unordered[graph] = same_stream

    def disagreements(self, model_later: Mapping[int, Iterable[int]]) -> list[Disagreement]:
        """Where the graph and the races the model reported differ; ``model_later``: graph ->
        seqs of the launches the model reports as racing with an earlier one."""
        out = []
        for graph in sorted(self.checked_graphs):
            nodes_of = self.nodes_of[graph]
            reported = {seq for seq in model_later.get(graph, ()) if seq in nodes_of}
            unordered = self.unordered[graph]
            for a, b in sorted(unordered):
                if b not in reported:
                    reported.add(b)  # one disagreement per later launch
                    out.append(self._disagreement(MISSED, graph, a, b))
            flagged = {b for _, b in unordered}
            for b in sorted(reported - flagged):
                out.append(self._unfounded(graph, b))
            for a, b in sorted(self.same_stream_unordered[graph]):
                out.append(self._disagreement(SAME_STREAM, graph, a, b))
        return out

    def _disagreement(self, what: str, graph: int, a: int, b: int) -> Disagreement:
        nodes = self.nodes_of[graph]
        return Disagreement(what, graph, b, {a: nodes[a], b: nodes[b]}, (self.launches[a], self.launches[b]))

    def _unfounded(self, graph: int, b: int) -> Disagreement:
        return Disagreement(UNFOUNDED, graph, b, {b: self.nodes_of[graph][b]})


def unordered_conflicts(launches: list[Mapping[str, Any]], reach: list[LaunchReach]) -> set[tuple[int, int]]:
    """Every pair ``(earlier, later)`` of positions in ``launches`` (in program order) that touch
    a common byte, at least one writing it, where no node of the earlier reaches a node of the
    later; ``reach[i]`` is where launch ``i``'s nodes sit in the graph.

    Ranges are taken by their spans to find who can meet whom, then by their bytes (exact,
    docs/analysis.md §3) for the pairs found unordered, so the answer is the exact one.
    """
    histories, written = _histories(launches)
    sweep = _CoveringSweep(reach)
    for keys in _overlapping_groups(histories, written):
        sweep.group(keys, histories)
    return sweep.found


# A range as a dictionary key: (addr, nbytes), or (addr, shape, stride, itemsize) if strided.
RangeKey = tuple[Any, ...]


def _histories(launches: list[Mapping[str, Any]]) -> tuple[dict[RangeKey, list[int]], set[RangeKey]]:
    """Per distinct range, its accesses in program order as ``2 * launch + is_write`` (a
    launch's reads before its writes), and the ranges written at all."""
    histories: dict[RangeKey, list[int]] = {}
    written: set[RangeKey] = set()
    for index, ev in enumerate(launches):
        item = 2 * index
        for ranges in (ev["reads"], ev["writes"]):
            for rng in ranges:
                nbytes = rng.get("nbytes")
                if nbytes is not None:
                    if nbytes <= 0:
                        continue
                    key: RangeKey = (rng["addr"], nbytes)
                else:
                    if 0 in rng["shape"]:
                        continue
                    key = (rng["addr"], tuple(rng["shape"]), tuple(rng["stride"]), rng["itemsize"])
                history = histories.get(key)
                if history is None:
                    histories[key] = [item]
                else:
                    history.append(item)
                if item & 1:
                    written.add(key)
            item += 1
    return histories, written


def _span(key: RangeKey) -> tuple[int, int]:
    """``[lo, hi)`` holding every byte of the range (as ``normalize(...).span()``)."""
    if len(key) == 2:
        return key[0], key[0] + key[1]
    addr, shape, stride, itemsize = key
    lo, hi = addr, addr + itemsize
    for count, step in zip(shape, stride, strict=True):
        reach = (count - 1) * step * itemsize
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi


def _normal(key: RangeKey) -> ByteRange:
    if len(key) == 2:
        return normalize({"addr": key[0], "nbytes": key[1]})
    return normalize({"addr": key[0], "shape": key[1], "stride": key[2], "itemsize": key[3]})


def _overlapping_groups(histories: dict[RangeKey, list[int]], written: set[RangeKey]) -> Iterator[list[RangeKey]]:
    """The written ranges and the ranges that meet one, in groups whose spans chain together:
    accesses in different groups share no byte. A range only ever read is left out."""
    spans = {key: _span(key) for key in written}
    starts: list[int] = []  # the union of the written spans, as disjoint intervals
    ends: list[int] = []
    for lo, hi in sorted(spans.values()):
        if ends and lo < ends[-1]:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    for key in histories:
        if key not in written:
            lo, hi = _span(key)
            i = bisect_right(starts, lo) - 1
            if (i >= 0 and ends[i] > lo) or (i + 1 < len(starts) and starts[i + 1] < hi):
                spans[key] = (lo, hi)
    group: list[RangeKey] = []
    group_end = None
    for key in sorted(spans, key=spans.__getitem__):
        lo, hi = spans[key]
        if group_end is not None and lo < group_end:
            group.append(key)
            group_end = max(group_end, hi)
        else:
            if group:
                yield group
            group, group_end = [key], hi
    if group:
        yield group


class _CoveringSweep:
    """The covering rule over the captured graph, one group of overlapping ranges at a time.

    The group's spans cut its bytes into segments, each touched or not by every range. Per
    segment, in program order, the accesses fall into slices: a slice starts with a covering
    write, one that every access of the slice before it and that slice's covering write reach
    with some node of theirs every node of it (``meet``, a transitive order), so everything
    earlier reaches it in the same way. A new access is compared with the accesses of the
    latest slice only (its writes; its reads too when the new access writes) and with the
    covering write that starts it: when that write reaches it, so does everything before.
    Only when it does not (a race, by the graph) does the walk go back, slice by slice, to a
    covering write that does. A graph that orders what it should does constant work per access
    and segment; every pair left unordered is found, and kept if the bytes truly meet.
    """

    def __init__(self, reach: list[LaunchReach]) -> None:
        self._marks = [r.marks for r in reach]
        self._join = [r.join for r in reach]
        self._meet = [r.meet for r in reach]
        self._keys: list[RangeKey] = []  # the group's ranges, by local number
        self._normals: dict[RangeKey, ByteRange] = {}
        self.found: set[tuple[int, int]] = set()

    def group(self, keys: list[RangeKey], histories: dict[RangeKey, list[int]]) -> None:
        self._keys = keys
        if len(keys) == 1:
            segment = _new_segment()
            for item in histories[keys[0]]:
                self._step(segment, item >> 1, item & 1, 0)
            return
        cuts = sorted({end for key in keys for end in _span(key)})
        cut_index = {cut: i for i, cut in enumerate(cuts)}
        covered = [(cut_index[lo], cut_index[hi]) for lo, hi in map(_span, keys)]
        segments = [_new_segment() for _ in range(len(cuts) - 1)]
        count = len(keys)
        merged = sorted(item * count + k for k, key in enumerate(keys) for item in histories[key])
        for tagged in merged:
            item, k = divmod(tagged, count)
            first, last = covered[k]
            for i in range(first, last):
                self._step(segments[i], item >> 1, item & 1, k)

    def _meets(self, ka: int, kb: int) -> bool:
        """Do the bytes of two of the group's ranges meet (not just their spans)?"""
        if ka == kb:
            return True
        a, b = self._keys[ka], self._keys[kb]
        normals = self._normals
        if a not in normals:
            normals[a] = _normal(a)
        if b not in normals:
            normals[b] = _normal(b)
        return overlaps(normals[a], normals[b]) is not Overlap.NONE

    def _step(self, segment: list[Any], b: int, write: int, kb: int) -> None:
        """Access ``kb`` by launch ``b`` on one segment: find its unordered partners, then
        record it (a covering write starts a new slice)."""
        marks, join, meet, found = self._marks, self._join, self._meet, self.found
        join_b, meet_b = join[b], meet[b]
        cover, cover_key, writes, reads, _ = segment
        covering = bool(write)  # can b start a slice: does all of the latest slice reach all of b?
        for partners in (writes, reads) if write else (writes,):
            for a, ka in partners:
                if a == b or reaches(marks[a], meet_b):
                    continue
                covering = False
                if not reaches(marks[a], join_b) and self._meets(ka, kb):
                    found.add((a, b))
        if cover >= 0 and cover != b and not reaches(marks[cover], meet_b):
            covering = False
            if not reaches(marks[cover], join_b):
                self._walk_back(segment, b, write, kb)
        if covering:
            segment[4].append((cover, cover_key, writes, reads))
            segment[:4] = b, kb, [], []
        elif write:
            writes.append((b, kb))
        else:
            reads.append((b, kb))

    def _walk_back(self, segment: list[Any], b: int, write: int, kb: int) -> None:
        """The latest covering write does not reach ``b``: go back through the earlier slices,
        each's accesses compared one by one, until a covering write that reaches ``b``."""
        marks, join_b, found = self._marks, self._join[b], self.found
        cover, cover_key = segment[0], segment[1]
        for earlier_cover, earlier_key, writes, reads in reversed(segment[4]):
            if self._meets(cover_key, kb):
                found.add((cover, b))
            for partners in (writes, reads) if write else (writes,):
                for a, ka in partners:
                    if a != b and not reaches(marks[a], join_b) and self._meets(ka, kb):
                        found.add((a, b))
            cover, cover_key = earlier_cover, earlier_key
            if cover < 0 or cover == b or reaches(marks[cover], join_b):
                return


def _new_segment() -> list[Any]:
    """[covering write (-1: none yet), its range, the latest slice's writes and reads, the
    earlier slices as (covering write, its range, writes, reads)]."""
    return [-1, -1, [], [], []]
