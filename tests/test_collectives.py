"""NCCL collectives (streamrace/record/collectives.py, docs/recording.md): what each c10d
collective reads and writes, seen through the real dispatcher with a one-rank gloo group on
the CPU, with both hook kinds; how an async collective's events, in the order the hooks
see ProcessGroupNCCL issue them, are put on NCCL's internal stream; and what both engines
report of the three hazards (examples/nccl_gallery.py, proven on the H200) and their fixes.
The real traces recorded on the H200 are checked at the end, once they are committed."""

from __future__ import annotations

import pathlib

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, GRAPH_INPUT_FREED
from streamrace.record.collectives import NCCL_STREAM_NAME, collective_name, order_collectives
from streamrace.trace.builder import TraceBuilder
from streamrace.trace.io import Trace, load_trace

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = 4 << 20
GATHER = "c10d::_allgather_base_"


# -- the accesses, through the real dispatcher ---------------------------------------------------
@pytest.fixture(scope="module")
def gloo():
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield torch, dist
    dist.destroy_process_group()


@pytest.fixture(params=["python", "native"])
def record_ops(request):
    from op_engines import ENGINES

    return ENGINES[request.param]


def _addr(t) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def _collectives(ops):
    return [
        (name.split(".")[0], [r["addr"] for r in reads], [w["addr"] for w in writes]) for name, reads, writes in ops
    ]


def test_each_collective_writes_its_outputs_and_reads_its_inputs(gloo, record_ops):
    torch, dist = gloo
    tensor, inp, out = torch.ones(8), torch.ones(8), torch.zeros(8)
    chunks = [torch.zeros(8)]

    def program():
        dist.all_reduce(tensor, async_op=True).wait()
        dist.all_gather_into_tensor(out, inp)
        dist.all_to_all_single(out, inp)  # its schema returns only the Work: the rule for returns misses it
        dist.all_gather(chunks, inp)
        dist.broadcast(tensor, 0)

    got = [op for op in _collectives(record_ops(program)) if collective_name(op[0])]
    assert got == [
        ("c10d::allreduce_", [], [_addr(tensor)]),  # in place: the write covers the read
        (GATHER, [_addr(inp)], [_addr(out)]),
        ("c10d::alltoall_base_", [_addr(inp)], [_addr(out)]),
        ("c10d::allgather_", [_addr(inp)], [_addr(chunks[0])]),
        ("c10d::broadcast_", [], [_addr(tensor)]),
    ]


# -- the hooks' events of an async collective, as ProcessGroupNCCL issues them -----------------
def _issued_async(tb: TraceBuilder, caller: int, reads, writes, at: str, nccl: int | None = None) -> int:
    """One ``async_op=True`` collective as the hooks drain it: inside the op, the fork (an event
    recorded on the caller, waited for by the internal stream, seen for the first time there),
    the end event recorded on the internal stream, then a second event the group records there
    (as torch 2.11 does on the H200); then the op itself, on the caller (where the hooks write it
    when it returns). Returns the internal stream and its end event, the one work.wait() waits."""
    if nccl is None:
        nccl = tb.stream()
    fork, done = tb.event(), tb.event()
    tb.record(fork, caller, at)
    tb.wait(fork, nccl, at)
    tb.record(done, nccl, at)
    tb.record(tb.event(), nccl, at)
    tb.op(GATHER, caller, reads, writes, at)
    return nccl, done


class _Drained:
    """Hooks that have recorded ``events`` (what EventLog.ingest drains)."""

    def __init__(self, events):
        self.events = events

    def drain(self):
        events, self.events = self.events, []
        return events


def _reordered(tb: TraceBuilder) -> tuple[Trace, set[int]]:
    """What the event log keeps of the hooks' events (collectives on their stream, which is
    named, in seq order), and the streams they were moved onto."""
    from streamrace.record.event_log import EventLog

    log = EventLog()
    log.hooks = _Drained([dict(e) for e in tb.events])
    log.ingest()
    events = log.in_order(0, set())
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    moved = {e["stream"] for e in events if e["ev"] == "op" and collective_name(e["op"])}
    return Trace(header=tb.header, events=events, stacks=stacks), moved - {
        e["stream"] for e in tb.events if e["ev"] == "op"
    }


