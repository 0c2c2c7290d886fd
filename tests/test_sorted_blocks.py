"""The live-block index of the Python engine: the answers of one sorted list, without its
quadratic path on allocations at descending addresses (streamrace/analysis/sorted_blocks.py)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrace.analysis import analyze
from streamrace.analysis.core import cpp_available
from streamrace.analysis.sorted_blocks import LOAD, SortedBlocks
from streamrace.trace.builder import TraceBuilder


@dataclass(eq=False)
class Block:
    addr: int
    size: int = 16

    @property
    def end(self) -> int:
        return self.addr + self.size


def _chunks(blocks: SortedBlocks) -> list[int]:
    return [len(chunk) for chunk in blocks._blocks]


operations = st.lists(
    st.tuples(st.sampled_from(["insert", "pop", "query"]), st.integers(0, 3000)), min_size=1, max_size=400
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(operations)
def test_it_answers_as_one_sorted_list(ops):
    blocks: SortedBlocks[Block] = SortedBlocks()
    reference: list[Block] = []
    for op, value in ops:
        starts = [b.addr for b in reference]
        if op == "insert":
            block = Block(value * 8)
            reference.insert(bisect_left(starts, block.addr), block)
            blocks.insert(block)
        elif op == "pop" and reference:
            pos = blocks.bisect_left(value * 8)
            if pos != blocks.end:
                assert blocks.pop(pos) is reference.pop(bisect_left(starts, value * 8))
        else:
            at = value * 8
            right = bisect_right(starts, at)
            assert blocks.last_at_or_before(at) is (reference[right - 1] if right else None)
            left = bisect_left(starts, at)
            expected = []
            for block in reversed(reference[:left]):
                if block.end <= at - 40:
                    break
                expected.append(block)
            assert blocks.ending_after(at, at - 40) == expected
        assert list(blocks) == reference and len(blocks) == len(reference)
    assert all(0 < n <= 2 * LOAD for n in _chunks(blocks))


def test_descending_inserts_keep_every_chunk_small():
    """An insert moves the elements of one chunk only; at descending addresses a flat list
    moved all of them, every time."""
    blocks: SortedBlocks[Block] = SortedBlocks()
    for k in range(20 * LOAD):
        blocks.insert(Block(10**9 - 64 * k))
    assert len(blocks) == 20 * LOAD
    assert max(_chunks(blocks)) <= 2 * LOAD and len(_chunks(blocks)) >= 10
    assert [b.addr for b in blocks] == sorted(b.addr for b in blocks)


def _descending_trace() -> object:
    """Many live blocks at descending addresses, each used by another stream and some freed
    out of order: unsafe frees and races the index must find as before."""
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        blocks = [tb.alloc(256, main, addr=(1 << 40) - 512 * k, at=f"m.py:{k % 7 + 1}") for k in range(3000)]
        tb.wait_stream(side, main)
        for k, x in enumerate(blocks[::50]):
            tb.op("aten::sum", side, reads=[tb.span(x, 256)], at=f"m.py:{20 + k % 3}")
        for x in blocks[::97]:
            tb.free(x, at="m.py:30")
        tb.alloc(256, main, at="m.py:31")
        tb.op("aten::fill_", main, writes=[tb.span(blocks[100], 256)], at="m.py:32")
        tb.wait_stream(main, side)
    return tb.trace()


@pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")
def test_both_engines_agree_on_descending_allocations(monkeypatch):
    trace = _descending_trace()
    results = []
    for core in ("python", "cpp"):
        monkeypatch.setenv("STREAMRACE_CORE", core)
        results.append(analyze(trace).to_dict("0"))
    assert results[0] == results[1]
    kinds = {f["kind"] for f in results[0]["findings"]}
    assert kinds == {"unsafe-free", "data-race"}, kinds
