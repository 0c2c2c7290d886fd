"""The direct reader (csrc/core.cpp, run_lines; csrc/trace_tree.h): the C++ core reads a trace
file's lines itself, and makes Python objects only for what a finding names and what the
Python passes read (each pass's EventWatch). Nothing a user sees may change: every committed
trace gives the same JSON, SARIF and text, with the same exit code, read directly or as Python
events; a line the tree gives up on goes the old way in the middle of a trace; and what the
tree takes, it takes as the Python reader would read it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_native_reader import _PLAIN, _same
from test_trace_io import VALID_EVENTS

from streamrace.analysis import analyze
from streamrace.cli import main
from streamrace.trace import iter_trace
from streamrace.trace.io import TraceEvents

_core = pytest.importorskip("streamrace._core", reason="the C++ core is not built")

EXAMPLES = Path(__file__).parent.parent / "examples" / "traces"
FORMATS = ("json", "sarif", "text")


@pytest.fixture(autouse=True)
def _cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMRACE_CORE", "cpp")


def _cli(path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["analyze", str(path), "--format", fmt])
    out, err = capsys.readouterr()
    return code, out, err


def _both(
    path: Path, fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[int, str, str], tuple[int, str, str], int]:
    """The command line's outcome read directly, then as Python events; and how many times
    the lines were handed over to the core."""
    handed: list[object] = []
    hand_over = TraceEvents.hand_over

    def spy(self: TraceEvents, consumer: Any) -> None:
        handed.append(consumer)
        hand_over(self, consumer)

    with monkeypatch.context() as patch:
        patch.setattr(TraceEvents, "hand_over", spy)
        direct = _cli(path, fmt, capsys)
    with monkeypatch.context() as patch:
        patch.setattr(TraceEvents, "can_hand_over", lambda self: False)
        events = _cli(path, fmt, capsys)
    return direct, events, len(handed)


TRACES = sorted(EXAMPLES.glob("*.jsonl*"))


def _lines_of(path: Path) -> list[str]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as text:
        return text.read().splitlines()


def _without_passes(path: Path, out: Path, graph_check: bool = False) -> Path:
    """The trace with a header of format 1.0, and with its graph readback only if
    ``graph_check``: no whole-trace pass but the graph check (the C++ core's own collector)
    reads its events (a Python pass needs the Python events, and with one the lines are not
    handed over), so the core reads all of its lines directly. Kinds newer than 1.0 are
    skipped, and noted."""
    lines = _lines_of(path)
    header = json.loads(lines[0])
    header["minor"] = 0
    if not graph_check:
        header.pop("graph_readback", None)
    out.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_committed_traces_report_alike_read_directly(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for fmt in FORMATS:
        direct, events, handed = _both(path, fmt, capsys, monkeypatch)
        assert handed == 1, "every pass takes the events one at a time, or is the core's own graph check"
        assert direct == events, fmt
    for graph_check in (False, True):
        plain = _without_passes(path, tmp_path / "plain.jsonl", graph_check)
        for fmt in FORMATS:
            direct, events, handed = _both(plain, fmt, capsys, monkeypatch)
            assert handed == 1
            assert direct == events, (fmt, graph_check)


def _rewrite(path: Path, out: Path, change: Any) -> Path:
    """The trace at path, without passes, with change(event) applied to every other op line."""
    lines = _lines_of(_without_passes(path, out))
    ops = 0
    written = [lines[0]]
    for line in lines[1:]:
        event = json.loads(line) if line.strip() else None
        if event is not None and event.get("ev") == "op":
            ops += 1
            if ops % 2:
                line = change(event)
        written.append(line)
    out.write_text("\n".join(written) + "\n", encoding="utf-8")
    return out


GIVEN_UP = {
    # each is a line the tree gives up on and the other paths read: the trace means the same
    "non-ascii name": lambda ev: json.dumps({**ev, "op": ev["op"] + "\u00e9"}, ensure_ascii=False),
    "escaped name": lambda ev: json.dumps({**ev, "op": ev["op"] + "\n"}),
    "float field": lambda ev: json.dumps({**ev, "elapsed": 0.5}),
    "repeated key": lambda ev: json.dumps(ev)[:-1] + ', "op": "again"}',
}


@pytest.mark.parametrize("change", sorted(GIVEN_UP))
def test_lines_the_tree_gives_up_on_go_the_old_way_mid_trace(
    change: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    buggy = [p for p in TRACES if "buggy" in p.name and "host_" not in p.name][:4]
    assert buggy
    for path in buggy:
        changed = _rewrite(path, tmp_path / f"{path.name}.jsonl", GIVEN_UP[change])
        direct, events, handed = _both(changed, "json", capsys, monkeypatch)
        assert handed == 1
        assert direct == events
        assert direct[0] == 1, direct[2]  # still a finding


def test_a_graph_the_fast_check_leaves_to_the_reference_reads_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node ids out of creation order: the C++ check gives the capture to the Python reference,
    which reads every launch of the capture (copies, made into events as it asks)."""
    checked = 0
    for path in [p for p in TRACES if "buggy" in p.name][:12]:
        lines = _lines_of(_without_passes(path, tmp_path / "plain.jsonl", graph_check=True))
        out = [lines[0]]
        for line in lines[1:]:
            event = json.loads(line) if line.strip() else None
            if event is not None and event.get("ev") == "graph" and len(event.get("nodes") or ()) > 1:
                event["nodes"] = event["nodes"][::-1]  # the same graph, its nodes listed backwards
                line = json.dumps(event)
                checked += 1
            out.append(line)
        changed = tmp_path / "reversed.jsonl"
        changed.write_text("\n".join(out) + "\n", encoding="utf-8")
        direct, events, handed = _both(changed, "json", capsys, monkeypatch)
        assert handed == 1
        assert direct == events
    assert checked, "no committed trace has a graph of two nodes or more"


OP = {"seq": 5, "ev": "op", "op": "x", "stream": 1, "reads": [], "writes": []}
HOSTILE = [
    {**OP, "reads": [{"addr": 4096, "nbytes": 99999999999999999}]},
    {**OP, "reads": [{"addr": -1, "nbytes": 4}]},
    {"seq": 5, "ev": "alloc", "addr": 4611686018427387900, "size": 64, "stream": 1},
    {"seq": 0, "ev": "free", "addr": 4096},
    {**OP, "stream": True},
    {**OP, "reads": [{"addr": 4096, "shape": [2], "stride": [1], "itemsize": 0}]},
    {"seq": 5, "ev": "event_record", "event": 3},
    {**OP, "stack": 9},
]


@pytest.mark.parametrize("line", HOSTILE)
def test_hostile_lines_get_the_same_answer_read_directly(
    line: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    header = json.dumps({"format": "streamrace-trace", "version": 1})
    first = json.dumps({"seq": 1, "ev": "stream", "stream": 1})
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([header, first, json.dumps(line), ""]))
    for fmt in FORMATS:
        direct, events, handed = _both(path, fmt, capsys, monkeypatch)
        assert handed == 1
        assert direct == events, fmt


def test_analyze_takes_the_direct_reader_and_counts_alike(tmp_path: Path) -> None:
    path = _without_passes(next(p for p in TRACES if "buggy" in p.name), tmp_path / "plain.jsonl")
    events = iter_trace(path)
    header = next(events)
    assert isinstance(events, TraceEvents) and events.can_hand_over()
    direct = analyze(header, events)
    events = iter_trace(path)
    header = next(events)
    as_python = analyze(header, (e for e in events))
    assert direct.to_dict() == as_python.to_dict()
    assert direct.summary == as_python.summary


def test_a_trace_is_handed_over_once_and_only_right_after_its_header() -> None:
    path = TRACES[0]
    events = iter_trace(path)
    assert not events.can_hand_over()  # the header is not taken yet
    next(events)
    next(events, None)
    assert not events.can_hand_over()  # an event was taken
    with pytest.raises(RuntimeError):
        events.hand_over(lambda lines: None)


# -- the tree's JSON: what it takes, it takes as the C++ reader's Python objects have it ---------
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _PLAIN, max_size=6), st.sampled_from([None, 0, 1]), st.booleans())
def test_the_tree_takes_only_what_the_reader_reads_alike(value: dict[str, Any], indent: Any, ascii: bool) -> None:
    for text in (
        (json.dumps(value, indent=indent, ensure_ascii=ascii).replace("\n", "\r\t ") + "\n").encode(),
        json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
    ):
        tree = _core.parse_trace_tree(text)
        if tree is not None:
            assert _same(tree, _core.parse_trace_line(text)), text
            assert _same(tree, json.loads(text)), text


