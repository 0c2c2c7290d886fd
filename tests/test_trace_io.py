"""Trace files: write/read round trips and the loader's validation, each error naming its line."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrace.errors import TraceError
from streamrace.trace import FORMAT_MINOR, FORMAT_VERSION, iter_trace, load_trace, make_header, write_trace
from streamrace.trace import io as trace_io
from streamrace.trace.builder import TraceBuilder
from streamrace.trace.events import MAX_STREAMS, UnknownEvent, fast_checks, validate_event


def _race_builder() -> TraceBuilder:
    tb = TraceBuilder(torch="2.13.0")
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(4096, main, at="model.py:10 in forward")
        tb.op("aten::fill_", main, writes=[tb.span(x, 4096)], at="model.py:11 in forward")
        tb.wait_stream(side, main, at="model.py:12 in forward")
        tb.op("aten::sum", side, reads=[tb.view(x, [32, 16], [64, 2], itemsize=4, offset=1)], at="model.py:13")
        tb.free(x, at="model.py:14 in forward")
    return tb


def _write_lines(path: Path, lines: list[Any]) -> Path:
    """Write JSON lines as given (objects are dumped, strings written verbatim)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> TraceError:
    with pytest.raises(TraceError) as info:
        list(iter_trace(path))
    return info.value


HEADER = make_header()


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    tb = _race_builder()
    path = tmp_path / name
    tb.write(str(path))

    trace = load_trace(path)

    assert trace.header == tb.header
    assert trace.header["version"] == FORMAT_VERSION
    assert trace.events == tb.events
    assert trace.path == str(path)
    assert trace.stacks[1] == [["model.py", 10, "forward"]]
    if name.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as raw:
            assert json.loads(raw.readline()) == tb.header


def test_gzip_is_detected_by_content_not_name(tmp_path: Path) -> None:
    tb = _race_builder()
    packed = tmp_path / "t.gz"
    tb.write(str(packed))
    renamed = packed.rename(tmp_path / "no-suffix.jsonl")

    assert load_trace(renamed).events == tb.events


def test_iter_trace_streams_header_then_events(tmp_path: Path) -> None:
    tb = _race_builder()
    path = tmp_path / "t.jsonl"
    write_trace(path, tb.header, iter(tb.events))

    items = iter_trace(path)

    assert next(items) == tb.header
    assert next(items) == tb.events[0]


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, "", {"seq": 0, "ev": "stream", "stream": 1}, "   "])

    assert [ev["seq"] for ev in load_trace(path).events] == [0]


def test_blank_lines_never_reach_the_reference_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip of a header and a million newlines is a few kilobytes: each blank line is
    skipped on the fast path, not parsed again by the reference (12x an event's cost)."""
    parsed: list[bytes] = []
    reference = trace_io._reference_parse

    def counted(line: bytes) -> Any:
        parsed.append(line)
        return reference(line)

    monkeypatch.setattr(trace_io, "_reference_parse", counted)
    lines: list[Any] = [HEADER, *([""] * 1000), {"seq": 0, "ev": "stream", "stream": 1}, *(["  \t"] * 1000)]
    path = _write_lines(tmp_path / "t.jsonl", lines)
    assert [ev["seq"] for ev in load_trace(path).events] == [0]
    assert len(parsed) <= 1, "the header alone goes to the reference path"


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, {"seq": 0, "ev": "stream", "stream": 1}, "{not json"])

    err = _error(path)

    assert (err.path, err.line) == (str(path), 3)
    assert "invalid JSON" in err.problem
    assert str(err).startswith(f"{path}:3: ")


def test_invalid_event_names_the_line_and_the_field(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, {"seq": 0, "ev": "alloc", "addr": 4096, "stream": 1}])

    err = _error(path)

    assert err.line == 2
    assert err.problem == "'alloc' event is missing field 'size'"


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"seq": 0}, "missing event type 'ev'"),
        ({"ev": "stream", "stream": 1}, "'stream' event needs a non-negative integer 'seq'"),
        ({"seq": 0, "ev": "alloc", "addr": 1, "size": 0, "stream": 1}, "field 'size' must be > 0"),
        ({"seq": 0, "ev": "stream", "stream": True}, "field 'stream' must be an integer"),
        (
            {"seq": 0, "ev": "op", "op": "aten::add", "stream": 1, "reads": [{"addr": 0}], "writes": []},
            "field 'reads': a range needs 'nbytes', or 'shape', 'stride' and 'itemsize'",
        ),
        (
            {
                "seq": 0,
                "ev": "op",
                "op": "x",
                "stream": 1,
                "reads": [],
                "writes": [{"addr": 0, "shape": [2], "stride": [1, 1], "itemsize": 4}],
            },
            "field 'writes': range 'shape' and 'stride' differ in length",
        ),
        ([1, 2], "an event must be a JSON object"),
    ],
)
def test_event_validation(tmp_path: Path, event: Any, problem: str) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, event])

    err = _error(path)

    assert (err.line, err.problem) == (2, problem)


