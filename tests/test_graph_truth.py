"""The clock model against CUDA's own graph edges, on the real H200 traces, and on doctored
copies of them that the check must catch. Every test runs on the engine the suite runs on
(``STREAMRACE_CORE``): the graph check's work is done by the C++ core when that is the engine.
"""

from __future__ import annotations

import copy
import itertools
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from graph_truth_reference import unordered_pairs

from streamrace.analysis import analyze
from streamrace.analysis.core import cpp_available
from streamrace.analysis.detectors import DATA_RACE, MODEL_DISAGREEMENT, UNSAFE_FREE
from streamrace.analysis.graph_reach import GraphInvalid
from streamrace.analysis.graph_truth import GraphTruth
from streamrace.cli import main
from streamrace.trace import Trace, load_trace
from streamrace.trace.io import write_trace

try:
    from streamrace import _core
except ImportError:  # not built
    _core = None

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
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    truth, found = _disagreements(trace)
    captured = any(ev["ev"] == "capture_begin" for ev in trace.events)  # X6 is eager only
    assert truth.checked_graphs or not captured, "every recorded capture carries its graph"
    assert found == []


@pytest.mark.parametrize("name", NAMES)
def test_the_check_finds_the_brute_force_pairs_on_every_real_trace(name):
    """The unordered conflicts themselves (races the model reports too), pair by pair."""
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    truth, _ = _disagreements(trace)
    for graph, (launches, graph_ev) in _captures(trace).items():
        cross, same = unordered_pairs(launches, graph_ev)
        assert (truth.unordered[graph], truth.same_stream_unordered[graph]) == (cross, same)


