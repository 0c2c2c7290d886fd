"""The graph check against brute force (tests/graph_truth_reference.py) on random small
captures: random DAGs (ids 0..n-1 in any order, edges against creation order, programmatic
edges, nodes of no launch or of a seq that is no launch, launches of several nodes side by
side) and random accesses (dense and strided, overlapping a lot) on up to three streams.
Both the Python check and the C++ core's find exactly the reference's pairs.
"""

from __future__ import annotations

from typing import Any

import pytest
from analysis_engines import core
from graph_truth_reference import unordered_pairs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrace.analysis.core import cpp_available
from streamrace.analysis.graph_truth import GraphTruth

PROPERTY = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CORES = ["python"] + (["cpp"] if cpp_available() else [])
FIRST_SEQ = 10


def ranges() -> st.SearchStrategy[dict[str, Any]]:
    # 240 bytes up from 0: a negative stride never reaches below address 0, which no trace
    # holds (the reader and both engines refuse it)
    dense = st.builds(lambda a, n: {"addr": a, "nbytes": n}, st.integers(240, 272), st.integers(0, 24))
    strided = st.integers(1, 3).flatmap(
        lambda dims: st.builds(
            lambda a, shape, stride, size: {"addr": a, "shape": shape, "stride": stride, "itemsize": size},
            st.integers(256, 288),
            st.lists(st.integers(0, 4), min_size=dims, max_size=dims),
            st.lists(st.integers(-6, 8), min_size=dims, max_size=dims),
            st.integers(1, 4),
        )
    )
    return st.one_of(dense, dense, strided)


@st.composite
def captures(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A capture's launches, in program order, and its graph event."""
    count = draw(st.integers(1, 6))
    launches = [
        {
            "seq": FIRST_SEQ + i,
            "ev": "op",
            "op": f"op{i}",
            "stream": draw(st.sampled_from([1, 2, 3])),
            "reads": draw(st.lists(ranges(), max_size=3)),
            "writes": draw(st.lists(ranges(), max_size=3)),
        }
        for i in range(count)
    ]
    # Node ids in creation order: as the recorder numbers them (the C++ core's fast path), or not.
    count_nodes = draw(st.integers(0, 12))
    ids = list(range(count_nodes)) if draw(st.booleans()) else draw(st.permutations(range(count_nodes)))
    seqs = [ev["seq"] for ev in launches]
    nodes = []
    for node_id in ids:
        node: dict[str, Any] = {"id": node_id, "type": "kernel"}
        op = draw(st.sampled_from([*seqs, *seqs, *seqs, None, FIRST_SEQ - 1]))
        if op is not None:
            node["op"] = op
        nodes.append(node)
    topological = draw(st.permutations(ids))
    edges = []
    for _ in range(draw(st.integers(0, 3 * len(ids)))) if len(ids) > 1 else ():
        i, j = sorted(draw(st.lists(st.integers(0, len(ids) - 1), min_size=2, max_size=2, unique=True)))
        edge: list[Any] = [topological[i], topological[j]]
        if draw(st.integers(0, 5)) == 0:
            edge.append("programmatic")
        edges.append(edge)
    return launches, {"seq": FIRST_SEQ + count + 1, "ev": "graph", "graph": 1, "nodes": nodes, "edges": edges}


def checked(launches: list[dict[str, Any]], graph_ev: dict[str, Any], name: str) -> GraphTruth:
    with core(name):
        truth = GraphTruth()
    truth.feed({"seq": 0, "ev": "capture_begin", "graph": 1, "stream": 1})
    for ev in launches:
        truth.feed(ev)
    truth.feed({"seq": FIRST_SEQ + len(launches), "ev": "capture_end", "graph": 1})
    truth.feed(graph_ev)
    return truth


@pytest.mark.parametrize("name", CORES)
@PROPERTY
@given(captures())
def test_the_check_finds_exactly_the_unordered_conflicts(name, capture):
    launches, graph_ev = capture
    cross, same = unordered_pairs(launches, graph_ev)
    truth = checked(launches, graph_ev, name)
    assert truth.checked_graphs == {1}
    assert truth.unordered[1] == cross
    assert truth.same_stream_unordered[1] == same
    nodes_of = truth.nodes_of[1]
    for ev in launches:
        ids = [n["id"] for n in graph_ev["nodes"] if n.get("op") == ev["seq"]]
        assert (ev["seq"] in nodes_of) == bool(ids)
        if ids:
            assert nodes_of[ev["seq"]] == ids


def test_the_generator_makes_unordered_pairs_of_both_kinds():
    """The property above is only worth something if its examples disagree with the naive
    answers: some captures have cross-stream pairs, some same-stream ones, some none."""
    seen = {"cross": 0, "same": 0, "none": 0}

    @settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(captures())
    def count(capture):
        cross, same = unordered_pairs(*capture)
        seen["cross"] += bool(cross)
        seen["same"] += bool(same)
        seen["none"] += not (cross or same)

    count()
    assert all(n >= 10 for n in seen.values()), seen


@pytest.mark.parametrize("name", CORES)
def test_a_launch_of_parallel_nodes_orders_nothing_through_itself(name):
    """A reaches one node of B, the other node of B reaches C: each is ordered with the next,
    yet A and C are not. The order between launches is not transitive, so a launch of several
    nodes only stands in for earlier ones when all its nodes are reached."""
    write = [{"addr": 0, "nbytes": 8}]
    launches = [
        {"seq": FIRST_SEQ + i, "ev": "op", "op": f"op{i}", "stream": stream, "reads": [], "writes": write}
        for i, stream in enumerate([1, 2, 3])
    ]
    nodes = [{"id": i, "type": "kernel", "op": FIRST_SEQ + op} for i, op in enumerate([0, 1, 1, 2])]
    graph_ev = {"seq": 20, "ev": "graph", "graph": 1, "nodes": nodes, "edges": [[0, 1], [2, 3]]}
    assert unordered_pairs(launches, graph_ev) == ({(FIRST_SEQ, FIRST_SEQ + 2)}, set())
    assert checked(launches, graph_ev, name).unordered[1] == {(FIRST_SEQ, FIRST_SEQ + 2)}
