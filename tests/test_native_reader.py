"""The C++ core's line reader (csrc/reader.h) reads every trace as the Python reader does:
the same events, and for a bad trace the same line and the same words.

Both readers are run on each trace in turn (``STREAMRACE_CORE=python`` picks the Python one)
and their outcomes compared; tests/test_trace_io.py holds the outcomes themselves.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_trace_io import _FIELD_NAMES, _JSON_VALUES, HEADER, HOSTILE_LINES, VALID_EVENTS, _mutate

from streamrace.errors import TraceError
from streamrace.trace import io as trace_io
from streamrace.trace import iter_trace
from streamrace.trace.events import MAX_STREAMS, fast_checks, validate_event

_core = pytest.importorskip("streamrace._core", reason="the C++ core is not built")

EXAMPLES = Path(__file__).parent.parent / "examples" / "traces"


def _outcome(path: Path | str) -> tuple[str, Any]:
    """("events", header and events) or ("error", (line, problem))."""
    try:
        return "events", list(iter_trace(path))
    except TraceError as exc:
        return "error", (exc.line, exc.problem)


def _both(path: Path | str, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[str, Any], tuple[str, Any]]:
    monkeypatch.setenv("STREAMRACE_CORE", "auto")
    native = _outcome(path)
    monkeypatch.setenv("STREAMRACE_CORE", "python")
    python = _outcome(path)
    return native, python


def _lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_the_native_reader_is_the_one_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMRACE_CORE", "auto")
    assert trace_io._native_line_reader() is _core.line_reader
    monkeypatch.setenv("STREAMRACE_CORE", "python")
    assert trace_io._native_line_reader() is None


@pytest.mark.parametrize("path", sorted(EXAMPLES.iterdir()), ids=lambda p: p.name)
def test_committed_traces_read_alike(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    native, python = _both(path, monkeypatch)
    assert native[0] == "events"
    assert native == python


@pytest.mark.parametrize(("name", "line"), [(name, line) for name, line, _ in HOSTILE_LINES])
def test_hostile_lines_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, line: Any) -> None:
    path = _lines(tmp_path / "t.jsonl", [HEADER, {"seq": 0, "ev": "stream", "stream": 1}, line])
    native, python = _both(path, monkeypatch)
    assert native[0] == "error"
    assert native == python


TRACE_RULES = [
    # seq order, on the fast path and after a line the Python path took
    [{"seq": 5, "ev": "stream", "stream": 1}, {"seq": 5, "ev": "stream", "stream": 2}],
    [{"seq": 5, "ev": "stack", "id": 1, "frames": []}, {"seq": 4, "ev": "stream", "stream": 2}],
    [{"seq": 3, "ev": "stream", "stream": 1}, {"seq": 4, "ev": "teleport"}, {"seq": 4, "ev": "device_sync"}],
    # a stack used before its entry, and after it
    [{"seq": 0, "ev": "alloc", "addr": 4096, "size": 64, "stream": 1, "stack": 7}],
    [
        {"seq": 0, "ev": "stack", "id": 7, "frames": [["m.py", 1, "f"]]},
        {"seq": 1, "ev": "alloc", "addr": 4096, "size": 64, "stream": 1, "stack": 7},
        {"seq": 2, "ev": "free", "addr": 4096, "stack": 8},
    ],
    # captures: begun twice, ended without a begin, a trace that ends inside one
    [
        {"seq": 0, "ev": "capture_begin", "graph": 1, "stream": 1},
        {"seq": 1, "ev": "capture_begin", "graph": 1, "stream": 2},
    ],
    [{"seq": 0, "ev": "capture_end", "graph": 3}],
    [{"seq": 0, "ev": "stream", "stream": 1}, {"seq": 1, "ev": "capture_begin", "graph": 2, "stream": 1}],
    # blank lines, unknown kinds (skipped and counted), kinds of format 1.1
    [{"seq": 0, "ev": "stream", "stream": 1}, "", "   ", {"seq": 1, "ev": "graph_replay", "graph": 1}],
    [{"seq": 0, "ev": "replay", "graph": 1, "stream": 2}, {"seq": 1, "ev": "graph_reset", "graph": 1}],
    [{"seq": 0, "ev": "replay", "graph": 1}],
    # a last line without its newline, and one cut short
    [{"seq": 0, "ev": "stream", "stream": 1}],
]


@pytest.mark.parametrize("events", TRACE_RULES)
def test_whole_trace_rules_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[Any]) -> None:
    path = _lines(tmp_path / "t.jsonl", [HEADER, *events])
    native, python = _both(path, monkeypatch)
    assert native == python
    text = path.read_bytes()
    path.write_bytes(text[:-1])  # no final newline
    native, python = _both(path, monkeypatch)
    assert native == python
    path.write_bytes(text[:-3])  # the last line cut short
    native, python = _both(path, monkeypatch)
    assert native == python


def test_the_stream_limit_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    streams = [{"seq": i, "ev": "stream", "stream": i} for i in range(MAX_STREAMS + 1)]
    native, python = _both(_lines(tmp_path / "t.jsonl", [HEADER, *streams]), monkeypatch)
    assert native == python == ("error", (MAX_STREAMS + 2, python[1][1]))
    native, python = _both(_lines(tmp_path / "ok.jsonl", [HEADER, *streams[:-1]]), monkeypatch)
    assert native == python
    assert native[0] == "events"


def _long_trace(path: Path) -> bytes:
    """A trace of many buffers' worth of lines, some longer than a buffer, gzip-compressed."""
    noise = random.Random(13)
    lines = [json.dumps(HEADER)]
    for seq in range(3000):
        size = 70_000 if seq % 1000 == 999 else seq % 50
        name = "".join(noise.choice("abcdefgh") for _ in range(size))
        lines.append(json.dumps({"seq": seq, "ev": "stream", "stream": seq % 7, "name": name}))
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path.write_bytes(data)
    return data


