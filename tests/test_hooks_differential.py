"""Both sets of hooks, compared on the CPU, over a whole scripted program.

One scripted capture (streams forking from the capture stream and joining it again through
events, allocations and frees, ops reading and writing, a custom op, a library kernel and a
memset the dispatcher never sees), and the program around it (eager ops staging the next
input on a copy stream, replays on two streams, a graph reset and captured again, one
collected) run on a fake CUDA (fake_cuda.py) behind the recorder's seam, once recorded with
the Python hooks and once with the native ones; the two traces must be the same, event for
event. tests/gpu/test_hooks_gpu.py does the same on real captures.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph, Kernels, memcopy  # noqa: E402
from hook_traces import canonical, first_difference  # noqa: E402
from op_engines import native_module  # noqa: E402

from streamrace.analysis import analyze  # noqa: E402
from streamrace.record.recorder import Recorder, name_stream  # noqa: E402
from streamrace.record.traces import finish_trace  # noqa: E402
from streamrace.trace.incremental import IncrementalTraceWriter  # noqa: E402
from streamrace.trace.io import Trace, load_trace  # noqa: E402

MAIN, SIDE, COPY = 0x1000, 0x2000, 0x3000
PRELUDE = 0x5000  # a stream no program names
KINDS = ("native", "python")


def scripted_capture(fake: FakeCuda) -> tuple[FakeGraph, torch.Tensor]:
    """A capture on MAIN that forks SIDE and COPY off with one event and joins both back: the
    graph, and its input (which it also writes)."""
    name_stream(SIDE, "side")
    with fake.on(COPY):
        early = fake.alloc()
        fake.free(early)  # before the allocator's history: its size is never known (left out)
    x, w, workspace = fake.alloc(), fake.alloc(), fake.alloc()
    # The custom op's kernel also holds a pointer its schema does not mention.
    fake.hidden_pointers["streamrace_fake::scale_"] = [workspace.data_ptr() + 64]
    x.fill_(1.0)  # eager, on the default stream
    graph = FakeGraph(fake)
    fork, side_done, copy_done = fake.event(), fake.event(), fake.event()
    with fake.on(MAIN):
        graph.capture_begin()
        y = fake.alloc()
        torch.mul(x, w, out=y)
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            z = fake.alloc()
            torch.add(y, 1.0, out=z)
            torch.ops.streamrace_fake.scale_(z, 0.5)
            fake.launch("kernel", "cupy_saxpy", params=[[z.data_ptr()], [y.data_ptr() + 16]])  # a library's
            fake.launch("memset", writes=[{"addr": z.data_ptr(), "nbytes": 64}])
            fake.record(side_done)
        with fake.on(COPY):
            fake.wait(fork)
            y[::2].fill_(3.0)  # a strided write
            fake.record(copy_done)
        fake.wait(side_done)
        fake.wait(copy_done)
        torch.sub(y, z, out=x)
        fake.free(z)
        graph.capture_end()
    fake.synchronize()
    fake.synchronize(side_done)
    fake.device_synchronize()
    fake.delete_event(fork)
    graph.work = lambda: memcopy(x, y)
    return graph, x


def scripted_program(fake: FakeCuda) -> None:
    """The scripted capture, and the program around it: the next input staged on COPY while
    MAIN waits for it, replays on MAIN, a second graph replayed on SIDE, reset and captured
    again, a third collected while recording."""
    graph, x = scripted_capture(fake)
    staged_ready = fake.event()
    for step in range(2):
        with fake.on(COPY):
            staged = fake.alloc()
            staged.fill_(float(step))  # eager, on the copy stream
            fake.record(staged_ready)
        with fake.on(MAIN):
            fake.wait(staged_ready)
            x.copy_(staged)  # eager, on MAIN
            graph.replay()
        fake.free(staged)
    with fake.on(SIDE):
        out = fake.alloc()
        second = FakeGraph(fake, work=lambda: memcopy(out, x))
        for _ in range(2):
            second.capture_begin()
            out.add_(x)
            second.capture_end()
            second.replay()
            second.reset()
        third = FakeGraph(fake)
        third.capture_begin()
        out.mul_(2.0)
        third.capture_end()
        third.replay()
        del third  # collected here: its graph_destroy comes before what follows
        out.zero_()


def record(kind: str) -> Recorder:
    """The scripted program, recorded with one set of hooks on a fresh fake."""
    return record_program(kind, scripted_program)[0]


def record_program(
    kind: str, program: Callable[[FakeCuda], None], kernels: bool = True, **fake_options: Any
) -> tuple[Recorder, FakeCuda]:
    """A scripted program, recorded with one set of hooks on a fresh fake. ``kernels``: the
    fake's dispatch mode launches a node for each op (without it, nothing runs below the
    hooks' dispatch, as on a GPU, and eager work launches nothing)."""
    if kind == "native":
        native_module()  # or a skip saying why not (CI insists they build: .ci/run)
    fake = FakeCuda(**fake_options)
    with Kernels(fake) if kernels else contextlib.nullcontext():
        recorder = Recorder(hooks=kind, runtime=fake)
        recorder.start()
        try:
            program(fake)
        finally:
            recorder.stop()
    assert recorder.hooks_kind == kind
    return recorder, fake