def test_seq_must_increase(tmp_path: Path) -> None:
    events = [{"seq": 5, "ev": "stream", "stream": 1}, {"seq": 5, "ev": "stream", "stream": 2}]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    err = _error(path)

    assert err.line == 3
    assert err.problem == "seq 5 does not increase (previous 5)"


def test_stack_used_before_its_definition(tmp_path: Path) -> None:
    events = [
        {"seq": 0, "ev": "alloc", "addr": 4096, "size": 64, "stream": 1, "stack": 7},
        {"seq": 1, "ev": "stack", "id": 7, "frames": [["model.py", 3, "f"]]},
    ]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    err = _error(path)

    assert (err.line, err.problem) == (2, "stack 7 is used before its 'stack' entry")


def test_capture_end_without_begin(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, {"seq": 0, "ev": "capture_end", "graph": 3}])

    err = _error(path)

    assert (err.line, err.problem) == (2, "capture_end of graph 3, which is not being captured")


def test_trace_ending_inside_a_capture(tmp_path: Path) -> None:
    events = [{"seq": 0, "ev": "stream", "stream": 1}, {"seq": 1, "ev": "capture_begin", "graph": 2, "stream": 1}]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    err = _error(path)

    assert err.line == 3
    assert err.problem == "trace ends inside a capture of graph 2 (truncated?)"


def test_a_graph_captured_twice(tmp_path: Path) -> None:
    events = [
        {"seq": 0, "ev": "capture_begin", "graph": 1, "stream": 1},
        {"seq": 1, "ev": "capture_end", "graph": 1},
        {"seq": 2, "ev": "capture_begin", "graph": 1, "stream": 1},
    ]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    assert _error(path).problem == "graph 1 is captured twice"


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ({"format": "something-else", "version": 1}, "not a streamrace trace"),
        ({"format": "streamrace-trace"}, "trace header has no integer 'version'"),
        ({"format": "streamrace-trace", "version": FORMAT_VERSION + 1}, "is newer than this streamrace reads"),
        ({"format": "streamrace-trace", "version": 0}, "unknown trace format version 0"),
    ],
)
def test_header_validation(tmp_path: Path, header: dict[str, Any], problem: str) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [header])

    err = _error(path)

    assert err.line == 1
    assert problem in err.problem


def test_empty_missing_and_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")

    assert _error(empty).problem == "empty file: no trace header"
    assert _error(tmp_path / "absent.jsonl").problem == "no such file"
    assert _error(tmp_path).problem == "is a directory, not a trace file"


def test_truncated_plain_file(tmp_path: Path) -> None:
    tb = _race_builder()
    path = tmp_path / "t.jsonl"
    tb.write(str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])

    err = _error(path)

    assert err.line == len(data.splitlines())
    assert "truncated file?" in err.problem


def test_truncated_gzip(tmp_path: Path) -> None:
    tb = _race_builder()
    path = tmp_path / "t.jsonl.gz"
    tb.write(str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])

    err = _error(path)

    assert "truncated or corrupt gzip data" in err.problem
    assert err.line is not None


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(bytes(range(128, 256)) * 4)

    err = _error(path)

    assert err.line == 1
    assert "not text" in err.problem


# -- forward compatibility: unknown kinds are skipped, an unknown major is refused -------------
def test_unknown_event_kinds_are_skipped_and_counted(tmp_path: Path) -> None:
    events = [
        {"seq": 0, "ev": "stream", "stream": 1},
        {"seq": 1, "ev": "graph_replay", "graph": 1, "anything": [1, {"x": None}]},
        {"seq": 2, "ev": "graph_replay", "graph": 1},
        {"seq": 3, "ev": "teleport"},
        {"seq": 4, "ev": "stream", "stream": 2},
    ]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    trace = load_trace(path)

    assert [ev["seq"] for ev in trace.events] == [0, 4]
    assert trace.header["skipped_events"] == {"graph_replay": 2, "teleport": 1}


