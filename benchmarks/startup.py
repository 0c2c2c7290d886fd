"""Start-up: ``streamrace --help`` against ``python -c pass``, side by side in one run.

Both are run as whole processes, in turn (so drift on a shared machine hits both alike), and
timed by the CPU time the kernel charges the child (user + system) as well as by the wall
clock; the medians and their ratio are printed. Also timed: ``streamrace analyze`` of the
smallest committed trace, which imports the analysis and the reporters but not the graph
check. The figures are in docs/performance.md (start-up).

    python benchmarks/startup.py
    python benchmarks/startup.py --runs 40
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL_TRACE = REPO / "examples" / "traces" / "handbuilt_freed_before_join.jsonl"


def streamrace_command() -> list[str]:
    """The console script next to this interpreter, as a user runs it; else its equivalent."""
    script = Path(sys.executable).parent / "streamrace"
    if script.exists():
        return [str(script)]
    found = shutil.which("streamrace")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from streamrace.cli import main; sys.exit(main())"]


def run_once(command: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``command``, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (medians are printed)")
    args = parser.parse_args()
    streamrace = streamrace_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "streamrace --help": [*streamrace, "--help"],
        "streamrace analyze (small trace)": [*streamrace, "analyze", str(SMALL_TRACE), "-o", os.devnull],
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for command in commands.values():  # one warm-up each: the page cache, .pyc files
        run_once(command)
    for _ in range(args.runs):
        for name, command in commands.items():
            times[name].append(run_once(command))

    base_cpu = statistics.median(cpu for cpu, _ in times["python -c pass"])
    base_wall = statistics.median(wall for _, wall in times["python -c pass"])
    print(f"{args.runs} runs each, in turn; medians\n")
    print(f"{'':34} {'CPU ms':>8} {'ratio':>7} {'wall ms':>9} {'ratio':>7}")
    for name in commands:
        cpu = statistics.median(c for c, _ in times[name])
        wall = statistics.median(w for _, w in times[name])
        print(f"{name:34} {cpu * 1e3:8.1f} {cpu / base_cpu:6.2f}x {wall * 1e3:9.1f} {wall / base_wall:6.2f}x")


if __name__ == "__main__":
    main()