def recorded_alike(program: Callable[[FakeCuda], None], **fake_options: Any) -> list[dict[str, Any]]:
    """The native hooks' trace of a scripted program, once both hook sets recorded it without
    an error and event for event alike (each on a fresh fake made with ``fake_options``)."""
    (native, _), (python, _) = [record_program(k, program, **fake_options) for k in KINDS]
    assert native.errors == [] and python.errors == []
    events = native.trace_events()
    difference = first_difference(canonical(events), canonical(python.trace_events()))
    assert difference is None, difference
    return events


def analyzed(events: list[dict[str, Any]], minor: int = 0):
    """The analysis of recorded events under a header of format 1.``minor``."""
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    return analyze(Trace(header={"minor": minor} if minor else {}, events=events, stacks=stacks))


def allocation_facts(events: list[dict[str, Any]]) -> dict[int, list[tuple[int, int, tuple[int, ...] | None]]]:
    """Each address's allocations in the trace, in order: (size, stream, pool)."""
    facts: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = {}
    for e in events:
        if e["ev"] == "alloc":
            facts.setdefault(e["addr"], []).append((e["size"], e["stream"], tuple(e["pool"]) if "pool" in e else None))
    return facts


def true_facts(fake: FakeCuda) -> dict[int, list[tuple[int, int, tuple[int, ...] | None]]]:
    """Each address's allocations as the fake allocator really made them, in order."""
    facts: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = {}
    for addr, size, stream, pool in fake.truth:
        facts.setdefault(addr, []).append((size, stream, pool))
    return facts


def record_both() -> tuple[Recorder, Recorder]:
    """(native, python): from one line, so that their stacks are the same."""
    return record("native"), record("python")


def _difference() -> str | None:
    native, python = record_both()
    assert native.errors == [] and python.errors == []
    return first_difference(canonical(native.trace_events()), canonical(python.trace_events()))


