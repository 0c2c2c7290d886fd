"""Static outputs read after the next replay (issue 26, item 2; HAZARDS.md M4) and capture-time
allocations that escape (item 3; M5), on hand-built traces of the programs' shapes: each bug
flagged once, its fixed twin and the graph idioms silent, on both engines (the ``engine``
fixture)."""

from __future__ import annotations

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import CAPTURE_ALLOCATION_ESCAPED, STALE_READ, STALE_STATIC_OUTPUT
from streamrace.trace.builder import TraceBuilder

N = 4096  # bytes of the static output
STATIC = 0x100  # the identity of the static output tensor (made in the capture: no view event)


def _graph(b: TraceBuilder, main: int) -> tuple[int, int]:
    """A graph writing a static output it allocates in its capture: (graph, output address)."""
    x = b.alloc(N, main, at="model.py:5 in setup")
    with b.capture(main) as graph:
        out = b.alloc(N, main, at="model.py:8 in setup")
        b.op("aten::mul", main, reads=[b.span(x, N)], writes=[b.span(out, N)], at="model.py:9 in setup")
    return graph, out


def _graphed_steps(*, clone: bool, steps: int = 2) -> TraceBuilder:
    """``make_graphed_callables``: each call replays and hands out ``static_out.detach()``; the
    program keeps every step's output (buggy) or its clone (fixed), and stacks them at the end."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    kept = []
    for step in range(steps):
        b.replay(graph, main, at="torch/cuda/graphs.py:600 in forward")
        handed = 0x200 + step
        b.make_view(
            handed, b.span(out, N), main, op="aten::detach", base=STATIC, at="torch/cuda/graphs.py:601 in forward"
        )
        if clone:
            copy = b.alloc(N, main, at="train.py:20 in step")
            b.op(
                "aten::clone",
                main,
                reads=[b.span(out, N)],
                writes=[b.span(copy, N)],
                tensors=[handed],
                at="train.py:20 in step",
            )
            kept.append((copy, 0))
        else:
            kept.append((out, handed))
    stacked = b.alloc(N * steps, main, at="train.py:30 in report")
    b.op(
        "aten::cat",
        main,
        reads=[b.span(addr, N) for addr, _ in kept],
        writes=[b.span(stacked, N * steps)],
        tensors=[handed for _, handed in kept],
        at="train.py:30 in report",
    )
    return b


def _plain_view(*, clone: bool) -> TraceBuilder:
    """A plain CUDAGraph: after each replay the program keeps ``static_out[:n]`` (buggy) or its
    clone (fixed), and reads the first step's after the second replay."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    b.replay(graph, main, at="serve.py:40 in step")
    b.make_view(0x300, b.view(out, [16]), main, base=STATIC, at="serve.py:41 in step")
    first, ident = out, 0x300
    if clone:
        first = b.alloc(64, main, at="serve.py:42 in step")
        b.op(
            "aten::clone",
            main,
            reads=[b.view(out, [16])],
            writes=[b.span(first, 64)],
            tensors=[0x300],
            at="serve.py:42 in step",
        )
        ident = 0
    b.replay(graph, main, at="serve.py:40 in step")
    b.op("aten::sum", main, reads=[b.view(first, [16])], tensors=[ident] if ident else (), at="serve.py:50 in report")
    return b


# Seeds of the trace fuzzer (trace_fuzz.py): views and read identities, buggy and fixed, and
# the escaped workspace.
STALE_PROGRAMS = {
    "graphed kept": lambda: _graphed_steps(clone=False),
    "graphed cloned": lambda: _graphed_steps(clone=True),
    "view kept": lambda: _plain_view(clone=False),
    "workspace escaped": lambda: _workspace(before_capture=False, other_graph=True),
}


def _kinds(b: TraceBuilder) -> list[str]:
    return [f.kind for f in analyze(b.trace()).findings]


