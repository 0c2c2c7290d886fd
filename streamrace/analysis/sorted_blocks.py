"""The live blocks of one device, sorted by start address, for the lifetime checks.

One Python list would do, but inserting at its front moves every element: allocations made at
descending addresses (a common pool layout, and a hostile trace's cheapest attack) made the
analysis quadratic. Here the blocks sit in sorted chunks of at most ``2 * LOAD``; an insert or
a removal moves at most one chunk's elements, and a lookup is two bisections. Positions are
``(chunk, offset)`` pairs, always normalized (an offset is never past its chunk's end), with
``(len(chunks), 0)`` as the end.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class _Block(Protocol):
    @property
    def addr(self) -> int: ...

    @property
    def end(self) -> int: ...


B = TypeVar("B", bound=_Block)
Pos = tuple[int, int]

LOAD = 256


class SortedBlocks(Generic[B]):
    """Blocks ordered by ``addr`` (ties in insertion order)."""

    def __init__(self) -> None:
        self._starts: list[list[int]] = []
        self._blocks: list[list[B]] = []
        self._maxes: list[int] = []  # the last start of each chunk
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[B]:
        for chunk in self._blocks:
            yield from chunk

    @property
    def end(self) -> Pos:
        return len(self._blocks), 0

    def bisect_left(self, start: int) -> Pos:
        """The first position whose block starts at ``start`` or after."""
        c = bisect_left(self._maxes, start)
        if c == len(self._maxes):
            return self.end
        return c, bisect_left(self._starts[c], start)

    def bisect_right(self, start: int) -> Pos:
        """The first position whose block starts after ``start``."""
        c = bisect_right(self._maxes, start)
        if c == len(self._maxes):
            return self.end
        return c, bisect_right(self._starts[c], start)

    def normal(self, pos: Pos) -> Pos:
        """``pos`` made valid after a removal: past its chunk's end is the next chunk's start."""
        c, i = pos
        if c < len(self._blocks) and i >= len(self._blocks[c]):
            return c + 1, 0
        return pos

    def before(self, pos: Pos) -> Pos | None:
        """The position just before ``pos``, or None at the start."""
        c, i = pos
        if i > 0:
            return c, i - 1
        if c == 0:
            return None
        return c - 1, len(self._blocks[c - 1]) - 1

    def after(self, pos: Pos) -> Pos:
        c, i = pos
        return (c, i + 1) if i + 1 < len(self._blocks[c]) else (c + 1, 0)

    def __getitem__(self, pos: Pos) -> B:
        return self._blocks[pos[0]][pos[1]]

    def start(self, pos: Pos) -> int:
        return self._starts[pos[0]][pos[1]]

    def ending_after(self, below: int, after: int) -> list[B]:
        """The blocks that start before ``below``, walking back from there while they end
        after ``after``: nearest first. (For disjoint blocks: those that meet
        ``[after, below)``.) The hot path of every access, so no positions here."""
        found: list[B] = []
        c = bisect_left(self._maxes, below)
        if c == len(self._maxes):
            if not c:
                return found
            c -= 1
            i = len(self._starts[c])
        else:
            i = bisect_left(self._starts[c], below)
        while True:
            blocks = self._blocks[c]
            while i:
                i -= 1
                block = blocks[i]
                if block.end <= after:
                    return found
                found.append(block)
            if not c:
                return found
            c -= 1
            i = len(self._blocks[c])

    def last_at_or_before(self, start: int) -> B | None:
        """The last block that starts at ``start`` or before, or None."""
        c = bisect_right(self._maxes, start)
        if c < len(self._maxes):
            i = bisect_right(self._starts[c], start)
            if i:
                return self._blocks[c][i - 1]
        return self._blocks[c - 1][-1] if c else None

    def insert(self, block: B) -> None:
        """Add ``block`` before any block with the same start (where ``bisect_left`` points)."""
        start = block.addr
        if not self._maxes:
            self._starts.append([start])
            self._blocks.append([block])
            self._maxes.append(start)
            self._size = 1
            return
        c = min(bisect_left(self._maxes, start), len(self._maxes) - 1)
        starts, blocks = self._starts[c], self._blocks[c]
        i = bisect_left(starts, start)
        starts.insert(i, start)
        blocks.insert(i, block)
        self._maxes[c] = starts[-1]
        self._size += 1
        if len(starts) > 2 * LOAD:  # split: both halves stay sorted and in place
            self._starts[c : c + 1] = [starts[:LOAD], starts[LOAD:]]
            self._blocks[c : c + 1] = [blocks[:LOAD], blocks[LOAD:]]
            self._maxes[c : c + 1] = [starts[LOAD - 1], starts[-1]]

    def pop(self, pos: Pos) -> B:
        """Remove and return the block at ``pos``; ``normal(pos)`` is then the next block's."""
        c, i = pos
        starts, blocks = self._starts[c], self._blocks[c]
        del starts[i]
        block = blocks.pop(i)
        self._size -= 1
        if starts:
            self._maxes[c] = starts[-1]
        else:
            del self._starts[c], self._blocks[c], self._maxes[c]
        return block