def test_both_hook_sets_record_the_scripted_capture_alike():
    native, python = record_both()
    assert native.errors == [] and python.errors == []
    events = canonical(native.trace_events())
    difference = first_difference(events, canonical(python.trace_events()))
    assert difference is None, difference
    assert native.kernel_stats == python.kernel_stats

    # What the capture path had to get right, so that agreeing means something.
    kinds = [e["ev"] for e in events]
    for kind in ("capture_begin", "capture_end", "graph", "op", "kernel", "alloc", "free", "event_wait"):
        assert kind in kinds, kind
    graph = next(e for e in events if e["ev"] == "graph")
    ops = {e["seq"]: e for e in events if e["ev"] in ("op", "kernel")}
    assert len(graph["nodes"]) == 7 and all("op" in n for n in graph["nodes"]), "every node has its launch"
    assert [ops[n["op"]].get("op") or ops[n["op"]]["name"] for n in graph["nodes"]] == [
        "aten::mul.out",
        "aten::add.out",
        "streamrace_fake::scale_",
        "cupy_saxpy",
        "memset",
        "aten::fill_.Scalar",
        "aten::sub.out",
    ]
    side = next(e["stream"] for e in events if e.get("name") == "side")
    assert {ops[n["op"]]["stream"] for n in graph["nodes"][1:5]} == {side}, "SIDE's launches, seen or not"
    assert sorted(map(tuple, graph["edges"])) == [(0, 1), (0, 5), (0, 6), (1, 2), (2, 3), (3, 4), (4, 6), (5, 6)]
    custom = next(e for e in events if e.get("op") == "streamrace_fake::scale_")
    assert custom["inferred"] and len(custom["writes"]) == 2, "the workspace its schema never mentions"
    kernels = [e for e in events if e["ev"] == "kernel"]
    assert [k["inferred"] for k in kernels] == [True, False], "parameter words; the memset's exact bytes"
    assert all(k["writes"] for k in kernels)
    assert sum(e["ev"] == "alloc" for e in events) == 9, "the first allocation, freed at once, has its facts too"
    assert native.dropped_allocations == python.dropped_allocations == 0

    # ... and what the program around it had to get right: eager ops, replays, lifetimes.
    captured = _captured_seqs(events)
    eager = [e["op"] for e in events if e["ev"] == "op" and e["seq"] not in captured]
    assert eager == ["aten::fill_.Scalar", *["aten::fill_.Scalar", "aten::copy_"] * 2, "aten::zero_"]
    lifetime = [(e["ev"], e["graph"]) for e in events if e["ev"] in ("replay", "graph_reset", "graph_destroy")]
    assert lifetime == [
        ("replay", 1),
        ("replay", 1),
        ("replay", 2),
        ("graph_reset", 2),
        ("replay", 3),
        ("graph_reset", 3),
        ("replay", 4),
        ("graph_destroy", 4),
        ("graph_destroy", 1),  # the program's function returned: the first graph goes; the second was reset
    ]
    begins = {e["graph"]: e["stream"] for e in events if e["ev"] == "capture_begin"}
    assert all(e["stream"] == begins[e["graph"]] for e in events if e["ev"] == "replay"), "each on its stream"
    zero = next(e["seq"] for e in events if e.get("op") == "aten::zero_")
    destroy = next(e["seq"] for e in events if e["ev"] == "graph_destroy")
    assert destroy < zero, "the destruction where the object was collected"


def _captured_seqs(events: list[dict]) -> set[int]:
    """The seqs of events between a capture's begin and end (one capture at a time here)."""
    captured, inside = set(), False
    for e in events:
        inside = inside or e["ev"] == "capture_begin"
        if inside:
            captured.add(e["seq"])
        inside = inside and e["ev"] != "capture_end"
    return captured


def eager_program(fake: FakeCuda) -> None:
    """Eager work before any capture, as PyTorch's documented warm-up does it: allocations on a
    side stream, freed and handed out again; the cache emptied (as ``torch.cuda.graph`` does)
    so that the warm-up's addresses come back on another stream with other sizes; a capture;
    allocations whose hooks run in another order than the allocator made them; an eager
    allocation from a private pool."""
    with fake.on(SIDE):
        for step in range(3):
            a, b = fake.alloc(64), fake.alloc(200 - step)
            torch.add(a[:4], 1.0, out=b[:4])
            fake.free(a)
            fake.free(b)
    fake.empty_cache()
    with fake.on(MAIN):
        small = fake.alloc(8)  # at the warm-up's first address: an 8-byte block on MAIN
        small.fill_(2.0)
        graph = FakeGraph(fake)
        graph.capture_begin()
        out = fake.alloc(100)
        torch.mul(small[:2], 3.0, out=out[:2])
        graph.capture_end()
        racing = fake.alloc_racing([16, 32, 48])
        for tensor in racing:
            fake.free(tensor)  # gone before the recording ends: no live block to lean on
        with fake.use_pool((7, 0)):
            pooled = fake.alloc(40)
        fake.free(pooled)