def test_a_graphed_callables_output_kept_across_steps_is_one_finding(engine):
    [finding] = analyze(_graphed_steps(clone=False).trace()).findings
    assert finding.kind == STALE_STATIC_OUTPUT and finding.hazard == "RAW"
    view, rewrote, read = finding.accesses
    assert (view.op, view.access, view.location) == ("aten::detach", "view", "torch/cuda/graphs.py:601")
    assert (rewrote.op, rewrote.seq) == (
        "replay of graph 1",
        next(e["seq"] for e in reversed(_graphed_steps(clone=False).events) if e["ev"] == "replay"),
    )
    assert (read.op, read.location) == ("aten::cat", "train.py:30")
    assert "rewrote those bytes before the read" in finding.message
    assert "`.clone()`" in finding.fix


def test_its_fixed_twin_cloning_each_step_is_silent(engine):
    assert _kinds(_graphed_steps(clone=True)) == []


def test_reading_each_output_in_its_own_step_is_silent(engine):
    """``out = graphed(x); loss = out.sum()`` per step: consumed before the next replay."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    for step in range(3):
        b.replay(graph, main, at="torch/cuda/graphs.py:600 in forward")
        b.make_view(0x200 + step, b.span(out, N), main, op="aten::detach", base=STATIC)
        b.op("aten::sum", main, reads=[b.span(out, N)], tensors=[0x200 + step], at="train.py:21 in step")
    assert _kinds(b) == []


def test_a_plain_graph_view_kept_across_replays_is_flagged_and_its_clone_is_not(engine):
    assert _kinds(_plain_view(clone=False)) == [STALE_STATIC_OUTPUT]
    assert _kinds(_plain_view(clone=True)) == []


def test_the_plain_graph_idioms_are_silent(engine):
    """``g.replay(); y = static_out.clone()``; vLLM's ``output[:num_tokens]`` after each replay,
    consumed before the next; a view made before the first replay, read after every one."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    before = 0x400
    b.make_view(before, b.view(out, [8]), main, base=STATIC, at="serve.py:30 in setup")
    for step in range(3):
        b.replay(graph, main, at="serve.py:40 in step")
        copy = b.alloc(N, main)
        b.op("aten::clone", main, reads=[b.span(out, N)], writes=[b.span(copy, N)], tensors=[STATIC])
        tokens = 0x500 + step
        b.make_view(tokens, b.view(out, [4 + step]), main, base=STATIC, at="serve.py:41 in step")
        b.op("aten::argmax", main, reads=[b.view(out, [4 + step])], tensors=[tokens], at="serve.py:42 in step")
        b.op("aten::sum", main, reads=[b.view(out, [8])], tensors=[before], at="serve.py:43 in step")
    assert _kinds(b) == []


def test_a_view_of_a_kept_output_is_as_stale_as_the_output(engine):
    """``kept = graphed(x)`` at step 1, ``kept[:2]`` sliced after step 2's replay: the slice is
    the first step's value, rewritten."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    b.replay(graph, main)
    b.make_view(0x600, b.span(out, N), main, op="aten::detach", base=STATIC, at="train.py:10 in step")
    b.replay(graph, main)
    b.make_view(0x601, b.view(out, [2]), main, base=0x600, at="train.py:11 in step")
    b.op("aten::sum", main, reads=[b.view(out, [2])], tensors=[0x601], at="train.py:12 in step")
    [finding] = analyze(b.trace()).findings
    assert finding.kind == STALE_STATIC_OUTPUT and finding.accesses[0].location == "train.py:10"


def test_a_graph_reset_before_the_read_rewrites_nothing(engine):
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    b.replay(graph, main)
    b.make_view(0x700, b.span(out, N), main, base=STATIC)
    b.reset_graph(graph)
    b.op("aten::sum", main, reads=[b.span(out, N)], tensors=[0x700])
    assert _kinds(b) == []


def test_an_identity_made_again_is_a_new_value(engine):
    """A TensorImpl address handed out again (the old tensor died) is a new tensor: the view
    event that names it again starts its story afresh."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    b.replay(graph, main)
    b.make_view(0x800, b.span(out, N), main, base=STATIC)
    b.replay(graph, main)
    b.make_view(0x800, b.span(out, N), main, base=STATIC)
    b.op("aten::sum", main, reads=[b.span(out, N)], tensors=[0x800])
    assert _kinds(b) == []


