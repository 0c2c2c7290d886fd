"""Two checkouts of streamrace side by side (before_after.py, drain_cost.py): one worker
process per checkout, each importing that checkout's package, asked one request at a time in
turn so that both see the same load on a shared machine.

A worker reads one JSON request a line and answers each with one JSON line (``serve``); the
parent starts the workers, waits until each says it is ready, and alternates its requests
between them (``Checkouts``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

LABELS = ("before", "after")


def serve(answer: Callable[[Any], dict[str, Any]]) -> None:
    """The worker's side: ready, then one answer per request read, until stdin closes."""
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), flush=True)


class Checkouts:
    """The two workers: ``script`` run with ``worker_args`` and, on PYTHONPATH,
    ``paths(checkout)`` (the checkout, and whatever else its worker imports)."""

    def __init__(
        self,
        script: str,
        trees: Sequence[str],
        paths: Callable[[str], list[str]],
        worker_args: Sequence[str] = ("--worker",),
    ) -> None:
        self._workers: dict[str, subprocess.Popen[bytes]] = {}
        for label, tree in zip(LABELS, trees, strict=True):
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths(os.path.abspath(tree))))
            self._workers[label] = subprocess.Popen(
                [sys.executable, script, *worker_args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
        for proc in self._workers.values():
            assert json.loads(proc.stdout.readline())["ready"]

    def ask(self, label: str, request: Any) -> dict[str, Any]:
        proc = self._workers[label]
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    def alternate(
        self, request: Any, rounds: int, measure: Callable[[dict[str, Any]], float]
    ) -> dict[str, list[float]]:
        """``rounds`` answers of each worker to ``request``, in turn, each made a number by
        ``measure``."""
        times: dict[str, list[float]] = {label: [] for label in LABELS}
        for _ in range(rounds):
            for label in LABELS:
                times[label].append(measure(self.ask(label, request)))
        return times

    def close(self) -> None:
        for proc in self._workers.values():
            proc.stdin.close()
            proc.wait()


def fastest_and_medians(times: dict[str, list[float]]) -> tuple[float, float, float, float]:
    """(before's fastest, before's median, after's fastest, after's median)."""
    before, after = times["before"], times["after"]
    return min(before), statistics.median(before), min(after), statistics.median(after)


def checkout_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser with the two checkouts and the hidden ``--worker`` flag."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("before", nargs="?", help="checkout (directory with the streamrace package) before")
    parser.add_argument("after", nargs="?", help="checkout after")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def require_checkouts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not (args.before and args.after):
        parser.error("give the two checkouts, before and after")


def print_side_by_side(
    checkouts: Checkouts,
    requests: Iterable[Any],
    rounds: int,
    measure: Callable[[dict[str, Any]], float],
    unit: str,
    width: int,
    digits: int,
    ratio_digits: int,
) -> None:
    """A row per request (named by it): each checkout's fastest and median of ``rounds``
    alternating answers, made numbers by ``measure``, and after / before of the fastest."""
    print(f"{unit:{width}} {'before (min/median)':>21} {'after (min/median)':>21} {'after/before':>13}")
    for request in requests:
        before, before_median, after, after_median = fastest_and_medians(checkouts.alternate(request, rounds, measure))
        print(
            f"{request:{width}} {before:10.{digits}f} /{before_median:8.{digits}f} {after:10.{digits}f} "
            f"/{after_median:8.{digits}f} {after / before:12.{ratio_digits}f}x"
        )