@pytest.mark.parametrize("tracker", [True, False], ids=["tracker", "history"])
def test_both_hook_sets_give_eager_allocations_their_exact_facts(tracker):
    # From one line, so that their stacks are the same.
    (native, fake_n), (python, fake_p) = [record_program(k, eager_program, tracker=tracker) for k in KINDS]
    assert native.errors == [] and python.errors == []
    events = native.trace_events()
    difference = first_difference(canonical(events), canonical(python.trace_events()))
    assert difference is None, difference
    assert native.dropped_allocations == python.dropped_allocations == 0
    assert allocation_facts(events) == true_facts(fake_n), "every allocation's own size, stream and pool"
    assert allocation_facts(python.trace_events()) == true_facts(fake_p)
    assert native.allocation_facts["source"] == ("allocator trace tracker" if tracker else "allocator history")
    assert python.allocation_facts["source"] == "allocator history"
    # The premises: addresses really were handed out again with other facts.
    reused = [facts for facts in true_facts(fake_n).values() if len(set(facts)) > 1]
    assert any(len({stream for _, stream, _ in facts}) > 1 for facts in reused), "an address on two streams"
    assert any((40, MAIN, (7, 0)) in facts for facts in true_facts(fake_n).values()), "the private pool's block"


def test_the_comparison_catches_a_hook_set_that_drops_a_field(monkeypatch):
    from streamrace.record import hooks

    drain = hooks.PythonHooks.drain

    def without_wait_stacks(self):
        events = drain(self)
        for event in events:
            if event["ev"] == "event_wait":
                event.pop("stack", None)
        return events

    monkeypatch.setattr(hooks.PythonHooks, "drain", without_wait_stacks)
    difference = _difference()
    assert difference is not None and "'ev': 'event_wait'" in difference


def test_the_comparison_catches_a_hook_set_that_writes_keys_in_another_order(monkeypatch):
    """The trace writes an event's keys as the dict holds them: the same events with keys in
    another order are other bytes (the native hooks once put an exact allocation's pool
    before its stack)."""
    from streamrace.record import hooks

    drain = hooks.PythonHooks.drain

    def reordered_allocs(self):
        events = drain(self)
        for i, event in enumerate(events):
            if event["ev"] == "alloc":
                events[i] = dict(reversed(list(event.items())))
        return events

    monkeypatch.setattr(hooks.PythonHooks, "drain", reordered_allocs)
    difference = _difference()
    assert difference is not None and "'ev': 'alloc'" in difference


def test_the_comparison_catches_diverging_tables(monkeypatch):
    from streamrace.record import hooks

    # The Python hooks taking every namespace for PyTorch's own: the custom op's kernel is not
    # cross-checked, so its hidden workspace write is missing from their trace.
    monkeypatch.setattr(hooks, "is_trusted", lambda name: True)
    difference = _difference()
    assert difference is not None and "streamrace_fake::scale_" in difference


def test_the_scripted_program_analyses_the_same_from_either_set():
    traces = {}
    for kind, recorder in zip(("native", "python"), record_both(), strict=True):
        traces[kind] = analyzed(recorder.trace_events())
    found = {kind: sorted((f.kind, f.signature) for f in result.findings) for kind, result in traces.items()}
    assert found["native"] == found["python"]
    assert found["native"], "COPY's strided write to y and SIDE's accesses to it are unordered"


