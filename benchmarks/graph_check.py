"""The graph-truth check's cost: ``analyze()`` with and without it, side by side, by graph size.

A recorded trace carries each capture's graph (the ``graph`` event) and ``analyze()`` checks
the clock model against it (docs/analysis.md §9). This times ``analyze(header, events)`` on
the same events in memory twice over, alternately: with a header that says the graphs were
read back (the check runs) and one that does not (it does not). The capture is one decode step
of benchmarks/synthetic.py, 32 ops a layer on three streams forking and joining, with its
graph built as CUDA's stream capture builds it (one node per op), at 1,024, 4,096 and 20,480
nodes. Printed: the median of each, and their ratio (the check's cost as a factor). Times are
the process's CPU time, so that other work on a shared machine (waiting for a core) does not
count; cache and memory contention still do.

    python benchmarks/graph_check.py
    python benchmarks/graph_check.py --core python --bug
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from typing import Any

import synthetic

from streamrace.analysis import analyze
from streamrace.analysis.core import CORE_ENV, selected_core

OPS_PER_LAYER = 32


def capture(nodes: int, bug: bool) -> list[dict[str, Any]]:
    layers = nodes // OPS_PER_LAYER
    return list(synthetic.with_captured_graphs(synthetic.synthetic_events(layers, OPS_PER_LAYER, 1, bug=bug)))


def timings(events: list[dict[str, Any]], repeats: int) -> tuple[float, float, Any, Any]:
    """Median CPU seconds of analyze() without and with the check, run alternately."""
    plain, checked = synthetic.header(), synthetic.graph_header()
    without, with_check = [], []
    for _ in range(repeats):
        for header, times in ((plain, without), (checked, with_check)):
            gc.collect()
            start = time.process_time()
            result = analyze(header, events)
            times.append(time.process_time() - start)
            if header is plain:
                plain_result = result
            else:
                checked_result = result
    return statistics.median(without), statistics.median(with_check), plain_result, checked_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1024,4096,20480", help="graph sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each timing (median)")
    parser.add_argument("--core", choices=["auto", "cpp", "python"], default="auto")
    parser.add_argument("--bug", action="store_true", help="every layer also races (the DSV4 freed-before-join bug)")
    args = parser.parse_args()
    os.environ[CORE_ENV] = args.core
    print(f"engine: {selected_core()}; capture: 1 decode step, {OPS_PER_LAYER} ops a layer, 3 streams", end="")
    print(", a race in every layer" if args.bug else ", race-free")
    print(f"\n{'nodes':>7} {'accesses':>9} {'without check':>14} {'with check':>11} {'ratio':>6}  findings")
    for nodes in map(int, args.nodes.split(",")):
        events = capture(nodes, args.bug)
        # The events are held in a list; freezing them keeps the collector from walking them.
        gc.freeze()
        without, with_check, plain, checked = timings(events, args.repeats)
        gc.unfreeze()
        same = [f.to_dict() for f in plain.findings] == [f.to_dict() for f in checked.findings]
        print(
            f"{nodes:7,} {plain.summary['accesses']:9,} {without * 1e3:11.1f} ms {with_check * 1e3:8.1f} ms "
            f"{with_check / without:5.2f}x  {len(checked.findings)} ({'the same' if same else 'DIFFERENT'} without)"
        )


if __name__ == "__main__":
    main()