def test_an_async_collective_moves_between_its_fork_and_its_end_event():
    tb = TraceBuilder()
    main = tb.stream("main")
    x, y = tb.alloc(N, main), tb.alloc(N, main)
    nccl, _done = _issued_async(tb, main, [tb.span(x, N)], [tb.span(y, N)], at="n.py:5")
    trace, streams = _reordered(tb)
    assert streams == {nccl}
    order = [(e["ev"], e.get("stream")) for e in trace.events if e["ev"] in ("event_record", "event_wait", "op")]
    assert order == [
        ("event_record", main),
        ("event_wait", nccl),
        ("op", nccl),  # before the end event work.wait() waits on, not after the group's later one
        ("event_record", nccl),
        ("event_record", nccl),
    ]
    seqs = [e["seq"] for e in trace.events]
    assert seqs == sorted(set(seqs)), "seqs stay strictly increasing"


def _gather_and_its_node(after_wait: int) -> tuple[list[dict], dict, dict, int, dict]:
    """The hooks' events of an async all-gather (seqs spaced out tenfold) and the kernel event
    a catch-up gave the node it launched, ``after_wait`` seqs after the fork's wait: (events,
    the wait, the op, NCCL's stream, the kernel event)."""
    tb = TraceBuilder()
    main = tb.stream("main")
    x, y = tb.alloc(N, main), tb.alloc(N, main)
    nccl, _ = _issued_async(tb, main, [tb.span(x, N)], [tb.span(y, N)], at="n.py:5")
    events = [dict(e, seq=e["seq"] * 10) for e in tb.events]  # room for the recorder's event
    wait = next(e for e in events if e["ev"] == "event_wait")
    op = next(e for e in events if e["ev"] == "op")
    caught_up = {
        "seq": wait["seq"] + after_wait,
        "ev": "kernel",
        "graph": 1,
        "node": 0,
        "name": "memcpy",
        "stream": nccl,
        "reads": [],
        "writes": [],
        "inferred": True,
        "stack": op["stack"],
    }
    return events, wait, op, nccl, caught_up


@pytest.mark.parametrize("late", [False, True], ids=["before the end event", "after it"])
def test_in_a_capture_the_node_nccl_launched_is_the_collective_itself(late):
    """The recorder caught up the node the collective launched on the internal stream as a
    kernel event inside its call; that event becomes the op (the capture's node record points
    at it), so there is one launch there, named for the collective, not a memcpy beside it."""
    from streamrace.record.event_log import EventLog

    # after the first moved event (H200, N1); "late": after the end event's record too
    events, wait, op, nccl, caught_up = _gather_and_its_node(25 if late else 15)
    log = EventLog()
    log.events.append(caught_up)  # emitted by the recorder before the hooks are drained
    log.hooks = _Drained(events)
    log.ingest()
    on_nccl = [e for e in log.in_order(0, set()) if e.get("stream") == nccl and e["ev"] in ("op", "kernel")]
    records = [e["seq"] for e in log.in_order(0, set()) if e["ev"] == "event_record" and e["stream"] == nccl]
    if late:  # the op cannot take a place past its end event: the kernel stays beside it
        assert [e["ev"] for e in on_nccl] == ["op", "kernel"] and on_nccl[0]["seq"] < min(records)
        return
    assert on_nccl == [caught_up] and caught_up["ev"] == "op" and caught_up["op"] == GATHER
    assert caught_up["writes"] == op["writes"] and caught_up["seq"] == wait["seq"] + 15, "at the node's seq"
    assert wait["seq"] < caught_up["seq"] < min(records), "before the end event"


