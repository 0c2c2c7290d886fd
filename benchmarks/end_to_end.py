"""``streamrace analyze`` end to end against the reading floor, side by side in one run.

The floor is the least any JSON Lines analysis must spend: a Python process that
decompresses the trace and parses every line with orjson, and does nothing else. Against it,
each as a whole process, in turn (so drift on a shared machine hits all alike):

* **reader**: ``iter_trace`` over the file: parsing, validation and the whole-trace checks;
* **analyze**: ``streamrace analyze TRACE`` with the C++ core, the report written to /dev/null
  (the C++ core reads the file's lines itself: the direct reader, docs/analysis.md);
* **analyze, no orjson**: the same with orjson hidden, so the standard library parses;
* **analyze, freeing before exit**: ``cli.main`` run as a script, which frees what the analysis
  kept object by object before the process exits (the console script leaves it to the exit).

Each is timed by the CPU time the kernel charges the child (user + system; the wall clock,
on a shared machine, also counts other people's work) and printed as a ratio to the floor,
the median run of each and the fastest (the least disturbed by other work);
each runs once untimed first, so that its bytecode is cached as in an installed package.
Each child's peak memory (its largest resident set) is printed too, as a ratio to the trace's
uncompressed size. Then, in this process, ``analyze`` three ways: reading the file directly,
handed the reader's Python events (what the direct reader saves), and on events already in
memory (a list, as the Python API takes one).

The trace is benchmarks/synthetic.py's capture set (36 captures x 60 layers x 40 ops, 978,480
accesses), the one benchmarks/analysis_throughput.py uses. docs/performance.md has our figures.

    python benchmarks/end_to_end.py
    python benchmarks/end_to_end.py --runs 5 --captures 360
    python benchmarks/end_to_end.py --graphs    # each capture's graph too, as recorded traces have
    python benchmarks/end_to_end.py --graphs --recorded    # and the header facts a recorder writes
    python benchmarks/end_to_end.py --before /tmp/before   # another checkout's analyze, in the same rounds
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time

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
# The command line of another checkout (--before): its package ahead of any editable install's
# import finder, which would hand over this checkout's.
ANALYZE_AT = """
import sys
tree = sys.argv.pop(1)
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, tree)
from streamrace.cli import console
console()
"""
BEFORE_ROW = "analyze, the --before checkout"
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


def child_usage(env: dict[str, str], code: str, *args: str) -> tuple[float, float]:
    """CPU seconds (user + system) and peak resident memory (MB) of ``python -c code args``."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # reaped here: Popen must not wait for it again
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def child_cpu(env: dict[str, str], code: str, *args: str) -> float:
    """CPU seconds (user + system) of ``python -c code args``."""
    return child_usage(env, code, *args)[0]


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