_ASCII = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'), max_size=8)
_ASCII_TREE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1) | _ASCII,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ASCII, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_ASCII, _ASCII_TREE, max_size=6), st.sampled_from([None, 2]))
def test_the_plain_ascii_json_a_recorder_writes_is_taken(value: dict[str, Any], indent: Any) -> None:
    for text in (json.dumps(value, indent=indent), json.dumps(value, separators=(",", ":"))):
        assert _same(_core.parse_trace_tree(text.encode()), value), text


def test_every_valid_event_is_taken_by_the_tree() -> None:
    for event in VALID_EVENTS:
        line = json.dumps(event).encode()
        if all(ord(c) < 0x7F for c in line.decode()):
            assert _same(_core.parse_trace_tree(line), event)
    for text in [b'{"a":1.5}', b'{"a":"\\n"}', b'{"a":1,"a":2}', b'{"a":1234567890123456789}', b'{"a":"\xc3\xa9"}']:
        assert _core.parse_trace_tree(text) is None, text


def _long_lists(path: Path) -> Path:
    """An op whose one strided range has 300,000 dims, and one of 100,000 strided ranges: each
    list the reader's checks walk must be walked once (found by a helper's hostile review:
    read back and forth, shape against stride, they were walked once per item)."""
    dims = {"addr": 4096, "shape": [1] * 300_000, "stride": [1] * 300_000, "itemsize": 4}
    many = [{"addr": 4096 + 64 * k, "shape": [2], "stride": [1], "itemsize": 4} for k in range(100_000)]
    lines = [
        {"format": "streamrace-trace", "version": 1, "minor": 0},
        {"seq": 1, "ev": "stream", "stream": 1},
        {"seq": 2, "ev": "op", "op": "dims", "stream": 1, "reads": [dims], "writes": []},
        {"seq": 3, "ev": "op", "op": "many", "stream": 1, "reads": many, "writes": []},
    ]
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return path


def test_long_lists_are_read_in_one_walk_each(tmp_path: Path) -> None:
    path = _long_lists(tmp_path / "long.jsonl")
    command = [sys.executable, "-m", "streamrace", "analyze", str(path), "--format", "json"]
    env = {**os.environ, "STREAMRACE_CORE": "cpp"}
    # Walked once per item, this takes hours; once per list, a fraction of a second.
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["accesses"] == 100_001
