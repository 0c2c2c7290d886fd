"""The traces recorded on the H200 (torch 2.11) and committed under examples/traces/.

CI analyses real data on every run: the DSV4 freed-before-join bug and its fixes, and one
buggy/fixed pair per hazard class of the gallery. The last test checks the analysis model
against CUDA's own ground truth, the captured graphs read back by the recorder.
"""

from __future__ import annotations

import itertools
import pathlib

import networkx as nx
import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, GRAPH_INPUT_FREED, RECORD_STREAM_NOOP, STALE_READ, UNSAFE_FREE
from streamrace.analysis.ranges import Overlap, normalize, overlaps
from streamrace.trace import load_trace

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"
EXAMPLE = "examples/dsv4_mini_decode.py"


def _analyze(name: str):
    trace = load_trace(TRACES / f"{name}.jsonl.gz")
    return trace, analyze(trace)


def test_traces_come_from_the_h200():
    trace, _ = _analyze("dsv4_mini_race")
    assert trace.header["torch"].startswith("2.11")
    assert trace.header["devices"][0]["name"] == "NVIDIA H200"
    assert trace.header["graph_readback"] is True
    assert trace.header["recorder_errors"] == []


def test_a_serving_loop_written_as_it_ran_is_whole_in_program_order_and_clean():
    """``benchmarks/serving_loop.py --replays 3000`` recorded on an H100 (torch 2.11, native
    hooks, 2026-12-05): the recorder flushed to the file while the loop ran, taking the events
    it passes through (ops, event records and waits, ``record_stream``, replays) as the trace
    lines the hooks wrote in C++, merged by seq with those it settled in Python."""
    trace, result = _analyze("serving_loop_h100")
    assert trace.header["hooks"] == "native" and trace.header["recording"] == "program"
    assert trace.header["recorder_errors"] == [] and trace.header["allocations_dropped"] == 0
    events = list(trace.events)
    assert len(events) > 20_000, "more than one flush's worth (FLUSH_EVENTS)"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), "each event once, in program order"
    defined: set[tuple[str, int]] = set()
    for event in events:
        if event["ev"] in ("stack", "stream"):
            defined.add((event["ev"], event["id" if event["ev"] == "stack" else "stream"]))
        if "stack" in event:
            assert ("stack", event["stack"]) in defined, f"stack {event['stack']} used before it is defined"
        if "stream" in event and event["ev"] != "stream":
            assert ("stream", event["stream"]) in defined, f"stream {event['stream']} used before it is defined"
    assert [e["graph"] for e in events if e["ev"] == "replay"] == [1] * 3000
    assert result.findings == [], "the loop joins its copy stream before every use"
    assert result.summary["replays"] == 3000 and result.summary["ops"] == 12144


def test_dsv4_race_names_both_ops_streams_lines_allocation_reuse_and_fix():
    _, result = _analyze("dsv4_mini_race")
    assert len(result.findings) == 1
    finding = result.findings[0]
    assert (finding.kind, finding.hazard, finding.aliasing) == (UNSAFE_FREE, "WAR", True)
    assert finding.count == 3 and finding.graphs == [1, 2, 3], "one bug in each captured batch size"
    use, reuse = finding.accesses
    assert (use.stream_label, use.access) == ("kv", "read")
    assert use.location == f"{EXAMPLE}:50" and any(f[:2] == [EXAMPLE, 115] for f in use.stack)
    assert (reuse.stream_label, reuse.access, reuse.op) == ("main", "write", "aten::mm")
    assert reuse.location == f"{EXAMPLE}:120"
    alloc = finding.allocation
    assert alloc.stream_label == "main" and alloc.size == 16384
    assert alloc.alloc_location == f"{EXAMPLE}:105" and alloc.free_location == f"{EXAMPLE}:119"
    assert alloc.reused_by["op"] == "aten::mm" and alloc.reused_by["location"] == f"{EXAMPLE}:120"
    assert "main.wait_stream(kv)" in finding.fix and "record_stream(kv)" in finding.fix


def test_dsv4_latent_twin_is_flagged_without_reuse():
    _, result = _analyze("dsv4_mini_latent")
    assert [(f.kind, f.aliasing) for f in result.findings] == [(UNSAFE_FREE, False)]
    assert result.findings[0].allocation.reused_by is None


