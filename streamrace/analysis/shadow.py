"""Shadow memory: the earlier accesses of one domain on one device, and the race check.

Accesses are indexed by address granules of their own size class so that a new access only
meets the earlier accesses near it. An earlier access is forgotten once a later one that it happens before
covers its bytes and is a write (or both are reads): every future race with the forgotten
access is then also a race with the later one (docs/analysis.md §4), and the later one is
more recent, so the reported partner (the most recent racing access) does not change.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.clocks import NO_HOST, Domain, ordered_before
from streamrace.analysis.ranges import ByteRange, Overlap, covers, overlaps

# The index's levels (csrc/shadow.h): granules of 4 KiB, each level's 16 times the one's
# below, the last one holding any span.
LEVEL0_BITS = 12
LEVEL_STEP = 4
LEVELS = 14
# Above this many granules a lookup walks the level's sorted keys instead of probing each one.
_DIRECT_LOOKUPS = 8
# A bucket of this many accesses keeps its strided ones by residue (_Bucket).
LANES_FROM = 32


def level_bits(level: int) -> int:
    """The granule of ``level``, in bits."""
    return LEVEL0_BITS + level * LEVEL_STEP if level + 1 < LEVELS else 62


@dataclass(eq=False, slots=True)
class AccessRecord:
    """One range of one op: its epoch, its bytes and what the report needs to name it."""

    order: int  # global position among all accesses: reads before writes within an op
    stream: int
    tick: int
    write: bool
    rng: ByteRange
    domain: Domain
    device: int
    event: Mapping[str, Any]  # the op (or kernel) event
    raw: Mapping[str, Any]  # the range as written in the trace
    lifetimes: tuple[Any, ...] = ()  # the live allocation lifetimes it touched (at capture, for a replay's)
    forgotten: bool = False
    # A replay's access: the replay event; ``event`` is then the captured op it runs again.
    replay: Mapping[str, Any] | None = None


def issued_at(rec: AccessRecord) -> int:
    """The seq at which the program issued the access: its replay's, or its op's."""
    return rec.replay["seq"] if rec.replay is not None else rec.event["seq"]


def allocator_waited(old: AccessRecord, new: AccessRecord) -> bool:
    """Did the allocator order ``old`` before ``new``? Yes when every block ``old`` touched was
    freed after it with its stream named by ``record_stream``, and ``new`` reaches them only
    through later allocations: the caching allocator hands such a block out again only once
    the events it recorded on those streams at the free have completed (docs/analysis.md §5)."""
    if not old.lifetimes:
        return False
    issued = issued_at(old)
    for lifetime in old.lifetimes:
        free = lifetime.free
        if free is None or issued >= free["seq"] or old.stream not in lifetime.recorded:
            return False
        if any(lifetime is other for other in new.lifetimes):
            return False
    return True


class _Bucket:
    """The accesses of one granule of one level, split by what can share a byte with what.

    A lattice whose runs are shorter than the greatest common divisor of its strides (its
    step) holds bytes of a few residues modulo that step only: its lane, by the residue of its
    base. Another range can share a byte with it only where their residues meet (else
    ranges.overlaps finds them apart modulo their steps), so a lookup visits only the lane's
    residues near its own: the column slices of one matrix, whose spans all overlap, each meet
    only their own column. Every other access (dense, or a lattice that fills its step) is in
    ``plain``, met by every lookup of the granule. A bucket is split into lanes only once
    ``plain`` holds LANES_FROM accesses: a short list is cheaper to scan than to index."""

    __slots__ = ("lanes", "plain")

    def __init__(self) -> None:
        self.plain: list[AccessRecord] = []
        self.lanes: dict[int, _Lane] | None = None

    def add(self, rec: AccessRecord) -> None:
        rng = rec.rng
        step = rng.step
        lanes = self.lanes
        if lanes is None or step == 0 or rng.run >= step:
            plain = self.plain
            plain.append(rec)
            if lanes is None and len(plain) >= LANES_FROM:
                self.plain, self.lanes = [], {}
                for old in plain:
                    self.add(old)
            return
        lane = lanes.get(step)
        if lane is None:
            lane = lanes[step] = _Lane(step)
        lane.add(rec)


class _Lane:
    """The lattices of one step in one bucket, by the residue of their base modulo the step."""

    __slots__ = ("at", "residues", "step", "widest")

    def __init__(self, step: int) -> None:
        self.step = step
        self.at: dict[int, list[AccessRecord]] = {}
        self.residues: list[int] = []  # the keys of ``at``, sorted
        self.widest = 0  # the longest run any access of the lane had: how far back a residue reaches

    def add(self, rec: AccessRecord) -> None:
        residue = rec.rng.base % self.step
        here = self.at.get(residue)
        if here is None:
            self.at[residue] = [rec]
            insort(self.residues, residue)
        else:
            here.append(rec)
        self.widest = max(self.widest, rec.rng.run)

    def near(self, rng: ByteRange) -> list[int]:
        """The residues whose accesses may share a byte with ``rng``: all of them unless the
        bytes of ``rng`` lie in a few residues modulo the step (it is dense, or its own step
        is a multiple of this one), and then those that meet them."""
        step = self.step
        if rng.step % step or rng.run >= step:  # a dense range's step is 0
            return list(self.residues)
        reach = self.widest + rng.run - 1  # a residue r meets rng's iff r lies in (a - widest, a + run)
        if reach >= step:
            return list(self.residues)
        first = (rng.base - self.widest + 1) % step
        end = first + reach
        keys = self.residues
        if end <= step:
            return keys[bisect_left(keys, first) : bisect_left(keys, end)]
        return keys[bisect_left(keys, first) :] + keys[: bisect_left(keys, end - step)]

    def drop(self, residue: int) -> None:
        del self.at[residue]
        del self.residues[bisect_left(self.residues, residue)]


class ShadowMemory:
    """Earlier accesses of one (domain, device).

    An access sits in one bucket of the finest level whose granule is at least its span, keyed
    by its start granule (csrc/shadow.h's index, level for level), so a lookup meets a handful
    of accesses of its own size class. One 2 MiB granule per bucket, as before, made a lookup
    scan every earlier access near it: thousands of small eager accesses to one block, or one
    op of thousands of ranges, were quadratic. Within a bucket, strided accesses are kept by
    residue (``_Bucket``): interleaved strided writes, whose spans all overlap, were quadratic
    too. The decisions do not depend on the order accesses are met in: every earlier access
    that may share a byte with the new one is met, once."""

    def __init__(self) -> None:
        self._levels: list[dict[int, _Bucket]] = [{} for _ in range(LEVELS)]
        self._keys: list[list[int]] = [[] for _ in range(LEVELS)]  # each level's granules, sorted
        self._size = 0

    def __len__(self) -> int:
        """How many accesses are remembered (not forgotten)."""
        return self._size

    def check(
        self, new: AccessRecord, clock: Mapping[int, int], host: Mapping[int, int] = NO_HOST
    ) -> tuple[AccessRecord | None, Overlap]:
        """The most recent earlier access racing with ``new`` (issued at ``clock`` after
        ``host``, as ``ordered_before`` takes them), if any.

        Also forgets the earlier accesses ``new`` makes redundant. Returns the racing access
        and how its overlap was decided.
        """
        rng = new.rng
        lo, hi = rng.lo, rng.hi
        found: list[AccessRecord | None] = [None]
        how = [Overlap.NONE]
        for level, buckets in enumerate(self._levels):
            if not buckets:
                continue
            shift = level_bits(level)
            # An access of this level starts at most one granule before the one it meets.
            first, last = (lo >> shift) - 1, (hi - 1) >> shift
            keys = self._keys[level]
            if last < keys[0] or keys[-1] < first:
                continue  # all elsewhere
            if last - first < _DIRECT_LOOKUPS:
                granules = [g for g in range(first, last + 1) if g in buckets]
            else:  # a wide access: visit only the granules that exist in its span
                granules = keys[bisect_left(keys, first) : bisect_right(keys, last)]
            for g in granules:
                bucket = buckets[g]
                if bucket.plain:
                    self._scan(bucket.plain, new, clock, host, found, how)
                lanes = bucket.lanes
                if lanes:
                    for step, lane in list(lanes.items()):
                        for residue in lane.near(rng):
                            if self._scan(lane.at[residue], new, clock, host, found, how):
                                lane.drop(residue)
                        if not lane.at:
                            del lanes[step]
                if not bucket.plain and not bucket.lanes:
                    del buckets[g]
                    del keys[bisect_left(keys, g)]
        return found[0], how[0]

    def _scan(
        self,
        bucket: list[AccessRecord],
        new: AccessRecord,
        clock: Mapping[int, int],
        host: Mapping[int, int],
        found: list[AccessRecord | None],
        how: list[Overlap],
    ) -> bool:
        """Checks one bucket; drops the accesses ``new`` makes redundant. True when it is left
        empty."""
        rng, stream, write = new.rng, new.stream, new.write
        lo, hi = rng.lo, rng.hi
        racer = found[0]
        dropped = False
        for old in bucket:
            old_rng = old.rng
            # Most of a bucket is elsewhere in its granules: an access that shares no byte of
            # span with ``new`` is neither covered by it nor racing with it.
            if not (old_rng.lo < hi and lo < old_rng.hi):
                continue
            if ordered_before(old.stream, old.tick, clock, host):
                if (write or not old.write) and covers(rng, old_rng):
                    old.forgotten = dropped = True
            elif (write or old.write) and old.stream != stream and (racer is None or old.order > racer.order):
                hit = overlaps(old_rng, rng)
                if hit and not allocator_waited(old, new):
                    racer, how[0] = old, hit
        found[0] = racer
        if not dropped:
            return False
        live = [rec for rec in bucket if not rec.forgotten]
        self._size -= len(bucket) - len(live)
        bucket[:] = live
        return not live

    def insert(self, rec: AccessRecord) -> None:
        span = rec.rng.hi - rec.rng.lo
        level = 0
        while level + 1 < LEVELS and span > 1 << level_bits(level):
            level += 1
        key = rec.rng.lo >> level_bits(level)
        buckets = self._levels[level]
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = _Bucket()
            insort(self._keys[level], key)
        if bucket.lanes is None and len(bucket.plain) + 1 < LANES_FROM:
            bucket.plain.append(rec)  # _Bucket.add's first case, inline: most buckets are short
        else:
            bucket.add(rec)
        self._size += 1
