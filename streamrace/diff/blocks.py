"""The allocator's decisions behind an aliasing finding, read back from a trace's allocations.

Whether a freed block is handed out again depends on sizes: PyTorch's caching allocator rounds
a request up to a multiple of 512 bytes, serves a rounded size of at most 1 MiB from its small
pool (2 MiB segments) and a larger one from its large pool, and gives a freed block only to a
later request of its own stream, pool and size class (docs/analysis.md §5). So the same
freed-before-join bug is manifest in one run (the next allocation took the block) and latent
in another (it came from elsewhere). ``AllocationTable`` keeps a trace's allocations, each at
its call site, so that a diff can say what the allocation that took the block in one run got
in the other.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

ROUNDING = 512  # kMinBlockSize: every request is rounded up to a multiple of it
SMALL_POOL_MAX = 1 << 20  # kSmallSize: a rounded size up to this comes from the small pool


def rounded(size: int) -> int:
    """The block size the allocator reserves for a request of ``size`` bytes."""
    return max(ROUNDING, -(-size // ROUNDING) * ROUNDING)


def size_class(size: int) -> str:
    """``small`` or ``large``: the allocator's pool for a request of ``size`` bytes."""
    return "small" if rounded(size) <= SMALL_POOL_MAX else "large"


@dataclass(frozen=True)
class AllocationRecord:
    """One ``alloc`` event: the requested size, the stream, the graph pool and the call site."""

    seq: int
    addr: int
    size: int
    stream: int
    pool: list[int] | None
    location: str | None  # "file.py:LINE" of the innermost user frame

    def to_dict(self, freed: tuple[int, int] | None, label: str) -> dict[str, Any]:
        """The JSON form; ``freed``: the freed block's (addr, rounded size) in the same trace,
        to say whether this allocation got it (None: that trace has no such block)."""
        same = None if freed is None else freed[0] <= self.addr < freed[0] + freed[1]
        return {
            "location": self.location,
            "seq": self.seq,
            "stream_label": label,
            "requested": self.size,
            "rounded": rounded(self.size),
            "pool": size_class(self.size),
            "graph_pool": self.pool,
            "same_block": same,
        }


class AllocationTable:
    """A trace's allocations in seq order, found by seq, by stream and by call site."""

    def __init__(self) -> None:
        self._locations: dict[int, str | None] = {}  # stack id -> its innermost frame
        self._records: list[AllocationRecord] = []
        self._by_seq: dict[int, AllocationRecord] = {}

    def observe(self, events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Pass the events through, keeping the allocations (and the stacks they name)."""
        for event in events:
            kind = event.get("ev")
            if kind == "stack":
                frames = event.get("frames") or []
                self._locations[event["id"]] = f"{frames[0][0]}:{frames[0][1]}" if frames else None
            elif kind == "alloc":
                record = AllocationRecord(
                    event["seq"],
                    event["addr"],
                    event["size"],
                    event["stream"],
                    event.get("pool"),
                    self._locations.get(event.get("stack", -1)),
                )
                self._records.append(record)
                self._by_seq[record.seq] = record
            yield event

    def at_seq(self, seq: int | None) -> AllocationRecord | None:
        return self._by_seq.get(seq) if seq is not None else None

    def _after(self, seq: int) -> Iterator[AllocationRecord]:
        start = bisect.bisect_right(self._records, seq, key=lambda record: record.seq)
        return iter(self._records[start:])

    def next_on(self, stream: int, after: int, location: str | None = None) -> AllocationRecord | None:
        """The first allocation on ``stream`` after seq ``after`` (at ``location``, if given)."""
        for record in self._after(after):
            if record.stream == stream and (location is None or record.location == location):
                return record
        return None

    def ordinal(self, record: AllocationRecord) -> int:
        """How many allocations at ``record``'s call site came before it: its program position."""
        return sum(1 for other in self._records if other.location == record.location and other.seq < record.seq)

    def nth_at(self, location: str | None, index: int) -> AllocationRecord | None:
        """The ``index``-th allocation (from 0) at the call site ``location``."""
        found = [record for record in self._records if record.location == location]
        return found[index] if location is not None and index < len(found) else None