@pytest.mark.parametrize("kind", ["native", "python"])
def test_an_empty_capture_reads_back_as_an_empty_graph(kind):
    """cudagraph trees capture graphs with no node; the driver refuses to list zero nodes into
    an array, so a reader that asks anyway fails the read-back of every such graph."""
    if kind == "native":
        native_module()
    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake)
        recorder.start()
        try:
            graph = FakeGraph(fake)
            with fake.on(MAIN):
                graph.capture_begin()
                graph.capture_end()
        finally:
            recorder.stop()
    assert recorder.errors == []
    [read] = [e for e in recorder.trace_events() if e["ev"] == "graph"]
    assert read["nodes"] == [] and read["edges"] == []


def test_the_native_hooks_read_kernel_parameters_themselves(monkeypatch):
    """Above, the native hooks' C++ reading of kernel parameters (graph_reads.h) gave what the
    runtime's reading gives the Python hooks; here it is the one that ran: the runtime is not
    asked for a kernel node."""
    asked: list[str] = []
    original = FakeCuda.node_access

    def node_access(self: FakeCuda, node: int, type_name: str):
        asked.append(type_name)
        return original(self, node, type_name)

    monkeypatch.setattr(FakeCuda, "node_access", node_access)
    native = record("native")
    assert native.errors == [] and "memset" in asked and "kernel" not in asked, asked
    asked.clear()
    record("python")
    assert "kernel" in asked


def test_a_kernel_with_packed_parameters_is_read_alike():
    """A kernel launched with one parameter buffer (``extra``, its size first): the native
    hooks' C++ reading finds the pointers in it as the scripted reading does."""

    def program(fake: FakeCuda) -> None:
        x, y = fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        with fake.on(MAIN):
            graph.capture_begin()
            fake.launch("kernel", "packed_copy", params=[[x.data_ptr()], [y.data_ptr() + 8]], packed=True)
            graph.capture_end()

    native, python = record_program("native", program)[0], record_program("python", program)[0]
    assert native.errors == [] and python.errors == []
    events = canonical(native.trace_events())
    assert first_difference(events, canonical(python.trace_events())) is None
    [kernel] = [e for e in events if e["ev"] == "kernel"]
    assert kernel["name"] == "packed_copy" and len(kernel["writes"]) == 2, kernel


def pinned_program(fake: FakeCuda) -> None:
    """Pinned host memory (format 1.5): a staging buffer copied to the device while the host
    rewrites it, a result copied back and read at once, a blocking copy, an item on the
    device (the host waits), a graph that captured a copy from pinned memory replayed after
    the host wrote it, and the buffers' deaths."""
    with fake.on(MAIN):
        dev = fake.alloc()
        staging = fake.pinned(16)
        staging.fill_(1.0)
        dev[:16].copy_(staging, non_blocking=True)
        staging.fill_(2.0)  # M1
        out = fake.pinned(16)
        out.copy_(dev[:16], non_blocking=True)
        out[3].item()  # M2
        dev[:16].copy_(staging)  # blocking
        dev[:16].sum().item()  # the host waits for MAIN
        graph = FakeGraph(fake)
        graph.capture_begin()
        dev[16:32].copy_(staging, non_blocking=True)
        graph.capture_end()
        graph.work = lambda: None
        staging[0:4].fill_(3.0)
        graph.replay()
        staging.add_(1.0)  # M1, after the replay
        del out
    fake.synchronize()
    del graph, staging


def test_both_hook_sets_record_pinned_host_memory_alike():
    native, python = (record_program(kind, pinned_program)[0] for kind in KINDS)  # one line: one stack
    assert native.errors == [] and python.errors == []
    events = python.trace_events()
    kinds = {e["ev"] for e in events}
    assert {"host_alloc", "host_free", "host_op"} <= kinds
    assert any(e.get("host_reads") for e in events) and any(e.get("host_writes") for e in events)
    assert any(e.get("host_blocking") for e in events)
    assert first_difference(canonical(native.trace_events()), canonical(events)) is None
    found = sorted(f.kind for f in analyze(Trace(header={"minor": 5}, events=events, stacks={})).findings)
    assert "pinned-write-during-copy" in found and "pinned-read-before-copy" in found


