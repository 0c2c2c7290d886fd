"""A miniature of the DeepSeek-V4 sparse-attention decode step, with its freed-before-join bug.

This is the bug streamrace was born from (HAZARDS.md, SGLang PR #36547), in about a hundred
lines that keep the shape of the serving code:

* five streams are created once, at model init; the side-stream branch is taken only while
  capturing a CUDA graph and for small batches, so eager runs are single-stream;
* the main stream produces ``qkv``; the KV stream waits for it (an event), normalises half of
  it and stores it into the persistent SWA KV cache;
* the indexer stream runs a nested fork: a weights stream and a query stream, the query stream
  waiting on an event of the *main* stream and one of the weights stream, the indexer stream
  joining only the query stream (the weights stream is joined transitively) and writing a
  persistent top-k metadata buffer;
* several batch sizes are captured largest first into one shared pool on a dedicated capture
  stream, after two eager warm-ups each, as SGLang's CUDA-graph runner does.

The bug (``--variant bug``): ``del qkv`` on the main stream before the main stream joins the
KV stream. The allocator hands ``qkv``'s block to the next main-stream allocation (``q``), and
at replay the ``q`` GEMM writes the bytes the KV stream is still reading. The fixes: keep the
reference past the join (``keep-alive``, what #36547 did), ``record-stream``, ``join-then-free``,
or no overlap (``no-overlap``). ``--index-dtype fp8`` (the index-K cache in fp8, not bf16) or
``--latent`` puts ``q`` in the other pool: no reuse in this capture, the bug latent but
reported (``streamrace diff`` of the bf16 and fp8 traces says why: docs/findings.md).
``--check`` proves the example's own truth: ``torch.cuda._sleep`` delays the KV-stream reader,
every graph is replayed with fresh inputs, and the SWA cache and output are compared with an
eager single-stream run. The bug corrupts them; the fixes do not.

    python examples/dsv4_mini_decode.py --variant bug --check --trace race.jsonl.gz
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

import streamrace

VARIANTS = ("bug", "keep-alive", "record-stream", "join-then-free", "no-overlap")
BATCH_SIZES = (8, 4, 2)
MULTI_STREAM_MAX_BS = 64
HIDDEN, Q_LORA, HEAD, SLOTS = 512, 256, 256, 64
LATENT_Q_WIDTH = 1 << 18  # q of >= 2 MiB comes from the large pool: qkv's block is never reused


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class DecodeStreams:
    """Created once and shared by every layer, as the serving engines do."""

    def __init__(self) -> None:
        self.kv, self.compressor, self.indexer, self.weights, self.query = (torch.cuda.Stream() for _ in range(5))
        for name in ("kv", "compressor", "indexer", "weights", "query"):
            streamrace.name_stream(getattr(self, name), name)


class MiniDecodeLayer:
    def __init__(
        self, variant: str, latent: bool, sleep_cycles: int, streams: DecodeStreams, index_dtype: str = "bf16"
    ) -> None:
        weight = seeded_weights(0)
        self.variant, self.sleep_cycles, self.streams = variant, sleep_cycles, streams
        # The index dtype is the index-K cache's and the key's stored in it, and it sets the
        # size class of q, the main stream's next allocation after qkv's free: see query_width.
        q_width = query_width(latent, index_dtype)
        self.w_qkv = weight(HIDDEN, Q_LORA + HEAD)
        self.w_qb = weight(Q_LORA, q_width)
        self.w_weights = weight(HIDDEN, HEAD)
        self.w_qi = weight(Q_LORA, HEAD)
        self.swa_cache = torch.zeros(SLOTS, HEAD, device="cuda")
        self.index_k = torch.zeros(SLOTS, HEAD, device="cuda", dtype=INDEX_DTYPES[index_dtype])
        self.topk = torch.zeros(max(BATCH_SIZES), HEAD, device="cuda")  # per-batch metadata, every layer

    def reset_state(self) -> None:
        for buffer in (self.swa_cache, self.index_k, self.topk):
            buffer.zero_()

    def forward(self, x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        overlap = (
            self.variant != "no-overlap"
            and torch.cuda.is_current_stream_capturing()
            and x.shape[0] <= MULTI_STREAM_MAX_BS
        )
        return self._forward_overlapped(x, loc) if overlap else self._forward_single(x, loc)

    def _forward_single(self, x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        qkv = x @ self.w_qkv
        q_lora = rms_norm(qkv[:, :Q_LORA])
        store_rows(self.index_k, loc, rms_norm(x[:, :HEAD]))  # the indexer's key, cast on store
        weights = x @ self.w_weights
        self.topk[: x.shape[0]].copy_(((q_lora @ self.w_qi) * weights).softmax(-1))
        self.swa_cache.index_copy_(0, loc, rms_norm(qkv[:, Q_LORA:]))
        q = q_lora @ self.w_qb
        return self._attend(q, loc)

    def _forward_overlapped(self, x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        main, s = torch.cuda.current_stream(), self.streams
        s.kv.wait_stream(main)  # fork before this layer's producers, as SGLang does
        s.indexer.wait_stream(main)
        qkv = x @ self.w_qkv
        qkv_ready = torch.cuda.Event()
        qkv_ready.record(main)
        q_lora = rms_norm(qkv[:, :Q_LORA])
        q_lora_ready = torch.cuda.Event()
        q_lora_ready.record(main)
        self._indexer(x, loc, q_lora, q_lora_ready)
        with torch.cuda.stream(s.kv):
            s.kv.wait_event(qkv_ready)
            torch.cuda._sleep(self.sleep_cycles)  # a slow reader: turns the latent race into corruption
            self.swa_cache.index_copy_(0, loc, rms_norm(qkv[:, Q_LORA:]))
        if self.variant == "record-stream":
            qkv.record_stream(s.kv)
        if self.variant in ("bug", "record-stream"):
            del qkv  # freed before the join: the block goes back to the main stream's free list
        q = q_lora @ self.w_qb  # the next main-stream allocation
        main.wait_stream(s.kv)
        main.wait_stream(s.indexer)
        if self.variant == "join-then-free":
            del qkv
        return self._attend(q, loc)

    def _indexer(
        self, x: torch.Tensor, loc: torch.Tensor, q_lora: torch.Tensor, q_lora_ready: torch.cuda.Event
    ) -> None:
        s = self.streams
        with torch.cuda.stream(s.indexer):
            s.weights.wait_stream(s.indexer)
            s.query.wait_stream(s.indexer)
            store_rows(self.index_k, loc, rms_norm(x[:, :HEAD]))  # the indexer's key, cast on store
            with torch.cuda.stream(s.weights):
                weights = x @ self.w_weights
                weights_ready = torch.cuda.Event()
                weights_ready.record(s.weights)
            with torch.cuda.stream(s.query):
                s.query.wait_event(q_lora_ready)  # an event of the main stream
                s.query.wait_event(weights_ready)
                scores = (q_lora @ self.w_qi) * weights
            s.indexer.wait_stream(s.query)  # the weights stream is joined only through this wait
            self.topk[: x.shape[0]].copy_(scores.softmax(-1))

    def _attend(self, q: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        return q[:, :HEAD] * self.swa_cache.index_select(0, loc) + self.topk[: q.shape[0]]


# -- the index dtype ---------------------------------------------------------------------------
INDEX_DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def query_width(latent: bool, index_dtype: str) -> int:
    """The width of q, chosen by PyTorch's caching allocator's rules so that the index dtype
    decides whether q takes qkv's freed block, as the bf16 and fp8 index-K builds of the real
    deployment did (HAZARDS.md; the rules: docs/analysis.md, PyTorch's CUDACachingAllocator).

    A request is rounded up to a multiple of 512 bytes; a rounded size of at most 1 MiB comes
    from the small pool (2 MiB segments), a larger one from the large pool, and a freed block
    goes only to a later request of its own stream, pool and size class. qkv is float32,
    bs x (Q_LORA + HEAD) = bs x 2 KiB: 16, 8 and 4 KiB for the captured batch sizes, small.

    * bf16: q is as wide as qkv, the same size class: ``del qkv`` puts the block on the main
      stream's small free list and q, the next main-stream allocation, takes it (the best fit:
      the same rounded size). Manifest: at replay the q GEMM writes while the KV stream reads.
    * fp8 (and ``--latent``): q is bs x 2^18 x 4 bytes, 8, 4 and 2 MiB, above 1 MiB: it comes
      from the large pool, and qkv's small block stays free. The free is as unsafe as in bf16
      (a later main-stream allocation may still take it), but nothing takes it before the
      join in this capture: latent, no corruption.
    """
    return LATENT_Q_WIDTH if latent or index_dtype == "fp8" else Q_LORA + HEAD


def store_rows(cache: torch.Tensor, loc: torch.Tensor, rows: torch.Tensor) -> None:
    """``cache[loc] = rows``, the math done in float and cast on store, as serving code does.
    An fp8 cache is written as its bytes (not every index kernel has an fp8 variant)."""
    rows = rows.to(cache.dtype)
    if cache.element_size() == 1:
        cache, rows = cache.view(torch.uint8), rows.view(torch.uint8)
    cache.index_copy_(0, loc, rows)


def seeded_weights(seed: int) -> Callable[..., torch.Tensor]:
    """``weight(*shape)``: a scaled random weight from one generator, the same for every run."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def weight(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=gen) / shape[0] ** 0.5

    return weight


