"""Where a recorded serving step's time goes (needs a CUDA GPU).

serving_loop.py gives one ratio for a whole step; this one takes the same step apart. For the
step of serving_loop.py (stage from pinned memory on a copy stream, an event, the main stream
waiting, the copy into the static input, ``record_stream``, the replay, eager sampling), plain
and recorded by the native hooks, in turn, in one process:

* the **step time**, recorded into a trace file and in memory (nothing written), with the
  graph as serving_loop.py builds it, and with a graph so small
  that the device is idle most of the step: there the step time is the host's, so the two
  say whether recording costs host time the device used to hide, or makes the host wait;
* the **host's blocking calls**: how many times a step the host waited on the device
  (``torch.cuda`` synchronizations and event waits, counted by wrapping the CUDA runtime calls
  torch's profiler names), from ``torch.profiler`` over a few hundred steps;
* a **cProfile** of the recorded steps and of the plain ones: the Python functions and the
  builtins (torch's, whose time includes the native hooks' callbacks) that take the most time
  per step, side by side.

    python benchmarks/serving_step_anatomy.py --steps 2000 --repeats 3
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serving_loop import Server

from streamrace.record.recorder import Recorder
from streamrace.record.trace_output import TraceOutput
from streamrace.record.traces import finish_trace

FLUSHED: list[float] = []  # seconds of each flush inside the timed steps


def _timed_flush(flush):
    def timed(self):
        start = time.perf_counter()
        try:
            return flush(self)
        finally:
            FLUSHED.append(time.perf_counter() - start)

    return timed


TraceOutput.flush = _timed_flush(TraceOutput.flush)
IN_MEMORY = ""  # recorded with no trace file: the events stay in memory, nothing is written


def timed_steps(server: Server, steps: int, trace: str | None, profiler=None) -> float:
    """Seconds a step, plain (``trace`` None) or recorded by the native hooks (into ``trace``,
    or in memory)."""
    recorder = None
    if trace is not None:
        recorder = Recorder(trace=trace or None, hooks="native")
        recorder.start()
    graph, out = server.capture()
    torch.cuda.synchronize()
    if profiler is not None:
        profiler.enable()
    FLUSHED.clear()
    start = time.perf_counter()
    server.serve(graph, out, steps, 32)
    seconds = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    flushed = sum(FLUSHED)
    if recorder is not None and trace:
        print(f"    ({len(FLUSHED)} flushes inside the steps: {flushed / steps * 1e6:.1f} us a step)")
    del graph, out
    if recorder is not None:
        recorder.stop()
        if trace:
            finish_trace(recorder)
    return seconds / steps


def blocking_calls(server: Server, steps: int, trace: str | None) -> dict[str, tuple[int, float]]:
    """CUDA runtime calls torch's profiler saw in ``steps`` steps: count and CPU us a step."""
    from torch.profiler import ProfilerActivity, profile

    recorder = None
    if trace is not None:
        recorder = Recorder(trace=trace, hooks="native")
        recorder.start()
    graph, out = server.capture()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        server.serve(graph, out, steps, 32)
    del graph, out
    if recorder is not None:
        recorder.stop()
        finish_trace(recorder)
    rows = {}
    for event in prof.key_averages():
        if event.key.startswith("cu"):  # the CUDA runtime's and driver's calls
            rows[event.key] = (event.count, event.self_cpu_time_total / steps)
    return rows


def top_functions(profiler: cProfile.Profile, steps: int, limit: int) -> list[tuple[str, float, float]]:
    """The functions with the most own time: (name, calls a step, own us a step)."""
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, own, _cumulative, _callers) in stats.stats.items():
        where = name if filename == "~" else f"{os.path.basename(filename)}:{line} {name}"
        rows.append((where, calls / steps, own / steps * 1e6))
    rows.sort(key=lambda row: -row[2])
    return rows[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    directory = tempfile.mkdtemp(prefix="streamrace-anatomy-")
    servers = {"serving graph": Server(8, 16, 1024), "tiny graph": Server(1, 16, 64)}
    for server in servers.values():  # kernels, the native hooks' build
        timed_steps(server, 100, None)
        timed_steps(server, 100, os.path.join(directory, "warm.jsonl.gz"))

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.steps} steps, medians of {args.repeats}")
    print(f"{'graph':<15}{'plain us':>10}{'recorded us':>13}{'ratio':>8}{'in memory us':>14}{'ratio':>8}")
    for label, server in servers.items():
        times: dict[str, list[float]] = {"plain": [], "recorded": [], "in memory": []}
        for repeat in range(args.repeats):
            times["plain"].append(timed_steps(server, args.steps, None))
            trace = os.path.join(directory, f"{label.split()[0]}-{repeat}.jsonl.gz")
            times["recorded"].append(timed_steps(server, args.steps, trace))
            times["in memory"].append(timed_steps(server, args.steps, IN_MEMORY))
        plain, recorded, memory = (statistics.median(times[m]) * 1e6 for m in ("plain", "recorded", "in memory"))
        print(
            f"{label:<15}{plain:>10.1f}{recorded:>13.1f}{recorded / plain:>8.3f}{memory:>14.1f}{memory / plain:>8.3f}"
        )

    server = servers["serving graph"]
    steps = min(args.steps, 300)
    plain_calls = blocking_calls(server, steps, None)
    recorded_calls = blocking_calls(server, steps, os.path.join(directory, "profiled.jsonl.gz"))
    print(f"\nCUDA runtime calls a step ({steps} steps, torch.profiler): calls / CPU us, plain | recorded")
    for key in sorted(set(plain_calls) | set(recorded_calls)):
        p, r = plain_calls.get(key, (0, 0.0)), recorded_calls.get(key, (0, 0.0))
        print(f"  {key[:44]:<44}{p[0] / steps:>7.2f}{p[1]:>8.1f} |{r[0] / steps:>7.2f}{r[1]:>8.1f}")

    for mode, trace in (("plain", None), ("recorded", os.path.join(directory, "cprofile.jsonl.gz"))):
        profiler = cProfile.Profile()
        per_step = timed_steps(server, args.steps, trace, profiler)
        print(f"\ncProfile, {mode} ({per_step * 1e6:.1f} us a step under the profiler): calls and own us a step")
        for where, calls, own in top_functions(profiler, args.steps, args.top):
            print(f"  {where[:70]:<70}{calls:>7.2f}{own:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
