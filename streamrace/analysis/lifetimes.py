"""Allocation lifetimes: which block an access touched, and whether a free was safe.

PyTorch's caching allocator hands a freed block to a later allocation on the stream that
allocated it, unless ``record_stream`` named other users. So a free is unsafe when, at the
owner's next allocation in the domain of the free, another stream's use of the block is not
ordered before the owner: the freed-before-join hazard H1 (docs/analysis.md §5), whether or
not that allocation takes the block. A block whose owner allocates nothing more there is never
handed out while the use is pending, and is safe.

A lifetime drops its last uses as soon as nothing can read them again: at its free, unless it
awaits the owner's next allocation (then it keeps the uses in that domain), and once that
allocation or the end of the capture has judged it. Accesses and lifetimes refer to each
other, so this is what keeps a long trace's memory bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace.analysis.clocks import EAGER, NO_HOST, Domain, ordered_before
from streamrace.analysis.ranges import ByteRange, check_block, overlaps
from streamrace.analysis.shadow import AccessRecord
from streamrace.analysis.sorted_blocks import SortedBlocks


@dataclass(eq=False, slots=True)
class Lifetime:
    """One allocation of a block, from ``alloc`` to ``free``."""

    id: int
    addr: int
    size: int
    owner: int  # the allocating stream
    device: int
    alloc: dict[str, Any]  # the alloc event
    free: dict[str, Any] | None = None  # the free event, once freed
    recorded: set[int] = field(default_factory=set)  # streams named by record_stream
    # The last use of each non-owner stream, per domain: (domain, stream) -> the ranges of its
    # last op that touched the block, in order (the op's reads, then its writes).
    last_use: dict[tuple[Domain, int], list[AccessRecord]] = field(default_factory=dict)
    domain: Domain = EAGER  # where it was allocated: the eager domain or a capture
    # Allocated in a capture and written, while live, by an op of eager work or of another
    # graph: the program keeps its own state in it (docs/analysis.md §8.10, the escape check).
    kept: bool = False

    @property
    def end(self) -> int:
        return self.addr + self.size

    @classmethod
    def of_events(
        cls, alloc: Mapping[str, Any], free: Mapping[str, Any] | None = None, device: int | None = None
    ) -> Lifetime:
        """A lifetime made from its events alone (for a check outside the engines, to describe
        a block): ``device`` defaults to the alloc's."""
        if device is None:
            device = alloc.get("device") or 0
        return cls(0, alloc["addr"], alloc["size"], alloc["stream"], device, dict(alloc), dict(free) if free else None)


