"""What the record_*_fixtures.py scripts share: record each scenario of an example buggy and
fixed, one trace each, and print what streamrace found beside what the run itself saw."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import streamrace
from streamrace.analysis.findings import Finding


def kind_and_count(finding: Finding) -> tuple[Any, ...]:
    return (finding.kind, finding.count)


def record_buggy_and_fixed(
    out_dir: str,
    runs: Mapping[str, Callable[[bool], Any]],
    *,
    rounds: Callable[[Any], int] = lambda outcome: outcome.rounds,
    shown: Callable[[Finding], tuple[Any, ...]] = kind_and_count,
    premise: bool = True,
    **watch_options: Any,
) -> None:
    """Write ``<name>_{buggy,fixed}.jsonl.gz`` under ``out_dir`` for each ``runs[name]`` (called
    with ``fixed``; it returns the example's outcome: ``corrupted`` of ``rounds(outcome)``, and
    its ``premise``), recorded under ``streamrace.watch(**watch_options)``. Each trace's line:
    its name, ``shown`` of each finding, the corruption, the premise (unless ``premise`` is
    False) and the session's errors."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, run in runs.items():
        for fixed in (False, True):
            trace = f"{name}_{'fixed' if fixed else 'buggy'}"
            with streamrace.watch(trace=str(out / f"{trace}.jsonl.gz"), **watch_options) as session:
                outcome = run(fixed)
            found = [shown(f) for f in session.findings]
            seen = [f"corrupted {outcome.corrupted}/{rounds(outcome)}"]
            if premise:
                seen.append(f"premise {outcome.premise}")
            print(trace, found, *seen, session.errors)
