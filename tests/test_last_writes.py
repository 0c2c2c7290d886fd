"""The Python engine's last writes (streamrace/analysis/last_writes.py): the answers of a map
from every byte to its last write, without the flat lists' quadratic path on writes at
descending addresses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamrace.analysis.last_writes import LastWrites
from streamrace.analysis.sorted_blocks import LOAD

writes = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 40), st.one_of(st.none(), st.integers(1, 5))),
    min_size=1,
    max_size=120,
)


def _spans(last: LastWrites[int]) -> list[tuple[int, int, int]]:
    return list(last.under(0, 1 << 40))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(writes, st.integers(0, 200), st.integers(0, 60))
def test_it_answers_as_a_map_of_bytes(ops, lo, length):
    last: LastWrites[int] = LastWrites()
    byte: dict[int, int] = {}
    for start, size, value in ops:
        last.assign(start, start + size, value)
        for b in range(start, start + size):
            if value is None:
                byte.pop(b, None)
            else:
                byte[b] = value
    spans = _spans(last)
    assert all(a < b for a, b, _ in spans)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))  # disjoint, sorted
    assert {b: v for a, e, v in spans for b in range(a, e)} == byte
    assert len(last) == len(spans)
    for a, e, v in last.under(lo, lo + length):  # clipped to the query, every byte its last write
        assert lo <= a < e <= lo + length
        assert all(byte[b] == v for b in range(a, e))
    assert sum(e - a for a, e, _ in last.under(lo, lo + length)) == sum(b in byte for b in range(lo, lo + length))


def test_a_write_splits_the_spans_it_partly_covers():
    last: LastWrites[str] = LastWrites()
    last.assign(0, 100, "a")
    last.assign(40, 60, "b")
    assert _spans(last) == [(0, 40, "a"), (40, 60, "b"), (60, 100, "a")]
    last.assign(30, 70, None)
    assert _spans(last) == [(0, 30, "a"), (70, 100, "a")]
    last.assign(70, 100, "c")  # the same span again: its value replaced in place
    assert _spans(last) == [(0, 30, "a"), (70, 100, "c")]


def test_descending_writes_keep_every_chunk_small():
    """A write below every span moves the spans of one chunk only; the flat lists moved all
    of them, every time."""
    last: LastWrites[int] = LastWrites()
    blocks = 20 * LOAD
    for k in range(blocks):
        last.assign(10**9 - 64 * k, 10**9 - 64 * k + 32, k)
    assert len(last) == blocks
    chunks = [len(chunk) for chunk in last._spans._blocks]
    assert max(chunks) <= 2 * LOAD and len(chunks) >= 10
    assert [v for _, _, v in _spans(last)] == list(range(blocks - 1, -1, -1))