@pytest.mark.parametrize("name", ["dsv4_mini_fixed", "dsv4_mini_record_stream"])
def test_dsv4_fixes_are_clean(name):
    _, result = _analyze(name)
    assert result.findings == []
    assert result.summary["graphs"] == 3 and result.summary["ops"] > 60


GALLERY = {
    "H2": {(DATA_RACE, "RAW")},
    "H3": {(DATA_RACE, "WAR")},
    "H4": {(DATA_RACE, "RAW")},
    "H5": {(DATA_RACE, "WAR")},
    "H6": {(DATA_RACE, "WAR"), (DATA_RACE, "RAW")},
    "H10": {(RECORD_STREAM_NOOP, None), (UNSAFE_FREE, "WAR")},
}


@pytest.mark.parametrize("hazard", sorted(GALLERY))
def test_gallery_buggy_flagged_fixed_clean(hazard):
    _, buggy = _analyze(f"gallery_{hazard}_buggy")
    _, fixed = _analyze(f"gallery_{hazard}_fixed")
    assert {(f.kind, f.hazard) for f in buggy.findings} == GALLERY[hazard]
    assert fixed.findings == []


def _captured_ops(trace):
    """Per graph: the op and kernel events with their graph nodes, and the graph's DAG (the truth)."""
    graphs: dict[int, tuple[list[dict], nx.DiGraph]] = {}
    ops_of: dict[int, list[dict]] = {}
    current = None
    for e in trace.events:
        if e["ev"] == "graph":
            dag = nx.DiGraph()
            dag.add_nodes_from(n["id"] for n in e["nodes"])
            dag.add_edges_from((a, b) for a, b, *kind in e["edges"] if not kind)
            nodes_of = {}
            for n in e["nodes"]:
                nodes_of.setdefault(n.get("op"), []).append(n["id"])
            ops = [dict(op, nodes=nodes_of.get(op["seq"], [])) for op in ops_of.pop(e["graph"], [])]
            graphs[e["graph"]] = (ops, dag)
        elif e["ev"] == "capture_begin":
            ops_of[e["graph"]] = []
            current = e["graph"]
        elif e["ev"] == "capture_end":
            current = None  # the eager work between captures has no graph to check against
        elif current is not None and (e["ev"] == "op" or (e["ev"] == "kernel" and "stream" in e)):
            ops_of[current].append(e)  # dispatcher ops and the launches it never saw
    return graphs


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".jsonl.gz") for p in TRACES.glob("*.jsonl.gz")))
def test_model_agrees_with_the_captured_graph(name):
    """Every pair of cross-stream ops touching the same bytes is unordered in CUDA's own graph
    exactly when streamrace reports a race or an aliasing reuse between them."""
    trace, result = _analyze(name)
    reported = set()
    for f in result.raw_findings:
        captured = all(a.graph is not None and a.captured is None for a in f.accesses)
        if captured and (f.kind == DATA_RACE or (f.kind == UNSAFE_FREE and f.aliasing)):
            reported.add((f.accesses[0].seq, f.accesses[1].seq))
    unordered_conflicts = set()
    for ops, dag in _captured_ops(trace).values():
        reach = {n: nx.descendants(dag, n) for n in dag}
        for a, b in itertools.combinations(ops, 2):
            if a["stream"] == b["stream"] or not a["nodes"] or not b["nodes"]:
                continue
            ordered = any(nb in reach[na] for na in a["nodes"] for nb in b["nodes"])
            conflict = any(
                overlaps(normalize(ra), normalize(rb)) != Overlap.NONE
                for ra, wa in [(r, False) for r in a["reads"]] + [(w, True) for w in a["writes"]]
                for rb, wb in [(r, False) for r in b["reads"]] + [(w, True) for w in b["writes"]]
                if wa or wb
            )
            if conflict and not ordered:
                unordered_conflicts.add((a["seq"], b["seq"]))
    # Each reported pair is a real unordered conflict in the graph...
    assert reported <= unordered_conflicts
    # ...and every later op of an unordered conflict is reported (the engine names one partner).
    assert {b for _, b in unordered_conflicts} == {b for _, b in reported}


