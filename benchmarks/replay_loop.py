"""The execution view on a serving loop: what a replay costs each engine, side by side in one run.

A replay runs its graph's whole program through the analysis (docs/analysis.md §8), and a
serving loop replays thousands of times. The synthetic trace here is shaped like one: a
decode graph of ``--layers`` layers captured once on the main stream, with a shared-expert
branch forked onto a side stream and joined in every layer, its temporaries allocated and
freed in the graph's private pool, weights and KV cache in memory allocated before recording
(about 1,000 captured accesses at the default 50 layers); then ``--steps`` serving steps,
each: the next tokens staged into the graph's static input on a copy stream that waits for
main, main waiting for the copy, the replay, three sampling ops reading the static logits
into a fresh eager allocation (the next step's tokens, the same block every step) and a host
synchronization. The program is correct, so both engines must find nothing.

Printed, in turn:

* the trace: events, captured accesses, size;
* per replay, the C++ core and the Python engine on the same events in memory
  (``analyze(header, events)``, CPU time), ``--python-steps`` steps for both (the Python engine
  takes milliseconds a replay); the replay's own share is the analysis with the replays
  against the same trace with the replay events left out;
* the whole loop on the C++ core against the reading floor (benchmarks/end_to_end.py: a
  process that decompresses the gzip trace and parses each line with orjson, nothing else),
  both as whole processes, ``streamrace analyze`` included;
* memory over the loop: the accesses each engine's shadow memory remembers and the access
  records the C++ core holds, every tenth of the loop (flat: each replay forgets the last one's
  accesses it covers).

    python benchmarks/replay_loop.py
    python benchmarks/replay_loop.py --steps 10000 --layers 50 --python-steps 300
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from end_to_end import ANALYZE, FLOOR, child_cpu, child_env

from streamrace.analysis import analyze
from streamrace.analysis.core import live_records, new_engine
from streamrace.trace.io import make_header, write_trace

BF16, I32 = 2, 4
HIDDEN, BATCH, VOCAB = 7168, 8, 32768
ACT = BATCH * HIDDEN * BF16  # one activation of the batch
POOL_BASE = 0x7F00_0000_0000
EAGER_BASE = 0x7C00_0000_0000
WEIGHT_BASE = 0x7E00_0000_0000
KV_BASE = 0x7D00_0000_0000
MAIN, SIDE, COPY = 0x5000, 0x5010, 0x5020
GRAPH = 1
Events = list[dict[str, Any]]


class _Writer:
    """Events with a global seq, events ids, and the caching allocator's exact-size LIFO reuse."""

    def __init__(self) -> None:
        self.seq = 0
        self.event_ids = 0
        self.free_lists: dict[tuple[int, int], list[int]] = {}
        self.next_addr = {True: POOL_BASE, False: EAGER_BASE}
        self.size_of: dict[int, tuple[int, int, bool]] = {}

    def ev(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": self.seq, "ev": kind, **fields}
        self.seq += 1
        return event

    def alloc(self, size: int, stream: int, pooled: bool, site: int) -> tuple[int, dict[str, Any]]:
        size = -(-size // 512) * 512
        blocks = self.free_lists.get((stream, size))
        addr = blocks.pop() if blocks else self.next_addr[pooled]
        if addr == self.next_addr[pooled]:
            self.next_addr[pooled] += size
        self.size_of[addr] = (size, stream, pooled)
        pool = [GRAPH, 0] if pooled else None
        return addr, self.ev("alloc", addr=addr, size=size, stream=stream, device=0, pool=pool, stack=site)

    def free(self, addr: int, site: int) -> dict[str, Any]:
        size, stream, _ = self.size_of.pop(addr)
        self.free_lists.setdefault((stream, size), []).append(addr)
        return self.ev("free", addr=addr, device=0, stream=stream, stack=site)

    def wait_stream(self, waiter: int, waited: int) -> Iterator[dict[str, Any]]:
        """``waiter.wait_stream(waited)``: a fresh event, recorded, waited on and deleted."""
        self.event_ids += 1
        yield self.ev("event_create", event=self.event_ids)
        yield self.ev("event_record", event=self.event_ids, stream=waited)
        yield self.ev("event_wait", event=self.event_ids, stream=waiter)
        yield self.ev("event_delete", event=self.event_ids)


def span(addr: int, nbytes: int) -> dict[str, int]:
    return {"addr": addr, "nbytes": nbytes}


def weight(layer: int, k: int) -> dict[str, int]:
    return span(WEIGHT_BASE + layer * (64 << 20) + k * (4 << 20), 4 << 20)


def kv_view(layer: int) -> dict[str, Any]:
    """The layer's paged KV cache as attention reads it: [pages, page, 2, head_dim]."""
    return {
        "addr": KV_BASE + layer * (32 << 20),
        "shape": [256, 64, 2, 128],
        "stride": [64 * 2 * 128, 2 * 128, 128, 1],
        "itemsize": BF16,
    }


def serving_loop_events(steps: int = 10_000, layers: int = 50, replays: bool = True) -> Iterator[dict[str, Any]]:
    """Yield the events (no header) of the serving loop; ``replays=False`` leaves the replay
    events out (the rest of the loop, as the baseline of the replay's share)."""
    w = _Writer()
    for stream, name in ((MAIN, "main"), (SIDE, "shared_experts"), (COPY, "copy")):
        yield w.ev("stream", stream=stream, device=0, name=name)
    for site in range(1, 21):  # 1-12: the model's lines, 13-20: the serving loop's
        frame = ["model/decode.py", 100 + site, "forward"] if site <= 12 else ["serve.py", 200 + site, "serve"]
        yield w.ev("stack", id=site, frames=[frame])

    def op(name: str, stream: int, reads: list[Any], writes: list[Any], site: int) -> dict[str, Any]:
        return w.ev("op", op=name, stream=stream, device=0, reads=reads, writes=writes, stack=site)

    # The graph's static input (eager, outside its pool) and the first tokens.
    static_in, ev = w.alloc(BATCH * I32, MAIN, False, 13)
    yield ev
    yield op("aten::fill_", MAIN, [], [span(static_in, BATCH * I32)], 14)

    # The capture: ~20 accesses a layer.
    yield w.ev("capture_begin", graph=GRAPH, stream=MAIN, device=0, pool=[GRAPH, 0], mode="global")
    x, ev = w.alloc(ACT, MAIN, True, 1)
    yield ev
    yield op("aten::embedding", MAIN, [span(static_in, BATCH * I32), weight(0, 15)], [span(x, ACT)], 1)
    for layer in range(layers):
        n, ev = w.alloc(ACT, MAIN, True, 2)
        yield ev
        yield op("aten::rms_norm", MAIN, [span(x, ACT), weight(layer, 0)], [span(n, ACT)], 2)
        qkv, ev = w.alloc(3 * ACT, MAIN, True, 3)
        yield ev
        yield op("aten::mm", MAIN, [span(n, ACT), weight(layer, 1)], [span(qkv, 3 * ACT)], 3)
        rotary = {"addr": qkv, "shape": [BATCH, 2, HIDDEN // 2], "stride": [3 * HIDDEN, HIDDEN, 1], "itemsize": BF16}
        yield op("rotary_embedding", MAIN, [rotary], [rotary], 4)
        yield op("kv_store", MAIN, [span(qkv + ACT, 2 * ACT)], [span(kv_view(layer)["addr"] + layer * 4096, 4096)], 5)
        attn, ev = w.alloc(ACT, MAIN, True, 6)
        yield ev
        yield op("flash_attn", MAIN, [span(qkv, ACT), kv_view(layer)], [span(attn, ACT)], 6)
        yield from w.wait_stream(SIDE, MAIN)  # the shared experts on the side stream
        shared, ev = w.alloc(ACT, SIDE, True, 7)
        yield ev
        yield op("shared_expert", SIDE, [span(n, ACT), weight(layer, 2)], [span(shared, ACT)], 7)
        o, ev = w.alloc(ACT, MAIN, True, 8)
        yield ev
        yield op("aten::mm", MAIN, [span(attn, ACT), weight(layer, 3)], [span(o, ACT)], 8)
        yield from w.wait_stream(MAIN, SIDE)
        x2, ev = w.alloc(ACT, MAIN, True, 9)
        yield ev
        yield op("aten::add", MAIN, [span(x, ACT), span(o, ACT), span(shared, ACT)], [span(x2, ACT)], 9)
        for block in (n, qkv, attn, o, x):
            yield w.free(block, 10)
        yield w.free(shared, 10)
        x = x2
    logits, ev = w.alloc(BATCH * VOCAB * BF16, MAIN, True, 11)
    yield ev
    yield op("aten::mm", MAIN, [span(x, ACT), weight(layers, 0)], [span(logits, BATCH * VOCAB * BF16)], 11)
    yield w.free(x, 10)
    yield w.ev("capture_end", graph=GRAPH)

    # The serving loop.
    tokens, ev = w.alloc(BATCH * I32, MAIN, False, 13)
    yield ev
    yield op("aten::fill_", MAIN, [], [span(tokens, BATCH * I32)], 14)
    for _ in range(steps):
        yield from w.wait_stream(COPY, MAIN)
        yield op("aten::copy_", COPY, [span(tokens, BATCH * I32)], [span(static_in, BATCH * I32)], 15)
        yield from w.wait_stream(MAIN, COPY)
        if replays:
            yield w.ev("replay", graph=GRAPH, stream=MAIN, device=0, stack=16)
        probs, ev = w.alloc(BATCH * VOCAB * 4, MAIN, False, 17)
        yield ev
        yield op("aten::softmax", MAIN, [span(logits, BATCH * VOCAB * BF16)], [span(probs, BATCH * VOCAB * 4)], 17)
        yield w.free(tokens, 18)
        tokens, ev = w.alloc(BATCH * I32, MAIN, False, 19)
        yield ev
        yield op("aten::argmax", MAIN, [span(probs, BATCH * VOCAB * 4)], [span(tokens, BATCH * I32)], 19)
        yield w.free(probs, 18)
        yield op("aten::index_put_", MAIN, [span(tokens, BATCH * I32)], [span(tokens, BATCH * I32)], 20)
        yield w.ev("stream_sync", stream=MAIN)
    yield w.ev("graph_destroy", graph=GRAPH)


def header() -> dict[str, Any]:
    return make_header(producer="benchmarks/replay_loop.py", recording="program")


def analysis_cpu(core: str, events: list[dict[str, Any]]) -> float:
    """CPU seconds of ``analyze(header, events)`` on ``core``; it must find nothing."""
    os.environ["STREAMRACE_CORE"] = core
    gc.collect()
    gc.freeze()  # the events are held in a list: keep the collector from walking them
    start = time.process_time()
    result = analyze(header(), events)
    seconds = time.process_time() - start
    gc.unfreeze()
    if result.findings:
        sys.exit(f"{core}: the serving loop is correct, yet: {result.findings[0].message}")
    return seconds


def with_and_without(core: str, events: Events, rest: Events, runs: int) -> tuple[float, float]:
    """Median CPU seconds of the analysis of ``events``, and of what the replays add to it (the
    same loop without them, ``rest``), the two run alternately."""
    whole, added = [], []
    for _ in range(runs):
        seconds = analysis_cpu(core, events)
        whole.append(seconds)
        added.append(seconds - analysis_cpu(core, rest))
    return statistics.median(whole), statistics.median(added)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000, help="serving steps (replays) of the whole loop")
    parser.add_argument("--layers", type=int, default=50, help="decode layers of the graph (~20 accesses each)")
    parser.add_argument("--python-steps", type=int, default=300, help="steps both engines analyse side by side")
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement (medians are printed)")
    args = parser.parse_args()
    try:
        import orjson  # noqa: F401  (the floor is defined by it)
    except ImportError:
        sys.exit("the reading floor is measured with orjson: pip install orjson")

    full = list(serving_loop_events(args.steps, args.layers))
    small = list(serving_loop_events(args.python_steps, args.layers))
    small_rest = list(serving_loop_events(args.python_steps, args.layers, replays=False))
    full_rest = list(serving_loop_events(args.steps, args.layers, replays=False))
    captured = _captured_accesses(args.layers)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "replay_loop.jsonl.gz")
        write_trace(path, header(), full)
        print(
            f"trace: a graph of {captured:,} captured accesses ({args.layers} layers), {args.steps:,} serving steps, "
            f"{len(full):,} events, {os.path.getsize(path) / 1e6:.1f} MB gzip; medians of {args.runs} runs, CPU time\n"
        )

        print(f"per replay, {args.python_steps:,} steps on events in memory:")
        per = {}
        for core in ("cpp", "python"):
            whole, replays = with_and_without(core, small, small_rest, args.runs)
            per[core] = (whole / args.python_steps, replays / args.python_steps)
            print(
                f"  {core:6}  {per[core][0] * 1e6:9.1f} us a step, of which the replay {per[core][1] * 1e6:9.1f} us "
                f"({per[core][1] * 1e9 / captured:6.1f} ns a captured access)"
            )
        print(f"  Python / C++: {per['python'][1] / per['cpp'][1]:.1f}x a replay\n")

        cpp_whole, replays = with_and_without("cpp", full, full_rest, args.runs)
        env = child_env(os.path.join(tmp, "pycache"))
        floor_args, command_args = (FLOOR, path), (ANALYZE, "analyze", path, "-o", os.devnull)
        child_cpu(env, *floor_args)  # once untimed, to cache the bytecode (as end_to_end.py does)
        child_cpu(env, *command_args)
        floor = statistics.median(child_cpu(env, *floor_args) for _ in range(args.runs))
        command = statistics.median(child_cpu(env, *command_args) for _ in range(args.runs))
        print(f"the whole loop ({args.steps:,} replays), C++ core:")
        print(f"  reading floor (gzip + orjson per line)   {floor:7.2f} s   1.00x")
        print(f"  streamrace analyze (whole process)       {command:7.2f} s {command / floor:6.2f}x")
        print(f"  analysis of the events in memory         {cpp_whole:7.2f} s {cpp_whole / floor:6.2f}x")
        print(f"    of which the replays                   {replays:7.2f} s {replays / floor:6.2f}x")
        print(f"  per replay                               {replays / args.steps * 1e6:7.1f} us\n")

    print("memory over the loop (remembered accesses; C++ access records alive):")
    for core in ("cpp", "python"):
        steps = args.steps if core == "cpp" else args.python_steps
        marks = sorted({max(1, steps * k // 10) for k in range(1, 11)})
        engine = new_engine(core=core)
        replays, row = 0, []
        for ev in serving_loop_events(steps, args.layers):
            engine.feed(ev)
            if ev["ev"] == "replay":
                replays += 1
            elif ev["ev"] == "stream_sync" and replays in marks:
                row.append(f"{engine.remembered()}" + (f"/{live_records()}" if core == "cpp" else ""))
        print(f"  {core:6} at each tenth of {steps:,} steps: {' '.join(row)}")


def _captured_accesses(layers: int) -> int:
    """The accesses of the graph's program: those of the ops between capture_begin and capture_end."""
    inside, count = False, 0
    for ev in serving_loop_events(0, layers):
        if ev["ev"] == "capture_begin":
            inside = True
        elif ev["ev"] == "capture_end":
            return count
        elif inside and ev["ev"] == "op":
            count += len(ev["reads"]) + len(ev["writes"])
    return count


if __name__ == "__main__":
    main()
