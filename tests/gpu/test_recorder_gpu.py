"""The recorder on a real GPU: non-perturbation (captures, replays, eager work), every way a
capture is made, the graph read back, and the three front doors (watch, `streamrace run`,
STREAMRACE=1). Failure safety and the two sets of hooks: test_hooks_gpu.py."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import torch
from conftest import ROOT, load_example

import streamrace
from streamrace.run_program import child_environment
from streamrace.trace import load_trace

HERE = pathlib.Path(__file__).resolve().parent


def _layout(record: bool) -> dict:
    args = [sys.executable, str(HERE / "capture_layout.py")] + (["--record"] if record else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_recorder_does_not_change_the_capture():
    plain, recorded = _layout(False), _layout(True)
    assert recorded["findings"] == 1, "the recorded run must have seen the bug in its captures"
    assert plain["layout"] == recorded["layout"], "graph pool block layout differs with the recorder"
    assert plain["outputs"] == recorded["outputs"]


def _replay_program(trace: pathlib.Path | None) -> dict:
    args = [sys.executable, str(HERE / "replay_program.py")] + ([str(trace)] if trace else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT, timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_recorder_does_not_change_replays_or_eager_work(tmp_path):
    """Warm-up, two captures into one pool, replays with eager staging on a copy stream between
    them, a reset, a collected graph: the same outputs, bit for bit, and the same allocator
    layout with and without the recorder; the trace holds every replay, on its stream."""
    trace = tmp_path / "replays.jsonl.gz"
    plain, recorded = _replay_program(None), _replay_program(trace)
    assert recorded["errors"] == []
    assert plain["digest"] == recorded["digest"], "the program computed something else with the recorder"
    assert plain["layout"] == recorded["layout"], "block layout differs with the recorder"

    events = load_trace(trace).events
    graphs = [e["graph"] for e in events if e["ev"] == "capture_begin"]
    assert len(graphs) == 2
    step, sample = graphs
    streams = recorded["streams"]
    replays = [(e["graph"], e["stream"]) for e in events if e["ev"] == "replay"]
    assert replays == [(step, streams["main"]), (sample, streams["main"])] * 12
    assert all("stack" in e for e in events if e["ev"] == "replay"), "each replay has its line"
    declared = {e["stream"] for e in events if e["ev"] == "stream"}
    assert streams["main"] in declared and streams["copy"] in declared
    lifetime = [(e["ev"], e["graph"]) for e in events if e["ev"] in ("graph_reset", "graph_destroy")]
    assert lifetime == [("graph_reset", sample), ("graph_destroy", step)]
    captured = _captured_seqs(events)
    eager = [e for e in events if e["ev"] == "op" and e["seq"] not in captured]
    assert {e["stream"] for e in eager} >= {streams["main"], streams["copy"], streams["side"]}, "eager work"
    assert load_trace(trace).header["recording"] == "program"


def _captured_seqs(events: list[dict]) -> set[int]:
    """The seqs of the events inside a capture (these programs capture one graph at a time)."""
    captured, inside = set(), False
    for e in events:
        inside = inside or e["ev"] == "capture_begin"
        if inside:
            captured.add(e["seq"])
        inside = inside and e["ev"] != "capture_end"
    return captured


def test_graph_read_back_ties_nodes_to_ops(tmp_path):
    dsv4 = load_example("dsv4_mini_decode")
    _session, _ = dsv4.run("keep-alive", trace=str(tmp_path / "t.jsonl.gz"))
    trace = load_trace(tmp_path / "t.jsonl.gz")
    graphs = [e for e in trace.events if e["ev"] == "graph"]
    assert len(graphs) == 3
    inside = _captured_seqs(trace.events)
    captured_ops = {e["seq"] for e in trace.events if e["ev"] == "op" and e["seq"] in inside}  # not the warm-ups
    launches = {e["seq"] for e in trace.events if e["ev"] == "kernel"}
    attributed = {n["op"] for g in graphs for n in g["nodes"] if "op" in n}
    assert attributed <= captured_ops | launches
    assert len(attributed & captured_ops) >= 0.9 * len(captured_ops), "nearly every recorded op owns graph nodes"
    sleeps = [e for e in trace.events if e["ev"] == "kernel" and "spin_kernel" in e["name"]]
    assert len(sleeps) == 3, "torch.cuda._sleep, a launch the dispatcher never sees, is found in each graph"
    assert all(n.get("op") is not None for g in graphs for n in g["nodes"] if n["type"] == "kernel")
    kernels = [n for g in graphs for n in g["nodes"] if n["type"] == "kernel"]
    named = [n for n in kernels if n.get("name")]
    assert named and all(n["op"] in launches for n in named), "an op's event names its kernels: the graph does not"
    assert len(named) == len([n for n in kernels if n["op"] in launches]), "a node caught up is named"
    assert any("spin_kernel" in n["name"] for n in named), "torch.cuda._sleep is a kernel node"
    assert all(e[0] != e[1] for g in graphs for e in g["edges"])


def test_manual_capture_begin_end_and_shared_pool():
    side = torch.cuda.Stream()
    x = torch.ones(1 << 16, device="cuda")
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with streamrace.watch() as session, torch.cuda.stream(stream):
        g1.capture_begin()
        y = x * 2
        g1.capture_end()
        g2.capture_begin(pool=g1.pool())
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            z = y + 1
        stream.wait_stream(side)
        g2.capture_end()
    begins = [e for e in session.trace.events if e["ev"] == "capture_begin"]
    assert [b["pool"] for b in begins] == [list(g1.pool()), list(g1.pool())]
    assert session.result.summary["graphs"] == 2
    assert session.findings == []
    del z


def test_make_graphed_callables_is_recorded():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    sample = torch.randn(16, 64, device="cuda", requires_grad=True)
    with streamrace.watch() as session:
        graphed = torch.cuda.make_graphed_callables(model, (sample,))
    out = graphed(sample)
    out.sum().backward()
    assert session.result.summary["graphs"] >= 2, "forward and backward graphs"
    pools = {tuple(e["pool"]) for e in session.trace.events if e["ev"] == "capture_begin"}
    assert len(pools) == 1, "make_graphed_callables shares one pool"
    assert session.findings == [] and not session.errors


def _streamrace(*args: str, cwd: pathlib.Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamrace", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_run_wraps_a_program(tmp_path):
    trace = str(tmp_path / "h2.jsonl.gz")
    buggy = _streamrace("run", "-o", trace, "--", sys.executable, "examples/hazard_gallery.py", "H2", "--buggy")
    assert buggy.returncode == 1, buggy.stderr
    assert "data-race" in buggy.stdout and "hazard_gallery.py" in buggy.stdout
    assert (tmp_path / "h2.jsonl.gz").exists()
    fixed = _streamrace("run", "--", sys.executable, "examples/hazard_gallery.py", "H2", "--fixed")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_run_reports_a_failing_program_with_exit_3(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            g = torch.cuda.CUDAGraph()
            x = torch.ones(4, device="cuda")
            with torch.cuda.graph(g):
                y = x * 2
            raise SystemExit(7)
            """
        )
    )
    result = _streamrace("run", "--", sys.executable, str(script))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "exit code 7" in result.stderr


def test_environment_variable_records_every_process(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys
            worker = {str(ROOT / "examples" / "hazard_gallery.py")!r}
            procs = [
                subprocess.Popen([sys.executable, worker, "H4", "--buggy"], env=dict(os.environ, RANK=str(r)))
                for r in range(2)
            ]
            sys.exit(max(p.wait() for p in procs))
            """
        )
    )
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    env = child_environment(str(trace_dir))  # STREAMRACE=1 and the site hook
    subprocess.run([sys.executable, str(script)], check=True, env=env, cwd=ROOT, timeout=300)
    traces = sorted(p.name for p in trace_dir.iterdir())
    assert len(traces) == 2 and all("-rank" in name for name in traces), traces
    analysed = _streamrace("analyze", *(str(trace_dir / t) for t in traces))
    assert analysed.returncode == 1 and analysed.stdout.count("data-race") >= 2
