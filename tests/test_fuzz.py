"""The fuzzer (tests/trace_fuzz.py): hostile traces made from the committed ones, and structured
ones from hypothesis; every one must get an honest answer, the same from both engines.

The fast slice runs in the normal suite: a fixed seed, a few hundred inputs. The long mode is
for occasional runs (docs/cli.md, "Fuzzing")::

    STREAMRACE_FUZZ=long STREAMRACE_FUZZ_N=20000 STREAMRACE_FUZZ_SEED=7 python -m pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_fuzz import BOUNDARY_INTS, CORES, MUTATORS, Answer, describe, judge, mutants, run, seed_traces

from streamrace.analysis.core import cpp_available
from streamrace.cli import main

LONG = os.environ.get("STREAMRACE_FUZZ") == "long"
COUNT = int(os.environ.get("STREAMRACE_FUZZ_N", "20000" if LONG else "240"))
SEED = int(os.environ.get("STREAMRACE_FUZZ_SEED", str(int(time.time())) if LONG else "12"))
TIMEOUT = 60.0 if LONG else 15.0  # per analysis; the committed traces take milliseconds

needs_cpp = pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built: nothing to compare")


@needs_cpp
def test_mutated_traces_get_honest_answers_from_both_engines(tmp_path: Path) -> None:
    made = mutants(COUNT, SEED, heavy=max(2, COUNT // 100))
    failures, analyses = run(made, tmp_path, TIMEOUT)
    print(f"fuzz: seed {SEED}, {len(made)} inputs, {analyses} analyses ({len(made)} per engine in JSON)")
    assert not failures, f"seed {SEED}: {len(failures)} dishonest answers\n{describe(failures)}"


def test_the_fuzzer_knows_the_index_operands() -> None:
    """Seeds with ops that write through an index (the padded-scatter programs), and index
    ranges among the extreme ranges it writes."""
    seeds = seed_traces()
    assert any('"index":' in line for line in seeds["execution view: padded stale"])
    made = mutants(400, 5)
    assert any(" index: " in m.detail for m in made), "an index range made extreme"


def test_the_fuzzer_knows_the_application_pools() -> None:
    """Seeds with pool_alloc and pool_free events (format 1.4), so mutants of them are judged."""
    seeds = seed_traces()
    manifest = seeds["application pool: manifest"]
    assert any('"ev": "pool_free"' in line or '"ev":"pool_free"' in line for line in manifest)
    assert sum(m.seed.startswith("application pool") for m in mutants(400, 5)) > 0


def test_the_fuzzer_knows_pinned_host_memory() -> None:
    """Seeds with host_alloc, host_free, host_op and host ranges (format 1.5), so mutants of
    them are judged."""
    seeds = seed_traces()
    baked = "\n".join(seeds["pinned memory: baked"])
    for needle in ('"host_alloc"', '"host_free"', '"host_op"', '"host_reads"'):
        assert needle in baked, needle
    assert sum(m.seed.startswith("pinned memory") for m in mutants(400, 5)) > 0


def test_the_fuzzer_knows_graph_event_nodes_and_polling_kernels() -> None:
    """Seeds whose graph nodes name events and whose kernels point into host memory (format
    1.6), so mutants of them are judged."""
    seeds = seed_traces()
    signalled = "\n".join(seeds["event nodes: signalled_copy"])
    for needle in ('"eventrecord"', '"waitevent"', '"host_ranges"'):
        assert needle in signalled, needle
    assert sum(m.seed.startswith("event nodes") for m in mutants(600, 5)) > 0


def test_the_inputs_are_the_same_for_the_same_seed_and_differ_from_their_seeds() -> None:
    first, again = mutants(60, 3), mutants(60, 3)
    assert [m.data for m in first] == [m.data for m in again]
    assert {m.mutator.split("+")[0] for m in first} >= set(MUTATORS) - {"graph-nodes"}
    originals = {name: ("\n".join(lines) + "\n").encode() for name, lines in seed_traces().items()}
    changed = sum(m.data != originals[m.seed] for m in first)
    assert changed >= 50, "nearly every mutation changes its seed"


# -- the judge, on answers made up to be wrong ----------------------------------------------
REPORT = json.dumps({"findings": [{"kind": "data-race"}], "summary": {}})


@pytest.mark.parametrize(
    ("answer", "fmt", "problem"),
    [
        (Answer(1, REPORT, ""), "json", None),
        (Answer(0, json.dumps({"findings": []}), ""), "json", None),
        (Answer(2, "", "streamrace: error: t.jsonl:3: bad\n"), "json", None),
        (Answer(5, "{}", "streamrace: nothing recorded: the trace had no op\n"), "json", None),
        (Answer(1, "a report\n", ""), "text", None),
        (Answer(None, "", "", "worker died: signal 11"), "json", "signal 11"),
        (Answer(None, "", "", "hang: no answer in 15 s"), "json", "hang"),
        (Answer(1, "", "Traceback (most recent call last):\nKeyError: 'x'\n"), "json", "traceback"),
        (Answer(4, "", "streamrace: internal error: KeyError\n"), "json", "internal error"),
        (Answer(3, "", ""), "json", "exit code 3"),
        (Answer(2, "", "streamrace: error: a\nstreamrace: error: b\n"), "json", "exactly one error line"),
        (Answer(2, "partial", "streamrace: error: a\n"), "json", "exactly one error line"),
        (Answer(1, '{"findings": [{"size": NaN}]}', ""), "json", "not strict JSON"),
        (Answer(1, json.dumps({"findings": []}), ""), "json", "exit 1 but 0 findings"),
        (Answer(0, REPORT, "warning\n"), "json", "stderr"),
        (Answer(1, "op \x1b[31m\n", ""), "text", "unescaped"),
        (Answer(5, "{}", ""), "json", "exit 5 without its one line"),
    ],
)
def test_the_judge_refuses_every_dishonest_answer(answer: Answer, fmt: str, problem: str | None) -> None:
    verdict = judge(answer, fmt)
    if problem is None:
        assert verdict is None
    else:
        assert verdict is not None and problem in verdict


# -- a few through the real command ---------------------------------------------------------
def test_a_few_mutated_traces_through_the_real_process(tmp_path: Path) -> None:
    """The console entry point, not only main(): no traceback reaches stderr."""
    for index, mutant in enumerate(mutants(8, SEED + 1)):
        path = tmp_path / f"input-{index}.jsonl"
        path.write_bytes(mutant.data)
        proc = subprocess.run(
            [sys.executable, "-m", "streamrace", "analyze", "--format", "json", str(path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT * 4,
            errors="backslashreplace",
        )
        problem = judge(Answer(proc.returncode, proc.stdout, proc.stderr), "json")
        assert problem is None, f"{mutant.seed} {mutant.mutator} ({mutant.detail}): {problem}"


# -- the property slice: structured traces from hypothesis ----------------------------------
small = st.integers(0, 3)
ints = st.one_of(small, st.sampled_from(BOUNDARY_INTS), st.integers(-(2**64), 2**64))
addrs = st.one_of(st.integers(0, 1 << 16).map(lambda k: 4096 * k), st.sampled_from(BOUNDARY_INTS))
dense = st.fixed_dictionaries({"addr": addrs, "nbytes": st.one_of(st.integers(0, 1 << 20), ints)})
strided = st.integers(1, 3).flatmap(
    lambda n: st.fixed_dictionaries(
        {
            "addr": addrs,
            "shape": st.lists(st.one_of(st.integers(0, 64), ints), min_size=n, max_size=n),
            "stride": st.lists(st.one_of(st.integers(-64, 64), ints), min_size=n, max_size=n),
            "itemsize": st.one_of(st.sampled_from([1, 2, 4, 8]), ints),
        }
    )
)
ranges = st.lists(st.one_of(dense, strided), max_size=3)
streams = st.one_of(st.sampled_from([0, 16, 32, 48]), ints)
events = st.one_of(
    st.fixed_dictionaries({"ev": st.just("stream"), "stream": streams, "name": st.sampled_from(["main", "s", "\x1b"])}),
    st.fixed_dictionaries(
        {"ev": st.just("alloc"), "addr": addrs, "size": st.one_of(st.integers(1, 1 << 20), ints), "stream": streams}
    ),
    st.fixed_dictionaries({"ev": st.just("free"), "addr": addrs, "stream": streams}),
    st.fixed_dictionaries(
        {"ev": st.just("op"), "op": st.just("aten::k"), "stream": streams, "reads": ranges, "writes": ranges}
    ),
    st.fixed_dictionaries({"ev": st.sampled_from(["event_record", "event_wait"]), "event": small, "stream": streams}),
    st.fixed_dictionaries({"ev": st.just("record_stream"), "addr": addrs, "stream": streams}),
    st.fixed_dictionaries({"ev": st.sampled_from(["capture_begin", "capture_end"]), "graph": small, "stream": streams}),
    st.fixed_dictionaries({"ev": st.just("replay"), "graph": st.one_of(small, ints), "stream": streams}),
    st.fixed_dictionaries({"ev": st.sampled_from(["graph_reset", "graph_destroy"]), "graph": st.one_of(small, ints)}),
    st.fixed_dictionaries({"ev": st.just("device_sync")}),
)


class _Slow(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int):
    def fire(signum: int, frame: object) -> None:
        raise _Slow

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _analyze(path: Path, core: str) -> Answer:
    before = os.environ.get("STREAMRACE_CORE")
    os.environ["STREAMRACE_CORE"] = core
    out, err = io.StringIO(), io.StringIO()
    try:
        with _deadline(int(TIMEOUT)), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["analyze", "--format", "json", str(path)])
    except _Slow:
        return Answer(None, "", "", f"hang: no answer in {TIMEOUT:.0f} s")
    finally:
        if before is None:
            del os.environ["STREAMRACE_CORE"]
        else:
            os.environ["STREAMRACE_CORE"] = before
    return Answer(code, out.getvalue(), err.getvalue())


@needs_cpp
@settings(
    max_examples=400 if LONG else 60,
    deadline=None,
    derandomize=not LONG,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(st.lists(events, max_size=25))
def test_structured_traces_get_the_same_honest_answer_from_both_engines(tmp_path: Path, body: list[dict]) -> None:
    lines = [json.dumps({"format": "streamrace-trace", "version": 1})]
    lines += [json.dumps({"seq": seq, **event}) for seq, event in enumerate(body)]
    path = tmp_path / "structured.jsonl"
    path.write_text("\n".join(lines) + "\n")
    answers = {core: _analyze(path, core) for core in CORES}
    for core, answer in answers.items():
        problem = judge(answer, "json")
        assert problem is None, f"{core}: {problem}\n{path.read_text()[:2000]}"
    assert answers["cpp"] == answers["python"], "the engines disagree"
