"""The last write of every byte, in program order: what a later read of it gets.

The execution view (docs/analysis.md §8) asks, at each read, which write it sees and through
which allocation that write went. This is an interval map from disjoint byte spans to the
value of their last write (a writer record and the lifetime the write went through): a
write assigns its span, splitting what it partly covers; a read looks up the spans under it.
Memory is bounded by the distinct spans the program writes, not by the number of writes.

The spans sit in ``SortedBlocks`` (sorted chunks), not in flat lists: a write below every
span inserted at the lists' front and moved all of them, so blocks written at descending
addresses made the analysis quadratic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from streamrace.analysis.sorted_blocks import SortedBlocks

V = TypeVar("V")


@dataclass(eq=False, slots=True)
class _Span(Generic[V]):
    addr: int  # the span's first byte (SortedBlocks orders by it)
    end: int
    value: V


class LastWrites(Generic[V]):
    """Disjoint spans ``[start, end)`` sorted by start, each with the value of its last write."""

    def __init__(self) -> None:
        self._spans: SortedBlocks[_Span[V]] = SortedBlocks()

    def __len__(self) -> int:
        return len(self._spans)

    def assign(self, lo: int, hi: int, value: V | None) -> None:
        """``[lo, hi)`` was last written with ``value``; None forgets what wrote it."""
        if lo >= hi:
            return
        spans = self._spans
        met = spans.ending_after(hi, lo)  # the spans that share a byte with it, last first
        if len(met) == 1 and value is not None and met[0].addr == lo and met[0].end == hi:
            met[0].value = value  # the same span as the last write of these bytes
            return
        for span in met:
            spans.pop(spans.bisect_left(span.addr))
        if met and met[-1].addr < lo:  # the part of the first span before ``lo`` stays
            spans.insert(_Span(met[-1].addr, lo, met[-1].value))
        if value is not None:
            spans.insert(_Span(lo, hi, value))
        if met and met[0].end > hi:  # and the part of the last one after ``hi``
            spans.insert(_Span(hi, met[0].end, met[0].value))

    def under(self, lo: int, hi: int) -> Iterator[tuple[int, int, V]]:
        """``(start, end, value)`` of each written span inside ``[lo, hi)``, clipped to it."""
        if lo >= hi:
            return
        for span in reversed(self._spans.ending_after(hi, lo)):
            yield max(span.addr, lo), min(span.end, hi), span.value
