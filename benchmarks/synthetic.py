"""A synthetic trace shaped like a serving engine's CUDA-graph capture set.

One capture per batch size, each a decode step of ``layers`` transformer layers of
``ops_per_layer`` ops on a main stream, with two side streams forked and joined in every
layer (an indexer / KV-compression branch and a shared-expert branch), as DeepSeek-style
engines do. Every capture shares one graph pool, and blocks are handed out the way PyTorch's
caching allocator does: a freed block goes back to its own stream's free list and the next
allocation of that size on that stream gets it, so addresses are reused all the time.
Weights and the KV cache live in memory allocated before recording; attention reads the
layer's KV cache as a strided view and heads are split into interleaved views.

With ``bug=True`` every layer also frees a tensor the indexer branch still reads before the
join (the DeepSeek-V4 freed-before-join bug), so the analysis has findings to build: one raw
finding per layer and capture, deduplicated into two (at batch size 1 the next allocation
takes the block; elsewhere the bug is latent).

``fan_out_events`` is the other shape: eager work forked from a main stream to tens of side
streams and joined back every step, with host synchronizations, so that the clocks (joins of
tens of streams, the host clock) carry more of the cost.

Used by benchmarks/analysis_throughput.py; events are generated lazily, so a 10-million
access trace streams through the analysis (or to a file) without being held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

HIDDEN = 7168  # DeepSeek-V3/V4 hidden size
HEADS = 16  # local attention heads (tensor parallel slice)
HEAD_DIM = 128
PAGES = 512  # KV cache pages per layer
PAGE = 64  # tokens per page
BF16, FP32, I32 = 2, 4, 4
POOL_BASE = 0x7F00_0000_0000
WEIGHT_BASE = 0x7E00_0000_0000
KV_BASE = 0x7D00_0000_0000
STREAM_BASE = 0x5000


# The batch sizes an engine captures: 1, 2, 4, then multiples of 8 (as SGLang does).
BATCH_SIZES = [1, 2, 4] + [8 * i for i in range(1, 34)]


class _Pool:
    """The caching allocator under capture: per-stream free lists, exact-size reuse (LIFO)."""

    def __init__(self) -> None:
        self.free_lists: dict[tuple[int, int], list[int]] = {}
        self.next_addr = POOL_BASE
        self.size_of: dict[int, tuple[int, int]] = {}

    def alloc(self, size: int, stream: int) -> int:
        size = -(-size // 512) * 512
        blocks = self.free_lists.get((stream, size))
        if blocks:
            addr = blocks.pop()
        else:
            addr = self.next_addr
            self.next_addr += size
        self.size_of[addr] = (size, stream)
        return addr

    def free(self, addr: int) -> None:
        size, stream = self.size_of.pop(addr)
        self.free_lists.setdefault((stream, size), []).append(addr)


class _Writer:
    """Emits events with a global seq; ranges and ops in the trace's JSON shape."""

    def __init__(self) -> None:
        self.seq = 0
        self.pool = _Pool()
        self.event_ids = 0

    def ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": self.seq, "ev": kind, **fields}
        self.seq += 1
        return event