def _captures(trace: Trace) -> dict[int, tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Per graph: its launches in program order (what the recorder tied to it) and its graph event."""
    launches: dict[int, list[dict[str, Any]]] = {}
    out = {}
    for ev in trace.events:
        if ev["ev"] == "capture_begin":
            launches[ev["graph"]] = []
        elif ev["ev"] in ("op", "kernel") and ev.get("stream") is not None:
            open_graphs = list(launches)
            graph = ev.get("graph") if ev["ev"] == "kernel" else (open_graphs[0] if len(open_graphs) == 1 else None)
            if graph in launches:
                launches[graph].append(ev)
        elif ev["ev"] == "graph":
            out[ev["graph"]] = (launches.pop(ev["graph"]), ev)
    return out


def _doctored(name: str, edit: Callable[[dict[str, Any]], None], graph: int | None = None) -> Trace:
    """The trace with ``edit`` applied to its graph events (only graph ``graph``'s, if given)."""
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    events = copy.deepcopy(trace.events)
    for ev in events:
        if ev["ev"] == "graph" and graph in (None, ev["graph"]):
            edit(ev)
    return Trace(header=trace.header, events=events, stacks=trace.stacks)


def _owner(graph_ev: dict[str, Any]) -> dict[int, int | None]:
    return {n["id"]: n.get("op") for n in graph_ev["nodes"]}


def test_a_missing_edge_the_model_did_not_see_is_reported():
    """Cut every edge out of the KV stream's ops: the graph now lets the main stream's later
    ops run alongside the KV stream's, which the model (still seeing the waits) calls ordered."""
    clean = load_trace(TRACES / "dsv4_mini_fixed.jsonl.gz")
    kv_ops = {e["seq"] for e in clean.events if e["ev"] == "op" and e["stream"] != _main(clean)}

    def cut(graph_ev):
        owner = _owner(graph_ev)
        graph_ev["edges"] = [e for e in graph_ev["edges"] if owner.get(e[0]) not in kv_ops]

    _, found = _disagreements(_doctored("dsv4_mini_fixed", cut))
    assert found and all(f.kind == MODEL_DISAGREEMENT for f in found)
    assert "no path in the graph" in found[0].message and "nodes" in found[0].message


def _cross_stream_edges(name: str, graph: int) -> list[list[int]]:
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    launches, graph_ev = _captures(trace)[graph]
    stream = {ev["seq"]: ev["stream"] for ev in launches}
    owner = _owner(graph_ev)
    return [e for e in graph_ev["edges"] if stream.get(owner[e[0]]) != stream.get(owner[e[1]])]


@pytest.mark.parametrize("edge", _cross_stream_edges("dsv4_mini_fixed", 1), ids=str)
def test_each_join_the_model_relies_on_is_missed_when_cut(edge):
    """One cross-stream edge of the clean trace's first graph cut at a time: a disagreement
    appears exactly when the brute force finds the cut leaves conflicting launches unordered,
    and it names a pair the brute force found."""

    def cut(graph_ev):
        graph_ev["edges"] = [e for e in graph_ev["edges"] if e != edge]

    trace = _doctored("dsv4_mini_fixed", cut, graph=1)
    launches, graph_ev = _captures(trace)[1]
    cross, same = unordered_pairs(launches, graph_ev)
    truth, found = _disagreements(trace)
    assert (truth.unordered[1], truth.same_stream_unordered[1]) == (cross, same)
    assert bool(found) == bool(cross or same)
    for finding in found:
        assert (finding.accesses[0].seq, finding.accesses[1].seq) in cross | same


def test_at_least_one_join_matters():
    """The test above would pass vacuously if no single edge mattered."""
    trace = load_trace(TRACES / "dsv4_mini_fixed.jsonl.gz")
    launches, graph_ev = _captures(trace)[1]
    mattering = []
    for edge in _cross_stream_edges("dsv4_mini_fixed", 1):
        doctored = dict(graph_ev, edges=[e for e in graph_ev["edges"] if e != edge])
        mattering.append(any(unordered_pairs(launches, doctored)))
    assert any(mattering)


def _reported(name: str) -> list[tuple[int, int, int]]:
    """(graph, earlier seq, later seq) of the model's races and aliasing reuses."""
    result = analyze(load_trace(TRACES / f"{name}.jsonl.gz"))
    return [
        (f.graph, f.accesses[0].seq, f.accesses[1].seq)
        for f in result.raw_findings
        if f.kind == DATA_RACE or (f.kind == UNSAFE_FREE and f.aliasing)
    ]


def test_an_edge_that_orders_a_reported_race_is_reported_as_unfounded():
    """Add an edge from the racing earlier launch's nodes to the later one's: the graph now
    orders the pair the model (rightly, for the real graph) reports."""
    graph, earlier, later = _reported("dsv4_mini_race")[0]

    def order(graph_ev):
        nodes = [n["id"] for n in graph_ev["nodes"]]
        owner = _owner(graph_ev)
        first = max(i for i in nodes if owner[i] == earlier)
        second = min(i for i in nodes if owner[i] == later)
        graph_ev["edges"].append([first, second])

    trace = _doctored("dsv4_mini_race", order, graph=graph)
    launches, graph_ev = _captures(trace)[graph]
    cross, _ = unordered_pairs(launches, graph_ev)
    assert not any(b == later for _, b in cross), "the added edge orders every partner of the later launch"
    _, found = _disagreements(trace)
    unfounded = [f for f in found if f.graph == graph and "every conflicting launch reaches it" in f.message]
    assert len(unfounded) == 1 and f"seq {later} " in unfounded[0].message


def test_a_chain_through_every_node_leaves_every_reported_race_unfounded():
    def chain(graph_ev):
        ids = [n["id"] for n in graph_ev["nodes"]]
        graph_ev["edges"] = [[a, b] for a, b in itertools.pairwise(ids)]

    _, found = _disagreements(_doctored("dsv4_mini_race", chain))
    later = {(graph, b) for graph, _, b in _reported("dsv4_mini_race")}
    unfounded = {(f.graph, int(f.message.split("seq ")[1].split()[0])) for f in found}
    assert unfounded == later


def test_programmatic_edges_do_not_order():
    def programmatic(graph_ev):
        ids = [n["id"] for n in graph_ev["nodes"]]
        graph_ev["edges"] = [[a, b, "programmatic"] for a, b in itertools.pairwise(ids)]

    truth, found = _disagreements(_doctored("dsv4_mini_race", programmatic))
    assert not any("every conflicting launch reaches it" in f.message for f in found)
    assert any(truth.unordered.values())


def test_ids_out_of_creation_order_give_the_same_verdicts():
    """The format wants ids 0..n-1, not in creation order: numbered backwards, every edge points
    to a lower id (the check then sorts the graph itself, and the C++ core hands it to the
    Python one), and the verdicts are the same."""

    def backwards(graph_ev):
        last = len(graph_ev["nodes"]) - 1
        for node in graph_ev["nodes"]:
            node["id"] = last - node["id"]
        graph_ev["edges"] = [[last - e[0], last - e[1], *e[2:]] for e in graph_ev["edges"]]

    plain, _ = _disagreements(load_trace(TRACES / "dsv4_mini_race.jsonl.gz"))
    truth, found = _disagreements(_doctored("dsv4_mini_race", backwards))
    assert found == []
    assert truth.unordered == plain.unordered and any(plain.unordered.values())
    graph = next(iter(truth.checked_graphs))
    seq = next(iter(truth.unordered[graph]))[0]
    last = len(_captures(load_trace(TRACES / "dsv4_mini_race.jsonl.gz"))[graph][1]["nodes"]) - 1
    assert truth.nodes_of[graph][seq] == [last - i for i in plain.nodes_of[graph][seq]]


MALFORMED = {
    "self-loop": (lambda g: g["edges"].append([3, 3]), "graph edge [3, 3] is a self-loop"),
    "cycle": (lambda g: g["edges"].append([g["nodes"][-1]["id"], 0]), "graph edges form a cycle"),
    "op a list": (lambda g: g["nodes"][0].update(op=[1]), "node 0 has an 'op' that is not a seq"),
    "op a string": (lambda g: g["nodes"][0].update(op="136"), "node 0 has an 'op' that is not a seq"),
    "op negative": (lambda g: g["nodes"][0].update(op=-1), "node 0 has an 'op' that is not a seq"),
    "id twice": (lambda g: g["nodes"][1].update(id=0), "node ids must be 0 to"),
    "id negative": (lambda g: g["nodes"][0].update(id=-1), "node ids must be 0 to"),
    "id huge": (lambda g: g["nodes"][0].update(id=2**70), "node ids must be 0 to"),
    "edge to nowhere": (lambda g: g["edges"].append([0, 999]), "graph edge [0, 999] names a node the graph does not"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_graph_the_format_forbids_is_one_clear_line_and_exit_2(name, tmp_path, capsys):
    """Handed over in memory, the check itself refuses it with the reader's message, naming
    the graph; read from a file, the reader refuses it, naming the line."""
    edit, message = MALFORMED[name]
    trace = _doctored("dsv4_mini_fixed", edit, graph=2)
    with pytest.raises(GraphInvalid, match=r"^graph 2 \(seq \d+\): ") as caught:
        _disagreements(trace)
    assert message in str(caught.value)
    path = tmp_path / "doctored.jsonl.gz"
    write_trace(path, trace.header, trace.events)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"streamrace: error: {path}:")


def test_a_write_of_2_to_the_50_bytes_is_checked_like_any_other():
    """One op of the clean trace writes 2^50 bytes from address 0, over everything: the model
    and the graph agree on what that races with, and neither walks the range granule by
    granule (the check used to hang here)."""
    trace = load_trace(TRACES / "dsv4_mini_fixed.jsonl.gz")
    events = copy.deepcopy(trace.events)
    # An op on a side stream inside a capture (the trace also holds the eager warm-up's).
    captured = {ev["seq"] for launches, _ in _captures(trace).values() for ev in launches}
    target = next(ev for ev in events if ev["seq"] in captured and ev["ev"] == "op" and ev["stream"] != _main(trace))
    target["writes"].append({"addr": 0, "nbytes": 2**50})
    doctored = Trace(header=trace.header, events=events, stacks=trace.stacks)
    truth, found = _disagreements(doctored)
    assert found == []
    assert any(target["seq"] in pair for pairs in truth.unordered.values() for pair in pairs)
    for graph, (launches, graph_ev) in _captures(doctored).items():
        assert truth.unordered[graph] == unordered_pairs(launches, graph_ev)[0]


def _main(trace: Trace) -> int:
    return next(e["stream"] for e in trace.events if e["ev"] == "capture_begin")


@pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")
@pytest.mark.parametrize("name", NAMES)
def test_the_cpp_core_checks_every_recorded_graph_itself(name):
    """The C++ core hands only unusual graphs to the Python check: a recorded one it answers,
    with the brute force's pairs."""
    for launches, graph_ev in _captures(load_trace(TRACES / f"{name}.jsonl.gz")).values():
        answer = _core.graph_unordered(launches, graph_ev)
        assert answer is not None
        nodes_of, pairs = answer
        cross, same = unordered_pairs(launches, graph_ev)
        assert {(launches[a]["seq"], launches[b]["seq"]) for a, b in pairs} == cross | same
        assert all(ev["seq"] in nodes_of for ev in launches if any(n.get("op") == ev["seq"] for n in graph_ev["nodes"]))
