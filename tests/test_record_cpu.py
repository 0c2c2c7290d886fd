"""The recorder's CPU-testable parts: op read/write sets from schemas (CSAN's argument-handling
cases, keyed on storage bytes), with the Python and the native hooks alike, Triton IR
directions, pointer resolution, user stacks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from op_engines import ENGINES, INDEX_ENGINES  # noqa: E402

from streamrace.record.kernel_params import LiveBlocks  # noqa: E402
from streamrace.record.op_accesses import tensor_range  # noqa: E402
from streamrace.record.stacks import StackTable, UserCode  # noqa: E402
from streamrace.record.triton_launches import stored_pointer_args  # noqa: E402


@pytest.fixture(params=sorted(ENGINES))
def record(request):
    """Record a function's ops with one engine: [(op without overload, reads, writes)]."""
    engine = ENGINES[request.param]

    def run(fn):
        return [(name.split(".")[0], reads, writes) for name, reads, writes in engine(fn)]

    return run


@pytest.fixture(params=sorted(INDEX_ENGINES))
def record_index(request):
    """Record a function's ops with one engine: [(op without overload, index operands)]."""
    engine = INDEX_ENGINES[request.param]
    return lambda fn: [(name.split(".")[0], index) for name, index in engine(fn)]


def test_ops_that_write_through_an_index_name_it_and_gathers_do_not(record_index):
    cache, rows, loc = torch.zeros(16, 4), torch.ones(3, 4), torch.tensor([5, 1, 9])
    index2d = torch.tensor([[1, 2, 3, 4]] * 3)
    ops = record_index(
        lambda: (
            cache.index_copy_(0, loc, rows),
            cache.__setitem__(loc, rows),  # index_put_
            cache.index_add_(0, loc, rows),
            cache.scatter_(0, index2d, rows),
            cache.scatter(0, index2d, rows),
            cache.index_select(0, loc),
            cache.gather(0, index2d),
        )
    )
    loc_range = {"addr": _addr(loc), "shape": [3], "stride": [1], "itemsize": 8}
    index2d_range = {"addr": _addr(index2d), "shape": [3, 4], "stride": [4, 1], "itemsize": 8}
    assert ops == [
        ("aten::index_copy_", [loc_range]),
        ("aten::index_put_", [loc_range]),
        ("aten::index_add_", [loc_range]),
        ("aten::scatter_", [index2d_range]),
        ("aten::scatter", [index2d_range]),
        ("aten::index_select", []),
        ("aten::gather", []),
    ]


def _addr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def test_add_reads_both_inputs_and_writes_the_output(record):
    a, b = torch.ones(5, 3), torch.ones(5, 3)
    out = {}
    ops = record(lambda: out.setdefault("c", torch.add(a, b)))
    [(name, reads, writes)] = ops
    assert name == "aten::add"
    assert sorted(r["addr"] for r in reads) == sorted([_addr(a), _addr(b)])
    assert [w["addr"] for w in writes] == [_addr(out["c"])]


def test_cat_reads_every_list_element(record):
    a, b, c = torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3)
    [(name, reads, writes)] = record(lambda: torch.cat([a, b, c]))
    assert name == "aten::cat" and len(reads) == 3 and len(writes) == 1


def test_split_is_a_view_and_touches_nothing(record):
    a = torch.ones(6, 3)
    assert record(lambda: torch.split(a, 2)) == []


def test_inplace_writes_self_and_reads_the_other(record):
    a, b = torch.ones(5, 3), torch.ones(5, 3)
    [(name, reads, writes)] = record(lambda: a.add_(b))
    assert name == "aten::add_"
    assert [r["addr"] for r in reads] == [_addr(b)] and [w["addr"] for w in writes] == [_addr(a)]


def test_out_argument_is_written(record):
    a, b, c = torch.ones(5, 3), torch.ones(5, 3), torch.empty(5, 3)
    [(name, reads, writes)] = record(lambda: torch.add(a, b, out=c))
    assert name == "aten::add" and [w["addr"] for w in writes] == [_addr(c)] and len(reads) == 2


def test_several_outputs_are_all_written(record):
    a = torch.randn(4, 6)
    [(name, reads, writes)] = record(lambda: a.max(dim=0))
    assert name == "aten::max" and [r["addr"] for r in reads] == [_addr(a)] and len(writes) == 2


