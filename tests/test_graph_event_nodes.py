"""A captured graph's own event nodes (trace format 1.6): an ``Event(external=True)`` recorded
or waited on inside a capture is a node of the graph, so every replay records or waits on it
(docs/analysis.md §8.2). Without them, a program that orders eager work after a replay through
such an event (PyTorch's own ``test_graph_external_wait_and_record``) got findings it cannot act
on. Each ordering found here has a twin without it that still races. Both engines, and the
passes that keep their own order (pinned host memory, application pools)."""

from __future__ import annotations

import pytest
from analysis_engines import ENGINES, core

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, PINNED_READ_BEFORE_COPY
from streamrace.trace.builder import TraceBuilder
from streamrace.trace.events import EventInvalid, validate_event

N = 1024


@pytest.fixture(params=ENGINES)
def engine(request):
    with core(request.param):
        yield request.param


def _kinds(trace) -> list[str]:
    return [f.kind for f in analyze(trace).findings]


def _external_record(named: bool = True, waits: bool = True):
    """A graph writes ``out`` and records an external event; replayed on ``main``, its output is
    read on ``side`` after ``side`` waited on that event (``waits``). ``named``: the graph event
    names the node's event (1.6; a 1.5 recorder did not)."""
    b = TraceBuilder()
    main, side = b.stream("main"), b.stream("side")
    out = b.alloc(N, main, at="model.py:3 in setup")
    done = b.event()
    with b.capture(main) as graph:
        b.op("aten::mul", main, writes=[b.span(out, N)], at="model.py:6 in capture")
        b.record(done, main, at="model.py:7 in capture")
    record = {"type": "eventrecord", "event": done} if named else {"type": "eventrecord"}
    b.read_back(graph, [{"type": "kernel"}, record], [(0, 1)])
    b.replay(graph, main, at="model.py:10 in step")
    if waits:
        b.wait(done, side, at="model.py:11 in step")
    b.op("aten::sum", side, reads=[b.span(out, N)], at="model.py:12 in step")
    return b.trace()


def test_a_replay_records_its_external_event(engine):
    assert _kinds(_external_record()) == []


def test_the_twin_that_does_not_wait_still_races(engine):
    findings = analyze(_external_record(waits=False)).findings
    assert [(f.kind, f.hazard) for f in findings] == [(DATA_RACE, "RAW")]


def test_an_event_node_without_its_event_orders_nothing(engine):
    """A 1.5 trace does not say which event a node records: the wait orders nothing (the
    capture's record was in the capture's domain, gone at its end), as before."""
    assert _kinds(_external_record(named=False)) == [DATA_RACE]


def _external_wait(waits: bool = True):
    """``copy`` writes ``x`` and records an event; a graph captured with an external wait on
    that event reads ``x``; replayed on ``main``, which never waited on ``copy`` itself."""
    b = TraceBuilder()
    main, copy = b.stream("main"), b.stream("copy")
    x = b.alloc(N, main, at="model.py:3 in setup")
    ready = b.event()
    with b.capture(main) as graph:
        if waits:
            b.wait(ready, main, at="model.py:6 in capture")
        b.op("aten::relu", main, reads=[b.span(x, N)], at="model.py:7 in capture")
    nodes = [{"type": "waitevent", "event": ready}] if waits else []
    b.read_back(graph, [*nodes, {"type": "kernel"}], [(0, 1)] if waits else [])
    b.op("aten::copy_", copy, writes=[b.span(x, N)], at="model.py:10 in stage")
    b.record(ready, copy, at="model.py:11 in stage")
    b.replay(graph, main, at="model.py:12 in step")
    return b.trace()


def test_a_replay_waits_on_its_external_event(engine):
    assert _kinds(_external_wait()) == []


def test_the_graph_without_the_wait_node_races_with_the_copy(engine):
    findings = analyze(_external_wait(waits=False)).findings
    assert [(f.kind, f.hazard) for f in findings] == [(DATA_RACE, "RAW")]


def test_a_wait_node_waits_on_the_record_current_at_each_launch(engine):
    """Recorded again after the first replay, before the second: the second replay waits on
    the new record; a write issued after that record still races with it."""
    b = TraceBuilder()
    main, copy = b.stream("main"), b.stream("copy")
    x = b.alloc(N, main)
    ready = b.event()
    with b.capture(main) as graph:
        b.wait(ready, main)
        b.op("aten::relu", main, reads=[b.span(x, N)], at="model.py:7 in capture")
    b.read_back(graph, [{"type": "waitevent", "event": ready}, {"type": "kernel"}], [(0, 1)])
    for _ in range(2):
        b.wait_stream(copy, main)  # the last replay read x: the next copy waits for it
        b.op("aten::copy_", copy, writes=[b.span(x, N)], at="model.py:10 in stage")
        b.record(ready, copy)
        b.replay(graph, main, at="model.py:12 in step")
    assert _kinds(b.trace()) == []
    b.wait_stream(copy, main)
    b.op("aten::copy_", copy, writes=[b.span(x, N)], at="model.py:14 in late")
    b.replay(graph, main, at="model.py:15 in step")
    assert [(f.kind, f.hazard) for f in analyze(b.trace()).findings] == [(DATA_RACE, "RAW")]


