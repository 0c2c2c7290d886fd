"""Native catch-ups that follow new nodes back through their dependencies (unseen_launches.h).

Where the nodes no recorded launch made are one chain (a library's kernel or two on one
stream), the native hooks find them from the frontier node they did not account for, one
dependency query per node, instead of walking the whole graph as it grows; anything else (a
branch, new nodes on two streams, an old driver, a failed query) walks. Either way the trace
must be the Python hooks' (which always walk), and a node the hooks only saw through a wait
is still new.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph  # noqa: E402
from test_hooks_differential import COPY, KINDS, MAIN, SIDE, analyzed, record_program, recorded_alike  # noqa: E402

INTERNAL = (0x6000, 0x7000)  # streams a custom op forks onto and joins back, unheard
_FAKES: list[FakeCuda] = []  # the fake the custom ops below launch on
_LIBRARY = torch.library.Library("streamrace_traced", "DEF")
_LIBRARY.define("forked_(Tensor(a!) x) -> Tensor(a!)")
_LIBRARY.define("copy(Tensor x, Tensor(a!) out) -> Tensor(a!)")


def _forked(x: torch.Tensor) -> torch.Tensor:
    """A kernel on each of two internal streams, joined back through the op's own events:
    the caller's stream ends with both nodes as its frontier."""
    fake = _FAKES[-1]
    fork = fake.event()
    fake.record(fork, heard=False)
    for i, stream in enumerate(INTERNAL):
        with fake.on(stream):
            fake.wait(fork)
            fake.launch("kernel", f"forked_part{i}", params=[[x.data_ptr() + 64 * i]])
            done = fake.event()
            fake.record(done, heard=False)
        fake.wait(done)
    return x