def host_result_program(fake: FakeCuda) -> None:
    """``torch.equal(x, x)`` eagerly (it reads x), then in a capture, where it hands a bool to
    the host and launched nothing (CUDA refuses a copy to the host in a capture: the one that
    succeeds short-circuits), then x freed and the graph replayed: torch 2.13's
    check_input_liveness does not count x as the graph's input, nor must streamrace."""
    x = fake.alloc()
    x.fill_(1.0)
    assert torch.equal(x, x)
    w, y = fake.alloc(), fake.alloc()
    graph = FakeGraph(fake)
    with fake.on(MAIN):
        graph.capture_begin()
        assert torch.equal(x, x)
        torch.mul(w, 2.0, out=y)
        graph.capture_end()
        fake.free(x)
        graph.replay()


@pytest.mark.parametrize("kind", KINDS)
def test_an_op_that_hands_a_value_to_the_host_is_no_access_in_a_capture(kind):
    recorder, _ = record_program(kind, host_result_program)
    assert recorder.errors == []
    events = recorder.trace_events()
    captured = _captured_seqs(events)
    equal = [e for e in events if e["ev"] == "op" and e["op"] == "aten::equal"]
    assert [e["seq"] in captured for e in equal] == [False], "the eager one only"
    assert equal[0]["reads"], "eagerly it reads x on the device"
    assert not [e for e in events if e["ev"] == "kernel"], "no node left for a catch-up"
    assert analyzed(events).findings == []


def test_both_hook_sets_leave_a_captured_host_result_out_alike():
    (native, _), (python, _) = [record_program(k, host_result_program) for k in KINDS]
    difference = first_difference(canonical(native.trace_events()), canonical(python.trace_events()))
    assert difference is None, difference


def static_output_program(fake: FakeCuda) -> None:
    """A graph's static output, and the program's values of it (format 1.5): a slice and a
    detach made after the first replay, read then and after the next replay, beside a read of
    eager memory (no identity); a view made inside the capture is not one of them."""
    with fake.on(MAIN):
        x = fake.alloc(64)
        x.fill_(1.0)
        graph = FakeGraph(fake)
        graph.capture_begin()
        out = fake.alloc(64)
        torch.mul(x, 2.0, out=out)
        inside = out[:2]  # a view made in the capture: the static output as the program holds it
        graph.capture_end()
        graph.work = lambda: memcopy(out, x)
        graph.replay()
        kept = out[:4]
        handed = out.detach()
        total = fake.alloc(64)
        torch.add(kept, handed[:4], out=total[:4])
        graph.replay()
        torch.mul(kept, 1.0, out=total[:4])
        torch.add(x[:4], inside[:1], out=total[:4])


def test_both_hook_sets_name_the_values_of_a_static_output_alike():
    (native, _), (python, _) = [record_program(k, static_output_program, own_storages=True) for k in KINDS]
    assert native.errors == [] and python.errors == []
    events = canonical(native.trace_events())
    difference = first_difference(events, canonical(python.trace_events()))
    assert difference is None, difference
    views = [e for e in events if e["ev"] == "view"]
    assert [v["op"] for v in views] == [
        "aten::slice.Tensor",
        "aten::detach",
        "aten::slice.Tensor",
        "aten::slice.Tensor",
    ]
    assert all(v["tensor"] is not None for v in views)
    kept, handed, handed_slice, inside_slice = views
    assert handed_slice["base"] == handed["tensor"] and kept["base"] == handed["base"] != kept["tensor"]
    reads = [e.get("tensors") for e in events if e["ev"] == "op" and e["op"] in ("aten::add.out", "aten::mul.out")]
    # the captured mul, the two reads of views, the kept view after the next replay, the eager x
    assert reads == [None, [kept["tensor"], handed_slice["tensor"]], [kept["tensor"]], [None, inside_slice["tensor"]]]
    assert native.log.views == python.log.views == 4, "the header's views"