def test_nonzero_as_tuple_reads_input_writes_result(record):
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    [(name, reads, writes)] = record(lambda: torch.nonzero(a, as_tuple=True))  # then unbind: views
    assert name == "aten::nonzero" and [r["addr"] for r in reads] == [_addr(a)] and len(writes) == 1


def test_keyword_and_alias_names_are_bound_by_schema(record):
    a, b = torch.ones(3), torch.ones(3)
    [(_, reads, writes)] = record(lambda: torch.ops.aten.mul.Tensor(a, other=b))
    assert sorted(r["addr"] for r in reads) == sorted([_addr(a), _addr(b)]) and len(writes) == 1


def test_index_driven_write_covers_the_whole_destination_and_reads_indices(record):
    dest = torch.zeros(8, 4)
    index = torch.tensor([1, 5])
    values = torch.ones(2, 4)
    [(name, reads, writes)] = record(lambda: dest.index_copy_(0, index, values))
    assert name == "aten::index_copy_"
    assert writes == [tensor_range(dest)]
    assert sorted(r["addr"] for r in reads) == sorted([_addr(index), _addr(values)])


def test_factory_like_reads_nothing_and_empty_writes_nothing(record):
    a = torch.ones(4)
    [(name, reads, writes)] = record(lambda: (torch.empty_like(a), torch.zeros_like(a)))
    assert name == "aten::zeros_like" and reads == [] and len(writes) == 1, "empty_like touches nothing"


def test_strided_view_range_is_storage_offset_and_strides():
    base = torch.zeros(4, 6)
    view = base[1:, ::2]
    rng = tensor_range(view)
    assert rng == {"addr": _addr(base) + 6 * 4, "shape": [3, 3], "stride": [6, 2], "itemsize": 4}
    assert tensor_range(torch.zeros(0)) is None


def test_metadata_only_inplace_view_touches_nothing(record):
    a = torch.ones(4)
    assert record(lambda: a.resize_(4)) == []


# A custom op that returns a tensor over its input's memory without owning it, as vLLM's
# weak_ref_tensor does (at::from_blob): its schema declares no alias.
_VIEWS = torch.library.Library("streamrace_views", "DEF")
_VIEWS.define("weak_ref(Tensor x) -> Tensor")
_VIEWS.define("weak_ref_offset(Tensor x) -> Tensor")
_VIEWS.impl("weak_ref", lambda x: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x.detach())), "CPU")
_VIEWS.impl(
    "weak_ref_offset", lambda x: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x.detach()[1:])), "CPU"
)


_VIEWS.define("weak_ref_last(Tensor[] xs) -> Tensor")
_VIEWS.impl(
    "weak_ref_last",
    lambda xs: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(xs[-1].detach()[2:])),
    "CPU",
)


def test_a_view_of_any_of_many_inputs_is_found(record):
    """Among many input storages (sorted by address, not by position) the one the view lies in."""
    tensors = [torch.ones(8) for _ in range(40)]
    assert record(lambda: torch.ops.streamrace_views.weak_ref_last(tensors)) == []


def test_a_foreach_op_writes_each_fresh_output(record):
    a, b = [torch.ones(4) for _ in range(30)], [torch.ones(4) for _ in range(30)]
    out = {}
    [(name, reads, writes)] = record(lambda: out.setdefault("c", torch._foreach_add(a, b)))
    assert name == "aten::_foreach_add" and len(reads) == 60
    assert [w["addr"] for w in writes] == [_addr(c) for c in out["c"]]


def test_unsafe_view_is_a_view_and_touches_nothing(record):
    """_unsafe_view's schema declares no alias, yet its result is its input's memory."""
    a = torch.ones(6, 4)
    assert record(lambda: torch.ops.aten._unsafe_view(a, [4, 6])) == []


@pytest.mark.parametrize("op", ["weak_ref", "weak_ref_offset"])
def test_a_non_owning_view_made_by_a_custom_op_touches_nothing(record, op):
    """A tensor over memory it does not own (its own storage, the input's bytes) is a view of
    that memory, not a fresh output the op wrote."""
    a = torch.ones(6, 4)
    assert record(lambda: getattr(torch.ops.streamrace_views, op)(a)) == []


