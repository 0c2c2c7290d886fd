"""Analysis time of two checkouts of streamrace, side by side: before and after a change.

Each checkout (a directory holding a built ``streamrace`` package, e.g. ``git worktree add``
plus ``python setup.py build_ext --inplace``) gets one worker process that builds the
synthetic traces of benchmarks/synthetic.py in memory once; the runs then alternate between
the two workers, one timed ``analyze(header, events)`` at a time, so both see the same load
on a shared machine; a run is timed in the worker's CPU time, which other processes on the
machine disturb less than wall time. Printed per trace shape and engine: the fastest and the
median run of each, and after / before (of the fastest).

    python benchmarks/before_after.py /tmp/before /path/to/after --runs 15
"""

from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkouts import Checkouts, checkout_parser, fastest_and_medians, require_checkouts, serve

SHAPES = {
    "capture set (3 streams, 12 captures)": ("synthetic_events", {"layers": 60, "ops_per_layer": 40, "captures": 12}),
    "eager fan-out to 32 streams": ("fan_out_events", {"streams": 32, "steps": 2000}),
}


def worker() -> None:
    """Answer each ``[shape, core]`` request with the seconds of one analysis."""
    import synthetic

    from streamrace.analysis import analyze
    from streamrace.analysis.core import CORE_ENV

    traces = {name: list(getattr(synthetic, fn)(**kwargs)) for name, (fn, kwargs) in SHAPES.items()}
    gc.freeze()

    def answer(request: list[str]) -> dict[str, float]:
        shape, core = request
        os.environ[CORE_ENV] = core
        gc.collect()
        start = time.process_time()
        analyze(synthetic.header(), traces[shape])
        return {"seconds": time.process_time() - start}

    serve(answer)


def main() -> None:
    parser = checkout_parser(__doc__)
    parser.add_argument("--runs", type=int, default=15, help="timed runs per checkout, shape and engine")
    parser.add_argument("--python-runs", type=int, default=5, help="runs of the pure-Python engine (0: none)")
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    require_checkouts(parser, args)
    here = os.path.dirname(os.path.abspath(__file__))
    checkouts = Checkouts(__file__, (args.before, args.after), lambda tree: [tree, here])
    print(f"{'':40} {'engine':7} {'before (CPU s, min/median)':>27} {'after':>21} {'after/before':>12}")
    for shape in SHAPES:
        for core, runs in (("cpp", args.runs), ("python", args.python_runs)):
            if runs == 0:
                continue
            times = checkouts.alternate([shape, core], runs, lambda answer: answer["seconds"])
            before, before_median, after, after_median = fastest_and_medians(times)
            print(
                f"{shape:40} {core:7} {before:10.3f} /{before_median:8.3f} {after:10.3f} /{after_median:8.3f}"
                f" {after / before:11.2f}x"
            )
    checkouts.close()


if __name__ == "__main__":
    main()