def _copy(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    _FAKES[-1].launch("kernel", "copy_kernel", params=[[x.data_ptr()], [out.data_ptr()]])
    return out


_LIBRARY.impl("forked_", _forked, "CPU")
_LIBRARY.impl("copy", _copy, "CPU")
WALK_OPTIONS = [
    pytest.param({}, id="traced"),
    pytest.param({"node_dependencies": False}, id="no dependency query"),
]


def library_chain_program(fake: FakeCuda, reads: list[int]) -> None:
    """A capture where a library launches a kernel and a memset on SIDE between two ops, and
    the side stream's result is joined before MAIN reads it: no race. ``reads``: how many
    times the graph's nodes were read before the capture's end."""
    with fake.on(MAIN):
        x, y, z = fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.mul(x, 2.0, out=y)
        fork, done = fake.event(), fake.event()
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            torch.add(y, 1.0, out=z)
            fake.launch("kernel", "lib_scale", params=[[z.data_ptr()]])
            fake.launch("memset", writes=[{"addr": z.data_ptr(), "nbytes": 64}])
            torch.add(z, 1.0, out=z)
            fake.record(done)
        fake.wait(done)
        torch.sub(y, z, out=x)
        reads.append(fake.node_reads)
        graph.capture_end()


@pytest.mark.parametrize("options", WALK_OPTIONS)
def test_a_librarys_chain_of_nodes_is_caught_up_as_the_walk_finds_it(options):
    reads: list[int] = []
    events = recorded_alike(lambda fake: library_chain_program(fake, reads), **options)
    kernels = [e for e in events if e["ev"] == "kernel"]
    assert [(e["name"], e["node"], e["stream"]) for e in kernels] == [("lib_scale", 2, SIDE), ("memset", 3, SIDE)]
    assert analyzed(events).findings == []
    native_reads = reads[0]  # recorded_alike records the native hooks first
    if options:
        assert native_reads > 0, "without the dependency query a catch-up walks the graph"
    else:
        assert native_reads == 0, "a chain is traced: the graph is not walked until the capture's end"


def test_a_failed_dependency_query_walks_instead():
    def failing(fake: FakeCuda) -> None:
        fake.dependencies_fail = True
        library_chain_program(fake, reads)

    reads: list[int] = []
    (native, fake), (python, _) = [record_program(kind, failing) for kind in KINDS]
    assert native.errors == [] and fake.dependency_queries > 0 and reads[0] > 0
    caught = [(e["name"], e["node"]) for e in native.trace_events() if e["ev"] == "kernel"]
    assert caught == [(e["name"], e["node"]) for e in python.trace_events() if e["ev"] == "kernel"]
    assert caught == [("lib_scale", 2), ("memset", 3)]


def two_streams_program(fake: FakeCuda) -> None:
    """A library kernel on SIDE and another on COPY before MAIN's next op: two new frontier
    nodes, two chains. COPY's writes what MAIN reads, unjoined: a race."""
    with fake.on(MAIN):
        x, y, z = fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.mul(x, 2.0, out=y)
        fork, side_done = fake.event(), fake.event()
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            fake.launch("kernel", "lib_side", params=[[z.data_ptr()]])
            fake.record(side_done)
        with fake.on(COPY):
            fake.wait(fork)
            fake.launch("kernel", "lib_copy", params=[[x.data_ptr()]])
        fake.wait(side_done)
        torch.add(x, 1.0, out=y)
        copy_done = fake.event()
        with fake.on(COPY):
            fake.record(copy_done)
        fake.wait(copy_done)
        graph.capture_end()


def test_new_nodes_on_two_streams_are_traced_alike():
    events = recorded_alike(two_streams_program)
    assert sorted((e["name"], e["stream"]) for e in events if e["ev"] == "kernel") == [
        ("lib_copy", COPY),
        ("lib_side", SIDE),
    ]
    assert [(f.kind, f.hazard) for f in analyzed(events).findings] == [("data-race", "RAW")]


def waited_library_node_program(fake: FakeCuda) -> None:
    """A library fills x on SIDE and records its own event there, which torch never hears;
    MAIN waits on that event (torch hears the wait). The frontier MAIN has after the wait
    holds the library's node: seen, not accounted for, so it is still caught up at the next
    check. COPY reads x meanwhile, joined only at the end: a race with the library's kernel."""
    with fake.on(MAIN):
        x, y, z = fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.mul(y, 2.0, out=y)
        fork, library_done, copy_done = fake.event(), fake.event(), fake.event()
        fake.record(fork)
        with fake.on(COPY):
            fake.wait(fork)
            torch.add(x, 1.0, out=z)
            fake.record(copy_done)
        with fake.on(SIDE):
            fake.wait(fork)
            fake.launch("kernel", "lib_fill", params=[[x.data_ptr()]])
            fake.record(library_done, heard=False)
        fake.wait(library_done)
        torch.add(y, 1.0, out=y)
        fake.wait(copy_done)
        graph.capture_end()


def test_a_node_a_hooked_wait_brought_in_is_still_caught_up():
    events = recorded_alike(waited_library_node_program)
    assert [(e["name"], e["node"], e["stream"]) for e in events if e["ev"] == "kernel"] == [("lib_fill", 2, SIDE)]
    (race,) = analyzed(events).findings
    assert race.kind == "data-race" and {a.op for a in race.accesses} == {"lib_fill", "aten::add.out"}


def swallowed_program(fake: FakeCuda, third_stream: bool = False) -> None:
    """A library kernel on SIDE writes x while MAIN, never joined to it until the end, runs
    an op (its stream unchanged since its last launch: only MAIN is checked) and then reads
    x. The library node lies before MAIN's op in the graph: the walk, starting after the
    latest claim, gives it to that op; the trace finds it at SIDE's next check.
    ``third_stream``: an unrelated library kernel on COPY (it touches only w) comes to the
    same catch-up, two new frontier nodes."""
    with fake.on(MAIN):
        x, y, z, w = fake.alloc(), fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        fork, side_done, copy_done = fake.event(), fake.event(), fake.event()
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            torch.mul(z, 2.0, out=z)
        if third_stream:
            with fake.on(COPY):
                fake.wait(fork)
                torch.mul(w, 2.0, out=w)
        torch.mul(y, 2.0, out=y)
        with fake.on(SIDE):
            fake.launch("kernel", "lib_fill", params=[[x.data_ptr()]])
        torch.mul(y, 3.0, out=y)
        torch.add(x, 1.0, out=y)
        if third_stream:
            with fake.on(COPY):
                fake.launch("kernel", "lib_copy", params=[[w.data_ptr()]])
        with fake.on(SIDE):
            torch.add(z, 1.0, out=z)
            fake.record(side_done)
        if third_stream:
            with fake.on(COPY):
                fake.record(copy_done)
        fake.wait(side_done)
        if third_stream:
            fake.wait(copy_done)
        graph.capture_end()


def test_a_node_launched_unseen_on_another_stream_is_found_by_the_trace():
    native, _ = record_program("native", swallowed_program)
    events = native.trace_events()
    assert native.errors == []
    (kernel,) = [e for e in events if e["ev"] == "kernel"]
    assert (kernel["name"], kernel["stream"]) == ("lib_fill", SIDE)
    races = [f for f in analyzed(events).findings if f.kind == "data-race"]
    assert any("lib_fill" in {a.op for a in f.accesses} for f in races), races


def freed_under_an_unseen_read_program(fake: FakeCuda, joined_first: bool) -> None:
    """A library kernel on SIDE reads x, a block of the capture's pool, and MAIN frees x with
    no op between (a Python temporary dropped), then allocates z, which gets x's block, and
    writes it. Freed before SIDE is joined, x's block is z's while the kernel may still read
    it: an unsafe free. ``joined_first``: the fixed twin, which joins SIDE first."""
    with fake.on(MAIN):
        y = fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        x = fake.alloc()
        torch.mul(y, 2.0, out=x)
        fork, done = fake.event(), fake.event()
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            fake.launch("kernel", "lib_read", params=[[x.data_ptr()]])
        if joined_first:
            with fake.on(SIDE):
                fake.record(done)
            fake.wait(done)
        fake.free(x)
        z = fake.alloc()
        assert z.data_ptr() == x.data_ptr(), "the fake's allocator hands the freed block on"
        torch.mul(y, 2.0, out=z)
        if not joined_first:
            with fake.on(SIDE):
                fake.record(done)
            fake.wait(done)
        graph.capture_end()


@pytest.mark.parametrize("joined_first", [False, True], ids=["freed before the join", "joined first"])
def test_a_launch_no_hook_saw_is_in_the_trace_before_a_free_of_what_it_reads(joined_first):
    """The free's check covers every stream after an event hook, as a launch's does. Checked
    on MAIN alone, the library kernel came after the free and z's allocation, its pointer
    resolved to z, and the report was a data race on z, a tensor the kernel never saw, with
    both hook sets (where no allocation took the block, nothing at all)."""
    events = recorded_alike(lambda fake: freed_under_an_unseen_read_program(fake, joined_first))
    order = [e["ev"] for e in events if e["ev"] in ("kernel", "free")]
    assert order == ["kernel", "free"], order
    findings = analyzed(events).findings
    if joined_first:
        assert findings == []
    else:
        (unsafe,) = findings
        assert unsafe.kind == "unsafe-free" and "lib_read" in {a.op for a in unsafe.accesses}, unsafe


def dropped_temporary_program(fake: FakeCuda) -> None:
    """After the fork (event hooks), MAIN drops a temporary, a library kernel on SIDE writes
    b, and MAIN's next op reads b, unjoined: a race. The free checks every stream, as a
    launch would; were it counted as MAIN's launch, that op would check MAIN alone and find
    the library kernel only after it (the Python hooks, walking from its claim, never)."""
    with fake.on(MAIN):
        y = fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        b = fake.alloc()
        torch.mul(y, 2.0, out=b)
        fork, done = fake.event(), fake.event()
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
        fake.free(fake.alloc())
        with fake.on(SIDE):
            fake.launch("kernel", "lib_write", params=[[b.data_ptr()]])
        torch.mul(b, 3.0, out=y)
        with fake.on(SIDE):
            fake.record(done)
        fake.wait(done)
        graph.capture_end()


def test_a_free_is_no_launch_the_next_launch_still_checks_every_stream():
    events = recorded_alike(dropped_temporary_program)
    kernel_then_op = [e.get("name") or e["op"] for e in events if e["ev"] in ("kernel", "op")]
    assert kernel_then_op == ["aten::mul.out", "lib_write", "aten::mul.out"], kernel_then_op
    (race,) = analyzed(events).findings
    assert (race.kind, race.hazard) == ("data-race", "RAW") and "lib_write" in {a.op for a in race.accesses}


def aborted_program(fake: FakeCuda) -> None:
    """The recording stops inside a capture the program never ends, after a library kernel."""
    with fake.on(MAIN):
        x, y = fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.mul(x, 2.0, out=y)
        fake.launch("kernel", "lib_fill", params=[[x.data_ptr()]])
        torch.add(x, 1.0, out=y)


@pytest.mark.parametrize("kind", KINDS)
def test_a_capture_never_ended_still_numbers_its_caught_up_nodes(kind):
    recorder, _ = record_program(kind, aborted_program)
    events: list[dict[str, Any]] = recorder.trace_events()
    assert recorder.errors == []
    (kernel,) = [e for e in events if e["ev"] == "kernel"]
    assert kernel["node"] == 1 and "_node_handle" not in kernel
    assert [e.get("aborted") for e in events if e["ev"] == "capture_end"] == [True]


def test_the_graph_event_names_only_the_kernel_nodes_no_recorded_launch_made():
    """A recorded op's event names its kernels; the read-back reads a function (a parameter
    read each) only for the nodes caught up, the same with either hook set."""
    reads: list[int] = []
    native, fake = record_program("native", lambda fake: library_chain_program(fake, reads))
    events = native.trace_events()
    (graph,) = [e for e in events if e["ev"] == "graph"]
    named = {n["id"]: n["name"] for n in graph["nodes"] if "name" in n}
    caught = {e["node"] for e in events if e["ev"] == "kernel"}
    assert named == {2: "lib_scale"} and caught == {2, 3}, "the memset is no kernel: nameless"
    kernel_nodes = [n for n in graph["nodes"] if n["type"] == "kernel"]
    assert len(kernel_nodes) == 5 and fake.kernel_param_reads == 2, "the caught kernel's name, then its parameters"
    (python, _) = record_program("python", lambda fake: library_chain_program(fake, reads))
    (python_graph,) = [e for e in python.trace_events() if e["ev"] == "graph"]
    assert python_graph["nodes"] == graph["nodes"]


def branch_program(fake: FakeCuda, reads: list[int]) -> None:
    """Library kernels on SIDE and COPY that a third, on MAIN, waits for through the library's
    own events, recorded and waited on where no hook hears: one new node with two new
    dependencies, a branch, walked."""
    with fake.on(MAIN):
        x, y, z = fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.mul(x, 2.0, out=y)
        fork = fake.event()
        fake.record(fork)
        for stream, buffer in ((SIDE, y), (COPY, z)):
            with fake.on(stream):
                fake.wait(fork)
                fake.launch("kernel", f"lib_{stream:x}", params=[[buffer.data_ptr()]])
                done = fake.event()
                fake.record(done, heard=False)
            fake.wait(done, heard=False)
        fake.launch("kernel", "lib_join", params=[[x.data_ptr()]])
        torch.mul(x, 3.0, out=x)  # its launch check catches up: MAIN's new node comes first
        reads.append(fake.node_reads)
        graph.capture_end()


def test_a_branch_is_walked_alike():
    reads: list[int] = []
    events = recorded_alike(lambda fake: branch_program(fake, reads))
    assert [e["name"] for e in events if e["ev"] == "kernel"] == ["lib_2000", "lib_3000", "lib_join"]
    assert analyzed(events).findings == []
    assert reads[0] > 0, "the native hooks walked"


def forked_op_program(fake: FakeCuda) -> None:
    """A custom op ends joining its own two internal streams, so its stream's frontier holds
    both its nodes (it claims the last); a library kernel on MAIN follows it. COPY reads what
    the op wrote, ordered after it by an event: no race, and no node of the op is new."""
    _FAKES.append(fake)
    with fake.on(MAIN):
        x, y, z = fake.alloc(), fake.alloc(), fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        torch.ops.streamrace_traced.copy(y, z)
        torch.ops.streamrace_traced.forked_(x)
        done = fake.event()
        fake.record(done)
        with fake.on(COPY):
            fake.wait(done)
            torch.ops.streamrace_traced.copy(x, y)
            copy_done = fake.event()
            fake.record(copy_done)
        fake.launch("kernel", "lib_after", params=[[z.data_ptr()]])
        fake.wait(copy_done)
        torch.ops.streamrace_traced.copy(z, z)
        graph.capture_end()


@pytest.mark.parametrize("options", WALK_OPTIONS)
def test_the_nodes_an_op_joined_are_its_own(options):
    """Found by review: the op's first internal node was traced as a new kernel of MAIN's,
    after COPY's read of what it wrote, a false race."""
    recorder, _ = record_program("native", forked_op_program, kernels=False, **options)
    events = recorder.trace_events()
    assert recorder.errors == []
    assert [e["name"] for e in events if e["ev"] == "kernel"] == ["lib_after"]
    assert analyzed(events).findings == []


def test_a_kernel_on_a_third_stream_does_not_hide_the_node():
    """Found by review: two new frontier nodes made the catch-up walk, which starts after the
    latest claim and so never saw lib_fill, and the race went unreported."""
    recorder, _ = record_program("native", lambda fake: swallowed_program(fake, third_stream=True))
    events = recorder.trace_events()
    assert sorted(e["name"] for e in events if e["ev"] == "kernel") == ["lib_copy", "lib_fill"]
    races = [{a.op for a in f.accesses} for f in analyzed(events).findings if f.kind == "data-race"]
    assert {"lib_fill", "aten::add.out"} in races