def test_matmul_writes_its_output_once_through_mm(record):
    """A batched matmul is mm and an _unsafe_view of mm's output: only mm touches bytes."""
    a, b = torch.ones(2, 3, 4), torch.ones(4, 5)
    out = {}
    ops = record(lambda: out.setdefault("c", torch.matmul(a, b)))
    assert [name for name, _, _ in ops] == ["aten::mm"]
    [(_, reads, writes)] = ops
    assert [w["addr"] for w in writes] == [_addr(out["c"])]
    assert sorted(r["addr"] for r in reads) == sorted([_addr(a), _addr(b)])


def test_a_fresh_output_over_new_memory_is_still_written(record):
    """The view rule looks at memory, not at shape: clone returns new memory of the same shape."""
    a = torch.ones(6, 4)
    [(name, reads, writes)] = record(lambda: a.clone())
    assert name == "aten::clone" and [r["addr"] for r in reads] == [_addr(a)] and len(writes) == 1


TTIR = """
module {
  tt.func public @kern(%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %arg1: !tt.ptr<i64>,
                       %arg2: !tt.ptr<f32>, %arg3: i32) attributes {noinline = false} {
    %0 = tt.get_program_id x : i32 loc(#loc1)
    %1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32> loc(#loc2)
    %2 = tt.splat %arg1 : !tt.ptr<i64> -> tensor<128x!tt.ptr<i64>> loc(#loc3)
    %3 = tt.addptr %2, %1 : tensor<128x!tt.ptr<i64>>, tensor<128xi32> loc(#loc3)
    %4 = tt.load %3 : tensor<128x!tt.ptr<i64>> loc(#loc4)
    %5 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc5)
    %6 = tt.addptr %5, %4 : tensor<128x!tt.ptr<f32>>, tensor<128xi64> loc(#loc5)
    %7 = tt.splat %arg2 : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>> loc(#loc6)
    %8 = tt.addptr %7, %1 : tensor<128x!tt.ptr<f32>>, tensor<128xi32> loc(#loc6)
    %9 = tt.load %8 : tensor<128x!tt.ptr<f32>> loc(#loc7)
    tt.store %6, %9 : tensor<128x!tt.ptr<f32>> loc(#loc8)
    tt.return loc(#loc9)
  } loc(#loc)
} loc(#loc)
"""


def test_triton_ir_says_which_pointers_are_stored_through():
    # A scatter: out[idx[i]] = src[i]. The index is loaded data, not where the store's pointer
    # comes from, so the index buffer stays a read.
    assert stored_pointer_args(TTIR) == [True, False, False]
    atomic = TTIR.replace("tt.store %6, %9", "%10 = tt.atomic_rmw fadd, acq_rel, gpu, %8, %9")
    assert stored_pointer_args(atomic) == [False, False, True]
    assert stored_pointer_args("not triton ir") is None


def test_pointers_resolve_against_blocks_live_at_that_time():
    live = LiveBlocks([(0x1000, 0x100, 1, 10), (0x1000, 0x400, 20, None), (0x9000, 0x10, -1, None)])
    assert live.resolve(0x1080, 5) == (0x1000, 0x100)
    assert live.resolve(0x1200, 5) is None, "outside the first lifetime"
    assert live.resolve(0x1200, 25) == (0x1000, 0x400), "inside the reuse"
    assert live.resolve(0x1080, 15) is None, "between lifetimes"
    assert live.resolve(0x9008, 0) == (0x9000, 0x10), "live since before recording"
    assert live.ranges([0x1040, 0x1010, 0x5], 5) == [{"addr": 0x1010, "nbytes": 0xF0}]


def test_user_stack_skips_library_frames():
    emitted = []
    table = StackTable(lambda ev, **fields: emitted.append(fields))

    def user_code():
        return table.capture(1)

    first, second = user_code(), user_code()
    assert first == second == 1, "one entry per distinct stack"
    frames = emitted[0]["frames"]
    assert frames[0][0] == "tests/test_record_cpu.py" and frames[0][2] == "user_code"
    assert not any("torch" in f[0] or "streamrace/" in f[0] for f in frames)


@pytest.mark.parametrize(
    "module",
    [
        "pytest.__main__",
        "_pytest.runner",
        "pluggy._hooks",
        "xdist.remote",
        "execnet.gateway_base",
        "unittest.case",
        "runpy",
    ],
)
def test_test_runner_frames_are_never_user_code(module):
    """pytest (its ``python -m pytest`` entry too), pluggy, xdist's worker, execnet, unittest
    and runpy wrap every test: a finding's line is never theirs (the decision is by file)."""
    import importlib.util

    origin = importlib.util.find_spec(module).origin
    filename = f"<frozen {module}>" if origin == "frozen" else origin  # as a frozen module's frames name it
    assert UserCode().shown_path(compile("pass", filename, "exec")) is None, filename