def test_truncated_and_corrupt_gzip_fail_at_the_same_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl.gz"
    data = _long_trace(path)
    native, python = _both(path, monkeypatch)
    assert native == python
    assert native[0] == "events"
    for cut in (len(data) // 7, len(data) // 3, len(data) // 2, len(data) - 9, len(data) - 1):
        path.write_bytes(data[:cut])
        native, python = _both(path, monkeypatch)
        assert native == python, cut
        assert native[0] == "error"
    for at in (len(data) // 5, len(data) // 2):
        path.write_bytes(data[:at] + bytes(b ^ 0x5A for b in data[at : at + 64]) + data[at + 64 :])
        native, python = _both(path, monkeypatch)
        assert native == python, at


def test_a_pipe_is_read_as_its_lines_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event is handed on once its line has arrived, not when a buffer is full."""
    monkeypatch.setenv("STREAMRACE_CORE", "auto")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    first, second = threading.Event(), threading.Event()

    def feed() -> None:
        with open(fifo, "wb") as out:
            out.write((json.dumps(HEADER) + "\n" + json.dumps({"seq": 0, "ev": "stream", "stream": 1}) + "\n").encode())
            out.flush()
            assert first.wait(30)
            out.write((json.dumps({"seq": 1, "ev": "stream", "stream": 2}) + "\n").encode())
            out.flush()
            assert second.wait(30)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        events = iter_trace(fifo)
        assert next(events) == HEADER
        assert next(events)["seq"] == 0
        first.set()
        assert next(events)["seq"] == 1
        second.set()
        assert list(events) == []
    finally:
        first.set()
        second.set()
        writer.join(timeout=30)


def _read_one(event: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """The C++ reader over one line: (what it gave, whether it gave the line to the Python path)."""
    deferred = []
    checker = trace_io._Checker()
    checker.stacks.update({1, 2})
    lines = _core.line_reader(
        io.BufferedReader(io.BytesIO((json.dumps(event) + "\n").encode())),
        trace_io._native_table(),
        checker,
        lambda line: deferred.append(line),  # the Python path's answer: no event
        1,
        MAX_STREAMS,
        trace_io._LINE_READ,
    )
    out = list(lines)
    return (out[0] if out else None), bool(deferred)


def test_valid_events_take_the_native_fast_path() -> None:
    for event in VALID_EVENTS:
        read, deferred = _read_one(event)
        if event["ev"] in trace_io._STATEFUL:  # their whole-trace rules are the Python path's
            assert deferred, event["ev"]
        else:
            assert not deferred, event["ev"]
            assert read == event


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(VALID_EVENTS), _FIELD_NAMES, _JSON_VALUES, st.booleans())
def test_the_native_check_accepts_only_what_the_python_check_accepts(
    event: dict[str, Any], name: str, value: Any, in_range: bool
) -> None:
    path: list[Any] = ["reads", 1, name] if in_range and event["ev"] == "op" else [name]
    mutated = _mutate(event, path, value)
    read, deferred = _read_one(mutated)
    if not deferred:
        assert read == trace_io._fast_loads(json.dumps(mutated).encode())
        validate_event(mutated)  # raises if the C++ path let an invalid event through
        assert fast_checks()[mutated["ev"]](mutated)


# -- the C++ reader's JSON: what it gives is what the standard library gives ------------------
_PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 66), max_value=1 << 66)
    | st.sampled_from([0, -1, 10**17, 10**18 - 1, 10**18, -(10**18) + 1, (1 << 63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(["addr", "nbytes", "é", "\\", '"', "\x00", "\u2028", "\U0001f600"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


# What a recorder writes: all of it is taken.
_TAKEN_TEXT = st.text(st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters='"\\'), max_size=8)
_TAKEN = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1) | _TAKEN_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TAKEN_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _agrees(text: bytes) -> None:
    parsed = _core.parse_trace_line(text)
    try:
        expected = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        assert parsed is None, text
        return
    if parsed is not None:
        assert _same(parsed, expected), text


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _PLAIN, max_size=6), st.sampled_from([None, 0, 1]), st.booleans())
def test_parsed_lines_are_what_the_standard_library_reads(value: dict[str, Any], indent: Any, ascii: bool) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii).replace("\n", "\r\t ") + "\n"
    _agrees(text.encode())
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    _agrees(compact)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TAKEN_TEXT, _TAKEN, max_size=6), st.sampled_from([None, 2]))
def test_plain_lines_are_taken(value: dict[str, Any], indent: Any) -> None:
    for text in (json.dumps(value, indent=indent, ensure_ascii=False), json.dumps(value, separators=(",", ":"))):
        if "\\" not in text:  # json.dumps escapes what ensure_ascii asks it to
            assert _same(_core.parse_trace_line(text.encode()), value), text


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(VALID_EVENTS), st.integers(min_value=0), st.binary(max_size=3), st.booleans())
def test_damaged_lines_are_given_up_or_read_alike(event: dict[str, Any], at: int, junk: bytes, insert: bool) -> None:
    line = json.dumps(event, separators=(",", ":")).encode()
    at %= len(line)
    _agrees(line[:at] + junk + line[at + (0 if insert else len(junk)) :])


def test_the_plain_json_of_a_trace_is_taken() -> None:
    for event in VALID_EVENTS:
        line = (json.dumps(event) + "\n").encode()
        assert _same(_core.parse_trace_line(line), event)
    for text in [b'{"a":1.5}', b'{"a":1e3}', b'{"a":"\\n"}', b'{"a":1,"a":2}', b'{"a":1234567890123456789}', b"[1]"]:
        assert _core.parse_trace_line(text) is None, text  # the Python path's
    deep = b'{"a":' + b"[" * 100 + b"]" * 100 + b"}"
    assert _core.parse_trace_line(deep) is None


# -- graphs: the C++ reader checks them whole, and takes only what validate_event takes -------
_NODE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=8),
    st.sampled_from([1 << 63, (1 << 63) - 1, -(1 << 63)]),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
)


@st.composite
def _graphs(draw: Any) -> dict[str, Any]:
    """A graph event: nodes numbered in some order, edges between them (a DAG, or not), then
    perhaps one field of one node or edge changed to anything."""
    count = draw(st.integers(0, 7))
    ids = draw(st.permutations(list(range(count))))
    nodes: list[Any] = [{"id": i, "type": draw(st.sampled_from(["kernel", "memcpy", "eventrecord"]))} for i in ids]
    for node in nodes:
        if draw(st.booleans()):
            node["op"] = draw(st.integers(0, 50))
        if draw(st.booleans()):
            node["name"] = "k"
    pairs = st.tuples(st.integers(0, max(count - 1, 0)), st.integers(0, max(count - 1, 0)))
    acyclic = draw(st.booleans())
    edges: list[Any] = []
    for a, b in draw(st.lists(pairs, max_size=10)) if count else []:
        if acyclic and a >= b:
            continue
        edges.append([a, b] if draw(st.booleans()) else [a, b, "default"])
    event: dict[str, Any] = {"seq": 1, "ev": "graph", "graph": 1, "nodes": nodes, "edges": edges}
    if nodes and draw(st.booleans()):
        node = draw(st.sampled_from(nodes))
        node[draw(st.sampled_from(["id", "type", "op", "name", "event", "extra"]))] = draw(_NODE_VALUES)
    if edges and draw(st.booleans()):
        edge = draw(st.sampled_from(edges))
        edge[draw(st.integers(0, len(edge) - 1))] = draw(_NODE_VALUES)
    if draw(st.integers(0, 9)) == 0:
        event[draw(st.sampled_from(["nodes", "edges"]))] = draw(_NODE_VALUES)
    return event


@settings(max_examples=800, deadline=None)
@given(_graphs())
def test_the_native_graph_check_takes_only_valid_graphs(event: dict[str, Any]) -> None:
    read, deferred = _read_one(event)
    try:
        validate_event(event)
        valid = True
    except Exception:
        valid = False
    if not deferred:
        assert valid, event
        assert read == event
    elif valid:  # a valid graph goes to Python only where the C++ JSON gives up (an escape, 19 digits)
        assert _core.parse_trace_line(json.dumps(event).encode()) is None, event


def test_recorded_graphs_are_taken_by_the_native_check() -> None:
    checked = 0
    for path in sorted(EXAMPLES.iterdir()):
        for event in iter_trace(path):
            if event.get("ev") == "graph":
                read, deferred = _read_one(event)
                assert not deferred and read == event
                checked += 1
    assert checked > 10
