"""The graph check by brute force, for small graphs: every pair of launches, every pair of their
ranges, reachability from networkx. What streamrace/analysis/graph_truth.py must find, however
it finds it (tests/test_graph_truth_property.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import networkx as nx

from streamrace.analysis.ranges import Overlap, normalize, overlaps


def unordered_pairs(
    launches: list[Mapping[str, Any]], graph_ev: Mapping[str, Any]
) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(on different streams, on one stream): the (earlier, later) seq pairs of launches that
    share a byte, at least one writing it, where no node of the earlier reaches (or is) a node
    of the later. ``launches`` in program order; programmatic edges do not order."""
    dag = nx.DiGraph()
    dag.add_nodes_from(node["id"] for node in graph_ev["nodes"])
    dag.add_edges_from((edge[0], edge[1]) for edge in graph_ev["edges"] if len(edge) == 2)
    nodes_of: dict[int, list[int]] = {}
    for node in graph_ev["nodes"]:
        if node.get("op") is not None:
            nodes_of.setdefault(node["op"], []).append(node["id"])
    below = {node: nx.descendants(dag, node) | {node} for node in dag}
    checked = [ev for ev in launches if ev["seq"] in nodes_of]
    cross: set[tuple[int, int]] = set()
    same: set[tuple[int, int]] = set()
    for a, b in itertools.combinations(checked, 2):
        if any(nb in below[na] for na in nodes_of[a["seq"]] for nb in nodes_of[b["seq"]]):
            continue
        if any(
            overlaps(normalize(ra), normalize(rb)) is not Overlap.NONE
            for ra, wa in _accesses(a)
            for rb, wb in _accesses(b)
            if wa or wb
        ):
            (same if a["stream"] == b["stream"] else cross).add((a["seq"], b["seq"]))
    return cross, same


def _accesses(ev: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    return [(r, False) for r in ev["reads"]] + [(w, True) for w in ev["writes"]]