@dataclass
class CapturedModel:
    layer: MiniDecodeLayer
    x: torch.Tensor  # static input buffers, sized for the largest batch
    loc: torch.Tensor
    graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]]


def capture(layer: MiniDecodeLayer, sizes: tuple[int, ...] = BATCH_SIZES, guard: Guard | None = None) -> CapturedModel:
    """Warm up twice and capture each batch size, largest first, into one shared pool (``guard``: see Guard)."""
    max_bs = max(sizes)
    x = torch.randn(max_bs, HIDDEN, device="cuda")
    loc = torch.arange(max_bs, device="cuda")
    pool = torch.cuda.graph_pool_handle()
    capture_stream = torch.cuda.Stream()
    streamrace.name_stream(capture_stream, "main")
    # The warm-up runs on the capture stream: order it after the inputs and weights made on the
    # current stream, as PyTorch's CUDA-graph recipe does (a pool stream does not wait by itself).
    capture_stream.wait_stream(torch.cuda.current_stream())
    graphs = {}
    for bs in sorted(sizes, reverse=True):
        with torch.cuda.stream(capture_stream):
            for _ in range(2):
                layer.forward(x[:bs], loc[:bs] if guard is None else guard.slots(loc, bs))
        capture_stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=capture_stream):
            out = layer.forward(x[:bs], loc[:bs] if guard is None else guard.slots(loc, bs))
        graphs[bs] = (graph, out)
    return CapturedModel(layer, x, loc, graphs)


