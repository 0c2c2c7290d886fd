"""Allocation order: the same live blocks allocated at ascending and at descending addresses,
analysed side by side by both engines in this one process.

The Python engine once kept live blocks in one sorted list, and an allocation below every
live block moved all of them: descending addresses made it quadratic (issue 12). Printed:
seconds per run and the descending/ascending ratio for each engine, which should stay near 1
at every size.

    python benchmarks/allocation_order.py [BLOCKS ...]
"""

from __future__ import annotations

import os
import sys
import time

from streamrace.analysis import analyze
from streamrace.analysis.core import CORE_ENV, cpp_available
from streamrace.trace.builder import TraceBuilder


def trace(count: int, descending: bool):
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    # 4 MiB apart: one block per shadow granule, so the shadow's cost stays flat and what
    # is measured is the lifetime index
    step, top = 4 << 20, 1 << 44
    for k in range(count):
        addr = top - step * k if descending else top + step * k
        x = tb.alloc(256, main, addr=addr)
        tb.op("aten::fill_", side if k % 2 else main, writes=[tb.span(x, 256)])
    return tb.trace()


def seconds(events, core: str) -> float:
    os.environ[CORE_ENV] = core
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        analyze(events)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [10_000, 40_000, 160_000]
    cores = ["python"] + (["cpp"] if cpp_available() else [])
    print(f"{'blocks':>8} {'engine':>7} {'ascending s':>12} {'descending s':>13} {'desc/asc':>9}")
    for count in sizes:
        ascending, descending = trace(count, False), trace(count, True)
        for core in cores:
            up, down = seconds(ascending, core), seconds(descending, core)
            print(f"{count:>8} {core:>7} {up:>12.3f} {down:>13.3f} {down / up:>9.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