def test_unknown_events_still_keep_seq_order(tmp_path: Path) -> None:
    events = [{"seq": 3, "ev": "stream", "stream": 1}, {"seq": 2, "ev": "graph_replay"}]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *events])

    assert (_error(path).line, _error(path).problem) == (3, "seq 2 does not increase (previous 3)")


def test_unknown_kinds_never_reach_the_reference_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer recorder's kind, a million times, is skipped on the fast path: the reference
    parsed each line again (a million took 7 s; 1.6 s now)."""
    parsed: list[bytes] = []
    reference = trace_io._reference_parse

    def counted(line: bytes) -> Any:
        parsed.append(line)
        return reference(line)

    monkeypatch.setattr(trace_io, "_reference_parse", counted)
    lines: list[Any] = [HEADER, {"seq": 0, "ev": "stream", "stream": 1}]
    lines += [{"seq": seq, "ev": "zz", "x": [seq]} for seq in range(1, 1001)]
    path = _write_lines(tmp_path / "t.jsonl", lines)
    trace = load_trace(path)
    assert [ev["seq"] for ev in trace.events] == [0]
    assert trace.header["skipped_events"] == {"zz": 1000}
    assert len(parsed) <= 1, "the header alone goes to the reference path"


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"seq": -1, "ev": "zz"}, "'zz' event needs a non-negative integer 'seq'"),
        ({"seq": True, "ev": "zz"}, "'zz' event needs a non-negative integer 'seq'"),
        ({"seq": "1", "ev": "zz"}, "'zz' event needs a non-negative integer 'seq'"),
        ({"ev": "zz"}, "'zz' event needs a non-negative integer 'seq'"),
        ({"seq": 1, "ev": 7}, "missing event type 'ev'"),
        ({"seq": 1 << 63, "ev": "zz"}, "field 'seq' is outside the 64-bit integer range"),
        ({"seq": 0, "ev": "zz"}, "seq 0 does not increase (previous 0)"),
    ],
)
def test_a_malformed_event_of_an_unknown_kind_is_refused_as_before(
    tmp_path: Path, event: dict[str, Any], problem: str
) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, {"seq": 0, "ev": "stream", "stream": 1}, event])
    assert (_error(path).line, _error(path).problem) == (3, problem)


def test_a_trace_cannot_set_the_readers_own_header_field(tmp_path: Path) -> None:
    header = {**HEADER, "skipped_events": {"forged": 1}}
    path = _write_lines(tmp_path / "t.jsonl", [header, {"seq": 0, "ev": "stream", "stream": 1}])

    assert "skipped_events" not in load_trace(path).header


def test_a_newer_minor_version_is_read(tmp_path: Path) -> None:
    header = {**HEADER, "minor": FORMAT_MINOR + 3}
    path = _write_lines(tmp_path / "t.jsonl", [header, {"seq": 0, "ev": "stream", "stream": 1}])

    assert [ev["seq"] for ev in load_trace(path).events] == [0]


def test_the_builder_still_refuses_unknown_kinds() -> None:
    with pytest.raises(UnknownEvent):
        TraceBuilder().emit("teleport")


# -- limits: every hostile line gets one message naming it --------------------------------------
BIG = 1 << 63  # one past the largest 64-bit integer
RANGE = {"addr": 4096, "nbytes": 16}


def _op(**ranges: Any) -> dict[str, Any]:
    return {"seq": 1, "ev": "op", "op": "aten::add", "stream": 1, "reads": [], "writes": [], **ranges}


def _graph(nodes: list[Any], edges: list[Any] = ()) -> dict[str, Any]:
    return {"seq": 1, "ev": "graph", "graph": 1, "nodes": nodes, "edges": list(edges)}


def _nodes(count: int) -> list[dict[str, Any]]:
    return [{"id": i, "type": "kernel"} for i in range(count)]


# (name, line 2 as an object or verbatim text, a piece of the expected message)
HOSTILE_LINES: list[tuple[str, Any, str]] = [
    ("address 2^63", {"seq": 1, "ev": "alloc", "addr": BIG, "size": 1, "stream": 1}, "field 'addr' is outside the 64"),
    ("address 2^64", {"seq": 1, "ev": "free", "addr": 1 << 64}, "field 'addr' is outside the 64-bit integer range"),
    ("address -2^64", {"seq": 1, "ev": "free", "addr": -(1 << 64)}, "field 'addr' must be >= 0"),
    ("block end past 2^63", {"seq": 1, "ev": "alloc", "addr": BIG - 8, "size": 64, "stream": 1}, "ends past 2^62"),
    ("block end at 2^62", {"seq": 1, "ev": "alloc", "addr": (1 << 62) - 64, "size": 64, "stream": 1}, "ends past 2^62"),
    ("negative size", {"seq": 1, "ev": "alloc", "addr": 0, "size": -64, "stream": 1}, "field 'size' must be > 0"),
    ("seq 2^63", {"seq": BIG, "ev": "stream", "stream": 1}, "field 'seq' is outside the 64-bit integer range"),
    ("range end past 2^63", _op(reads=[{"addr": BIG - 8, "nbytes": 64}]), "a range ends past 2^62"),
    ("empty range at 2^62", _op(reads=[{"addr": 1 << 62, "nbytes": 0}]), "a range ends past 2^62"),
    ("range address 2^64", _op(writes=[{"addr": 1 << 64, "nbytes": 0}]), "range 'addr' is outside the 64-bit"),
    ("negative nbytes", _op(reads=[{"addr": 0, "nbytes": -1}]), "range 'nbytes' must be a non-negative integer"),
    ("null nbytes", _op(reads=[{"addr": 0, "nbytes": None, "shape": [], "stride": [], "itemsize": 1}]), "'nbytes'"),
    (
        "strided end past 2^63",
        _op(writes=[{"addr": 1 << 62, "shape": [4], "stride": [1 << 61], "itemsize": 1}]),
        "a strided range ends past 2^62",
    ),
    (
        "empty strided range at 2^62",
        _op(writes=[{"addr": 1 << 62, "shape": [0], "stride": [1], "itemsize": 1}]),
        "a strided range ends past 2^62",
    ),
    (
        "strided below 0",
        _op(reads=[{"addr": 0, "shape": [2], "stride": [-1], "itemsize": 4}]),
        "a strided range reaches below address 0",
    ),
    (
        "stride 2^70",
        _op(reads=[{"addr": 0, "shape": [1], "stride": [1 << 70], "itemsize": 4}]),
        "is outside the 64-bit integer range",
    ),
    ("5,000 digits", '{"seq":1,"ev":"free","addr":1' + "0" * 5000 + "}", "an integer has too many digits"),
    ("nested 5,000 deep", '{"seq":1,"ev":"stream","x":' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    ("NaN", '{"seq":1,"ev":"stream","stream":1,"x":NaN}', "invalid JSON"),
    ("Infinity in a range", '{"seq":1,"ev":"free","addr":-Infinity}', "invalid JSON"),
    ("1e400", '{"seq":1,"ev":"stream","stream":1,"x":1e400}', "invalid JSON"),
    ("lone surrogate", '{"seq":1,"ev":"stream","stream":1,"name":"\\ud800"}', "invalid JSON"),
    ("stream of the wrong type", {"seq": 1, "ev": "stack", "id": 1, "frames": [], "stream": "s"}, "field 'stream'"),
    ("stream that is a list", {"seq": 1, "ev": "event_sync", "event": 1, "stream": [1]}, "field 'stream'"),
    ("unhashable stack", {"seq": 1, "ev": "stream", "stream": 1, "stack": [1]}, "field 'stack' must be an integer"),
    ("unhashable graph on an op", _op(graph={"id": 1}), "field 'graph' must be an integer"),
    ("device 2^64", {"seq": 1, "ev": "device_sync", "device": 1 << 64}, "field 'device' is outside the 64"),
    ("a frame's file a list", {"seq": 1, "ev": "stack", "id": 1, "frames": [[["a"], 1, "f"]]}, "[file, line, func"),
    ("a frame's line 2^64", {"seq": 1, "ev": "stack", "id": 1, "frames": [["a", 1 << 64, "f"]]}, "a line number is"),
    ("pool 2^64", {"seq": 1, "ev": "capture_begin", "graph": 1, "stream": 1, "pool": [1 << 64, 0]}, "field 'pool'"),
    ("node id negative", _graph([{"id": -1, "type": "kernel"}], []), "node ids must be 0 to 0, each once"),
    ("node id huge", _graph([{"id": 1 << 40, "type": "kernel"}], []), "node ids must be 0 to 0, each once"),
    ("node id twice", _graph([{"id": 0, "type": "kernel"}] * 2), "node ids must be 0 to 1, each once"),
    ("node id unhashable", _graph([{"id": [0], "type": "kernel"}], []), "list of {id, type} objects"),
    ("node op a list", _graph([{"id": 0, "type": "kernel", "op": [3]}], []), "has an 'op' that is not a seq"),
    ("edge to no node", _graph(_nodes(2), [[0, 5]]), "graph edge [0, 5] names a node the graph does not have"),
    ("self-loop", _graph(_nodes(2), [[1, 1]]), "graph edge [1, 1] is a self-loop"),
    ("cycle", _graph(_nodes(3), [[0, 1], [1, 2], [2, 0]]), "graph edges form a cycle"),
    ("edge type not a string", _graph(_nodes(2), [[0, 1, 7]]), "must be a list of [from, to(, type)]"),
]


def _hostile_params() -> list[Any]:
    return [pytest.param(line, fragment, id=name) for name, line, fragment in HOSTILE_LINES]


@pytest.fixture(params=["orjson", "stdlib"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every limit holds with orjson and with the standard library alone, word for word."""
    if request.param == "orjson":
        if trace_io.orjson is None:
            pytest.skip("orjson is not installed")
        monkeypatch.setattr(trace_io, "_fast_loads", trace_io.orjson.loads)
    else:
        monkeypatch.setattr(trace_io, "_fast_loads", trace_io._stdlib_loads)
    return request.param


