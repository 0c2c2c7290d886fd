"""One hand-built trace per hazard class (HAZARDS.md; SERVING-PATTERNS.md sections 2.7, 2.8,
5 and 8), each with its fixed twin, modelled like the serving code that had the bug.

The harness follows the serving engines: the streams are created once at model init; the
model runs on a dedicated capture stream ``main``; several batch sizes are captured largest
first into one shared pool, each after two eager warm-ups; the multi-stream branch is gated on
"capturing" and on a small batch size, so warm-ups and the largest batch run single-stream
(and must stay clean), and only the small-batch graphs fork. The same bug in every layer of
every small batch size is one finding whose count and graphs say so.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE
from streamrace.trace.builder import TraceBuilder

BATCH_SIZES = (128, 64, 16, 4)  # captured largest first
MULTI_STREAM_LIMIT = 64  # the side-stream branch only for bs <= 64, only while capturing
LAYERS = 2
MAX_BS = BATCH_SIZES[0]
BF16 = 2
HIDDEN = 512  # hidden size, elements
Q_LORA = 256  # q_lora_rank
HEAD = 128  # kv head dim
TOPK = 64


class Model:
    """The serving-engine harness: streams, persistent buffers, warm-ups and captures."""

    def __init__(self, *side_streams: str) -> None:
        self.tb = tb = TraceBuilder()
        self.main = tb.stream("main")
        self.streams = {name: tb.stream(name) for name in side_streams}
        self.multi = False
        self.graphs: list[int] = []  # the graphs captured with the multi-stream branch
        self.all_graphs: list[int] = []
        # Persistent buffers, allocated once at init.
        self.x = tb.alloc(MAX_BS * HIDDEN * BF16, self.main, at="runner.py:10")  # static graph input
        self.swa_cache = tb.alloc(4 * MAX_BS * HEAD * BF16, self.main, at="model.py:12")
        self.topk = tb.alloc(MAX_BS * TOPK * 4, self.main, at="model.py:13")  # shared by every layer

    # -- the gated multi-stream vocabulary: single-stream when the gate is off -------------
    def on(self, name: str) -> int:
        return self.streams[name] if self.multi else self.main

    def fork(self, name: str, at: str, parent: str | None = None) -> None:
        if self.multi:
            waited = self.main if parent is None else self.streams[parent]
            self.tb.wait_stream(self.streams[name], waited, at=at)

    def join(self, name: str, at: str, into: str | None = None) -> None:
        if self.multi:
            waiter = self.main if into is None else self.streams[into]
            self.tb.wait_stream(waiter, self.streams[name], at=at)

    def record(self, stream: int, at: str) -> int | None:
        if not self.multi:
            return None
        event = self.tb.event()
        self.tb.record(event, stream, at=at)
        return event

    def wait(self, event: int | None, stream: int, at: str) -> None:
        if self.multi:
            self.tb.wait(event, stream, at=at)

    def rows(self, addr: int, bs: int, cols: int, itemsize: int = BF16) -> dict:
        return self.tb.view(addr, [bs, cols], itemsize=itemsize)

    # -- the runner ------------------------------------------------------------------------
    def serve(self, layer: Callable[[Model, int, int], None], layers: int = LAYERS):
        tb = self.tb
        for bs in BATCH_SIZES:
            self.multi = False
            for _ in range(2):  # eager warm-ups
                for i in range(layers):
                    layer(self, bs, i)
            self.multi = bs <= MULTI_STREAM_LIMIT
            with tb.capture(self.main, pool=(1, 0)) as graph:  # every graph shares the first one's pool
                self.all_graphs.append(graph)
                if self.multi:
                    self.graphs.append(graph)
                tb.op("aten::copy_", self.main, writes=[self.rows(self.x, bs, HIDDEN)], at="runner.py:20")
                for i in range(layers):
                    layer(self, bs, i)
        self.result = analyze(tb.trace())
        return self.result

    def the_finding(self, kind: str, per_layer_graph: int = 1, layers: int = LAYERS):
        """The one deduplicated finding: the same bug in every layer of every forked graph."""
        (f,) = self.result.findings
        assert f.kind == kind
        assert f.count == per_layer_graph * layers * len(self.graphs)
        assert sorted(f.graphs) == self.graphs
        assert {r.graph for r in self.result.raw_findings} == set(self.graphs)
        return f


def access(a) -> tuple:
    return (a.op, a.access, a.stream_label, a.location)


# -- H1: freed before join (SGLang #36547, recipe R1) ------------------------------------

QKV = Q_LORA + HEAD  # qkv_a columns: q_lora then the kv head


def h1_layer(variant: str) -> Callable[[Model, int, int], None]:
    """DSV4 MQA prologue: qkv on main, its kv half stored on the kv stream via an event."""

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main, kv = m.tb, m.main, m.on("kv")
        m.fork("kv", at="attn.py:10")
        qkv = tb.alloc(bs * QKV * BF16, main, at="attn.py:20")
        tb.op("aten::mm", main, reads=[m.rows(m.x, bs, HIDDEN)], writes=[m.rows(qkv, bs, QKV)], at="attn.py:21")
        ready = m.record(main, at="attn.py:22")
        q_lora = tb.alloc(bs * Q_LORA * BF16, main, at="attn.py:23")
        q_half = tb.view(qkv, [bs, Q_LORA], [QKV, 1], BF16)  # qkv[:, :q_lora_rank]
        tb.op("aten::rms_norm", main, reads=[q_half], writes=[m.rows(q_lora, bs, Q_LORA)], at="attn.py:23")
        m.wait(ready, kv, at="attn.py:30")
        kv_half = tb.view(qkv, [bs, HEAD], [QKV, 1], BF16, offset=Q_LORA)  # qkv[:, q_lora_rank:]
        cache_rows = tb.view(m.swa_cache, [bs, HEAD], itemsize=BF16, offset=i * MAX_BS * HEAD)
        tb.op("sgl::set_swa_key_buffer", kv, reads=[kv_half], writes=[cache_rows], at="attn.py:31")
        if variant == "record_stream" and m.multi:
            tb.record_stream(qkv, kv, at="attn.py:33")
        early_free = variant in ("manifest", "latent", "record_stream")
        if early_free:
            tb.free(qkv, at="attn.py:34")  # del qkv
        # wq_b: the manifest bug's output has qkv's size and lands on its freed block; the
        # latent one is bigger (another size class) and gets fresh memory.
        reuse = variant == "manifest"
        q_bytes = 2 * bs * QKV * BF16 if variant == "latent" else bs * QKV * BF16
        q = tb.alloc(q_bytes, main, addr=qkv if reuse else None, at="attn.py:36")
        tb.op("aten::mm", main, reads=[m.rows(q_lora, bs, Q_LORA)], writes=[tb.span(q, q_bytes)], at="attn.py:37")
        m.join("kv", at="attn.py:40")
        if variant == "join_then_free":
            tb.free(qkv, at="attn.py:41")
        out = tb.alloc(bs * HIDDEN * BF16, main, at="attn.py:45")
        tb.op(
            "sgl::sparse_attn",
            main,
            reads=[tb.span(q, q_bytes), cache_rows],
            writes=[m.rows(out, bs, HIDDEN)],
            at="attn.py:45",
        )
        for t in (q, q_lora, out):
            tb.free(t, at="attn.py:46")
        if variant == "keep_reference":
            tb.free(qkv, at="attn.py:46")

    return layer


def test_h1_manifest():
    m = Model("kv")
    m.serve(h1_layer("manifest"))
    f = m.the_finding(UNSAFE_FREE)
    assert (f.hazard, f.aliasing) == ("WAR", True)
    assert access(f.accesses[0]) == ("sgl::set_swa_key_buffer", "read", "kv", "attn.py:31")
    assert access(f.accesses[1]) == ("aten::mm", "write", "main", "attn.py:37")
    a = f.allocation
    assert (a.stream_label, a.alloc_location, a.free_location) == ("main", "attn.py:20", "attn.py:34")
    assert a.reused_by is not None
    assert (a.reused_by["op"], a.reused_by["stream_label"], a.reused_by["location"]) == (
        "aten::mm",
        "main",
        "attn.py:37",
    )
    assert a.reused_by["alloc_location"] == "attn.py:36"
    for raw in m.result.raw_findings:  # each instance: the block is the one that was reused
        assert raw.allocation.addr == next(
            e["addr"] for e in m.tb.events if e["ev"] == "alloc" and e["seq"] == raw.allocation.reused_by["alloc_seq"]
        )


def test_h1_latent():
    # Sizes avoid the reuse this time; the free is just as unsafe (a dtype change flips it).
    m = Model("kv")
    m.serve(h1_layer("latent"))
    f = m.the_finding(UNSAFE_FREE)
    assert (f.hazard, f.aliasing, f.allocation.reused_by) == ("WAR", False, None)
    assert access(f.accesses[0]) == ("sgl::set_swa_key_buffer", "read", "kv", "attn.py:31")
    assert (f.accesses[1].access, f.accesses[1].location) == ("free", "attn.py:34")
    assert (f.allocation.alloc_location, f.allocation.free_location) == ("attn.py:20", "attn.py:34")
    assert not [r for r in m.result.raw_findings if r.kind == DATA_RACE]


@pytest.mark.parametrize("fix", ["keep_reference", "record_stream", "join_then_free"])
def test_h1_fixed(fix):
    m = Model("kv")
    result = m.serve(h1_layer(fix))
    assert result.raw_findings == []
    assert result.summary["graphs"] == len(BATCH_SIZES)


# -- H2 and H3: the persistent top-k buffer (recipe R2; vLLM #43365, SGLang) -------------


def topk_layer(bug: str | None) -> Callable[[Model, int, int], None]:
    """The indexer writes the shared top-k buffer on idx; attention reads it on main.

    bug "late join": attention reads before main joins idx (H2).
    bug "early fork": the next layer's fork event is recorded before this layer's read (H3).
    """

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main, idx = m.tb, m.main, m.on("idx")
        topk = m.rows(m.topk, bs, TOPK, itemsize=4)
        if i == 0:
            m.fork_event = m.record(main, at="attn.py:8")
        m.wait(m.fork_event, idx, at="attn.py:10")
        tb.op("sgl::indexer_topk", idx, reads=[m.rows(m.x, bs, HIDDEN)], writes=[topk], at="indexer.py:50")
        if bug != "late join":
            m.join("idx", at="attn.py:59")
        if bug == "early fork":
            m.fork_event = m.record(main, at="attn.py:58")
        tb.op("sgl::sparse_attn", main, reads=[topk], at="attn.py:60")
        if bug != "early fork":
            m.fork_event = m.record(main, at="attn.py:62")
        if bug == "late join":
            m.join("idx", at="attn.py:61")

    return layer


def test_h2_late_join():
    m = Model("idx")
    m.serve(topk_layer("late join"))
    f = m.the_finding(DATA_RACE)
    assert (f.hazard, f.aliasing) == ("RAW", False)
    assert access(f.accesses[0]) == ("sgl::indexer_topk", "write", "idx", "indexer.py:50")
    assert access(f.accesses[1]) == ("sgl::sparse_attn", "read", "main", "attn.py:60")
    assert f.allocation is not None and f.allocation.alloc_location == "model.py:13"


def test_h3_early_next_fork():
    # Cross-layer WAR: layer i+1's indexer overwrites top-k while layer i's attention reads it.
    m = Model("idx")
    m.serve(topk_layer("early fork"), layers=3)
    f = m.the_finding(DATA_RACE, layers=3 - 1)
    assert (f.hazard, f.aliasing) == ("WAR", False)
    assert access(f.accesses[0]) == ("sgl::sparse_attn", "read", "main", "attn.py:60")
    assert access(f.accesses[1]) == ("sgl::indexer_topk", "write", "idx", "indexer.py:50")
    assert f.allocation is not None and f.allocation.alloc_location == "model.py:13"


@pytest.mark.parametrize("layers", [2, 3])
def test_h2_h3_fixed(layers):
    m = Model("idx")
    assert m.serve(topk_layer(None), layers=layers).raw_findings == []


# -- H4: missing event wait in the nested indexer fork (DSV4 q_lora_ready) --------------


def h4_layer(waits_q_lora: bool) -> Callable[[Model, int, int], None]:
    """main -> idx -> {w, q}: q waits main's q_lora_ready and w's weights_ready; idx waits q.
    w is joined only transitively (w -> q -> idx -> main)."""

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main = m.tb, m.main
        idx, q, w = m.on("idx"), m.on("q"), m.on("w")
        m.fork("idx", at="attn.py:10")
        q_lora = tb.alloc(bs * Q_LORA * BF16, main, at="attn.py:23")
        tb.op(
            "aten::rms_norm",
            main,
            reads=[m.rows(m.x, bs, HIDDEN)],
            writes=[m.rows(q_lora, bs, Q_LORA)],
            at="attn.py:23",
        )
        q_lora_ready = m.record(main, at="attn.py:24")
        m.fork("w", at="indexer.py:10", parent="idx")
        m.fork("q", at="indexer.py:10", parent="idx")
        tb.op("sgl::indexer_compress", idx, reads=[m.rows(m.x, bs, HIDDEN)], at="indexer.py:12")
        weights = m.weights
        tb.op("aten::linear", w, reads=[m.rows(m.x, bs, HIDDEN)], writes=[m.rows(weights, bs, 64)], at="indexer.py:20")
        weights_ready = m.record(w, at="indexer.py:21")
        if waits_q_lora:
            m.wait(q_lora_ready, q, at="indexer.py:30")
        m.wait(weights_ready, q, at="indexer.py:31")
        q_idx = m.q_idx
        tb.op(
            "sgl::compute_q",
            q,
            reads=[m.rows(q_lora, bs, Q_LORA), m.rows(weights, bs, 64)],
            writes=[m.rows(q_idx, bs, 128)],
            at="indexer.py:32",
        )
        m.join("q", at="indexer.py:40", into="idx")
        topk = m.rows(m.topk, bs, TOPK, itemsize=4)
        tb.op(
            "sgl::mqa_logits_topk",
            idx,
            reads=[m.rows(q_idx, bs, 128), m.rows(weights, bs, 64)],
            writes=[topk],
            at="indexer.py:41",
        )
        m.join("idx", at="attn.py:59")
        tb.op("sgl::sparse_attn", main, reads=[topk, m.rows(q_lora, bs, Q_LORA)], at="attn.py:60")
        tb.free(q_lora, at="attn.py:61")

    return layer


def nested_model() -> Model:
    m = Model("idx", "q", "w")
    m.weights = m.tb.alloc(MAX_BS * 64 * BF16, m.main, at="indexer.py:3")
    m.q_idx = m.tb.alloc(MAX_BS * 128 * BF16, m.main, at="indexer.py:4")
    return m


def test_h4_missing_event_wait():
    m = nested_model()
    m.serve(h4_layer(waits_q_lora=False))
    f = m.the_finding(DATA_RACE)
    assert (f.hazard, f.aliasing) == ("RAW", False)
    assert access(f.accesses[0]) == ("aten::rms_norm", "write", "main", "attn.py:23")
    assert access(f.accesses[1]) == ("sgl::compute_q", "read", "q", "indexer.py:32")
    assert f.allocation is not None and f.allocation.alloc_location == "attn.py:23"


def test_h4_fixed_transitive_join():
    # Passes although w is never joined directly: happens-before is transitive over events.
    m = nested_model()
    assert m.serve(h4_layer(waits_q_lora=True)).raw_findings == []


# -- H5: one branch mutates in place what the other reads (vLLM #52033, SGLang #23827) ----


def h5_layer(clone: bool) -> Callable[[Model, int, int], None]:
    """Dual-stream MoE: shared experts on aux read hidden; routed experts quantize it in place."""

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main, aux = m.tb, m.main, m.on("aux")
        size = bs * HIDDEN * BF16
        hidden = tb.alloc(size, main, at="moe.py:8")
        tb.op(
            "aten::rms_norm", main, reads=[m.rows(m.x, bs, HIDDEN)], writes=[m.rows(hidden, bs, HIDDEN)], at="moe.py:8"
        )
        shared_in = hidden
        if clone:
            shared_in = tb.alloc(size, main, at="moe.py:11")
            tb.op(
                "aten::clone",
                main,
                reads=[m.rows(hidden, bs, HIDDEN)],
                writes=[m.rows(shared_in, bs, HIDDEN)],
                at="moe.py:11",
            )
        m.fork("aux", at="moe.py:12")
        shared_out = tb.alloc(size, aux, at="moe.py:20")
        tb.op(
            "sgl::shared_experts",
            aux,
            reads=[m.rows(shared_in, bs, HIDDEN)],
            writes=[m.rows(shared_out, bs, HIDDEN)],
            at="moe.py:20",
        )
        tb.op(
            "sgl::quantize_",
            main,
            reads=[m.rows(hidden, bs, HIDDEN)],
            writes=[m.rows(hidden, bs, HIDDEN)],
            at="moe.py:30",
        )
        routed = tb.alloc(size, main, at="moe.py:31")
        tb.op(
            "sgl::routed_experts",
            main,
            reads=[m.rows(hidden, bs, HIDDEN)],
            writes=[m.rows(routed, bs, HIDDEN)],
            at="moe.py:31",
        )
        m.join("aux", at="moe.py:40")
        tb.op(
            "aten::add_",
            main,
            reads=[m.rows(shared_out, bs, HIDDEN), m.rows(routed, bs, HIDDEN)],
            writes=[m.rows(routed, bs, HIDDEN)],
            at="moe.py:41",
        )
        for t in dict.fromkeys((hidden, shared_in, shared_out)):
            tb.free(t, at="moe.py:42")
        tb.free(routed, at="moe.py:43")

    return layer


def test_h5_in_place_mutation():
    m = Model("aux")
    m.serve(h5_layer(clone=False))
    f = m.the_finding(DATA_RACE)
    assert (f.hazard, f.aliasing) == ("WAR", False)
    assert access(f.accesses[0]) == ("sgl::shared_experts", "read", "aux", "moe.py:20")
    assert access(f.accesses[1]) == ("sgl::quantize_", "write", "main", "moe.py:30")
    assert f.allocation is not None and f.allocation.alloc_location == "moe.py:8"


def test_h5_fixed_clone():
    m = Model("aux")
    assert m.serve(h5_layer(clone=True)).raw_findings == []


# -- H6: a static workspace shared by two streams (vLLM #56098, #41834) -------------------

WS = 4096  # bytes of one workspace slot


def h6_layer(per_stream_slots: bool) -> Callable[[Model, int, int], None]:
    """Shared experts on aux and routed experts on main both call a skinny GEMM that writes
    partial sums into a module-level workspace and reduces them."""

    def gemm(m: Model, stream: int, slot: int, out: int, bs: int) -> None:
        ws = m.tb.span(m.workspace + slot * WS, WS)
        m.tb.op("sgl::wvsplitk_partial", stream, reads=[m.rows(m.x, bs, HIDDEN)], writes=[ws], at="gemm.py:20")
        m.tb.op("sgl::wvsplitk_reduce", stream, reads=[ws], writes=[m.rows(out, bs, HIDDEN)], at="gemm.py:21")

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main, aux = m.tb, m.main, m.on("aux")
        m.fork("aux", at="moe.py:12")
        shared_out = tb.alloc(bs * HIDDEN * BF16, aux, at="moe.py:20")
        gemm(m, aux, 1 if per_stream_slots and m.multi else 0, shared_out, bs)
        routed = tb.alloc(bs * HIDDEN * BF16, main, at="moe.py:31")
        gemm(m, main, 0, routed, bs)
        m.join("aux", at="moe.py:40")
        tb.op(
            "aten::add_",
            main,
            reads=[m.rows(shared_out, bs, HIDDEN)],
            writes=[m.rows(routed, bs, HIDDEN)],
            at="moe.py:41",
        )
        tb.free(shared_out, at="moe.py:42")
        tb.free(routed, at="moe.py:43")

    return layer


def workspace_model() -> Model:
    m = Model("aux")
    m.workspace = m.tb.alloc(2 * WS, m.main, at="gemm.py:5")  # one slot, or one per stream
    return m


def test_h6_shared_workspace():
    m = workspace_model()
    m.serve(h6_layer(per_stream_slots=False))
    # main's partial-sum write races with aux's reduce (the most recent conflicting access);
    # main's reduce reads what aux's partial-sum write may still be writing.
    write, read = m.result.findings
    for f in (write, read):
        assert (f.kind, f.count, sorted(f.graphs)) == (DATA_RACE, LAYERS * len(m.graphs), m.graphs)
        assert f.allocation is not None and f.allocation.alloc_location == "gemm.py:5"
    assert write.hazard == "WAR"
    assert access(write.accesses[0]) == ("sgl::wvsplitk_reduce", "read", "aux", "gemm.py:21")
    assert access(write.accesses[1]) == ("sgl::wvsplitk_partial", "write", "main", "gemm.py:20")
    assert read.hazard == "RAW"
    assert access(read.accesses[0]) == ("sgl::wvsplitk_partial", "write", "aux", "gemm.py:20")
    assert access(read.accesses[1]) == ("sgl::wvsplitk_reduce", "read", "main", "gemm.py:21")


def test_h6_fixed_per_stream_slots():
    m = workspace_model()
    assert m.serve(h6_layer(per_stream_slots=True)).raw_findings == []


# -- H10: record_stream on the allocating stream (SGLang forward_deepep) ------------------


def h10_layer(recorded_on: str) -> Callable[[Model, int, int], None]:
    """shared_output is made on alt and read on main after an event wait; the author calls
    record_stream inside ``with stream(alt)``, i.e. on alt itself: a no-op."""

    def layer(m: Model, bs: int, i: int) -> None:
        tb, main, alt = m.tb, m.main, m.on("alt")
        m.fork("alt", at="moe.py:50")
        shared_output = tb.alloc(bs * HIDDEN * BF16, alt, at="moe.py:51")
        tb.op(
            "sgl::shared_experts",
            alt,
            reads=[m.rows(m.x, bs, HIDDEN)],
            writes=[m.rows(shared_output, bs, HIDDEN)],
            at="moe.py:51",
        )
        shared_done = m.record(alt, at="moe.py:52")
        if m.multi:
            tb.record_stream(shared_output, alt if recorded_on == "alt" else main, at="moe.py:53")
        routed = tb.alloc(bs * HIDDEN * BF16, main, at="moe.py:55")
        tb.op(
            "sgl::routed_experts",
            main,
            reads=[m.rows(m.x, bs, HIDDEN)],
            writes=[m.rows(routed, bs, HIDDEN)],
            at="moe.py:55",
        )
        m.wait(shared_done, main, at="moe.py:56")
        tb.op(
            "aten::add_",
            main,
            reads=[m.rows(shared_output, bs, HIDDEN)],
            writes=[m.rows(routed, bs, HIDDEN)],
            at="moe.py:57",
        )
        tb.free(shared_output, at="moe.py:58")
        tb.free(routed, at="moe.py:58")
        if i == LAYERS - 1:
            m.join("alt", at="moe.py:60")  # the capture must end joined

    return layer


def test_h10_record_stream_noop():
    m = Model("alt")
    m.serve(h10_layer(recorded_on="alt"))
    f = m.the_finding(RECORD_STREAM_NOOP)
    assert (f.severity, f.hazard) == ("warning", None)
    assert f.allocation is not None
    assert (f.allocation.stream_label, f.allocation.alloc_location) == ("alt", "moe.py:51")
    # The user must find the call: its line is named (in an access, or the message).
    assert any("moe.py:53" in (text or "") for text in [*(a.location for a in f.accesses), f.message])


def test_h10_fixed_consumer_stream():
    m = Model("alt")
    assert m.serve(h10_layer(recorded_on="main")).raw_findings == []
