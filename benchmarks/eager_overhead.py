"""The cost of recording the whole program: eager ops and replays, side by side in one process
(needs a CUDA GPU).

The DSV4 decode example (examples/dsv4_mini_decode.py, fixed variant) stacked N layers deep
runs eagerly, in turn (so drift hits all alike):

* plain, under ``streamrace.watch()`` (whole-program recording, the native hooks), and with the
  Python reference hooks;
* then under PyTorch's CUDA sanitizer (CSAN), last, because enabling it cannot be undone;

and a captured graph of the same model is replayed plain and while a recording runs.
Printed: median times, the cost per eager op above plain, the ratios to plain, and the median
of each repeat's ratio to its own plain run (``pairs``, which drift moves least). Absolute
times only mean something on the machine that ran it.

    python benchmarks/eager_overhead.py --layers 8 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from capture_overhead import DeepDecoder, decoder_on_gpu, paired_ratio, print_replays, replay_time

import streamrace


def eager_time(model: DeepDecoder, x: torch.Tensor, loc: torch.Tensor, stream: torch.cuda.Stream, steps: int) -> float:
    """Seconds per eager forward, host to device idle."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.cuda.stream(stream):
        for _ in range(steps):
            model.forward(x, loc)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="eager forwards per timing")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--replays", type=int, default=500)
    parser.add_argument("--no-csan", action="store_true", help="skip the CUDA sanitizer comparison")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")

    model, x, loc, stream = decoder_on_gpu(args.layers, args.batch)
    stream.wait_stream(torch.cuda.current_stream())  # the inputs and weights are made on this one
    eager_time(model, x, loc, stream, 2)  # warm-up: cuBLAS handles, workspaces, allocator segments

    configs = {"streamrace": {"hooks": "native"}, "python hooks": {"hooks": "python"}}
    times: dict[str, list[float]] = {"plain": [], **{name: [] for name in configs}}
    ops = 0
    for _ in range(args.repeats):
        times["plain"].append(eager_time(model, x, loc, stream, args.steps))
        for name, options in configs.items():
            with streamrace.watch(**options) as session:
                times[name].append(eager_time(model, x, loc, stream, args.steps))
            assert session.recorder.hooks_kind == options["hooks"] and not session.errors, session.errors
            assert session.findings == [], session.report()
            ops = session.result.summary["ops"] // args.steps

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        model.forward(x, loc)
    replays: dict[str, list[float]] = {"plain": [], "recording": []}
    for _ in range(args.repeats):
        replays["plain"].append(replay_time(graph, args.replays))
        with streamrace.watch():
            replays["recording"].append(replay_time(graph, args.replays))

    if not args.no_csan:
        from torch.cuda._sanitizer import enable_cuda_sanitizer

        enable_cuda_sanitizer()
        times["csan"] = [eager_time(model, x, loc, stream, args.steps) for _ in range(args.repeats)]

    plain = statistics.median(times["plain"])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layers} layers, batch {args.batch}")
    print(f"eager ops per forward: {ops}")
    print(f"{'eager':<14}{'median ms':>12}{'ratio':>10}{'us per op':>12}{'pairs':>8}")
    for name, values in times.items():
        median = statistics.median(values)
        per_op = (median - plain) / max(ops, 1) * 1e6
        pairs = paired_ratio(times, name)
        print(f"{name:<14}{median * 1e3:>12.3f}{median / plain:>10.2f}{per_op:>12.2f}{pairs:>8}")
    print_replays(replays, 14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