@pytest.mark.parametrize(("line", "fragment"), _hostile_params())
def test_hostile_lines_are_refused_with_their_line(tmp_path: Path, parser: str, line: Any, fragment: str) -> None:
    first = {"seq": 0, "ev": "stream", "stream": 1}
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, first, line, {"seq": 2, "ev": "stream", "stream": 1}])

    err = _error(path)

    assert err.line == 3
    assert fragment in err.problem
    assert "\n" not in str(err)


def test_refused_messages_do_not_depend_on_the_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if trace_io.orjson is None:
        pytest.skip("orjson is not installed")
    for name, line, _ in HOSTILE_LINES:
        path = _write_lines(tmp_path / "t.jsonl", [HEADER, line])
        problems = []
        for loads in (trace_io.orjson.loads, trace_io._stdlib_loads):
            monkeypatch.setattr(trace_io, "_fast_loads", loads)
            problems.append(_error(path).problem)
        assert problems[0] == problems[1], name


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        ({"recorder_errors": "boom"}, "trace header field 'recorder_errors' must be a list of strings"),
        ({"recorder_errors": [["boom"]]}, "trace header field 'recorder_errors' must be a list of strings"),
        ({"allocator": "native"}, "trace header field 'allocator' must be an object"),
        ({"allocator": {"caching": "yes"}}, "trace header field 'allocator' must be an object"),
        ({"allocations_dropped": "3"}, "trace header field 'allocations_dropped' must be a non-negative integer"),
        ({"graph_readback": 1}, "trace header field 'graph_readback' must be true or false"),
        ({"minor": -1}, "trace header field 'minor' must be a non-negative integer"),
        ({"replays_unrecorded": -2}, "trace header field 'replays_unrecorded' must be a non-negative integer"),
    ],
)
def test_header_facts_of_the_wrong_type(tmp_path: Path, facts: dict[str, Any], problem: str) -> None:
    path = _write_lines(tmp_path / "t.jsonl", [{**HEADER, **facts}])

    err = _error(path)

    assert err.line == 1
    assert err.problem.startswith(problem)