def synthetic_events(
    layers: int = 60,
    ops_per_layer: int = 40,
    captures: int = 36,
    bug: bool = True,
) -> Iterator[dict[str, Any]]:
    """Yield the events (no header) of the capture set; see the module docstring."""
    w = _Writer()
    main, indexer, shared = (STREAM_BASE + 0x10 * i for i in range(3))
    for stream, name in ((main, "main"), (indexer, "indexer"), (shared, "shared_experts")):
        yield w.ev("stream", stream=stream, device=0, name=name)
    # One stack per op site of the layer: the same source lines in every layer and graph.
    sites = ops_per_layer + 8
    for site in range(1, sites + 1):
        yield w.ev("stack", id=site, frames=[["model/deepseek.py", 100 + site, "forward"]])

    def span(addr: int, nbytes: int) -> dict[str, int]:
        return {"addr": addr, "nbytes": nbytes}

    def weight(layer: int, k: int, nbytes: int) -> dict[str, int]:
        # 64 MiB of address space per layer, 2 MiB per weight slot
        return span(WEIGHT_BASE + layer * (64 << 20) + (k % 32) * (2 << 20), min(nbytes, 2 << 20))

    def kv_view(layer: int, cache: int = 0) -> dict[str, Any]:
        # cache 0: the attention KV cache; 1: the indexer's own key cache
        base = KV_BASE + (2 * layer + cache) * PAGES * PAGE * HEAD_DIM * 2 * BF16
        return {
            "addr": base,
            "shape": [PAGES, PAGE, 2, HEAD_DIM],
            "stride": [PAGE * 2 * HEAD_DIM, 2 * HEAD_DIM, HEAD_DIM, 1],
            "itemsize": BF16,
        }

    def heads(addr: int, bs: int, first: int, step: int) -> dict[str, Any]:
        # q[:, first::step, :] of a [bs, HEADS, HEAD_DIM] tensor: interleaved, no common byte
        return {
            "addr": addr + first * HEAD_DIM * BF16,
            "shape": [bs, HEADS // step, HEAD_DIM],
            "stride": [HEADS * HEAD_DIM, step * HEAD_DIM, 1],
            "itemsize": BF16,
        }

    def wait_stream(waiter: int, waited: int) -> Iterator[dict[str, Any]]:
        w.event_ids += 1
        event = w.event_ids
        yield w.ev("event_create", event=event)
        yield w.ev("event_record", event=event, stream=waited)
        yield w.ev("event_wait", event=event, stream=waiter)
        yield w.ev("event_delete", event=event)

    for graph in range(1, captures + 1):
        bs = BATCH_SIZES[(graph - 1) % len(BATCH_SIZES)]  # beyond 36 captures the set repeats
        yield w.ev("capture_begin", graph=graph, stream=main, device=0, pool=[1, 0], mode="thread_local")
        act = bs * HIDDEN * BF16
        x = w.pool.alloc(act, main)
        yield w.ev("alloc", addr=x, size=act, stream=main, device=0, pool=[1, 0], stack=1)
        slice_bytes = bs * 256 * FP32
        ws = w.pool.alloc(6 * slice_bytes, main)
        yield w.ev("alloc", addr=ws, size=6 * slice_bytes, stream=main, device=0, pool=[1, 0], stack=2)
        for layer in range(layers):
            site = 0

            def op(name: str, stream: int, reads: list, writes: list) -> dict[str, Any]:
                nonlocal site
                site += 1
                return w.ev("op", op=name, stream=stream, device=0, reads=reads, writes=writes, stack=site)

            def alloc(size: int, stream: int) -> tuple[int, dict[str, Any]]:
                addr = w.pool.alloc(size, stream)
                return addr, w.ev(
                    "alloc", addr=addr, size=-(-size // 512) * 512, stream=stream, device=0, pool=[1, 0], stack=sites
                )

            def free(addr: int) -> dict[str, Any]:
                stream = w.pool.size_of[addr][1]
                w.pool.free(addr)
                return w.ev("free", addr=addr, stream=stream, device=0, stack=sites - 1)

            # -- attention on main, with the indexer branch forked off ----------------------
            y, ev = alloc(act, main)
            yield ev
            yield op("rms_norm", main, [span(x, act), weight(layer, 0, HIDDEN * BF16)], [span(y, act)])
            q_bytes = bs * HEADS * HEAD_DIM * BF16
            q, ev = alloc(q_bytes, main)
            yield ev
            q_scale, ev = alloc(bs * FP32, main)
            yield ev
            yield op("fp8_quant", main, [span(y, act)], [span(y, act), span(q_scale, bs * FP32)])
            yield op(
                "fp8_linear",
                main,
                [
                    span(y, act),
                    weight(layer, 1, HIDDEN * HEADS * HEAD_DIM),
                    weight(layer, 2, 4096),
                    span(q_scale, bs * FP32),
                ],
                [span(q, q_bytes)],
            )
            topk_w, ev = alloc(bs * 64 * FP32, main)  # the indexer's weights (the DSV4 tensor)
            yield ev
            yield op("index_weights", main, [span(y, act), weight(layer, 3, 1 << 20)], [span(topk_w, bs * 64 * FP32)])
            yield from wait_stream(indexer, main)
            # indexer branch: reads main's tensors, writes its own
            idx_q, ev = alloc(q_bytes, indexer)
            yield ev
            yield op("indexer_proj", indexer, [span(y, act), weight(layer, 4, 1 << 21)], [span(idx_q, q_bytes)])
            for h in range(2):
                yield op(
                    "rope",
                    indexer,
                    [heads(idx_q, bs, h, 2), weight(layer, 5, 1 << 16), span(topk_w, bs * 64 * FP32)],
                    [heads(idx_q, bs, h, 2)],
                )
            logits, ev = alloc(bs * PAGES * FP32, indexer)
            yield ev
            yield op(
                "indexer_logits",
                indexer,
                [span(idx_q, q_bytes), kv_view(layer, 1), span(topk_w, bs * 64 * FP32)],
                [span(logits, bs * PAGES * FP32)],
            )
            topk, ev = alloc(bs * 64 * I32, indexer)
            yield ev
            yield op("topk", indexer, [span(logits, bs * PAGES * FP32)], [span(topk, bs * 64 * I32)])
            yield free(logits)
            yield free(idx_q)
            if bug:
                # freed on main while the indexer may still read it: the DSV4 bug
                yield free(topk_w)
            # main meanwhile: q rope on interleaved heads, kv store
            for h in range(2):
                yield op("rope", main, [heads(q, bs, h, 2), weight(layer, 5, 1 << 16)], [heads(q, bs, h, 2)])
            kv, ev = alloc(bs * 2 * HEAD_DIM * BF16, main)
            yield ev
            yield op("kv_proj", main, [span(y, act), weight(layer, 6, 1 << 21)], [span(kv, bs * 2 * HEAD_DIM * BF16)])
            yield op("kv_store", main, [span(kv, bs * 2 * HEAD_DIM * BF16)], [kv_view(layer)])
            yield from wait_stream(main, indexer)  # join
            if not bug:
                yield free(topk_w)
            attn, ev = alloc(q_bytes, main)
            yield ev
            yield op(
                "sparse_attention",
                main,
                [span(q, q_bytes), kv_view(layer), span(topk, bs * 64 * I32)],
                [span(attn, q_bytes)],
            )
            yield free(topk)
            yield free(q)
            yield free(q_scale)
            yield free(kv)
            o, ev = alloc(act, main)
            yield ev
            yield op("o_proj", main, [span(attn, q_bytes), weight(layer, 7, 1 << 21)], [span(o, act)])
            yield free(attn)
            yield op("add_", main, [span(x, act), span(o, act)], [span(x, act)])
            yield free(o)
            # -- MoE: routed experts on main, shared experts forked off ---------------------
            yield op("rms_norm", main, [span(x, act), weight(layer, 8, HIDDEN * BF16)], [span(y, act)])
            yield from wait_stream(shared, main)
            h_shared, ev = alloc(bs * 2048 * BF16, shared)
            yield ev
            yield op(
                "shared_gate_up", shared, [span(y, act), weight(layer, 9, 1 << 21)], [span(h_shared, bs * 2048 * BF16)]
            )
            yield op("silu_and_mul", shared, [span(h_shared, bs * 2048 * BF16)], [span(h_shared, bs * 1024 * BF16)])
            s_out, ev = alloc(act, shared)
            yield ev
            yield op(
                "shared_down",
                shared,
                [span(h_shared, bs * 1024 * BF16), weight(layer, 10, 1 << 21)],
                [span(s_out, act)],
            )
            yield free(h_shared)
            router, ev = alloc(bs * 256 * FP32, main)
            yield ev
            yield op(
                "router", main, [span(y, act), weight(layer, 11, 256 * HIDDEN * BF16)], [span(router, bs * 256 * FP32)]
            )
            ids, ev = alloc(bs * 8 * I32, main)
            yield ev
            tw, ev = alloc(bs * 8 * FP32, main)
            yield ev
            yield op(
                "topk_softmax",
                main,
                [span(router, bs * 256 * FP32)],
                [span(ids, bs * 8 * I32), span(tw, bs * 8 * FP32)],
            )
            yield free(router)
            moe, ev = alloc(act, main)
            yield ev
            expert_reads = [weight(layer, 12 + k, 1 << 21) for k in range(8)]  # w13/w2 and their scales
            yield op(
                "fused_moe",
                main,
                [span(y, act), span(ids, bs * 8 * I32), span(tw, bs * 8 * FP32), *expert_reads],
                [span(moe, act)],
            )
            yield free(ids)
            yield free(tw)
            yield from wait_stream(main, shared)  # join
            yield op("add3_", main, [span(x, act), span(moe, act), span(s_out, act)], [span(x, act)])
            yield free(moe)
            yield free(s_out)
            yield free(y)
            # The rest of the layer's ops: fused epilogues (Triton-style) reading the residual
            # and fifteen small parameters, updating it in place and writing scratch slices.
            while site < ops_per_layer:
                params = [weight(layer, 20 + (site + k) % 15, HIDDEN * BF16) for k in range(15)]
                scratch = [span(ws + k * slice_bytes, slice_bytes) for k in range(6)]
                yield op("fused_epilogue", main, [span(x, act), *params], [span(x, act), *scratch])
        yield w.ev("free", addr=ws, stream=main, device=0, stack=sites - 1)
        w.pool.free(ws)
        yield free(x)
        yield w.ev("capture_end", graph=graph)


def fan_out_events(streams: int = 32, steps: int = 2000) -> Iterator[dict[str, Any]]:
    """Yield the events (no header) of ``steps`` eager steps: main writes an input, each side
    stream waits on main, reads it and writes its own output, main waits on every side and
    reads their outputs; a stream_sync of main every 8 steps, a device_sync every 64."""
    w = _Writer()
    main = STREAM_BASE
    sides = [STREAM_BASE + 0x10 * (i + 1) for i in range(streams)]
    yield w.ev("stream", stream=main, device=0, name="main")
    for i, side in enumerate(sides):
        yield w.ev("stream", stream=side, device=0, name=f"side{i}")
    yield w.ev("stack", id=1, frames=[["model/fan_out.py", 10, "step"]])
    slot = 1 << 16
    inputs, outputs = POOL_BASE, POOL_BASE + (1 << 30)

    def op(name: str, stream: int, reads: list, writes: list) -> dict[str, Any]:
        return w.ev("op", op=name, stream=stream, device=0, reads=reads, writes=writes, stack=1)

    def record_wait(waiter: int, waited: int) -> Iterator[dict[str, Any]]:
        w.event_ids += 1
        yield w.ev("event_record", event=w.event_ids, stream=waited)
        yield w.ev("event_wait", event=w.event_ids, stream=waiter)

    for step in range(steps):
        x = {"addr": inputs + (step % 4) * slot, "nbytes": slot}
        yield op("produce", main, [], [x])
        for i, side in enumerate(sides):
            yield from record_wait(side, main)
            yield op("branch", side, [x], [{"addr": outputs + i * slot, "nbytes": slot}])
        for side in sides:
            yield from record_wait(main, side)
        yield op("gather", main, [{"addr": outputs + i * slot, "nbytes": slot} for i in range(streams)], [x])
        if step % 64 == 63:
            yield w.ev("device_sync", device=0)
        elif step % 8 == 7:
            yield w.ev("stream_sync", stream=main)


def header() -> dict[str, Any]:
    return {"format": "streamrace-trace", "version": 1, "producer": "benchmarks/synthetic.py"}


# What today's recorder writes in a header of a whole-program recording with no views, index
# ops or application pools (format 1.6): every whole-trace check it calls for runs.
RECORDER_FACTS = {"minor": 6, "views": 0, "index_ops": 0, "app_pools": 0, "host_memory": True, "host_events": 0}


def write_capture_set(
    path: str, layers: int = 60, ops: int = 40, captures: int = 36, graphs: int = 0, recorded: int = 0
) -> None:
    """The capture set (synthetic_events) as a trace file; with each capture's graph (as a
    recorder reads it back) if ``graphs``, and the header facts of today's recorder if
    ``recorded``."""
    from streamrace.trace.io import write_trace

    events = synthetic_events(layers, ops, captures)
    facts = RECORDER_FACTS if recorded else {}
    if graphs:
        write_trace(path, {**graph_header(), **facts}, with_captured_graphs(events))
    else:
        write_trace(path, {**header(), **facts}, events)


def with_captured_graphs(events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The events with each capture's graph read back after its ``capture_end``, built the
    way CUDA's stream capture builds it: one kernel node per captured op, depending on its
    stream's capture frontier; an event record snapshots a frontier, a wait merges it in.

    The ``graph`` events take seq numbers of their own, so every event is renumbered."""
    seq = 0
    frontier: dict[int, list[int]] = {}  # stream -> the nodes its next node depends on
    snapshot: dict[int, list[int]] = {}  # event -> the frontier it recorded
    nodes: list[dict[str, Any]] = []
    edges: list[list[int]] = []
    capturing: int | None = None
    for ev in events:
        ev = dict(ev, seq=seq)
        seq += 1
        kind = ev["ev"]
        if kind == "capture_begin":
            capturing = ev["graph"]
            frontier = {ev["stream"]: []}
            snapshot, nodes, edges = {}, [], []
        elif capturing is not None and kind == "op":
            node = len(nodes)
            nodes.append({"id": node, "type": "kernel", "name": ev["op"], "op": ev["seq"]})
            edges.extend([dep, node] for dep in frontier.get(ev["stream"], []))
            frontier[ev["stream"]] = [node]
        elif capturing is not None and kind == "event_record":
            snapshot[ev["event"]] = list(frontier.get(ev["stream"], []))
        elif capturing is not None and kind == "event_wait":
            joined = frontier.setdefault(ev["stream"], [])
            joined.extend(n for n in snapshot.get(ev["event"], []) if n not in joined)
        yield ev
        if kind == "capture_end":  # the recorder reads the graph back as the capture ends
            yield {"seq": seq, "ev": "graph", "graph": capturing, "nodes": nodes, "edges": edges}
            seq += 1
            capturing = None


def graph_header() -> dict[str, Any]:
    """The header of a trace whose captures carry their graphs (``with_captured_graphs``)."""
    return {**header(), "graph_readback": True}
