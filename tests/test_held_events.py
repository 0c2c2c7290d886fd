"""The events the C++ core keeps for replays (csrc/held_event.h): a captured op's event is held
as a compact copy and made again only for a finding. The copy must be exact (the same types,
values and key order) or not made at all, so no caller's event is ever changed; and an
analysis of many captures must not keep their Python objects."""

from __future__ import annotations

import copy
import gc
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from analysis_engines import core
from benchmark_traces import synthetic
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrace.analysis import analyze
from streamrace.analysis.core import cpp_available, new_engine
from streamrace.trace import load_trace
from streamrace.trace.io import Trace

pytestmark = pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")

ROOT = Path(__file__).resolve().parents[1]


def _copy(obj: Any) -> tuple[bool, Any]:
    import streamrace._core as native

    return native.held_copy(obj)


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order, floats bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


JSON_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),  # any code point but lone surrogates (those are below)
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(JSON_LIKE)
def test_what_is_copied_is_made_again_exactly(value: Any) -> None:
    copied, made = _copy(value)
    assert copied == (not _has_long_int(value))
    assert _same(value, made) and (copied or made is value), (value, made)


def _has_long_int(value: Any) -> bool:
    """An int beyond 64 bits anywhere in it (kept as it is: as text it would be made again
    under whatever digit limit, sys.set_int_max_str_digits, holds then)."""
    if isinstance(value, dict):
        return any(_has_long_int(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_long_int(v) for v in value)
    return type(value) is int and not -(2**63) <= value < 2**63


@pytest.mark.parametrize(
    "value",
    [
        pytest.param((1, 2), id="tuple"),
        pytest.param({"shape": (1, 8)}, id="tuple inside"),
        pytest.param(
            {"reads": [{"addr": 1, "nbytes": True}, {"addr": 2, "nbytes": 3.5}, {"addr": "\ud800"}]},
            id="lone surrogate after what copies",
        ),
        pytest.param({1: "a"}, id="key not a string"),
        pytest.param({"name": type("Name", (str,), {})("n")}, id="str subclass"),
        pytest.param({"seq": type("Seq", (int,), {})(7)}, id="int subclass"),
        pytest.param(type("Event", (dict,), {})(seq=1), id="dict subclass"),
        pytest.param([object()], id="object"),
        pytest.param("\udfff", id="lone surrogate"),
        pytest.param(2**63, id="int beyond 64 bits"),
        pytest.param({"tag": -(2**63) - 1}, id="negative int beyond 64 bits"),
    ],
)
def test_what_cannot_be_copied_exactly_is_kept_as_it_is(value: Any) -> None:
    copied, made = _copy(value)
    assert not copied and made is value


def test_deep_nesting_is_kept_as_it_is_and_shallower_is_copied() -> None:
    deep: Any = 0
    for _ in range(100):
        deep = [deep]
    assert _copy(deep) == (False, deep) and _copy(deep)[1] is deep
    shallow: Any = {"x": 1}
    for _ in range(60):
        shallow = {"x": shallow}
    copied, made = _copy(shallow)
    assert copied and _same(made, shallow)


def test_edge_values_are_made_again_exactly() -> None:
    values = [2**63 - 1, -(2**63), 0, -1, 1, -0.0, math.nan, math.inf, "é✓𝄞", "\0", "", [], {}]
    for value in values:
        copied, made = _copy({"v": value, "list": [value]})
        assert copied and _same(made, {"v": value, "list": [value]}), value


def test_many_captures_keep_no_python_objects_per_captured_op() -> None:
    """The engine keeps every captured op for replays; before copies, each kept its event's
    dicts and lists (a dozen objects an op). Now only what a finding names is made again."""
    events = synthetic().synthetic_events(layers=4, ops_per_layer=40, captures=6, bug=False)  # loaded first
    gc.collect()
    before = len(gc.get_objects())
    engine = new_engine(core="cpp")
    ops = 0
    for ev in events:
        engine.feed(ev)
        ops += ev["ev"] == "op"
    del ev
    gc.collect()
    kept = len(gc.get_objects()) - before
    assert engine.graphs == 6 and ops > 900
    assert kept < ops / 10, f"{kept} objects kept for {ops} captured ops"


def test_an_uncopyable_captured_event_is_reported_as_it_was_given() -> None:
    """Events handed over in memory may hold what a trace file cannot (a tuple): such an event
    is kept as it is, and its findings are the Python engine's, field for field."""
    trace = load_trace(ROOT / "examples" / "traces" / "gallery_H2_buggy.jsonl.gz")
    events = []
    for ev in trace.events:
        if ev["ev"] == "op":
            ev = {**ev, "reads": [{**r, "tag": ("kept", 1)} for r in ev["reads"]]}
        events.append(ev)
    doctored = Trace(trace.header, events, stacks=trace.stacks)
    results = {}
    for name in ("python", "cpp"):
        with core(name):
            results[name] = analyze(doctored)
    assert results["cpp"].findings and results["cpp"].to_dict() == results["python"].to_dict()
    ranges = [a.range for f in results["cpp"].raw_findings for a in f.accesses if a.access == "read"]
    assert ranges and all(r["tag"] == ("kept", 1) for r in ranges)


CAPTURED_THEN_RACED = [
    {"ev": "stream", "seq": 0, "stream": 1},
    {"ev": "stream", "seq": 0, "stream": 2},
    {"ev": "alloc", "seq": 0, "stream": 1, "addr": 4096, "size": 4096},
    {"ev": "capture_begin", "seq": 1, "stream": 1, "graph": 7},
    {"ev": "op", "op": "w", "seq": 2, "stream": 1, "reads": [], "writes": [{"addr": 4096, "nbytes": 64}]},
    {"ev": "capture_end", "seq": 3, "stream": 1, "graph": 7},
    {"ev": "replay", "seq": 4, "stream": 1, "graph": 7},
    {"ev": "op", "op": "r", "seq": 5, "stream": 2, "reads": [{"addr": 4096, "nbytes": 64}], "writes": []},
]


def _writer_of_the_race(name: str, events: list[dict[str, Any]]) -> Any:
    engine = new_engine(core=name)
    for ev in events:
        engine.feed(ev)
    [race] = engine.detections
    return race.earlier if race.earlier.write else race.later


@pytest.mark.parametrize("name", ["python", "cpp"])
def test_a_records_range_stays_what_it_was_whatever_is_done_to_its_event(name: str) -> None:
    """A copied event's record has no range object of its own: it is found again in the event
    made again, which every record and replay of the op share. A caller trimming that event
    (a report, say) must not change or lose the range, as it does not in the Python engine."""
    writer = _writer_of_the_race(name, copy.deepcopy(CAPTURED_THEN_RACED))
    assert writer.raw == {"addr": 4096, "nbytes": 64}
    writer.event["writes"].clear()
    assert writer.raw == {"addr": 4096, "nbytes": 64}


@pytest.mark.parametrize("name", ["python", "cpp"])
def test_an_int_beyond_64_bits_is_made_again_whatever_the_digit_limit(name: str) -> None:
    """Such an int is kept as it is: as text it would be made again under whatever
    sys.set_int_max_str_digits holds then, and raise."""
    big = 10**5000  # past the default limit of 4300 digits
    events = copy.deepcopy(CAPTURED_THEN_RACED)
    events[4]["tag"] = big
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a caller's own code needed long ints meanwhile
    try:
        writer = _writer_of_the_race(name, events)
    finally:
        sys.set_int_max_str_digits(old)
    assert writer.event["tag"] == big


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_copying_one_large_event_keeps_nothing_of_its_size() -> None:
    script = textwrap.dedent(
        """
        import gc
        import streamrace._core as native
        def resident_mb():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20
        start = resident_mb()
        event = {"ev": "op", "op": "k", "note": "x" * 200_000_000}
        copied, _ = native.held_copy(event, make=False)  # the copy goes at once
        assert copied
        del event, _
        gc.collect()
        print(resident_mb() - start)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 50, "the encoder's buffer kept the size of a 200 MB event"


@pytest.mark.parametrize("kept", [True, False])
def test_events_the_caller_keeps_are_held_as_they_are(kept: bool) -> None:
    """A caller that keeps every event alive (analyze of a list) gains nothing from copies:
    the core then holds the captured events themselves; streamed, it copies them."""
    events = copy.deepcopy(CAPTURED_THEN_RACED)
    engine = new_engine(core="cpp", events_kept=kept)
    engine.run(events)
    [race] = engine.detections
    writer = race.earlier if race.earlier.write else race.later
    assert writer.event == events[4] and (writer.event is events[4]) == kept
    assert writer.raw == events[4]["writes"][0] and (writer.raw is events[4]["writes"][0]) == kept