class Lifetimes:
    """The live blocks of every device, sorted by address (``SortedBlocks``: no quadratic path
    whatever order the allocations come in)."""

    def __init__(self) -> None:
        self._live: dict[int, SortedBlocks[Lifetime]] = {}
        self._count = 0
        self._in_domain: dict[Domain, dict[int, Lifetime]] = {}  # capture -> lifetimes it used
        # (domain, owner) -> freed lifetimes that await the owner's next allocation there
        self._pending: dict[tuple[Domain, int], list[Lifetime]] = {}

    def _device(self, device: int) -> SortedBlocks[Lifetime]:
        blocks = self._live.get(device)
        if blocks is None:
            blocks = self._live[device] = SortedBlocks()
        return blocks

    def alloc(self, event: Mapping[str, Any], device: int, domain: Domain = EAGER) -> Lifetime:
        """Start a lifetime; a live block it overlaps (a malformed trace) ends silently."""
        addr, size = event["addr"], event["size"]
        check_block(addr, size)
        live = self._device(device)
        lo = live.bisect_left(addr)
        while (prev := live.before(lo)) is not None and live[prev].end > addr:
            lo = prev
        ended = 0  # the blocks from lo that start before the new one's end
        pos, end = lo, addr + size
        while pos != live.end and live.start(pos) < end:
            ended += 1
            pos = live.after(pos)
        for _ in range(ended):
            live.pop(lo).last_use.clear()
            lo = live.normal(lo)
        lifetime = Lifetime(self._count, addr, size, event["stream"], device, dict(event), domain=domain)
        self._count += 1
        live.insert(lifetime)
        return lifetime

    def free(self, addr: int, device: int, event: Mapping[str, Any]) -> Lifetime | None:
        """End the lifetime of the block at ``addr``; None if the trace never allocated it."""
        live = self._device(device)
        pos = live.bisect_left(addr)
        if pos == live.end or live.start(pos) != addr:
            return None
        lifetime = live.pop(pos)
        lifetime.free = dict(event)
        return lifetime

    def await_reuse(self, lifetime: Lifetime, domain: Domain) -> None:
        """``lifetime`` was freed while its owner was in ``domain``: judge it at the owner's next
        allocation there (``settle``)."""
        uses = lifetime.last_use
        if any(where == domain for where, _ in uses):
            lifetime.last_use = {key: rec for key, rec in uses.items() if key[0] == domain}
            self._pending.setdefault((domain, lifetime.owner), []).append(lifetime)
        else:
            uses.clear()

    def settle(
        self, owner: int, domain: Domain, clock: Mapping[int, int], host: Mapping[int, int] = NO_HOST
    ) -> list[tuple[Lifetime, list[list[AccessRecord]]]]:
        """``owner`` allocates in ``domain`` at ``clock`` after ``host`` (``ordered_before``):
        judge the blocks it freed there.

        Returns the unsafe ones with their unordered uses (each the ranges of one op); every
        judged block is settled for good (clocks only grow).
        """
        unsafe = []
        for lifetime in self._pending.pop((domain, owner), ()):
            uses = self.unordered_uses(lifetime, domain, clock, host)
            lifetime.last_use.clear()
            if uses:
                unsafe.append((lifetime, uses))
        return unsafe

    def containing(self, addr: int, device: int) -> Lifetime | None:
        block = self._device(device).last_at_or_before(addr)
        return block if block is not None and addr < block.end else None

    def record_stream(self, addr: int, stream: int, device: int) -> Lifetime | None:
        """``record_stream``: ``stream``'s uses of the block at ``addr`` no longer make its free unsafe.

        Returns the block (None if unknown); on its own stream the call does nothing (H10).
        """
        lifetime = self.containing(addr, device)
        if lifetime is not None and stream != lifetime.owner:
            lifetime.recorded.add(stream)
        return lifetime

    def touched(self, rng: ByteRange, device: int) -> tuple[Lifetime, ...]:
        """The live lifetimes that share a byte with ``rng``, by address."""
        found: list[Lifetime] = []
        for block in self._device(device).ending_after(rng.hi, rng.lo):
            inside = block.addr <= rng.lo and rng.hi <= block.end
            if inside or overlaps(rng, ByteRange(block.addr, (), block.size)):
                found.append(block)
        found.reverse()
        return tuple(found)

    def note_use(self, rec: AccessRecord) -> None:
        """Remember ``rec`` as (a range of) its stream's last use of every live block it
        touched (a replay's access may go through lifetimes freed since its capture)."""
        for lifetime in rec.lifetimes:
            if rec.stream != lifetime.owner and lifetime.free is None:
                key = (rec.domain, rec.stream)
                last = lifetime.last_use.get(key)
                if last is not None and last[-1].tick == rec.tick:
                    last.append(rec)  # another range of the same op
                else:
                    lifetime.last_use[key] = [rec]
                if rec.domain is not EAGER:
                    self._in_domain.setdefault(rec.domain, {})[lifetime.id] = lifetime

    def end_domain(self, graph: int) -> None:
        """A capture ended: its uses can no longer make a free unsafe."""
        for key in [key for key in self._pending if key[0] == graph]:
            for lifetime in self._pending.pop(key):
                lifetime.last_use.clear()
        for lifetime in self._in_domain.pop(graph, {}).values():
            for key in [key for key in lifetime.last_use if key[0] == graph]:
                del lifetime.last_use[key]

    @staticmethod
    def unordered_uses(
        lifetime: Lifetime, domain: Domain, clock: Mapping[int, int], host: Mapping[int, int] = NO_HOST
    ) -> list[list[AccessRecord]]:
        """Uses of other streams in ``domain`` not ordered before ``clock`` (after ``host``) nor
        covered by record_stream: the ranges of each one's last op, by the order of that op's
        last range."""
        uses = [
            recs
            for (where, stream), recs in lifetime.last_use.items()
            if where == domain
            and stream not in lifetime.recorded
            and not ordered_before(stream, recs[-1].tick, clock, host)
        ]
        uses.sort(key=lambda recs: recs[-1].order)
        return uses
