"""Check the modelled happens-before against the captured graph's own edges.

Inside a capture, CUDA's graph is the truth: at replay two nodes run in the order a path
between them imposes, and in any order otherwise. The recorder reads each graph back (the
``graph`` event: nodes tied to the op or kernel event that created them, and edges). This
module finds every pair of accesses to the same bytes from two launches of one capture, at
least one a write, asks the graph whether one reaches the other, and compares the answer
with the races the clock model reported. Any difference is a fault in streamrace or in the
recording, reported loudly as a ``model-disagreement`` finding naming both launches and their
graph nodes: the two must never disagree silently.

Programmatic (dependent-launch) edges do not order completion and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import networkx as nx

from streamrace.analysis.findings import DATA_RACE, MODEL_DISAGREEMENT, UNSAFE_FREE, Access, Finding
from streamrace.analysis.ranges import Overlap, normalize, overlaps

_REPORT = (
    "a fault in streamrace or in its recording, not a verdict on your program: please report it with the trace "
    "(streamrace run -o trace.jsonl.gz)"
)

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

    def disagreements(
        self, raw: Iterable[Finding], describe: Callable[[Mapping[str, Any], str], Access]
    ) -> list[Finding]:
        """Model-disagreement findings: where the graph and the reported races differ.

        ``describe(event, access_kind)`` turns a launch event into an Access (labels, sites)."""
        model_later: dict[int, set[int]] = {}
        for finding in raw:
            if finding.kind == DATA_RACE or (finding.kind == UNSAFE_FREE and finding.aliasing):
                model_later.setdefault(finding.graph, set()).add(finding.accesses[1].seq)
        out = []
        for graph in sorted(self.checked_graphs):
            nodes_of = self.nodes_of[graph]
            reported = {seq for seq in model_later.get(graph, ()) if seq in nodes_of}
            unordered = self.unordered[graph]
            for a, b in sorted(unordered):
                if b not in reported:
                    reported.add(b)  # one disagreement per later launch
                    out.append(self._finding(graph, a, b, describe, "no path in the graph, but the model orders them"))
            flagged = {b for _, b in unordered}
            for b in sorted(reported - flagged):
                out.append(self._unfounded(graph, b))
            for a, b in sorted(self.same_stream_unordered[graph]):
                out.append(self._finding(graph, a, b, describe, "same stream, yet no path between them in the graph"))
        return out

    def _finding(
        self, graph: int, a: int, b: int, describe: Callable[[Mapping[str, Any], str], Access], what: str
    ) -> Finding:
        first, second = self.launches[a], self.launches[b]
        nodes = self.nodes_of[graph]
        return Finding(
            kind=MODEL_DISAGREEMENT,
            hazard=None,
            accesses=[
                describe(first, "write" if first["writes"] else "read"),
                describe(second, "write" if second["writes"] else "read"),
            ],
            message=(
                f"streamrace's model and graph {graph} disagree about {first.get('op') or first.get('name')} "
                f"(nodes {nodes[a]}) and {second.get('op') or second.get('name')} (nodes {nodes[b]}): {what}"
            ),
            fix=_REPORT,
            graph=graph,
        )

    def _unfounded(self, graph: int, b: int) -> Finding:
        return Finding(
            kind=MODEL_DISAGREEMENT,
            hazard=None,
            accesses=[],
            message=(
                f"streamrace's model reports a race at the launch with seq {b} (nodes {self.nodes_of[graph][b]}) "
                f"of graph {graph}, but in the graph every conflicting launch reaches it"
            ),
            fix=_REPORT,
            graph=graph,
        )


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
