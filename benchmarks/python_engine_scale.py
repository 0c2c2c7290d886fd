"""The Python engine against the C++ core on the shapes that once made it quadratic (issue 27),
side by side in one run: CPU seconds of ``analyze`` on the same events in memory, and the ratio.

* many small eager ops on two streams, each writing its own 64 bytes of one block;
* one op of many ranges;
* interleaved strided writes: ops on two streams, each writing its own 16 columns of one
  matrix, so every write's span overlaps every earlier one while no two share a byte, at
  three sizes (a quadratic engine takes 4x the time at each doubling);
* a captured graph of such strided writes, replayed many times.

    python benchmarks/python_engine_scale.py
    python benchmarks/python_engine_scale.py --scale 0.25   # every size a quarter
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from streamrace.analysis import analyze
from streamrace.analysis.core import CORE_ENV, cpp_available
from streamrace.trace.builder import TraceBuilder


def many_small_eager_ops(tb: TraceBuilder, count: int) -> None:
    """``count`` eager ops on two streams, each writing its own 64 bytes of one block."""
    main, side = tb.stream("main"), tb.stream("side")
    x = tb.alloc(count * 64, main, at="m.py:1")
    for i in range(count):
        tb.op("aten::fill_", main if i % 2 else side, writes=[tb.span(x + 64 * i, 64)], at="m.py:2")


def one_op_of_many_ranges(tb: TraceBuilder, count: int) -> None:
    """One op of ``count`` read ranges and ``count`` write ranges."""
    main = tb.stream("main")
    x = tb.alloc(count * 64, main, at="m.py:1")
    reads = [tb.span(x + 64 * i, 32) for i in range(count)]
    writes = [tb.span(x + 64 * i + 32, 32) for i in range(count)]
    tb.op("aten::cat", main, reads=reads, writes=writes, at="m.py:2")


def column_slices(tb: TraceBuilder, count: int) -> None:
    """``count`` ops on two streams, each writing its own 16 columns of one matrix: strided views
    whose spans all overlap, though no two share a byte."""
    main, side = tb.stream("main"), tb.stream("side")
    x = tb.alloc(count * 4096, main, at="m.py:1")
    for i in range(count):
        view = tb.view(x, [64, 16], [count * 16, 1], offset=i * 16)
        tb.op("aten::copy_", main if i % 2 else side, writes=[view], at="m.py:2")


def replayed_column_slices(tb: TraceBuilder, count: int, replays: int) -> None:
    """A graph of ``count`` column-slice writes on one stream, replayed ``replays`` times: each
    replay's writes are checked against the last replay's, whose spans all overlap theirs."""
    main = tb.stream("main")
    x = tb.alloc(count * 4096, main, at="m.py:1")
    with tb.capture(main) as graph:
        for i in range(count):
            view = tb.view(x, [64, 16], [count * 16, 1], offset=i * 16)
            tb.op("aten::copy_", main, writes=[view], at="m.py:2")
    for _ in range(replays):
        tb.replay(graph, main, at="m.py:3")


def seconds(build: Callable[[TraceBuilder], None], core: str) -> float:
    tb = TraceBuilder()
    build(tb)
    trace = tb.trace()
    os.environ[CORE_ENV] = core
    start = time.process_time()
    analyze(trace)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    args = parser.parse_args()

    def n(count: int) -> int:
        return max(1, int(count * args.scale))

    shapes: list[tuple[str, Callable[[TraceBuilder], None]]] = [
        (f"{n(10_000):,} small eager ops", lambda tb: many_small_eager_ops(tb, n(10_000))),
        (f"one op of {n(20_000):,} ranges", lambda tb: one_op_of_many_ranges(tb, n(20_000))),
        *[(f"{n(k):,} strided ops", lambda tb, k=k: column_slices(tb, n(k))) for k in (2_000, 4_000, 8_000)],
        (
            f"{n(4_000):,}-op capture x {n(400):,} replays",
            lambda tb: replayed_column_slices(tb, n(4_000), n(400)),
        ),
    ]
    cores = ("python", "cpp") if cpp_available() else ("python",)
    print(f"{'shape':<36}" + "".join(f"{core:>10}" for core in cores) + ("     ratio" if len(cores) == 2 else ""))
    for name, build in shapes:
        times = [seconds(build, core) for core in cores]
        line = f"{name:<36}" + "".join(f"{t:>9.2f}s" for t in times)
        if len(times) == 2:
            line += f"{times[0] / max(times[1], 1e-6):>9.1f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
