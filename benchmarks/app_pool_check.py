"""What the application-pool check (docs/analysis.md §8.8) costs a trace of eager work, side by side.

    python benchmarks/app_pool_check.py [--streams 16] [--steps 3000] [--repeats 5]

The same events in memory (benchmarks/synthetic.py's fan-out: eager work forked to many streams
and joined every step, with host synchronizations) analysed alternately with the check (a
format 1.4 header that does not say ``app_pools``) and without it (``app_pools: 0``, what a
recording that made no annotation writes); prints the medians of the process's CPU time and
their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic

from streamrace.analysis import analyze
from streamrace.trace.io import Trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    events = list(synthetic.fan_out_events(streams=args.streams, steps=args.steps))
    headers = {
        "skipped (app_pools: 0)": {**synthetic.header(), "minor": 4, "recording": "program", "app_pools": 0},
        "with the check": {**synthetic.header(), "minor": 4, "recording": "program"},
    }
    times: dict[str, list[float]] = {name: [] for name in headers}
    for _ in range(args.repeats):
        for name, header in headers.items():
            start = time.process_time()
            analyze(Trace(header=header, events=events, stacks={}))
            times[name].append(time.process_time() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["skipped (app_pools: 0)"]
    print(f"{len(events):,} events, {args.repeats} runs each")
    for name, median in medians.items():
        print(f"  {name:<24} {median:7.3f} s  {median / base:5.2f}x")


if __name__ == "__main__":
    main()