@pytest.mark.parametrize("late", [False, True], ids=["before the end event", "after it"])
def test_a_node_the_native_hooks_caught_up_names_the_event_it_became(late):
    """The native hooks catch the collective's node up themselves: the kernel event is among
    the drained events, and which node is whose is known by the seqs the events were emitted
    at (the hooks' own, given at the capture's end, before the drain). Moving the collective
    renumbers the events of its call; the node must still name its event (the op it became,
    or the kernel left beside the op), or the graph check sees a launch with no node (H200,
    N1 and N2)."""
    from streamrace.record.capture_nodes import CaptureNodes, KernelStats
    from streamrace.record.event_log import EventLog
    from streamrace.record.graph_readback import GraphRead
    from streamrace.record.kernel_params import LiveBlocks, NodeAccess

    events, _wait, op, nccl, caught_up = _gather_and_its_node(25 if late else 5)
    del caught_up["node"]
    caught_up["_node_handle"] = 700  # the native hooks name the node by handle
    events.append(caught_up)
    events.sort(key=lambda e: e["seq"])
    nodes = CaptureNodes(handle=1, base=0, read_access=lambda node, kind: NodeAccess(kind))
    # what the native hooks say at the capture's end: the caught node, by its index in the graph
    nodes.snapshot(GraphRead([700], ["memcpy"], [None], []), claims=[], caught=[(0, caught_up["seq"])])
    graph = nodes.event_nodes  # what the graph event holds

    def settle_kernel(event):
        nodes.claim_caught(event)
        return event

    log = EventLog()
    log.settle("kernel", settle_kernel)
    log.hooks = _Drained(events)
    log.ingest()
    nodes.finish(lambda: LiveBlocks([]), {}, KernelStats())
    kept = {e["seq"]: e for e in log.in_order(0, set())}
    owner = kept[graph[0]["op"]]
    assert owner["stream"] == nccl and owner["ev"] == ("kernel" if late else "op")
    assert owner is nodes.kernels[0] and "_node_handle" not in owner
    assert late == ("node" in owner) and owner.get("node", 0) == 0, "a kernel event names its node by index"
    if not late:
        assert owner["op"] == GATHER and owner["writes"] == op["writes"]
    seqs = [e["seq"] for e in log.in_order(0, set())]
    assert seqs == sorted(set(seqs)), "seqs stay strictly increasing"


def test_a_collective_on_the_callers_stream_and_the_users_own_edges_stay_put():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    x, y = tb.alloc(N, main), tb.alloc(N, main)
    # The user's own fork to a side stream, from another line, then a synchronous collective
    # (torch >= 2.7 runs it on the caller's stream, with no events).
    fork, done = tb.event(), tb.event()
    tb.record(fork, main, "n.py:3")
    tb.wait(fork, side, "n.py:3")
    tb.record(done, side, "n.py:4")
    tb.op(GATHER, main, [tb.span(x, N)], [tb.span(y, N)], at="n.py:5")
    trace, streams = _reordered(tb)
    assert streams == set()
    assert next(e for e in trace.events if e["ev"] == "op")["stream"] == main


def test_the_internal_stream_is_named_and_the_direct_order_kept():
    tb = TraceBuilder()
    main = tb.stream("main")
    x, y = tb.alloc(N, main), tb.alloc(N, main)
    nccl, _ = _issued_async(tb, main, [tb.span(x, N)], [tb.span(y, N)], at="n.py:5")
    events = [dict(e) for e in tb.events]
    assert [moved.stream for moved in order_collectives(events)] == [nccl]
    trace, _ = _reordered(tb)
    names = {e["stream"]: e.get("name") for e in trace.events if e["ev"] == "stream"}
    assert names == {main: "main", nccl: NCCL_STREAM_NAME}