def external_event_program(fake: FakeCuda, side_waits: bool = True) -> None:
    """Events made with ``external=True`` (format 1.6): one recorded inside a capture (an event
    record node: every replay records it), one waited on (an event wait node). The side stream
    reads the replay's output after waiting on the recorded one; the graph reads what the copy
    stream wrote after it recorded the other."""
    with fake.on(MAIN):
        x, out = fake.alloc(64), fake.alloc(64)
        ready, done = fake.event(), fake.event()
        graph = FakeGraph(fake)
        graph.capture_begin()
        fake.wait(ready, external=True)
        torch.mul(x, 2.0, out=out)
        fake.record(done, external=True)
        graph.capture_end()
        graph.work = lambda: memcopy(out, x)
    with fake.on(COPY):
        x.fill_(3.0)
        fake.record(ready)
    with fake.on(MAIN):
        graph.replay()
    with fake.on(SIDE):
        if side_waits:
            fake.wait(done)
        torch.add(out, 1.0, out=fake.alloc(64))


def test_both_hook_sets_name_the_events_of_a_graphs_event_nodes_alike():
    events = recorded_alike(external_event_program)
    (graph,) = [e for e in events if e["ev"] == "graph"]
    named = {n["type"]: n.get("event") for n in graph["nodes"] if n["type"] in ("eventrecord", "waitevent")}
    created = [e["event"] for e in events if e["ev"] == "event_create"]
    assert named == {"waitevent": created[0], "eventrecord": created[1]}
    assert analyzed(events).findings == []


def test_without_the_wait_on_the_recorded_event_the_side_read_races():
    native, _ = record_program("native", lambda fake: external_event_program(fake, side_waits=False))
    assert [(f.kind, f.hazard) for f in analyzed(native.trace_events()).findings] == [("data-race", "RAW")]


def signalled_copy_program(fake: FakeCuda) -> None:
    """PyTorch's test_graph_external_wait_and_record in miniature: a graph's custom kernel holds
    a pointer to a pinned flag it spins on and records an external event; a second graph waits
    on it and copies into pinned memory. The host reads that memory before it sets the flag,
    and again after synchronizing the second graph's external event."""
    with fake.on(MAIN):
        dev, x_cpu, flag, probe = fake.alloc(), fake.pinned(16), fake.pinned(4), fake.pinned(16)
        flag.fill_(0.0)
        probe.fill_(0.0)
        start, end = fake.event(), fake.event()
        signalling = FakeGraph(fake)
        signalling.capture_begin()
        fake.launch("kernel", "wait_for_cpu", params=[[flag.data_ptr()]])
        fake.record(start, external=True)
        signalling.capture_end()
        working = FakeGraph(fake)
        working.capture_begin()
        fake.wait(start, external=True)
        x_cpu.copy_(dev[:16], non_blocking=True)
        fake.record(end, external=True)
        working.capture_end()
        signalling.work = working.work = lambda: None
    with fake.on(SIDE):
        signalling.replay()
    with fake.on(COPY):
        working.replay()
    with fake.on(MAIN):
        probe.copy_(x_cpu)  # before the flag is set: the copy cannot have started
        flag.fill_(1.0)
        fake.synchronize(end)
        probe.copy_(x_cpu)