def check_replays(model: CapturedModel, replays: int = 3) -> tuple[int, int]:
    """(corrupted, total) replays, each compared with an eager single-stream run on the same inputs."""
    layer, gen = model.layer, torch.Generator(device="cuda").manual_seed(1)
    corrupted = total = 0
    for bs, (graph, out) in model.graphs.items():
        for _ in range(replays):
            model.x[:bs].copy_(torch.randn(bs, HIDDEN, device="cuda", generator=gen))
            model.loc[:bs].copy_(torch.randperm(SLOTS, device="cuda", generator=gen)[:bs])
            layer.reset_state()
            graph.replay()
            torch.cuda.synchronize()
            got = (out.clone(), layer.swa_cache.clone(), layer.topk[:bs].clone())
            layer.reset_state()
            want_out = layer.forward(model.x[:bs], model.loc[:bs])  # eager: single stream
            want = (want_out, layer.swa_cache, layer.topk[:bs])
            total += 1
            corrupted += not all(torch.allclose(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(got, want, strict=True))
    return corrupted, total


def run(
    variant: str,
    latent: bool = False,
    check: bool = False,
    trace: str | None = None,
    sleep_cycles: int = 20_000_000,
    index_dtype: str = "bf16",
) -> tuple[streamrace.Session, tuple[int, int] | None]:
    """Capture under streamrace.watch(); optionally replay and compare. Returns (session, replay result)."""
    streams = DecodeStreams()
    layer = MiniDecodeLayer(variant, latent, sleep_cycles, streams, index_dtype)
    with streamrace.watch(trace) as session:
        model = capture(layer)
    return session, (check_replays(model) if check else None)


# -- padded batches (HAZARDS.md H9, the padded-scatter check) ---------------------------------
# ``--padding`` replays the largest graph with padded batches, as serving engines do: PAD_REAL
# real rows, the rest padding, the whole program recorded. ``stale`` refreshes only
# ``loc[:n]``, so the padding rows write through the warm-up's slots into live KV (the bug);
# ``reserved`` sets the padding rows to a reserved slot every step; ``guarded`` captures the
# layer with slots computed in the graph from the real token count (``Guard``). With
# ``--check`` each replay is compared with an eager run of the real rows alone: a changed slot
# outside them is the padding bug, wrong real rows are the race. The two are independent:
#
#     python examples/dsv4_mini_decode.py --variant bug --padding stale --check --trace both.jsonl.gz
PADDINGS = ("stale", "reserved", "guarded")
PAD_REAL = 3  # real rows of a padded batch of the largest captured size
RESERVED_SLOT = SLOTS - 1  # no request owns it: padding rows may write there


class Guard:
    """The real rows' slots, the padding rows' the reserved one, from the static real token
    count ``n_real``: computed in the graph, so stale entries of ``loc`` never reach a write."""

    def __init__(self, max_bs: int) -> None:
        self.n_real = torch.full((1,), max_bs, device="cuda")
        self.positions = torch.arange(max_bs, device="cuda")

    def slots(self, loc: torch.Tensor, bs: int) -> torch.Tensor:
        return torch.where(self.positions[:bs] < self.n_real, loc[:bs], RESERVED_SLOT)


@dataclass
class PaddedCheck:
    clobbered: int  # replays after which a live slot outside the real rows changed: the padding bug
    wrong: int  # replays whose real rows differ from the eager run: the race
    total: int


def check_padded_replays(
    model: CapturedModel, padding: str, guard: Guard | None = None, replays: int = 3
) -> PaddedCheck:
    """Replay the largest graph with ``PAD_REAL`` real rows over live caches, each time compared
    with an eager single-stream run of the real rows alone."""
    layer, gen, n = model.layer, torch.Generator(device="cuda").manual_seed(1), PAD_REAL
    bs = max(model.graphs)
    graph, out = model.graphs[bs]
    check = PaddedCheck(0, 0, replays)
    for _ in range(replays):
        live = [torch.randn(SLOTS, HEAD, device="cuda", generator=gen) for _ in range(2)]  # other requests' KV
        real_x = torch.randn(n, HIDDEN, device="cuda", generator=gen)
        # Real slots never include the warm-up's, so a stale entry always names another request's slot.
        real_loc = bs + torch.randperm(RESERVED_SLOT - bs, device="cuda", generator=gen)[:n]
        model.x[:n].copy_(real_x)
        model.loc[:n].copy_(real_loc)
        if padding == "reserved":
            model.loc[n:bs].fill_(RESERVED_SLOT)
        if guard is not None:
            guard.n_real.fill_(n)
        caches = (layer.swa_cache, layer.index_k)
        for cache, state in zip(caches, live, strict=True):
            cache.copy_(state)
        graph.replay()
        torch.cuda.synchronize()
        got = [out[:n].clone(), *(cache.clone() for cache in caches)]
        for cache, state in zip(caches, live, strict=True):
            cache.copy_(state)
        want = [layer.forward(real_x, real_loc), *caches]  # eager: single stream, real rows only
        others = torch.ones(SLOTS, dtype=torch.bool, device="cuda")
        others[real_loc] = False
        others[RESERVED_SLOT] = False
        check.clobbered += any(not torch.equal(g[others], w[others]) for g, w in zip(got[1:], want[1:], strict=True))
        real = [got[0], *(g[real_loc] for g in got[1:])], [want[0], *(w[real_loc] for w in want[1:])]
        check.wrong += not all(torch.allclose(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(*real, strict=True))
    return check


def run_padded(
    variant: str, padding: str, trace: str | None = None, sleep_cycles: int = 20_000_000
) -> tuple[streamrace.Session, PaddedCheck]:
    """The whole program under streamrace.watch(): captures, then padded replays, each checked."""
    layer = MiniDecodeLayer(variant, False, sleep_cycles, DecodeStreams())
    guard = Guard(max(BATCH_SIZES)) if padding == "guarded" else None
    with streamrace.watch(trace) as session:
        model = capture(layer, guard=guard)
        check = check_padded_replays(model, padding, guard)
    return session, check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, default="bug")
    parser.add_argument("--index-dtype", choices=list(INDEX_DTYPES), default="bf16", help="the index-K cache's dtype")
    parser.add_argument("--latent", action="store_true", help="sizes that avoid reuse in this capture")
    parser.add_argument("--check", action="store_true", help="replay and compare with eager (proves corruption)")
    parser.add_argument("--trace", help="write the recorded trace here (.gz compresses)")
    parser.add_argument("--sleep-cycles", type=int, default=20_000_000, help="delay of the KV-stream reader")
    parser.add_argument("--padding", choices=PADDINGS, help="replay padded batches, recorded (see PADDINGS)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    if args.padding is not None:
        session, padded = run_padded(args.variant, args.padding, args.trace, args.sleep_cycles)
        print(session.report())
        if args.check:
            print(
                f"padded replay check: a live slot outside the real rows changed in {padded.clobbered} of "
                f"{padded.total} replays; the real rows differ from eager in {padded.wrong}"
            )
        return 0
    session, replay = run(args.variant, args.latent, args.check, args.trace, args.sleep_cycles, args.index_dtype)
    print(session.report())
    if replay is not None:
        corrupted, total = replay
        verdict = "CORRUPTED" if corrupted else "exact"
        print(f"replay check: {verdict}: {corrupted} of {total} replays differ from eager single-stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
