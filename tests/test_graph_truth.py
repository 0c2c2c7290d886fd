"""The clock model against CUDA's own graph edges, on the real H200 traces, and on doctored
copies of them that the check must catch."""

from __future__ import annotations

import copy
import itertools
import pathlib

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import MODEL_DISAGREEMENT
from streamrace.analysis.graph_truth import GraphTruth
from streamrace.trace import Trace, load_trace

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"
NAMES = sorted(p.name.removesuffix(".jsonl.gz") for p in TRACES.glob("*.jsonl.gz"))


def _disagreements(trace: Trace):
    """The graph-truth check on its own, and the model-disagreement findings of the analysis,
    which runs it as a pass."""
    truth = GraphTruth()
    for ev in trace.events:
        truth.feed(ev)
    return truth, [f for f in analyze(trace).raw_findings if f.kind == MODEL_DISAGREEMENT]


@pytest.mark.parametrize("name", NAMES)
def test_model_and_graph_agree_on_every_real_trace(name):
    truth, found = _disagreements(load_trace(TRACES / f"{name}.jsonl.gz"))
    assert truth.checked_graphs, "every recorded capture carries its graph"
    assert found == []


def _doctored(name: str, edit) -> Trace:
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    events = copy.deepcopy(trace.events)
    for ev in events:
        if ev["ev"] == "graph":
            edit(ev)
    return Trace(header=trace.header, events=events, stacks=trace.stacks)


def test_a_missing_edge_the_model_did_not_see_is_reported():
    """Cut every edge into the main stream's first op after the join: the graph now lets it run
    alongside the KV stream's reads, which the model (still seeing the waits) calls ordered."""
    clean = load_trace(TRACES / "dsv4_mini_fixed.jsonl.gz")
    kv_ops = {e["seq"] for e in clean.events if e["ev"] == "op" and e["stream"] != _main(clean)}

    def cut(graph_ev):
        owner = {n["id"]: n.get("op") for n in graph_ev["nodes"]}
        graph_ev["edges"] = [e for e in graph_ev["edges"] if owner.get(e[0]) not in kv_ops]

    _, found = _disagreements(_doctored("dsv4_mini_fixed", cut))
    assert found and all(f.kind == MODEL_DISAGREEMENT for f in found)
    assert "no path in the graph" in found[0].message and "nodes" in found[0].message


def test_a_race_the_graph_orders_is_reported_as_unfounded():
    """Add an edge from every node to every later node: the graph is a chain, so the race the
    model reports (rightly, for the real graph) has no ground any more."""

    def chain(graph_ev):
        ids = [n["id"] for n in graph_ev["nodes"]]
        graph_ev["edges"] = [[a, b] for a, b in itertools.pairwise(ids)]

    _, found = _disagreements(_doctored("dsv4_mini_race", chain))
    assert any("every conflicting launch reaches it" in f.message for f in found)


def test_programmatic_edges_do_not_order():
    def programmatic(graph_ev):
        ids = [n["id"] for n in graph_ev["nodes"]]
        graph_ev["edges"] = [[a, b, "programmatic"] for a, b in itertools.pairwise(ids)]

    truth, found = _disagreements(_doctored("dsv4_mini_race", programmatic))
    assert not any("every conflicting launch reaches it" in f.message for f in found)
    assert any(truth.unordered.values())


def _main(trace: Trace) -> int:
    return next(e["stream"] for e in trace.events if e["ev"] == "capture_begin")