def test_stream_count_limit(tmp_path: Path) -> None:
    streams = [{"seq": i, "ev": "stream", "stream": i} for i in range(MAX_STREAMS + 1)]
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, *streams])

    err = _error(path)

    assert err.line == MAX_STREAMS + 2
    assert err.problem == f"more than {MAX_STREAMS} distinct streams (the limit of this streamrace)"
    assert len(load_trace(_write_lines(tmp_path / "ok.jsonl", [HEADER, *streams[:-1]])).events) == MAX_STREAMS


# -- the fast path never accepts what the reference refuses -------------------------------------
VALID_EVENTS: list[dict[str, Any]] = [
    {"seq": 0, "ev": "stream", "stream": 1, "device": 0, "name": "main", "priority": -1},
    {"seq": 0, "ev": "capture_begin", "graph": 1, "stream": 1, "pool": [1, 0], "mode": "global", "stack": 2},
    {"seq": 0, "ev": "capture_end", "graph": 1, "aborted": False},
    {"seq": 0, "ev": "alloc", "addr": 4096, "size": 512, "stream": 1, "device": 0, "pool": [0, 0]},
    {"seq": 0, "ev": "free", "addr": 4096, "stream": 1},
    {"seq": 0, "ev": "record_stream", "addr": 4096, "stream": 2},
    {
        "seq": 0,
        "ev": "op",
        "op": "aten::mm",
        "stream": 1,
        "reads": [{"addr": 4096, "nbytes": 64}, {"addr": 8192, "shape": [4, 4], "stride": [8, -1], "itemsize": 4}],
        "writes": [{"addr": 0, "shape": [0], "stride": [1], "itemsize": 2}],
        "nodes": [1, 2],
        "inferred": True,
    },
    {"seq": 0, "ev": "event_record", "event": 3, "stream": 1},
    {"seq": 0, "ev": "event_wait", "event": 3, "stream": 2},
    {"seq": 0, "ev": "device_sync"},
    {"seq": 0, "ev": "stack", "id": 1, "frames": [["model.py", 10, "forward"]]},
    {"seq": 0, "ev": "kernel", "graph": 1, "node": 2, "name": "triton:k", "reads": [], "writes": [], "stream": None},
    {"seq": 0, "ev": "recorder_error", "message": "boom", "where": "on_alloc"},
]

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.sampled_from([BIG - 1, BIG, -BIG, -BIG - 1, 0, -1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["addr", "nbytes", "x"]), inner),
    max_leaves=8,
)
_FIELD_NAMES = st.sampled_from(
    [
        "seq",
        "stream",
        "device",
        "stack",
        "graph",
        "addr",
        "size",
        "nbytes",
        "reads",
        "writes",
        "shape",
        "stride",
        "itemsize",
        "frames",
        "pool",
        "nodes",
        "op",
        "name",
        "event",
        "id",
        "inferred",
        "aborted",
        "priority",
    ]
)