def test_a_view_op_returning_its_input_itself_hands_out_nothing(engine):
    """``aten::flatten`` of a 1-D tensor returns the tensor itself (PyTorch's
    test_graph_rng_functional: ``assertNotEqual(eager_out, graph_out)`` after each replay): its
    view event names the static output as its own base, and later reads of the static output
    after later replays are the plain-graph idiom. A real view made the same way stays a value."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    for _ in range(3):
        b.replay(graph, main, at="test.py:664 in run")
        b.op("aten::eq.Tensor", main, reads=[b.span(out, N)], tensors=[STATIC], at="test.py:668 in run")
        b.make_view(STATIC, b.span(out, N), main, op="aten::flatten.using_ints", base=STATIC, at="test.py:669 in run")
    assert _kinds(b) == []
    b.replay(graph, main, at="test.py:664 in run")
    b.make_view(0x900, b.span(out, N), main, op="aten::flatten.using_ints", base=STATIC, at="test.py:670 in run")
    b.replay(graph, main, at="test.py:664 in run")
    b.op("aten::eq.Tensor", main, reads=[b.span(out, N)], tensors=[0x900], at="test.py:671 in run")
    assert _kinds(b) == [STALE_STATIC_OUTPUT]


# -- M5 ------------------------------------------------------------------------------------
def _workspace(*, before_capture: bool, other_graph: bool = False) -> TraceBuilder:
    """ROCm aiter #5393: a graph's temporary is freed inside its capture and a lazily cached
    workspace is then first allocated inside a capture of the pool (the same graph, or a later
    one with ``other_graph``), on those bytes; the program fills it, replays the first graph,
    then reads the workspace (eagerly, or in the later graph's replay). Fixed: the workspace is
    allocated before any capture."""
    b = TraceBuilder(recording="program")
    main, side = b.stream("main"), b.stream("capture")
    src = b.alloc(N, main, at="repro.py:5 in arm")
    pool = (7, 0)
    ws = b.alloc(N, main, at="repro.py:9 in arm") if before_capture else None
    with b.capture(side, pool=pool) as first:
        t = b.alloc(N, side, pool=pool, at="repro.py:12 in arm")
        b.op("aten::mul", side, reads=[b.span(src, N)], writes=[b.span(t, N)], at="repro.py:12 in arm")
        sink = b.alloc(4, side, pool=pool)
        b.op("aten::sum", side, reads=[b.span(t, N)], writes=[b.span(sink, 4)], at="repro.py:14 in arm")
        b.free(t)
        if ws is None and not other_graph:
            ws = b.alloc(N, side, addr=t, pool=pool, at="repro.py:16 in get_workspace")
    second = None
    if other_graph:
        with b.capture(side, pool=pool) as second:
            if ws is None:
                ws = b.alloc(N, side, addr=t, pool=pool, at="repro.py:16 in get_workspace")
            out = b.alloc(4, side, pool=pool)
            b.op("my::splitk_gemm", side, reads=[b.span(ws, N)], writes=[b.span(out, 4)], at="repro.py:20 in gemm")
    assert ws is not None
    b.op("aten::fill_", main, writes=[b.span(ws, N)], at="repro.py:25 in arm")
    b.replay(first, main, at="repro.py:27 in arm")
    if second is not None:
        b.replay(second, main, at="repro.py:28 in arm")
    else:
        flag = b.alloc(N, main)
        b.op("aten::ne", main, reads=[b.span(ws, N)], writes=[b.span(flag, N)], at="repro.py:29 in arm")
    return b


@pytest.mark.parametrize("other_graph", [False, True], ids=["same-graph", "later-graph"])
def test_a_workspace_first_allocated_in_a_capture_and_clobbered_is_one_finding(engine, other_graph):
    [finding] = analyze(_workspace(before_capture=False, other_graph=other_graph).trace()).findings
    assert finding.kind == CAPTURE_ALLOCATION_ESCAPED and finding.aliasing
    assert finding.allocation is not None and finding.allocation.alloc_location == "repro.py:16"
    writer, reader = finding.accesses
    assert writer.captured is not None and writer.captured["graph"] == 1 and writer.location == "repro.py:27"
    assert reader.location == ("repro.py:28" if other_graph else "repro.py:29")
    escaped = 2 if other_graph else 1
    assert f"during the capture of graph {escaped}" in finding.message
    assert ("graph 1's replay" if other_graph else "its own replay") in finding.message
    assert "before any capture" in finding.fix


@pytest.mark.parametrize("other_graph", [False, True], ids=["same-graph", "later-graph"])
def test_its_fixed_twin_allocated_before_any_capture_is_silent(engine, other_graph):
    assert _kinds(_workspace(before_capture=True, other_graph=other_graph)) == []


def test_graphs_of_a_shared_pool_replayed_in_order_and_consumed_are_silent(engine):
    """The legal shared-pool pattern: the second graph's output is handed the first graph's
    freed temporary; replayed in capture order and consumed before the next step."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    pool = (9, 0)
    x = b.alloc(N, main)
    with b.capture(main, pool=pool) as first:
        t = b.alloc(N, main, pool=pool)
        b.op("aten::mul", main, reads=[b.span(x, N)], writes=[b.span(t, N)])
        o1 = b.alloc(N, main, pool=pool)
        b.op("aten::add", main, reads=[b.span(t, N)], writes=[b.span(o1, N)])
        b.free(t)
    with b.capture(main, pool=pool) as second:
        o2 = b.alloc(N, main, addr=t, pool=pool)
        b.op("aten::mul", main, reads=[b.span(o1, N)], writes=[b.span(o2, N)])
    for _ in range(3):
        b.op("aten::copy_", main, writes=[b.span(x, N)])
        b.replay(first, main)
        b.replay(second, main)
        b.op("aten::sum", main, reads=[b.span(o2, N)])
    assert _kinds(b) == []


def test_a_static_output_read_out_of_capture_order_stays_a_stale_read(engine):
    """X4's shape: the second graph's output (written by its own program) clobbered by the
    first graph replayed after it: the replay order, not an escaped buffer."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    pool = (9, 0)
    x = b.alloc(N, main)
    with b.capture(main, pool=pool) as first:
        t = b.alloc(N, main, pool=pool)
        b.op("aten::mul", main, reads=[b.span(x, N)], writes=[b.span(t, N)])
        b.free(t)
    with b.capture(main, pool=pool) as second:
        o2 = b.alloc(N, main, addr=t, pool=pool)
        b.op("aten::mul", main, reads=[b.span(x, N)], writes=[b.span(o2, N)])
    b.replay(second, main)
    b.replay(first, main)
    b.op("aten::sum", main, reads=[b.span(o2, N)])
    assert _kinds(b) == [STALE_READ]


def test_a_kept_value_read_many_times_is_one_detection_per_value(engine):
    """Two values kept from steps 1 and 2, each read twice after step 3's replay: one detection
    per value (its first read), one finding of count 2."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    for step in range(3):
        b.replay(graph, main)
        b.make_view(0x200 + step, b.span(out, N), main, op="aten::detach", base=STATIC, at="train.py:10 in step")
    for _ in range(2):
        b.op("aten::sum", main, reads=[b.span(out, N)] * 2, tensors=[0x200, 0x201], at="train.py:20 in report")
    [finding] = analyze(b.trace()).findings
    assert (finding.kind, finding.count) == (STALE_STATIC_OUTPUT, 2)


def test_a_dead_value_s_identity_on_other_bytes_is_not_that_value(engine):
    """A TensorImpl address a dead hand-out left, reused by a tensor over other bytes that no
    view op made: its reads are not the dead value's."""
    b = TraceBuilder(recording="program")
    main = b.stream("main")
    graph, out = _graph(b, main)
    b.replay(graph, main)
    b.make_view(0x900, b.view(out, [8]), main, base=STATIC)
    b.replay(graph, main)
    b.op("aten::sum", main, reads=[b.span(out, N)], tensors=[0x900])
    assert _kinds(b) == []


def test_a_recording_that_made_no_view_skips_the_check(engine):
    """``views: 0`` in the header: the static-output check (a pass over every event) is not
    run; the builder counts its views as the recorder does, and a trace that does not say gets
    the check."""
    b = _plain_view(clone=False)
    assert b.header["views"] == 1
    b.header["views"] = 0
    assert _kinds(b) == []
    del b.header["views"]
    assert _kinds(b) == [STALE_STATIC_OUTPUT]
