"""Analysis throughput: loading a trace, the pure-Python engine and the C++ core, side by side.

A synthetic capture set shaped like a serving engine's (benchmarks/synthetic.py: 60 layers of
40 ops, 36 batch sizes, three streams forking and joining in every layer, blocks reused the
way the caching allocator reuses them; about a million accesses) is written to a gzip trace,
then timed in this one process:

* loading alone: ``iter_trace`` over the file (JSON parsing and validation, no analysis);
* the Python engine and the C++ core on the events already in memory (``analyze(header,
  events)``, findings and deduplication included), and both cores' findings compared;
* what ``streamrace analyze`` does, with either engine: the events streamed from the file.

Printed: accesses per second and the ratios. ``--fan-out N`` times instead an eager trace of
tens of streams forking and joining every step (``synthetic.fan_out_events``), where the
clocks carry more of the cost. ``--ten-million`` adds a ten-million-access trace analysed
while streaming from its file in a fresh process, which reports its peak resident memory (a
few minutes, mostly writing and parsing JSON). Absolute figures only mean something on the
machine that ran it; docs/performance.md has ours.

    python benchmarks/analysis_throughput.py
    python benchmarks/analysis_throughput.py --fan-out 32
    python benchmarks/analysis_throughput.py --ten-million
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import synthetic

from streamrace.analysis import AnalysisResult, analyze
from streamrace.analysis.core import CORE_ENV, cpp_available
from streamrace.trace import iter_trace
from streamrace.trace.io import write_trace

CAPTURES_PER_MILLION = 36  # the default capture set is about a million accesses


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` runs, and the last run's result."""
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def analyze_with(core: str, header: dict[str, Any], events: Any) -> AnalysisResult:
    os.environ[CORE_ENV] = core
    return analyze(header, events)


def streamed(path: str) -> Iterator[dict[str, Any]]:
    """The events of a trace file, one at a time (the header skipped)."""
    items = iter_trace(path)
    next(items)
    return items


def write(path: str, layers: int, ops: int, captures: int) -> None:
    write_trace(path, synthetic.header(), synthetic.synthetic_events(layers, ops, captures))


def throughput(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "capture_set.jsonl.gz")
        if args.fan_out:
            write_trace(path, synthetic.header(), synthetic.fan_out_events(args.fan_out, args.steps))
            shape = f"{args.steps} eager steps forked to {args.fan_out} side streams"
        else:
            write(path, args.layers, args.ops, args.captures)
            shape = f"{args.captures} captures x {args.layers} layers x {args.ops} ops"
        size = os.path.getsize(path)

        load_time, events = timed(lambda: list(iter_trace(path)), args.repeats)
        header, events = events[0], events[1:]
        accesses = sum(len(ev["reads"]) + len(ev["writes"]) for ev in events if ev["ev"] == "op")
        print(f"trace: {shape}; {len(events):,} events, {accesses:,} accesses; {size / 1e6:.1f} MB gzip")
        # The events are held in a list here; freezing them keeps the garbage collector from
        # walking them during the timings, as it would not when they stream from the file.
        gc.freeze()
        rows = [("load only (iter_trace, gzip)", load_time)]
        python_time, reference = timed(lambda: analyze_with("python", header, events), args.python_repeats)
        rows.append(("analysis, pure Python", python_time))
        python_stream, _ = timed(lambda: analyze_with("python", header, streamed(path)), args.python_repeats)
        rows.append(("load + analysis, pure Python (streamed)", python_stream))
        if cpp_available():
            cpp_time, fast = timed(lambda: analyze_with("cpp", header, events), args.repeats)
            rows.append(("analysis, C++ core", cpp_time))
            stream_time, _ = timed(lambda: analyze_with("cpp", header, streamed(path)), args.repeats)
            rows.append(("load + analysis, C++ core (streamed)", stream_time))
        gc.unfreeze()

    print(f"\n{'':40} {'seconds':>9} {'accesses/s':>13}")
    for name, seconds in rows:
        print(f"{name:40} {seconds:9.3f} {accesses / seconds:13,.0f}")
    findings = reference.summary["findings"]
    print(f"\nfindings: {findings} ({len(reference.raw_findings)} raw)")
    if not cpp_available():
        print("C++ core not built: no C++ figures (pip install -e . with a C++ compiler)")
        return
    same = json.dumps(fast.to_dict()) == json.dumps(reference.to_dict())
    print(f"C++ and Python findings identical: {'yes' if same else 'NO'}")
    print(f"C++ core / pure Python: {python_time / cpp_time:.1f}x")
    print(f"C++ core / loading alone: {load_time / cpp_time:.1f}x")
    print(f"streamed from the file, C++ core / pure Python: {python_stream / stream_time:.1f}x")


def ten_million(args: argparse.Namespace) -> None:
    captures = CAPTURES_PER_MILLION * 10
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ten_million.jsonl.gz")
        start = time.perf_counter()
        write(path, args.layers, args.ops, captures)
        print(
            f"\nten-million run: {captures} captures written in {time.perf_counter() - start:.0f} s, "
            f"{os.path.getsize(path) / 1e6:.0f} MB gzip"
        )
        # A fresh process, so that its peak memory is the analysis's alone.
        child = [sys.executable, __file__, "--stream-child", path, "--core", args.core]
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    print(
        f"streamed analysis ({report['core']}): {report['accesses']:,} accesses in {report['seconds']:.0f} s "
        f"({report['accesses'] / report['seconds']:,.0f}/s, loading included), "
        f"{report['findings']} findings ({report['raw_findings']:,} raw); "
        f"peak memory {report['max_rss_mb']:.0f} MB"
    )


def peak_rss_kb() -> int:
    """This process's peak resident memory. Linux's VmHWM belongs to the process image, while
    ru_maxrss also keeps the parent's peak from before exec (subprocess may vfork)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux


def stream_child(path: str, core: str) -> None:
    """Analyse ``path`` streaming from the file; print one JSON line with the figures."""
    start = time.perf_counter()
    result = analyze_with(core, synthetic.header(), streamed(path))
    seconds = time.perf_counter() - start
    report = {
        "core": core,
        "accesses": result.summary["accesses"],
        "findings": len(result.findings),
        "raw_findings": len(result.raw_findings),
        "seconds": seconds,
        "max_rss_mb": peak_rss_kb() / 1024,
    }
    print(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--ops", type=int, default=40, help="ops per layer")
    parser.add_argument("--captures", type=int, default=CAPTURES_PER_MILLION, help="captured batch sizes")
    parser.add_argument("--fan-out", type=int, metavar="N", help="time the eager fan-out to N side streams instead")
    parser.add_argument("--steps", type=int, default=2000, help="steps of the fan-out trace")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each fast timing (median)")
    parser.add_argument("--python-repeats", type=int, default=1, help="runs of the pure-Python analysis")
    parser.add_argument("--ten-million", action="store_true", help="also the 10M-access streaming run")
    parser.add_argument("--core", choices=["cpp", "python"], default="cpp", help="the core of the 10M run")
    parser.add_argument("--stream-child", metavar="TRACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream_child:
        stream_child(args.stream_child, args.core)
        return
    throughput(args)
    if args.ten_million:
        ten_million(args)


if __name__ == "__main__":
    main()