def test_launches_own_the_nodes_since_the_previous_claim():
    from streamrace.record.capture_nodes import CaptureNodes, KernelStats
    from streamrace.record.graph_readback import GraphRead
    from streamrace.record.kernel_params import LiveBlocks

    handles = [100, 101, 102, 103, 104, 105, 106]
    nodes = CaptureNodes(handle=1, base=1)  # node 0 was there before the first launch
    invisible = {"seq": 5, "ev": "kernel"}
    nodes.claim_kernel(invisible, 1)
    empty = ["empty"] * len(handles)  # no parameters to read
    claims = [7, 103, 1, 9, 102, 1, 11, 106, 1]  # (seq, frontier node, trusted); seq 9 launched nothing new
    nodes.snapshot(GraphRead(handles, empty, [None] * len(handles), [0, 1, 0]), claims)
    graph_nodes, graph_edges = nodes.event_nodes, nodes.event_edges  # what the graph event holds
    assert graph_nodes == [], "the graph event is completed once the capture's events are in"
    nodes.finish(lambda: LiveBlocks([]), {}, KernelStats())
    assert [n.get("op") for n in graph_nodes] == [None, 5, 7, 7, 11, 11, 11]
    assert graph_edges == [[0, 1]]
    assert nodes.event_nodes == [] and nodes.event_edges == [], "the capture lets them go"


def test_a_failed_parameter_read_still_ties_launches_to_their_nodes():
    """Reading a caught-up node's parameters fails at the capture's end: the graph event is
    lost, but a launch claimed by handle still learns its first node when the events settle."""
    from streamrace.record.capture_nodes import CaptureNodes, KernelStats
    from streamrace.record.graph_readback import GraphRead
    from streamrace.record.kernel_params import LiveBlocks

    def broken(node, kind):
        raise RuntimeError("cuGraphKernelNodeGetParams failed")

    nodes = CaptureNodes(handle=1, base=0, read_access=broken)
    nodes.claim_kernel({"seq": 3, "ev": "kernel"}, 0)
    launch = {"seq": 6, "ev": "kernel"}
    nodes.launches[6] = launch
    with pytest.raises(RuntimeError):
        nodes.snapshot(GraphRead([100, 101, 102], ["kernel"] * 3, [None] * 3, []), [6, 102, 1])
    nodes.finish(lambda: LiveBlocks([]), {}, KernelStats())
    assert launch["node"] == 1


def test_watch_session_reports_what_it_found() -> None:
    """``session.report()`` hands its reporter a result and the options, in each format."""
    import json
    from pathlib import Path

    from streamrace.analysis import analyze
    from streamrace.record.recorder import Recorder
    from streamrace.session import Session
    from streamrace.trace.io import load_trace

    trace = load_trace(Path(__file__).parent.parent / "examples" / "traces" / "dsv4_mini_race.jsonl.gz")
    session = Session(Recorder(), None, owned=False)
    with pytest.raises(RuntimeError, match="has not ended"):
        session.report()
    session.trace, session.result = trace, analyze(trace)
    assert session.findings
    doc = json.loads(session.report("json"))
    assert [(f["kind"], f["trace"]) for f in doc["findings"]] == [(f.kind, "<watch>") for f in session.findings]
    assert "<watch>" in session.report("text")


def test_the_driver_facts_are_asked_of_nvml_once_a_process(monkeypatch):
    """Every recording's header names the driver and devices; pytest --streamrace ends one
    recording a test, and NVML's init and shutdown each time cost every test."""
    import sys
    import types

    from streamrace.record import facts

    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 0,
        nvmlSystemGetDriverVersion=lambda: "580.0",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts._nvml_facts.cache_clear()
    try:
        first, second = facts.process_facts(), facts.process_facts()
    finally:
        facts._nvml_facts.cache_clear()
    assert calls == ["init"]
    assert first["driver"] == second["driver"] == "580.0"
    first["devices"].append("changed")
    assert second["devices"] == [], "each header gets its own copy"
