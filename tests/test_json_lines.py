"""Trace lines written by the C++ core (csrc/trace_json_write.h) are the standard library's,
byte for byte, and it gives up on whatever it would write otherwise (streamrace/trace/json_lines.py
then writes or refuses the batch through json.dumps, as before)."""

from __future__ import annotations

import enum
import json
import math
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrace.trace import iter_trace, json_lines
from streamrace.trace.io import write_trace
from streamrace.trace.json_lines import EncodedLines, encode_lines

_core = pytest.importorskip("streamrace._core", reason="the C++ core is not built")

EXAMPLES = Path(__file__).parent.parent / "examples" / "traces"


def _stdlib(items: list) -> bytes:
    return "".join(json.dumps(i, separators=(",", ":"), allow_nan=False) + "\n" for i in items).encode()


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # every code point: escapes, non-ASCII, astral, lone surrogates
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), _VALUES, max_size=6), max_size=4))
def test_the_core_writes_what_the_standard_library_writes(items):
    assert _core.encode_lines(items) == _stdlib(items)


def test_every_committed_trace_is_written_as_the_standard_library_writes_it():
    traces = sorted(EXAMPLES.glob("*.jsonl*"))
    assert len(traces) > 50
    for path in traces:
        items = list(iter_trace(path))
        assert _core.encode_lines(items) == _stdlib(items), path.name


def _nested(depth: int) -> list:
    value: list = [0]
    for _ in range(depth):
        value = [value]
    return value


class _Kind(enum.IntEnum):
    OP = 1


@pytest.mark.parametrize(
    "item",
    [
        {"x": math.nan},
        {"x": math.inf},
        {1: "int key"},
        {"x": _Kind.OP},
        {"x": object()},
        {"x": _nested(70)},
    ],
    ids=["nan", "inf", "int-key", "int-subclass", "object", "deep"],
)
def test_it_gives_up_where_it_would_differ_and_the_standard_library_decides(item):
    assert _core.encode_lines([{"ev": "op"}, item]) is None
    try:
        want: bytes | type[Exception] = _stdlib([item])
    except (ValueError, TypeError) as exc:
        want = type(exc)
    if isinstance(want, bytes):
        assert json_lines.encode_lines([item]) == want
    else:
        with pytest.raises(want):
            json_lines.encode_lines([item])


def test_write_trace_round_trips_through_the_fast_writer(tmp_path, monkeypatch):
    events = [{"seq": i, "ev": "stack", "id": i, "frames": [["m\u00e9.py", i + 1, "f"]]} for i in range(25_000)]
    header = {"format": "streamrace-trace", "version": 1}
    fast, slow = tmp_path / "fast.jsonl.gz", tmp_path / "slow.jsonl"
    write_trace(fast, header, iter(events))
    monkeypatch.setattr(json_lines, "_native", lambda: None)
    write_trace(slow, header, events)
    assert list(iter_trace(fast)) == list(iter_trace(slow)) == [header, *events]


def _merge_cases():
    events = [{"seq": 0, "ev": "stream", "stream": 1}, {"seq": 3, "ev": "free", "addr": 5}, {"seq": 6, "ev": "x"}]
    first = EncodedLines().extended(array("q", [1, 2]).tobytes(), b'{"seq":1}\n{"seq":2}\n')
    lines = first.extended(array("q", [4, 7]).tobytes(), b'{"seq":4}\n{"seq":7}\n')
    assert list(first.seqs) == [1, 2], "extended makes new lines (a Ctrl-C between two updates tore them)"
    return events, lines


@pytest.mark.parametrize("core", ["native", "python"])
def test_events_merge_with_lines_written_already_by_seq(core, monkeypatch):
    """A flush writes the recorder's events and the native hooks' own trace lines, in one
    seq order (EncodedLines)."""
    if core == "python":
        monkeypatch.setattr(json_lines, "_native", lambda: None)
    elif json_lines._native() is None:
        pytest.skip("the C++ core is not built")
    events, lines = _merge_cases()
    merged = encode_lines(events, lines).decode().splitlines()
    assert [json.loads(line)["seq"] for line in merged] == [0, 1, 2, 3, 4, 6, 7]
    assert merged[1] == '{"seq":1}' and merged[3] == '{"seq":3,"ev":"free","addr":5}'
    assert encode_lines([], lines) == lines.data
    assert encode_lines(events, EncodedLines()) == encode_lines(events)


def test_the_lines_after_a_seq_are_those_the_file_lacks():
    _, lines = _merge_cases()
    assert lines.after(-1) is lines
    later = lines.after(2)
    assert list(later.seqs) == [4, 7] and later.data == b'{"seq":4}\n{"seq":7}\n' and later.last_seq == 7
    assert len(lines.after(7)) == 0 and lines.after(7).last_seq == -1


def test_lines_that_do_not_match_their_seqs_are_refused_by_the_core():
    """Fewer lines than seqs (a bug upstream) must not write a torn trace: the C++ merge gives
    up, and the Python merge writes what it holds."""
    native = json_lines._native()
    if native is None:
        pytest.skip("the C++ core is not built")
    assert native([{"seq": 0}], array("q", [1, 2]), b'{"seq":1}\n') is None
    assert native([{"seq": 0}], array("q", [1]), b'{"seq":1}\n{"seq":2}\n') is None
    assert native([{"ev": "no seq"}], array("q", [1]), b'{"seq":1}\n') is None


def test_a_core_built_before_lines_were_merged_leaves_the_merge_to_python(monkeypatch):
    """The native hooks rebuild themselves; an installed core may be older, its encode_lines
    taking the items alone: the flush must still write its lines."""
    native = json_lines._native()

    def old_core(items):
        return native(items) if native is not None else None

    monkeypatch.setattr(json_lines, "_native", lambda: old_core)
    events, lines = _merge_cases()
    assert [json.loads(line)["seq"] for line in encode_lines(events, lines).splitlines()] == [0, 1, 2, 3, 4, 6, 7]