def _mutate(event: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    """``event`` with the value at ``path`` (a field, or a field inside a range) replaced."""
    out = json.loads(json.dumps(event))
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(VALID_EVENTS), _FIELD_NAMES, _JSON_VALUES, st.booleans())
def test_fast_check_accepts_only_what_the_reference_accepts(
    event: dict[str, Any], name: str, value: Any, in_range: bool
) -> None:
    if in_range and event["ev"] == "op":
        path: list[Any] = ["reads", 1, name]
    else:
        path = [name]
    mutated = _mutate(event, path, value)

    if fast_checks()[event["ev"]](mutated):
        validate_event(mutated)  # raises if the fast path let an invalid event through


def test_valid_events_take_the_fast_path() -> None:
    for event in VALID_EVENTS:
        validate_event(event)
        assert fast_checks()[event["ev"]](event), event["ev"]


def test_committed_traces_take_the_fast_path() -> None:
    """Only graph events (checked whole: ids, edges, no cycle) go to the reference path."""
    slow = set()
    for path in sorted((Path(__file__).parent.parent / "examples" / "traces").iterdir()):
        for event in load_trace(path).events:
            check = fast_checks().get(event["ev"])
            if check is None or not check(event):
                slow.add(event["ev"])
    assert slow == {"graph"}


# -- pipes: standard input and FIFOs ------------------------------------------------------------
def test_iter_trace_reads_a_fifo(tmp_path: Path) -> None:
    tb = _race_builder()
    packed = tmp_path / "t.jsonl.gz"
    tb.write(str(packed))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as out:
            data = packed.read_bytes()
            out.write(data[:1])  # the gzip magic arrives a byte at a time
            out.flush()
            out.write(data[1:])

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        trace = load_trace(fifo)
    finally:
        writer.join(timeout=30)

    assert trace.events == tb.events
    assert trace.path == str(fifo)


def test_reading_closes_what_it_opened(tmp_path: Path) -> None:
    tb = _race_builder()
    path = tmp_path / "t.jsonl.gz"
    tb.write(str(path))
    before = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None

    load_trace(path)
    with pytest.raises(TraceError):
        list(iter_trace(_write_lines(tmp_path / "bad.jsonl", [HEADER, "{"])))

    if before is not None:
        assert set(os.listdir("/proc/self/fd")) <= before


def test_without_orjson_the_standard_library_reads_the_same(tmp_path: Path) -> None:
    """orjson is optional (setup.py installs it only where it has a wheel)."""
    tb = _race_builder()
    path = tmp_path / "t.jsonl.gz"
    tb.write(str(path))
    code = (
        "import sys, json\n"
        "sys.modules['orjson'] = None\n"
        "from streamrace.trace import io, load_trace\n"
        "assert io.orjson is None\n"
        f"print(json.dumps(load_trace({str(path)!r}).events))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)

    assert json.loads(proc.stdout) == tb.events
