"""``streamrace analyze`` of many traces, one at a time against ``--jobs``, side by side.

A fleet's traces (one per rank, or one per test under ``pytest --streamrace-traces``) are
analysed in one command. ``--jobs N`` gives each trace a process of its own, up to N; the
report is the serial run's, byte for byte (checked here on every round). The traces are
benchmarks/synthetic.py's capture set at a size of a rank's decode step, written once to a
temporary directory; each configuration runs as a whole process, in turn, and the wall
clock is what it saves (the CPU time only grows: each worker starts its own interpreter).

    python benchmarks/many_traces.py                 # 8 traces, --jobs 0 (one per CPU)
    python benchmarks/many_traces.py --traces 16 --jobs 4 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import synthetic

from streamrace.trace.io import write_trace


def analyze(paths: list[str], jobs: int, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", *paths, "--format", "json", "--jobs", str(jobs)],
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"analyze --jobs {jobs} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=8, help="how many traces (default 8)")
    parser.add_argument("--captures", type=int, default=6, help="captures per trace (default 6)")
    parser.add_argument("--jobs", type=int, default=0, help="--jobs for the parallel run (default 0: one per CPU)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both (default 3)")
    args = parser.parse_args()
    env = {**os.environ, "STREAMRACE_CORE": os.environ.get("STREAMRACE_CORE", "cpp")}
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for index in range(args.traces):
            path = os.path.join(directory, f"rank{index}.jsonl.gz")
            write_trace(path, synthetic.header(), synthetic.synthetic_events(captures=args.captures))
            paths.append(path)
        serial_times, parallel_times = [], []
        for round_index in range(args.rounds):
            order = (1, args.jobs) if round_index % 2 == 0 else (args.jobs, 1)
            outputs = {}
            for jobs in order:
                seconds, outputs[jobs] = analyze(paths, jobs, env)
                (serial_times if jobs == 1 else parallel_times).append(seconds)
            if outputs[1] != outputs[args.jobs]:
                raise SystemExit("the --jobs report differs from the serial one")
    serial, parallel = statistics.median(serial_times), statistics.median(parallel_times)
    cpus = os.cpu_count() or 1
    print(f"{args.traces} traces of {args.captures} captures, {cpus} CPUs, {args.rounds} rounds (median wall time)")
    print(f"  one at a time   {serial:7.2f} s")
    print(f"  --jobs {args.jobs:<8} {parallel:7.2f} s   {serial / parallel:.2f}x faster, the same report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
