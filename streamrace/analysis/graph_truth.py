"""Check the modelled happens-before against the captured graph's own edges.

Inside a capture, CUDA's graph is the truth: at replay two nodes run in the order a path
between them imposes, and in any order otherwise. The recorder reads each graph back (the
``graph`` event: nodes tied to the op or kernel event that created them, and edges). This
module finds every pair of accesses to the same bytes from two launches of one capture, at
least one a write, asks the graph whether one reaches the other, and compares the answer
with the races the clock model reported. Any difference is a fault in streamrace or in the
recording, a ``Disagreement`` that the model-disagreement detector reports loudly
(streamrace/analysis/detectors/model_disagreement.py, which declares the record and runs this
check as a pass over the engine's results): the two must never disagree silently.

Programmatic (dependent-launch) edges do not order completion and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import networkx as nx

from streamrace.analysis.detectors.model_disagreement import MISSED, SAME_STREAM, UNFOUNDED, Disagreement
from streamrace.analysis.ranges import Overlap, normalize, overlaps

_LAUNCHES = ("op", "kernel")


class GraphTruth:
    """Fed every event in order; keeps one capture's launches until its graph arrives."""

    def __init__(self) -> None:
        self._open: dict[int, list[Mapping[str, Any]]] = {}  # graph -> its launches so far
        self._member: dict[int, int] = {}  # stream -> graph it captures into (as the recorder saw it)
        self.unordered: dict[int, set[tuple[int, int]]] = {}  # graph -> conflicting (earlier, later) seqs
        self.same_stream_unordered: dict[int, set[tuple[int, int]]] = {}
        self.nodes_of: dict[int, dict[int, list[int]]] = {}  # graph -> seq -> node ids
        self.checked_graphs: set[int] = set()
        self.launches: dict[int, Mapping[str, Any]] = {}  # seq -> launch, for those in unordered pairs

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """Pass the events through, looking at each on the way (the engine reads them once)."""
        for ev in events:
            self.feed(ev)
            yield ev

    def feed(self, ev: Mapping[str, Any]) -> None:
        kind = ev["ev"]
        if kind == "capture_begin":
            self._open[ev["graph"]] = []
        elif kind in _LAUNCHES and ev.get("stream") is not None:
            graph = ev.get("graph")
            if graph is None:  # an op: its capture is the one whose launches we are collecting
                graph = next(reversed(self._open), None) if len(self._open) == 1 else None
            if graph in self._open:
                self._open[graph].append(ev)
        elif kind == "graph":
            launches = self._open.pop(ev["graph"], None)
            if launches is not None:
                self._check(ev["graph"], launches, ev)

    def _check(self, graph: int, launches: list[Mapping[str, Any]], graph_ev: Mapping[str, Any]) -> None:
        dag = nx.DiGraph()
        dag.add_nodes_from(n["id"] for n in graph_ev["nodes"])
        dag.add_edges_from((e[0], e[1]) for e in graph_ev["edges"] if len(e) == 2)
        nodes_of: dict[int, list[int]] = {}
        for node in graph_ev["nodes"]:
            if "op" in node:
                nodes_of.setdefault(node["op"], []).append(node["id"])
        self.nodes_of[graph] = nodes_of
        self.checked_graphs.add(graph)
        ancestors = _ancestor_sets(dag)
        unordered: set[tuple[int, int]] = set()
        same_stream: set[tuple[int, int]] = set()
        for a, b in _conflicts([ev for ev in launches if ev["seq"] in nodes_of]):
            reach_b = 0
            for node in nodes_of[b["seq"]]:
                reach_b |= ancestors[node]
            if any(reach_b >> node & 1 for node in nodes_of[a["seq"]]):
                continue
            (same_stream if a["stream"] == b["stream"] else unordered).add((a["seq"], b["seq"]))
        self.unordered[graph] = unordered
        self.same_stream_unordered[graph] = same_stream
        involved = {seq for pair in unordered | same_stream for seq in pair}
        for ev in launches:
            if ev["seq"] in involved:
                self.launches[ev["seq"]] = ev

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


def _ancestor_sets(dag: nx.DiGraph) -> dict[int, int]:
    """Node -> bitset of the nodes that reach it (itself included), in one topological pass."""
    ancestors: dict[int, int] = {}
    for node in nx.topological_sort(dag):
        bits = 1 << node
        for pred in dag.predecessors(node):
            bits |= ancestors[pred]
        ancestors[node] = bits
    return ancestors


_GRANULE = 1 << 21  # the engine's shadow-memory granule: accesses meet only within one


def _conflicts(launches: list[Mapping[str, Any]]) -> Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Pairs (earlier, later) of launches touching a common byte, at least one writing it."""
    buckets: dict[int, list[tuple[int, bool, Any]]] = {}
    found: set[tuple[int, int]] = set()
    for index, ev in enumerate(launches):
        for rng, write in [(r, False) for r in ev["reads"]] + [(w, True) for w in ev["writes"]]:
            normal = normalize(rng)
            if normal.empty:
                continue
            lo, hi = normal.span()
            for granule in range(lo // _GRANULE, (hi - 1) // _GRANULE + 1):
                bucket = buckets.setdefault(granule, [])
                for other, other_write, other_range in bucket:
                    if other == index or not (write or other_write) or (other, index) in found:
                        continue
                    if overlaps(normal, other_range) is not Overlap.NONE:
                        found.add((other, index))
                bucket.append((index, write, normal))
    for first, second in sorted(found):
        yield launches[first], launches[second]