# -- what both engines report ----------------------------------------------------------------
def output_read_before_wait(fixed: bool, captured: bool) -> TraceBuilder:
    """N1 (captured) and N3 (eager): the gathered output is doubled before work.wait()."""
    tb = TraceBuilder()
    main = tb.stream("main")
    inp, out = tb.alloc(N, main, at="n1.py:3"), tb.alloc(N, main, at="n1.py:4")

    def body(pool):
        _nccl, done = _issued_async(tb, main, [tb.span(inp, N)], [tb.span(out, N)], at="n1.py:8")
        if fixed:
            tb.wait(done, main, at="n1.py:10")
        doubled = tb.alloc(N, main, at="n1.py:11", pool=pool)
        tb.op("aten::mul", main, [tb.span(out, N)], [tb.span(doubled, N)], at="n1.py:11")
        if not fixed:
            tb.wait(done, main, at="n1.py:13")

    if captured:
        with tb.capture(main) as graph:
            body((graph, 0))
    else:
        body(None)
    return tb


def input_overwritten_before_wait(fixed: bool) -> TraceBuilder:
    """N2: the next layer writes the gather's input in place before work.wait()."""
    tb = TraceBuilder()
    main = tb.stream("main")
    inp, out = tb.alloc(N, main, at="n2.py:3"), tb.alloc(N, main, at="n2.py:4")
    with tb.capture(main):
        _nccl, done = _issued_async(tb, main, [tb.span(inp, N)], [tb.span(out, N)], at="n2.py:8")
        if fixed:
            tb.wait(done, main, at="n2.py:10")
        tb.op("aten::add_", main, writes=[tb.span(inp, N)], at="n2.py:11")
        if not fixed:
            tb.wait(done, main, at="n2.py:13")
    return tb


def captured_input_freed(fixed: bool) -> TraceBuilder:
    """N4: the gather's input, made outside the graph's pool, is freed while the graph lives."""
    tb = TraceBuilder()
    main = tb.stream("main")
    inp, out = tb.alloc(N, main, at="n4.py:3"), tb.alloc(N, main, at="n4.py:4")
    with tb.capture(main) as graph:
        _nccl, done = _issued_async(tb, main, [tb.span(inp, N)], [tb.span(out, N)], at="n4.py:7")
        tb.wait(done, main, at="n4.py:8")
    if not fixed:
        tb.free(inp, at="n4.py:12")
        other = tb.alloc(N, main, addr=inp, at="n4.py:13")
        tb.op("aten::fill_", main, writes=[tb.span(other, N)], at="n4.py:16")
    tb.replay(graph, main, at="n4.py:17")
    return tb


def _findings(tb: TraceBuilder):
    trace, _ = _reordered(tb)
    return analyze(trace).findings


@pytest.mark.parametrize("captured", [True, False], ids=["captured", "eager"])
def test_reading_the_output_before_wait_is_a_race_and_waiting_fixes_it(engine, captured):
    [finding] = _findings(output_read_before_wait(False, captured))
    assert (finding.kind, finding.hazard) == (DATA_RACE, "RAW")
    assert {a.op.split(".")[0] for a in finding.accesses} == {GATHER, "aten::mul"}
    assert {a.stream_label for a in finding.accesses if a.op == GATHER} == {NCCL_STREAM_NAME}
    assert _findings(output_read_before_wait(True, captured)) == []


def test_overwriting_the_input_before_wait_is_a_race_and_waiting_fixes_it(engine):
    [finding] = _findings(input_overwritten_before_wait(False))
    assert (finding.kind, finding.hazard) == (DATA_RACE, "WAR")
    assert GATHER in {a.op for a in finding.accesses}
    assert _findings(input_overwritten_before_wait(True)) == []


def test_freeing_a_captured_collectives_input_is_a_freed_graph_input(engine):
    findings = _findings(captured_input_freed(False))
    assert [f.kind for f in findings] == [GRAPH_INPUT_FREED], [f.message for f in findings]
    assert GATHER in {a.op for a in findings[0].accesses} or GATHER in findings[0].message
    assert _findings(captured_input_freed(True)) == []


def test_without_the_move_the_race_would_be_missed(engine):
    """The recorder's part matters: as the hooks first write it, on the caller's stream after
    its end event, the read before wait() looks ordered."""
    tb = output_read_before_wait(False, captured=True)
    assert analyze(tb.trace()).findings == []


