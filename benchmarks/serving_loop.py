"""A serving loop recorded whole: trace size, recorder memory and cost per replay, analysis time
(needs a CUDA GPU).

The loop is shaped like a decode server's: a step graph (``--layers`` matmul + activation
layers) captured once, then ``--replays`` steps of: the next input staged on a copy stream
(a fresh tensor copied from pinned host memory, an event recorded), the main stream waiting on
it, the input copied into the graph's static input, the graph replayed, and eager sampling
(argmax into a token buffer) between replays; the host waits every ``--sync-every`` steps, as
a server returning tokens does. A second loop replays the graph alone, with nothing between.

Each loop runs plain and recorded (the whole program, the trace written as it runs), in turn,
``--repeats`` times, side by side in this process, so drift hits both alike. Printed: the
median time per step and its ratio to plain, and the median of each repeat's recorded / plain
ratio (a pair run back to back, which drift moves least); the trace's bytes per replay; the growth of the
process's resident memory over the recorded run (sampled every 500 steps), against the plain
run's; and the time ``streamrace analyze`` takes on the recorded trace, with what it found
(the loop is correct: any finding is a false positive).

    python benchmarks/serving_loop.py --replays 10000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from streamrace.record.recorder import Recorder
from streamrace.record.traces import finish_trace

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """The process's resident memory, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


class Server:
    """The model, its static buffers, its streams, and the inputs it serves."""

    def __init__(self, layers: int, batch: int, hidden: int, inputs: int = 64) -> None:
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.weights = [torch.randn(hidden, hidden, device="cuda", generator=gen) / hidden**0.5 for _ in range(layers)]
        self.static_in = torch.zeros(batch, hidden, device="cuda")
        self.host_inputs = [torch.randn(batch, hidden).pin_memory() for _ in range(inputs)]
        self.main, self.copy = torch.cuda.Stream(), torch.cuda.Stream()
        self.ready = torch.cuda.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for weight in self.weights:
            x = torch.nn.functional.gelu(x @ weight)
        return x

    def capture(self) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        self.copy.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.copy):
            for _ in range(2):
                self.forward(self.static_in)  # warm-up on a side stream
        torch.cuda.current_stream().wait_stream(self.copy)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.main):
            out = self.forward(self.static_in)
        torch.cuda.synchronize()
        return graph, out

    def serve(self, graph: torch.cuda.CUDAGraph, out: torch.Tensor, steps: int, sync_every: int, rss_at=None):
        with torch.cuda.stream(self.main):
            # On main, where the sampling writes it: made on another stream it would need a join.
            tokens = torch.zeros(sync_every, out.shape[0], dtype=torch.long, device="cuda")
            for step in range(steps):
                with torch.cuda.stream(self.copy):
                    staged = self.host_inputs[step % len(self.host_inputs)].to("cuda", non_blocking=True)
                    self.ready.record(self.copy)
                self.main.wait_event(self.ready)
                self.static_in.copy_(staged)
                staged.record_stream(self.main)
                del staged
                graph.replay()
                tokens[step % sync_every] = out.argmax(dim=-1)  # eager sampling
                if (step + 1) % sync_every == 0:
                    tokens.cpu()  # the server hands the tokens back
                if rss_at is not None and step % 500 == 0:
                    rss_at.append(rss())
        torch.cuda.synchronize()

    def replay_only(self, graph: torch.cuda.CUDAGraph, steps: int, sync_every: int) -> None:
        with torch.cuda.stream(self.main):
            for step in range(steps):
                graph.replay()
                if (step + 1) % sync_every == 0:
                    self.main.synchronize()
        torch.cuda.synchronize()