def _signalled_copy(
    synchronized: bool = True, early_read: bool = False, signals: bool = True, polls: bool = True, gated: bool = True
):
    """PyTorch's test_graph_external_wait_and_record: one graph spins on pinned ``flag`` (a
    custom kernel, ``host_ranges`` 1.6: ``polls``) and records ``start`` (external); another
    waits on it (``gated``), copies ``x`` into pinned ``x_cpu`` (D2H, non_blocking) and records
    ``end`` (external). Both replayed on their own streams; the host reads ``x_cpu`` before the
    copy can run (``early_read``), sets ``flag`` (``signals``), synchronizes ``end``
    (``synchronized``) and reads ``x_cpu``."""
    b = TraceBuilder()
    main, signal, work = b.stream("main"), b.stream("signalling"), b.stream("work")
    x = b.alloc(16, main, at="test_cuda.py:2 in test")
    x_cpu = b.host_alloc(16, main, at="test_cuda.py:3 in test")
    flag = b.host_alloc(4, main, at="test_cuda.py:4 in test")
    start, end = b.event(), b.event()
    with b.capture(main) as signalling:
        spin = {"host_ranges": [b.span(flag, 4)]} if polls else {}
        b.emit("kernel", graph=signalling, node=0, name="wait_for_cpu", reads=[], writes=[], stream=main, **spin)
        b.record(start, main, at="test_cuda.py:8 in test")
    b.read_back(signalling, [{"type": "kernel"}, {"type": "eventrecord", "event": start}], [(0, 1)])
    with b.capture(main) as working:
        if gated:
            b.wait(start, main, at="test_cuda.py:12 in test")
        b.copy(main, device_reads=[b.span(x, 16)], host_writes=[b.span(x_cpu, 16)], at="test_cuda.py:13 in test")
        b.record(end, main, at="test_cuda.py:14 in test")
    nodes = [{"type": "memcpy"}, {"type": "eventrecord", "event": end}]
    b.read_back(working, [{"type": "waitevent", "event": start}, *nodes] if gated else nodes)
    b.replay(signalling, signal, at="test_cuda.py:20 in test")
    b.replay(working, work, at="test_cuda.py:23 in test")
    if early_read:  # "Copy cannot occur until start_event is recorded"
        b.host_op("aten::eq", reads=[b.span(x_cpu, 16)], at="test_cuda.py:30 in test")
    if signals:
        b.host_op("aten::fill_", writes=[b.span(flag, 4)], at="test_cuda.py:35 in test")
    if synchronized:
        b.event_sync(end)
    b.host_op("aten::eq", reads=[b.span(x_cpu, 16)], at="test_cuda.py:40 in test")
    return b.trace()


# Seeds of the trace fuzzer (trace_fuzz.py): each ordering and a twin without it.
EVENT_NODE_PROGRAMS = {
    "external_record": _external_record,
    "external_record_unwaited": lambda: _external_record(waits=False),
    "external_wait": _external_wait,
    "signalled_copy": lambda: _signalled_copy(early_read=True),
    "signalled_copy_never_signalled": lambda: _signalled_copy(early_read=True, signals=False, synchronized=False),
}


def _lines(trace) -> list[tuple[str, str]]:
    return [(f.kind, f.accesses[1].location) for f in analyze(trace).findings]


def test_the_host_knows_a_replay_done_once_its_external_event_is_synchronized(engine):
    assert _kinds(_signalled_copy()) == []


def test_the_host_reading_before_that_is_still_found(engine):
    assert _lines(_signalled_copy(synchronized=False)) == [(PINNED_READ_BEFORE_COPY, "test_cuda.py:40")]


def test_a_read_before_the_host_sets_the_flag_the_copy_waits_behind_is_ordered(engine):
    """The copy is ordered after the spinning kernel, which cannot end before the host's
    write of its flag: the host's read before that write comes before the copy."""
    assert _kinds(_signalled_copy(early_read=True)) == []


@pytest.mark.parametrize(
    "twin",
    [
        {"signals": False, "synchronized": False},  # nothing releases the kernel
        {"polls": False},  # a 1.5 recorder: no kernel is known to poll host bytes
        {"gated": False},  # the copy is not ordered after the kernel
    ],
    ids=["never-signalled", "kernel-unseen", "copy-not-behind-kernel"],
)
def test_the_early_read_stays_a_finding_without_each_link_of_that_order(engine, twin):
    assert (PINNED_READ_BEFORE_COPY, "test_cuda.py:30") in _lines(_signalled_copy(early_read=True, **twin))


def test_a_host_write_of_a_polled_flag_is_no_finding(engine):
    """The kernel only points at the flag (direction unknown): the host setting it is the
    protocol, not a write during a copy."""
    assert _kinds(_signalled_copy(synchronized=True)) == []


def test_a_graph_captured_again_forgets_the_old_event_nodes(engine):
    b = TraceBuilder()
    main, side = b.stream("main"), b.stream("side")
    out = b.alloc(N, main)
    done = b.event()
    with b.capture(main) as graph:
        b.op("aten::mul", main, writes=[b.span(out, N)])
        b.record(done, main)
    b.read_back(graph, [{"type": "kernel"}, {"type": "eventrecord", "event": done}], [(0, 1)])
    b.reset_graph(graph)
    with b.capture(main) as again:
        b.op("aten::mul", main, writes=[b.span(out, N)], at="model.py:20 in capture")
    b.read_back(again, [{"type": "kernel"}])
    b.replay(again, main, at="model.py:22 in step")
    b.wait(done, side)
    b.op("aten::sum", side, reads=[b.span(out, N)], at="model.py:24 in step")
    assert _kinds(b.trace()) == [DATA_RACE]


@pytest.mark.parametrize("event", [-1, "3", 1.5, 2**64])
def test_a_node_event_that_is_no_event_is_refused(event):
    ev = {"seq": 1, "ev": "graph", "graph": 1, "nodes": [{"id": 0, "type": "eventrecord", "event": event}], "edges": []}
    with pytest.raises(EventInvalid, match="'event' that is not an event"):
        validate_event(ev)