def in_process(path: str, runs: int) -> dict[str, float]:
    """CPU seconds of analyze() in this process (medians): reading the file directly, and
    handed the reader's events as Python objects."""
    from streamrace.analysis import analyze
    from streamrace.trace import iter_trace

    os.environ["STREAMRACE_CORE"] = "cpp"
    times: dict[str, list[float]] = {"direct": [], "python events": []}
    for _ in range(runs):
        for way in times:
            start = time.process_time()
            events = iter_trace(path)
            header = next(events)
            analyze(header, events if way == "direct" else (event for event in events))
            times[way].append(time.process_time() - start)
    return {way: statistics.median(values) for way, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--ops", type=int, default=40, help="ops per layer")
    parser.add_argument("--captures", type=int, default=36, help="captured batch sizes (36: ~1M accesses)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each process (the median and fastest)")
    parser.add_argument(
        "--graphs", action="store_true", help="each capture's graph in the trace, as a recorder reads it back"
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="the header facts of today's recorder (format 1.6, host memory on): its whole-trace checks run",
    )
    parser.add_argument(
        "--before",
        metavar="CHECKOUT",
        help="also analyze with another checkout (a directory with a built streamrace package), in the same rounds",
    )
    args = parser.parse_args()
    try:
        import orjson  # noqa: F401  (the floor is defined by it)
    except ImportError:
        sys.exit("the reading floor is measured with orjson: pip install orjson")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "capture_set.jsonl.gz")
        # Written by a child: a child's peak memory, as the kernel counts it, starts from this
        # process's size when it was forked, so this process stays small until they have run.
        write = "import sys, synthetic; synthetic.write_capture_set(sys.argv[1], *map(int, sys.argv[2:]))"
        here = os.path.dirname(os.path.abspath(__file__))
        shape = [str(args.layers), str(args.ops), str(args.captures), str(int(args.graphs)), str(int(args.recorded))]
        subprocess.run([sys.executable, "-c", write, path, *shape], cwd=here, check=True)
        graphs = " (with their graphs)" if args.graphs else ""
        graphs += ", today's recorder header" if args.recorded else ""
        print(f"trace: {args.captures} captures{graphs} x {args.layers} layers x {args.ops} ops, ", end="")
        print(f"{os.path.getsize(path) / 1e6:.1f} MB gzip; {args.runs} runs of each, in turn; CPU seconds\n")
        rows = {
            "floor (gzip + orjson per line)": (FLOOR, path),
            "reader (iter_trace)": (READER, path),
            "streamrace analyze, C++ core": (ANALYZE, "analyze", path, "-o", os.devnull),
            "streamrace analyze, no orjson": (WITHOUT_ORJSON, "analyze", path, "-o", os.devnull),
            "analyze, freeing before exit": (FREEING, "analyze", path, "-o", os.devnull),
        }
        if args.before:
            before = os.path.abspath(args.before)
            rows[BEFORE_ROW] = (ANALYZE_AT, before, "analyze", path, "-o", os.devnull)
        with gzip.open(path, "rb") as trace:
            uncompressed = sum(len(chunk) for chunk in iter(lambda: trace.read(1 << 20), b"")) / 2**20
        env = child_env(os.path.join(tmp, "pycache"))
        for code, *argv in rows.values():  # once untimed, to cache the bytecode
            child_usage(env, code, *argv)
        times: dict[str, list[float]] = {name: [] for name in rows}
        peaks: dict[str, float] = dict.fromkeys(rows, 0.0)
        for _ in range(args.runs):
            for name, (code, *argv) in rows.items():
                seconds, peak = child_usage(env, code, *argv)
                times[name].append(seconds)
                peaks[name] = max(peaks[name], peak)
        core = core_alone(path)
        ways = in_process(path, args.runs)

    median = {name: statistics.median(values) for name, values in times.items()}
    fastest = {name: min(values) for name, values in times.items()}
    floor = median["floor (gzip + orjson per line)"]
    floor_fastest = fastest["floor (gzip + orjson per line)"]
    # The fastest run of each is the one least disturbed by other work on a shared machine.
    print(f"{'':34} {'median':>7} {'x floor':>8}   {'fastest':>7} {'x floor':>8}")
    for name, seconds in median.items():
        quickest = fastest[name]
        print(f"{name:34} {seconds:7.2f} {seconds / floor:7.2f}x   {quickest:7.2f} {quickest / floor_fastest:7.2f}x")
    if BEFORE_ROW in median:
        this = "streamrace analyze, C++ core"
        print(
            f"this checkout / --before: {median[this] / median[BEFORE_ROW]:.2f}x of the medians, "
            f"{fastest[this] / fastest[BEFORE_ROW]:.2f}x of the fastest"
        )

    print(f"\npeak memory (largest resident set; the trace is {uncompressed:.0f} MB uncompressed):")
    for name, peak in peaks.items():
        print(f"  {name:34} {peak:6.0f} MB {peak / uncompressed:6.2f}x")

    print("\nanalyze() in this process (x floor):")
    print(f"  reading the file directly          {ways['direct']:6.2f} s {ways['direct'] / floor:6.2f}x")
    print(f"  handed the reader's Python events  {ways['python events']:6.2f} s {ways['python events'] / floor:6.2f}x")
    print(f"  on events in memory (a list)       {core:6.2f} s {core / floor:6.2f}x")


if __name__ == "__main__":
    main()