INVISIBLE = {
    # trace: (hazard, the earlier access's op and whether its direction was inferred, the later op)
    "triton_buggy": ("RAW", "triton:double_into", False, "aten::add.Tensor"),
    "cupy_buggy": ("RAW", "triple_into", True, "aten::sub.Tensor"),
    "cupy_annotated_buggy": ("RAW", "triple_into", False, "aten::sub.Tensor"),
    "extension_buggy": ("WAR", "aten::add.Tensor", False, "streamrace_test::scale"),
}


@pytest.mark.parametrize("name", sorted(INVISIBLE))
def test_kernels_the_dispatcher_never_saw(name):
    """Triton (IR-derived directions), CuPy (parameter words, or annotated), and a custom
    extension writing through a pointer its schema hides: each buggy capture is one race
    naming both launches, each fixed twin is clean."""
    hazard, first_op, first_inferred, second_op = INVISIBLE[name]
    _, buggy = _analyze(name)
    [race] = buggy.findings
    first, second = race.accesses
    assert (race.kind, race.hazard) == (DATA_RACE, hazard)
    assert (first.op, first.inferred, second.op) == (first_op, first_inferred, second_op)
    assert {first.stream_label, second.stream_label} == {"main", "side"}
    assert first.location.startswith("tests/gpu/test_invisible_kernels_gpu.py:")
    if name == "extension_buggy":
        assert second.inferred and second.access == "write", "the hidden write is inferred from the kernel's pointer"
    _, fixed = _analyze(name.replace("buggy", "fixed"))
    assert fixed.findings == []


def test_parameter_words_resolve_to_live_blocks():
    trace, _ = _analyze("cupy_buggy")
    stats = trace.header["kernel_nodes"]
    assert stats["invisible_kernels"] >= 1 and stats["resolved_words"] >= 2


# -- the execution view: whole programs recorded on the H200 (examples/execution_gallery.py) ----
EXECUTION_GALLERY = "examples/execution_gallery.py"
EXECUTION = {  # the buggy program: its kind, hazard, aliasing, and the replay sides' graphs
    "X1": (DATA_RACE, "WAR", False),
    "X2": (DATA_RACE, "RAW", False),
    "X3": (DATA_RACE, None, True),
    "X4": (STALE_READ, "RAW", True),
    "X5": (GRAPH_INPUT_FREED, None, True),
    "X6": (UNSAFE_FREE, "WAR", True),
}


@pytest.mark.parametrize("key", sorted(EXECUTION))
def test_execution_view_buggy_programs(key):
    """Each buggy program, recorded whole (it corrupted at replay on the H200), is reported as
    its kind, in the eager domain or at the graph, with the replay sides placed at the replay."""
    kind, hazard, aliasing = EXECUTION[key]
    trace, result = _analyze(f"execution_{key}_buggy")
    assert trace.header["recording"] == "program" and trace.header["allocations_dropped"] == 0
    assert result.summary["replays"] >= 4 or key == "X6"
    assert {f.kind for f in result.findings} == {kind}, [f.message for f in result.findings]
    finding = result.findings[0]
    assert hazard is None or finding.hazard == hazard
    assert finding.aliasing == aliasing
    assert all(a.location and a.location.startswith(f"{EXECUTION_GALLERY}:") for a in finding.accesses)
    replay_sides = [a for a in finding.accesses if a.captured is not None]
    if key in ("X1", "X2", "X3", "X4"):
        assert replay_sides, "a replay's access, placed at the replay"
        assert all(a.captured["location"].startswith(f"{EXECUTION_GALLERY}:") for a in replay_sides)
    if key == "X3":
        assert len({a.captured["graph"] for a in replay_sides}) == 2, "both graphs of the pool"
    if key == "X5":
        use, free = finding.accesses
        assert use.captured is None and use.graph is not None, "the captured op, at its capture"
        assert free.access == "free" and "replayed after the free" in finding.message


@pytest.mark.parametrize("name", [f"execution_{k}_fixed" for k in [*sorted(EXECUTION), "E1", "E2"]])
def test_execution_view_fixed_and_correct_programs_are_clean(name):
    """The fixed twins, PyTorch's documented side-stream warm-up (E1) and capturable Adam with
    a side branch (E2), recorded whole: no finding, and every eager allocation's size known."""
    trace, result = _analyze(name)
    assert trace.header["allocations_dropped"] == 0
    assert result.findings == [], [f.message for f in result.findings]