# -- the real traces, recorded on the H200 (tests/gpu/record_nccl_fixtures.py) ----------------
NCCL_FIXTURES = {"N1": DATA_RACE, "N2": DATA_RACE, "N3": DATA_RACE, "N4": GRAPH_INPUT_FREED}


@pytest.mark.parametrize("key", sorted(NCCL_FIXTURES))
def test_real_nccl_traces(engine, key):
    buggy = ROOT / "examples" / "traces" / f"nccl_{key}_buggy.jsonl.gz"
    fixed = ROOT / "examples" / "traces" / f"nccl_{key}_fixed.jsonl.gz"
    if not (buggy.exists() and fixed.exists()):
        pytest.skip("recorded on the GPU machine: tests/gpu/record_nccl_fixtures.py")
    findings = analyze(load_trace(str(buggy))).findings
    assert {f.kind for f in findings} == {NCCL_FIXTURES[key]}
    assert any(collective_name(a.op) for f in findings for a in f.accesses)
    assert analyze(load_trace(str(fixed))).findings == []


@pytest.mark.parametrize("key", ["N1", "N2"])
def test_real_native_hooks_nccl_traces(engine, key):
    """Recorded on the H200 with the native hooks, which catch the collective's node up in
    C++ (examples/nccl_gallery.py's record, buggy variant): the race alone, and the node NCCL
    launched names the collective's op, on NCCL's stream (before the fix of the renumbered
    seqs it named no event, and the graph check disagreed with the model)."""
    trace = load_trace(str(ROOT / "examples" / "traces" / f"nccl_{key}_buggy_native.jsonl.gz"))
    assert {f.kind for f in analyze(trace).findings} == {DATA_RACE}
    events = {e["seq"]: e for e in trace.events if "seq" in e}
    (graph,) = [e for e in trace.events if e["ev"] == "graph"]
    nccl = {e["stream"] for e in trace.events if e["ev"] == "stream" and e.get("name") == NCCL_STREAM_NAME}
    owners = [events[n["op"]] for n in graph["nodes"] if n["type"] == "memcpy"]
    assert owners and all(collective_name(e["op"]) and e["stream"] in nccl for e in owners)


def _drained_as_lines(fn):
    """The native hooks' CPU records of ``fn`` as a flush to a trace file drains them."""
    from op_engines import native_drained

    return native_drained(fn, lambda state: state.drain_lines())


COLLECTIVE_CALLS = {
    "all_reduce": lambda dist, t: dist.all_reduce(t),
    "all_gather_into_tensor": lambda dist, t: dist.all_gather_into_tensor(t, t.clone()),
    "all_to_all_single": lambda dist, t: dist.all_to_all_single(t, t.clone()),
    "all_gather": lambda dist, t: dist.all_gather([t], t.clone()),
    "broadcast": lambda dist, t: dist.broadcast(t, 0),
}


@pytest.mark.parametrize("call", COLLECTIVE_CALLS)
def test_a_drain_with_a_collective_gives_every_event_as_a_dict(gloo, call):
    """The recorder moves a collective and the events around it onto NCCL's stream
    (order_collectives), so a drain that holds one gives no trace lines (the native hooks
    tell a collective by hook_tables.py's names, as collective_name does); one without does."""
    torch, dist = gloo
    tensor = torch.ones(8)
    dicts, lines, seqs, *_ = _drained_as_lines(lambda: (tensor.add_(1.0), COLLECTIVE_CALLS[call](dist, tensor)))
    assert lines == b"" and seqs == b""
    assert any(e["ev"] == "op" and collective_name(e["op"]) for e in dicts)
    assert any(e["ev"] == "op" and e["op"].startswith("aten::add_") for e in dicts)
    dicts, lines, seqs, *_ = _drained_as_lines(lambda: tensor.add_(1.0))
    assert b'"op":"aten::add_.Tensor"' in lines and len(seqs) == 8 * lines.count(b"\n")
    assert not any(e["ev"] == "op" for e in dicts)
