"""Shadow memory: the earlier accesses of one domain on one device, and the race check.

Accesses are indexed by coarse address granules so that a new access only meets the earlier
accesses near it. An earlier access is forgotten once a later one that it happens before
covers its bytes and is a write (or both are reads): every future race with the forgotten
access is then also a race with the later one (docs/analysis.md §4), and the later one is
more recent, so the reported partner (the most recent racing access) does not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.clocks import NO_HOST, Domain, ordered_before
from streamrace.analysis.ranges import ByteRange, Overlap, covers, overlaps

GRANULE_BITS = 21  # 2 MiB: the allocator's small-segment size
# An access over more granules than this sits in one list that every lookup scans.
_MAX_GRANULES = 64


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


class ShadowMemory:
    """Earlier accesses of one (domain, device)."""

    def __init__(self) -> None:
        self._granules: dict[int, list[AccessRecord]] = {}
        self._wide: list[AccessRecord] = []

    def __len__(self) -> int:
        """How many accesses are remembered (not forgotten)."""
        live = {rec.order for bucket in self._granules.values() for rec in bucket if not rec.forgotten}
        return len(live) + sum(not rec.forgotten for rec in self._wide)

    def _granule_keys(self, first: int, last: int) -> list[int]:
        if first == last:
            return [first] if first in self._granules else []
        if last - first < 4 * _MAX_GRANULES:
            return [g for g in range(first, last + 1) if g in self._granules]
        # A huge range: cheaper to scan the granules that exist than every one it spans.
        return [g for g in self._granules if first <= g <= last]

    def check(
        self, new: AccessRecord, clock: Mapping[int, int], host: Mapping[int, int] = NO_HOST
    ) -> tuple[AccessRecord | None, Overlap]:
        """The most recent earlier access racing with ``new`` (issued at ``clock`` after
        ``host``, as ``ordered_before`` takes them), if any.

        Also forgets the earlier accesses ``new`` makes redundant. Returns the racing access
        and how its overlap was decided.
        """
        rng, stream, write = new.rng, new.stream, new.write
        first, last = rng.lo >> GRANULE_BITS, (rng.hi - 1) >> GRANULE_BITS
        keys = self._granule_keys(first, last)
        lists = [self._granules[g] for g in keys]
        if self._wide:
            lists.append(self._wide)
        racer: AccessRecord | None = None
        how = Overlap.NONE
        stale = False
        # An access spanning several granules is met once per granule: the checks repeat
        # harmlessly, cheaper than de-duplicating every lookup.
        for bucket in lists:
            for old in bucket:
                if old.forgotten:
                    stale = True
                elif ordered_before(old.stream, old.tick, clock, host):
                    if (write or not old.write) and covers(rng, old.rng):
                        old.forgotten = stale = True
                elif (write or old.write) and old.stream != stream and (racer is None or old.order > racer.order):
                    hit = overlaps(old.rng, rng)
                    if hit and not allocator_waited(old, new):
                        racer, how = old, hit
        if stale:
            self._compact(keys)
        return racer, how

    def _compact(self, keys: list[int]) -> None:
        for g in keys:
            live = [rec for rec in self._granules[g] if not rec.forgotten]
            if live:
                self._granules[g] = live
            else:
                del self._granules[g]
        if self._wide:
            self._wide = [rec for rec in self._wide if not rec.forgotten]

    def insert(self, rec: AccessRecord) -> None:
        first, last = rec.rng.lo >> GRANULE_BITS, (rec.rng.hi - 1) >> GRANULE_BITS
        if last - first >= _MAX_GRANULES:
            self._wide.append(rec)
            return
        for g in range(first, last + 1):
            bucket = self._granules.get(g)
            if bucket is None:
                self._granules[g] = [rec]
            else:
                bucket.append(rec)
