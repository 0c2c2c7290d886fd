"""PyTorch's own CUDA-graph tests, plain and under ``pytest --streamrace``, side by side.

The outside measure of false positives and perturbation (docs/peer-suites.md): a test that
passes plain and fails under streamrace is a finding to explain or a perturbation to fix.
PyTorch's test files are not in this repository (they are PyTorch's code); give their paths::

    python benchmarks/peer_suites.py SUITE.py [SUITE.py ...] [--traces DIR] [--json OUT]
        [--rounds N] [-- PYTEST ARGS]

Each round runs every suite plain, then under ``--streamrace`` (the order alternates between
rounds, so neither always runs on a warmer machine), with ``--junitxml`` for each test's
verdict. It prints, per suite: items, tests that captured a graph, tests with findings, the
verdicts that changed, and wall time plain and recorded with their ratio (the median over
rounds), and the time recording added to each test (junit's times; the tests it costs most
first). ``--traces DIR`` keeps every recorded test's trace under DIR/<suite>/ (the plugin's
``--streamrace-traces``) for ``streamrace analyze``.

Then the tests whose verdict changed run again by themselves, one after another in one
process (none of the PYTEST ARGS, no ``PYTEST_ADDOPTS``: no workers beside them, no other test
before them), plain and recorded: a change that does not come back there came from the run
around it (a test measuring the device's free memory while seven workers share it, another
test's garbage) rather than from recording that test. ``--no-recheck`` skips this.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field

_SUMMARY = re.compile(r"streamrace: (\d+) tests? recorded, (\d+) with CUDA graph captures, (\d+) with findings")


@dataclass
class Run:
    """One pytest run of one suite."""

    seconds: float
    verdicts: dict[str, str]  # test id -> passed, failed, error, skipped
    messages: dict[str, str]  # test id -> the first line of its failure
    durations: dict[str, float] = field(default_factory=dict)  # test id -> seconds, as junit says
    recorded: int = 0
    captured: int = 0
    with_findings: int = 0
    exit_code: int = 0


@dataclass
class SuiteResult:
    suite: str
    plain: list[Run] = field(default_factory=list)
    recorded: list[Run] = field(default_factory=list)
    # test -> (plain verdict, recorded verdict) when the changed tests ran by themselves
    alone: dict[str, tuple[str, str]] = field(default_factory=dict)

    def added_time(self) -> list[tuple[str, float]]:
        """(test, seconds recording added to it: the medians' difference), most first."""
        plain, recorded = _median_durations(self.plain), _median_durations(self.recorded)
        added = [(t, recorded[t] - plain[t]) for t in recorded if t in plain]
        return sorted(added, key=lambda item: -item[1])

    def changes(self) -> list[tuple[str, str, str, str]]:
        """(test, plain verdict, recorded verdict, recorded failure) for each changed test."""
        plain, recorded = self.plain[-1], self.recorded[-1]
        return [
            (test, plain.verdicts.get(test, "absent"), verdict, recorded.messages.get(test, ""))
            for test, verdict in sorted(recorded.verdicts.items())
            if verdict != plain.verdicts.get(test, "absent")
        ]


def node_id(suite: str, test: str) -> str:
    """pytest's node id, relative to the suite's folder, of a test named as junit names it
    (``classname::name``; the classname is the module's dotted path from the rootdir, then
    its classes)."""
    classname, name = test.split("::", 1)
    module = os.path.splitext(os.path.basename(suite))[0]
    parts = classname.split(".")
    classes = parts[len(parts) - parts[::-1].index(module) :] if module in parts else []
    return "::".join([os.path.basename(suite), *classes, name])


def _median_durations(runs: list[Run]) -> dict[str, float]:
    tests = set().union(*(r.durations for r in runs)) if runs else set()
    return {t: statistics.median(r.durations[t] for r in runs if t in r.durations) for t in tests}


def _verdicts(junit: str) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
    verdicts: dict[str, str] = {}
    messages: dict[str, str] = {}
    durations: dict[str, float] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        durations[test] = durations.get(test, 0.0) + float(case.get("time") or 0.0)
        verdict = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                verdict = "failed" if child.tag == "failure" else "error"
                text = (child.get("message") or child.text or "").strip()
                messages.setdefault(test, text.splitlines()[0][:300] if text else "")
            elif child.tag == "skipped":
                verdict = "skipped"
        if verdicts.get(test) not in ("failed", "error"):  # a teardown error outranks the call's pass
            verdicts[test] = verdict
    return verdicts, messages, durations


def run_suite(
    suite: str,
    pytest_args: list[str],
    streamrace: bool,
    traces: str | None,
    log: str | None,
    only: list[str] | None = None,
) -> Run:
    """One pytest run of the suite, or of the tests ``only`` names (node ids), those by
    themselves: without ``PYTEST_ADDOPTS`` either (``-n auto`` there would spread them over
    workers)."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = os.path.join(scratch, "junit.xml")
        targets = only if only is not None else [suite]
        command = [
            sys.executable,
            "-m",
            "pytest",
            *targets,
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfE",
            f"--junitxml={junit}",
        ]
        if streamrace:
            command.append("--streamrace")
            if traces:
                command.append(f"--streamrace-traces={traces}")
        command += pytest_args
        start = time.perf_counter()
        env = dict(os.environ)
        if only is not None:
            env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(
            command, cwd=os.path.dirname(os.path.abspath(suite)), capture_output=True, text=True, env=env
        )
        seconds = time.perf_counter() - start
        if log:
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"\n===== {' '.join(command)}: exit {done.returncode}, {seconds:.1f} s\n")
                out.write(done.stdout[-200_000:])
                out.write(done.stderr[-20_000:])
        verdicts, messages, durations = _verdicts(junit) if os.path.exists(junit) else ({}, {}, {})
    run = Run(seconds, verdicts, messages, durations, exit_code=done.returncode)
    counts = _SUMMARY.findall(done.stdout)
    if counts:
        run.recorded, run.captured, run.with_findings = (int(n) for n in counts[-1])
    return run


def recheck(result: SuiteResult, log: str | None) -> None:
    """The tests whose verdict changed, again by themselves, plain then recorded."""
    changed = [test for test, *_ in result.changes()]
    if not changed:
        return
    only = [node_id(result.suite, test) for test in changed]
    plain, recorded = (run_suite(result.suite, [], streamrace, None, log, only) for streamrace in (False, True))
    for test in changed:
        result.alone[test] = (plain.verdicts.get(test, "absent"), recorded.verdicts.get(test, "absent"))
    print(f"{os.path.basename(result.suite)}: the {len(changed)} changed tests again by themselves", flush=True)


def report(results: list[SuiteResult]) -> str:
    lines = [
        "| suite | items | capturing | with findings | verdict changes | plain s | streamrace s | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        plain = statistics.median(r.seconds for r in result.plain)
        recorded = statistics.median(r.seconds for r in result.recorded)
        last = result.recorded[-1]
        lines.append(
            f"| {os.path.basename(result.suite)} | {len(last.verdicts)} | {last.captured} | {last.with_findings} "
            f"| {len(result.changes())} | {plain:.1f} | {recorded:.1f} | {recorded / plain:.2f}x |"
        )
    for result in results:
        for test, before, after, message in result.changes():
            alone = ""
            if test in result.alone:
                plain, recorded = result.alone[test]
                again = "the change comes back" if (plain, recorded) == (before, after) else "it does not come back"
                alone = f" [by itself: {plain} plain, {recorded} under streamrace; {again}]"
            lines.append(
                f"{os.path.basename(result.suite)}: {test}: {before} plain, {after} under streamrace: {message}{alone}"
            )
    for result in results:
        added = result.added_time()
        if added:
            total = sum(extra for _, extra in added)
            lines.append(
                f"{os.path.basename(result.suite)}: recording added {total:.1f} s over {len(added)} tests "
                f"({total / len(added) * 1000:.0f} ms a test); the most:"
            )
            lines += [f"  +{extra * 1000:6.0f} ms  {test}" for test, extra in added[:8]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        pytest_args = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", nargs="+", help="PyTorch test files (e.g. test_cuda_graphs.py)")
    parser.add_argument("--traces", help="keep every recorded test's trace under DIR/<suite>/")
    parser.add_argument("--json", help="write the runs (verdicts, times, counts) here")
    parser.add_argument("--log", help="append each pytest run's output here")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of plain and recorded runs (default 1)")
    parser.add_argument(
        "--streamrace-only", action="store_true", help="only the recorded runs (no verdict changes, no ratio)"
    )
    parser.add_argument(
        "--no-recheck", action="store_true", help="do not run the tests whose verdict changed again by themselves"
    )
    args = parser.parse_args(argv)
    results = [SuiteResult(os.path.abspath(s)) for s in args.suites]
    for round_index in range(args.rounds):
        for result in results:
            traces = None
            if args.traces:
                traces = os.path.abspath(os.path.join(args.traces, os.path.splitext(os.path.basename(result.suite))[0]))
            order: tuple[bool, ...] = (False, True) if round_index % 2 == 0 else (True, False)
            if args.streamrace_only:
                order = (True,)
            for streamrace in order:
                run = run_suite(result.suite, pytest_args, streamrace, traces, args.log)
                (result.recorded if streamrace else result.plain).append(run)
                kind = "streamrace" if streamrace else "plain"
                print(
                    f"round {round_index + 1} {os.path.basename(result.suite)} {kind}: {run.seconds:.1f} s", flush=True
                )
    if not args.streamrace_only and not args.no_recheck:
        for result in results:
            recheck(result, args.log)
    if not args.streamrace_only:
        print(report(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in results], out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
