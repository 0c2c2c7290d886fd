"""The last write of every byte, in program order: what a later read of it gets.

The execution view (docs/analysis.md §8) asks, at each read, which write it sees and through
which allocation that write went. This is an interval map from disjoint byte spans to the
value of their last write (a writer record and the lifetime the write went through): a
write assigns its span, splitting what it partly covers; a read looks up the spans under it.
Memory is bounded by the distinct spans the program writes, not by the number of writes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class LastWrites(Generic[V]):
    """Disjoint spans ``[start, end)`` sorted by start, each with the value of its last write."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._values: list[V] = []

    def __len__(self) -> int:
        return len(self._starts)

    def _overlapping(self, lo: int, hi: int) -> tuple[int, int]:
        """Indices ``[j, k)`` of the spans that share a byte with ``[lo, hi)``."""
        j = bisect_right(self._starts, lo) - 1
        if j < 0 or self._ends[j] <= lo:
            j += 1
        return j, max(j, bisect_left(self._starts, hi))

    def assign(self, lo: int, hi: int, value: V | None) -> None:
        """``[lo, hi)`` was last written with ``value``; None forgets what wrote it."""
        if lo >= hi:
            return
        j, k = self._overlapping(lo, hi)
        starts, ends, values = [], [], []
        if j < k and self._starts[j] < lo:  # the part of the first span before ``lo`` stays
            starts.append(self._starts[j])
            ends.append(lo)
            values.append(self._values[j])
        if value is not None:
            starts.append(lo)
            ends.append(hi)
            values.append(value)
        if j < k and self._ends[k - 1] > hi:  # and the part of the last one after ``hi``
            starts.append(hi)
            ends.append(self._ends[k - 1])
            values.append(self._values[k - 1])
        self._starts[j:k] = starts
        self._ends[j:k] = ends
        self._values[j:k] = values

    def under(self, lo: int, hi: int) -> Iterator[tuple[int, int, V]]:
        """``(start, end, value)`` of each written span inside ``[lo, hi)``, clipped to it."""
        j, k = self._overlapping(lo, hi)
        for i in range(j, k):
            yield max(self._starts[i], lo), min(self._ends[i], hi), self._values[i]
