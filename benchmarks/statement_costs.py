"""What recording costs each kind of statement a serving step is made of (needs a CUDA GPU).

The serving-step benchmarks (serving_loop.py, pinned_staging_cost.py) give one ratio for a
whole step; this one says which statement the cost is in. Each statement is run ``--iters``
times in a row, plain and recorded by the native hooks with pinned host memory off and on
(``Recorder(host_memory=...)``), in turn, ``--repeats`` times so that drift hits all alike.
Printed: the median microseconds per statement in each mode, and what recording adds to it.

    python benchmarks/statement_costs.py --iters 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from streamrace.record.recorder import Recorder
from streamrace.record.traces import finish_trace


def statements(tokens: int, hidden: int) -> dict[str, Callable[[], object]]:
    """Each statement of a staged serving step, over state made once."""
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    pinned = torch.arange(tokens, dtype=torch.long).pin_memory()
    landing = torch.zeros(tokens, dtype=torch.long).pin_memory()
    source = torch.arange(tokens, dtype=torch.long)
    ids = torch.zeros(tokens, dtype=torch.long, device="cuda")
    table = torch.randn(4096, hidden, device="cuda")
    x = torch.randn(tokens, hidden, device="cuda")
    event = torch.cuda.Event()
    event.record()
    static_in = torch.zeros(tokens, hidden, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2
    del static_out
    torch.cuda.synchronize()

    def fresh_event() -> object:
        e = torch.cuda.Event()
        e.record()
        return e

    def record_stream() -> None:
        y = torch.empty(tokens, device="cuda")
        y.record_stream(side)

    return {
        "cpu op, not pinned ((a + 1) % n)": lambda: (source + 1) % 4096,
        "host write of pinned (copy_)": lambda: pinned.copy_(source),
        "H2D copy from pinned, non_blocking": lambda: ids.copy_(pinned, non_blocking=True),
        "H2D copy, fresh device tensor": lambda: pinned.to("cuda", non_blocking=True),
        "device op (embedding gather)": lambda: table[ids],
        "device op (gelu)": lambda: torch.nn.functional.gelu(x),
        "D2H copy into pinned, non_blocking": lambda: landing.copy_(ids, non_blocking=True),
        "Event() + record()": fresh_event,
        "event.synchronize()": event.synchronize,
        "host read of pinned (.item())": lambda: landing[0].item(),
        "empty + record_stream": record_stream,
        "wait_stream": lambda: main.wait_stream(side),
        "graph replay": graph.replay,
    }


def timed(fn: Callable[[], object], iters: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    seconds = time.perf_counter() - start
    torch.cuda.synchronize()
    return seconds / iters


MODES = ("plain", "native", "native+pinned")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    directory = tempfile.mkdtemp(prefix="streamrace-statements-")
    cases = statements(args.tokens, args.hidden)
    seconds: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for mode in MODES:
            recorder = None
            if mode != "plain":
                recorder = Recorder(
                    trace=os.path.join(directory, f"{mode}-{repeat}.jsonl.gz"),
                    hooks="native",
                    host_memory=mode.endswith("+pinned"),
                )
                recorder.start()
            for name, fn in cases.items():
                per = timed(fn, args.iters if repeat else 50)
                if repeat:
                    seconds.setdefault((name, mode), []).append(per)
            if recorder is not None:
                recorder.stop()
                finish_trace(recorder)
                assert not recorder.errors, recorder.errors
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.iters} iterations, {args.repeats} repeats")
    print(f"{'statement':<40}{'plain us':>10}{'native':>10}{'+pinned':>10}{'native-plain':>14}{'pinned-native':>15}")
    for name in cases:
        plain, native, pinned = (statistics.median(seconds[(name, mode)]) * 1e6 for mode in MODES)
        print(f"{name:<40}{plain:>10.2f}{native:>10.2f}{pinned:>10.2f}{native - plain:>14.2f}{pinned - native:>15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