def run(server: Server, args: argparse.Namespace, trace: str | None, loop: str) -> dict:
    """One loop, plain (``trace`` None) or recorded into ``trace``: seconds and memory."""
    recorder = None
    if trace is not None:
        recorder = Recorder(trace=trace, hooks=args.hooks)
        recorder.start()
    graph, out = server.capture()
    samples: list[int] = []
    base = rss()
    torch.cuda.synchronize()
    start = time.perf_counter()
    if loop == "serve":
        server.serve(graph, out, args.replays, args.sync_every, samples)
    else:
        server.replay_only(graph, args.replays, args.sync_every)
    seconds = time.perf_counter() - start
    growth = max(samples, default=base) - base
    result = {"seconds": seconds, "rss_growth": max(growth, rss() - base)}
    del graph, out
    if recorder is not None:
        recorder.stop()
        finish_trace(recorder)
        result.update(flushes=recorder.output.flushes, retained=len(recorder.events), errors=recorder.errors)
    return result


def analyze_time(trace: str) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", "--format", "json", "--exit-zero", trace],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - start
    return seconds, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--sync-every", type=int, default=32)
    parser.add_argument("--hooks", choices=("auto", "native", "python"), default="auto")
    parser.add_argument("--keep", metavar="DIR", help="keep the recorded traces here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    server = Server(args.layers, args.batch, args.hidden)
    directory = args.keep or tempfile.mkdtemp(prefix="streamrace-serving-")
    os.makedirs(directory, exist_ok=True)
    results: dict[tuple[str, str], list[dict]] = {}
    warm = argparse.Namespace(**{**vars(args), "replays": 100})  # kernels, the native hooks' build
    run(server, warm, None, "serve")
    run(server, warm, os.path.join(directory, "warm-up.jsonl.gz"), "serve")
    for repeat in range(args.repeats):
        for loop in ("serve", "replay"):
            for mode in ("plain", "recorded"):
                trace = os.path.join(directory, f"{loop}-{repeat}.jsonl.gz") if mode == "recorded" else None
                results.setdefault((loop, mode), []).append(run(server, args, trace, loop))

    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.replays} replays, "
        f"{args.layers} layers of {args.batch}x{args.hidden}, {args.repeats} repeats (medians)"
    )
    for loop, what in (("serve", "serving step (stage, wait, replay, sample)"), ("replay", "replay alone")):
        plain = statistics.median(r["seconds"] for r in results[(loop, "plain")]) / args.replays
        recorded = statistics.median(r["seconds"] for r in results[(loop, "recorded")]) / args.replays
        # Each repeat runs plain and recorded back to back: the ratio within a pair is what the
        # machine's drift between calls and repeats (0.3x of this ratio on shared H100s) moves least.
        pairs = zip(results[(loop, "plain")], results[(loop, "recorded")], strict=True)
        paired = statistics.median(r["seconds"] / p["seconds"] for p, r in pairs)
        print(
            f"{what}: plain {plain * 1e6:.1f} us, recorded {recorded * 1e6:.1f} us, ratio {recorded / plain:.3f} "
            f"(median of the {args.repeats} side-by-side pairs: {paired:.3f})"
        )
    last = results[("serve", "recorded")][-1]
    trace = os.path.join(directory, f"serve-{args.repeats - 1}.jsonl.gz")
    size = os.path.getsize(trace)
    plain_growth = statistics.median(r["rss_growth"] for r in results[("serve", "plain")])
    recorded_growth = statistics.median(r["rss_growth"] for r in results[("serve", "recorded")])
    print(
        f"trace: {size / args.replays:.0f} bytes per replay ({size / 1e6:.1f} MB), {last['flushes']} flushes, "
        f"{last['retained']} events in memory at the end, recorder errors {len(last['errors'])}"
    )
    print(
        f"resident memory growth over the run: recorded {recorded_growth / 1e6:.1f} MB, "
        f"plain {plain_growth / 1e6:.1f} MB"
    )
    seconds, report = analyze_time(trace)
    found = sorted({f["kind"] for f in report["findings"]})
    print(
        f"streamrace analyze: {seconds:.1f} s ({seconds / args.replays * 1e6:.0f} us per replay), "
        f"{report['summary']['findings']} findings{' (' + ', '.join(found) + ')' if found else ''}, "
        f"{report['summary']['ops']} ops"
    )
    if not args.keep:
        print(f"traces in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
