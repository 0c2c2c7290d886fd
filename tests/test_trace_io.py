"""Trace files: write/read round trips and the loader's validation, each error naming its line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from streamrace.errors import TraceError
from streamrace.trace import FORMAT_VERSION, iter_trace, load_trace, make_header, write_trace
from streamrace.trace.builder import TraceBuilder


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
        ({"seq": 0, "ev": "teleport"}, "unknown event type 'teleport'"),
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