def test_both_hook_sets_see_the_pinned_flag_a_graph_kernel_polls_alike():
    events = recorded_alike(signalled_copy_program)
    (spin,) = [e for e in events if e["ev"] == "kernel" and e["name"] == "wait_for_cpu"]
    (flag,) = [e for e in events if e["ev"] == "host_alloc" and e["size"] == 16]
    assert [r["addr"] for r in spin["host_ranges"]] == [flag["addr"]]
    assert [f.kind for f in analyzed(events, minor=6).findings] == []
    # Without the flag's write nothing releases the kernel: the early read stands.
    sets_flag = [e for e in events if e["ev"] == "host_op" and e["writes"] and e["writes"][0]["addr"] == flag["addr"]]
    unsignalled = [e for e in events if e not in sets_flag]
    assert [f.kind for f in analyzed(unsignalled, minor=6).findings] == ["pinned-read-before-copy"]


LINE_PROGRAMS = {
    "scripted": scripted_program,
    "eager": eager_program,
    "pinned": pinned_program,
    "host result": host_result_program,
    "static output": static_output_program,
    "external event": external_event_program,
    "signalled copy": signalled_copy_program,
}


@pytest.mark.parametrize("name", LINE_PROGRAMS)
def test_the_native_hooks_write_a_flushed_trace_as_the_one_kept_in_memory(name, tmp_path, monkeypatch):
    """A flush to a trace file takes the events the recorder passes through (ops, views,
    events, syncs) from the native hooks as trace lines they write themselves, never made into
    dicts (event_log.h, ``drain_lines``). The file must hold the events the same program
    recorded in memory holds, key for key and in order, each line as json.dumps writes it."""
    native_module()
    program = LINE_PROGRAMS[name]
    written: list[int] = []
    write = IncrementalTraceWriter.write

    def counted(self, events, lines=None):
        written.append(len(lines or ()))
        write(self, events, lines)

    monkeypatch.setattr(IncrementalTraceWriter, "write", counted)
    path = tmp_path / "t.jsonl"
    # From one line, so that the two recordings' stacks are the same.
    flushed, in_memory = [_recorded_natively(program, trace) for trace in (str(path), None)]
    assert flushed.errors == [] and in_memory.errors == []
    assert written[0] > 0, "the prelude's flush took lines from the native hooks"
    lines = path.read_text().splitlines()[1:]
    for line in lines:
        assert json.dumps(json.loads(line), separators=(",", ":"), allow_nan=False) == line
    difference = first_difference(canonical(load_trace(path).events), canonical(in_memory.trace_events()))
    assert difference is None, difference


def _recorded_natively(program: Callable[[FakeCuda], None], trace: str | None) -> Recorder:
    """A program recorded by the native hooks on a fresh fake, to a trace file flushed at every
    flush point (and before and after it), or in memory."""
    fake = FakeCuda()
    with Kernels(fake):
        recorder = Recorder(hooks="native", runtime=fake, trace=trace, flush_events=1)
        recorder.start()
        try:
            # A prelude of kinds passed through, flushed before the program: the programs that
            # capture first drain everything at the capture's end, as dicts (settle).
            prelude = fake.alloc()
            with fake.on(PRELUDE):
                prelude.fill_(3.0)
                fake.record(fake.event())
            fake.synchronize()
            recorder.flush()
            program(fake)
            recorder.flush()
        finally:
            recorder.stop()
        if trace is not None:
            finish_trace(recorder)
    return recorder


def growing_captures_program(fake: FakeCuda) -> None:
    """A small capture, then one with more nodes than the room the native hooks leave past
    the small one's count (graph_reads.h, node_handles_as_before), then the small one again."""
    x, y = fake.alloc(), fake.alloc()
    for ops in (2, 300, 2):
        graph = FakeGraph(fake)
        with fake.on(MAIN):
            graph.capture_begin()
            for _ in range(ops):
                torch.add(x, 1.0, out=y)
            graph.capture_end()


def test_a_graph_larger_than_the_previous_one_is_read_whole():
    events = recorded_alike(growing_captures_program)
    graphs = [e for e in events if e["ev"] == "graph"]
    assert [len(g["nodes"]) for g in graphs] == [2, 300, 2]
    assert analyzed(events).findings == []
