"""``streamrace analyze`` end to end against the reading floor, side by side in one run.

The floor is the least any JSON Lines analysis must spend: a Python process that
decompresses the trace and parses every line with orjson, and does nothing else. Against it,
each as a whole process, in turn (so drift on a shared machine hits all alike):

* **reader**: ``iter_trace`` over the file: parsing, validation and the whole-trace checks;
* **analyze**: ``streamrace analyze TRACE`` with the C++ core, the report written to /dev/null;
* **analyze, no orjson**: the same with orjson hidden, so the standard library parses;
* **analyze, freeing before exit**: ``cli.main`` run as a script, which frees what the analysis
  kept object by object before the process exits (the console script leaves it to the exit).

Each is timed by the CPU time the kernel charges the child (user + system; the wall clock,
on a shared machine, also counts other people's work) and printed as a ratio to the floor,
the median run of each and the fastest (the least disturbed by other work);
each runs once untimed first, so that its bytecode is cached as in an installed package.
Then, in this process, what the C++ core adds to the reader when the events stream from the
file (as in analyze) and what it costs on events already in memory, to split analyze's time
into the floor, the reader's own work, the core, and the rest (start-up and the report).

The trace is benchmarks/synthetic.py's capture set (36 captures x 60 layers x 40 ops, 978,480
accesses), the one benchmarks/analysis_throughput.py uses. docs/performance.md has our figures.

    python benchmarks/end_to_end.py
    python benchmarks/end_to_end.py --runs 5 --captures 360
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import synthetic

from streamrace.trace.io import write_trace

FLOOR = """
import gzip, sys, orjson
with gzip.open(sys.argv[1], "rb") as lines:
    for line in lines:
        orjson.loads(line)
"""
READER = """
import sys
from streamrace.trace import iter_trace
for event in iter_trace(sys.argv[1]):
    pass
"""
# The command line, as the console script runs it.
ANALYZE = "from streamrace.cli import console\nconsole()"
WITHOUT_ORJSON = "import sys\nsys.modules['orjson'] = None  # import orjson now fails\n" + ANALYZE
# The same command line run in-process, which frees what the analysis kept before the process
# exits (streamrace/short_lived.py says why the console does not).
FREEING = "import sys\nfrom streamrace.cli import main\nsys.exit(main(sys.argv[1:]))"


def child_env(pycache: str) -> dict[str, str]:
    """The children's environment: the C++ core, and Python's bytecode cached (in ``pycache``)
    as an installed package has it, even where the environment says not to write it: else
    every run of analyze compiles streamrace's modules again, which the floor (orjson and the
    standard library, compiled at install) never pays."""
    env = {**os.environ, "STREAMRACE_CORE": "cpp", "PYTHONPYCACHEPREFIX": pycache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def child_cpu(env: dict[str, str], code: str, *args: str) -> float:
    """CPU seconds (user + system) of ``python -c code args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, env=env, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def core_alone(path: str) -> float:
    """CPU seconds of the C++ core's ``analyze`` on the trace's events already in memory."""
    import orjson

    from streamrace.analysis import analyze

    with gzip.open(path, "rb") as lines:
        header, *events = [orjson.loads(line) for line in lines]
    gc.collect()
    gc.freeze()  # the events are held in a list: keep the collector from walking them
    os.environ["STREAMRACE_CORE"] = "cpp"
    start = time.process_time()
    analyze(header, events)
    seconds = time.process_time() - start
    gc.unfreeze()
    return seconds


def core_streamed(path: str, runs: int) -> float:
    """CPU seconds the C++ core adds when the events stream from the file, as in analyze:
    analyze() over iter_trace minus iter_trace alone, in this process (medians)."""
    from streamrace.analysis import analyze
    from streamrace.trace import iter_trace

    os.environ["STREAMRACE_CORE"] = "cpp"
    both, alone = [], []
    for _ in range(runs):
        start = time.process_time()
        events = iter_trace(path)
        analyze(next(events), events)
        both.append(time.process_time() - start)
        start = time.process_time()
        for _event in iter_trace(path):
            pass
        alone.append(time.process_time() - start)
    return statistics.median(both) - statistics.median(alone)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--ops", type=int, default=40, help="ops per layer")
    parser.add_argument("--captures", type=int, default=36, help="captured batch sizes (36: ~1M accesses)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each process (the median and fastest)")
    args = parser.parse_args()
    try:
        import orjson  # noqa: F401  (the floor is defined by it)
    except ImportError:
        sys.exit("the reading floor is measured with orjson: pip install orjson")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "capture_set.jsonl.gz")
        write_trace(path, synthetic.header(), synthetic.synthetic_events(args.layers, args.ops, args.captures))
        print(f"trace: {args.captures} captures x {args.layers} layers x {args.ops} ops, ", end="")
        print(f"{os.path.getsize(path) / 1e6:.1f} MB gzip; {args.runs} runs of each, in turn; CPU seconds\n")
        rows = {
            "floor (gzip + orjson per line)": (FLOOR, path),
            "reader (iter_trace)": (READER, path),
            "streamrace analyze, C++ core": (ANALYZE, "analyze", path, "-o", os.devnull),
            "streamrace analyze, no orjson": (WITHOUT_ORJSON, "analyze", path, "-o", os.devnull),
            "analyze, freeing before exit": (FREEING, "analyze", path, "-o", os.devnull),
        }
        env = child_env(os.path.join(tmp, "pycache"))
        for code, *argv in rows.values():  # once untimed, to cache the bytecode
            child_cpu(env, code, *argv)
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.runs):
            for name, (code, *argv) in rows.items():
                times[name].append(child_cpu(env, code, *argv))
        core = core_alone(path)
        streamed = core_streamed(path, args.runs)

    median = {name: statistics.median(values) for name, values in times.items()}
    fastest = {name: min(values) for name, values in times.items()}
    floor = median["floor (gzip + orjson per line)"]
    floor_fastest = fastest["floor (gzip + orjson per line)"]
    # The fastest run of each is the one least disturbed by other work on a shared machine.
    print(f"{'':34} {'median':>7} {'x floor':>8}   {'fastest':>7} {'x floor':>8}")
    for name, seconds in median.items():
        quickest = fastest[name]
        print(f"{name:34} {seconds:7.2f} {seconds / floor:7.2f}x   {quickest:7.2f} {quickest / floor_fastest:7.2f}x")

    analyze = median["streamrace analyze, C++ core"]
    reader = median["reader (iter_trace)"]
    rest = analyze - reader - streamed
    print("\nwhere analyze's time goes (x floor):")
    print(f"  reading floor                      {floor:6.2f} s {1.0:6.2f}x")
    print(f"  the reader's own work              {reader - floor:6.2f} s {(reader - floor) / floor:6.2f}x")
    print(f"  C++ core, streamed from the file   {streamed:6.2f} s {streamed / floor:6.2f}x")
    print(f"    of which on events in memory     {core:6.2f} s {core / floor:6.2f}x")
    print(f"  the rest (start-up, report)        {rest:6.2f} s {rest / floor:6.2f}x")


if __name__ == "__main__":
    main()
