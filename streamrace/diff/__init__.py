"""``streamrace diff A B``: the findings that appear, disappear and persist between two traces.

A finding is matched by its signature (``Finding.signature``, the one dedup and suppressions
use). One finding changes signature between runs without being another bug: an unsafe free
that the allocator's reuse of the block made manifest is folded with the access that reused
it, so its later access is that write, where the latent form of the same bug has the free.
``bug_signature`` is the signature that finding has unfolded, so the two forms match and the
diff says the bug persists with its aliasing flipped.

For an aliasing finding that comes, goes or flips, ``explain`` reads the allocator's decisions
back from both traces (``streamrace.diff.blocks``): the freed block's size, size class, pool
and stream, the allocation that took it in one run, and what that same allocation (its call
site, at the same program position) got in the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.detectors import UNSAFE_FREE
from streamrace.analysis.findings import Access, Finding
from streamrace.diff.blocks import AllocationTable, rounded, size_class

APPEARED, DISAPPEARED, PERSISTED = "appeared", "disappeared", "persisted"
MANIFEST, LATENT, ABSENT = "manifest", "latent", "absent"


def bug_signature(finding: Finding) -> str:
    """The finding's signature, an unsafe free folded with the access that reused its block
    signed as its latent form (the use, then the free), as the engine reports it unreused."""
    alloc = finding.allocation
    if finding.kind != UNSAFE_FREE or not finding.aliasing or alloc is None or len(finding.accesses) != 2:
        return finding.signature
    free = Access("free", alloc.stream, alloc.stream_label, "free", alloc.free_seq or 0, location=alloc.free_location)
    return dataclasses.replace(finding, accesses=[finding.accesses[0], free]).signature


@dataclass(frozen=True)
class Side:
    """One run's findings and the allocations its trace made."""

    path: str
    findings: Sequence[Finding]
    allocations: AllocationTable


@dataclass
class DiffEntry:
    """One bug of either run: ``a`` and ``b`` its finding in each (None where it is absent)."""

    change: str  # APPEARED, DISAPPEARED or PERSISTED
    a: Finding | None
    b: Finding | None
    block: dict[str, Any] | None = None  # the allocator's decisions (``explain``), for aliasing findings

    @property
    def finding(self) -> Finding:
        """The finding to show: the new run's, where it has one."""
        found = self.b or self.a
        assert found is not None
        return found

    @property
    def flipped(self) -> bool:
        return self.a is not None and self.b is not None and self.a.aliasing != self.b.aliasing

    def to_dict(self) -> dict[str, Any]:
        shown = self.finding
        return {
            "kind": shown.kind,
            "severity": shown.severity,
            "hazard": shown.hazard,
            "signature": {"a": _signature(self.a), "b": _signature(self.b)},
            "aliasing": {"a": _aliasing(self.a), "b": _aliasing(self.b)},
            "a": self.a.to_dict() if self.a else None,
            "b": self.b.to_dict() if self.b else None,
            "block": self.block,
        }


def _signature(finding: Finding | None) -> str | None:
    return finding.signature if finding else None


def _aliasing(finding: Finding | None) -> bool | None:
    return finding.aliasing if finding else None


def _by_bug(findings: Sequence[Finding]) -> dict[str, Finding]:
    """One finding per bug signature, in order of first occurrence; of a bug seen both folded
    and not (reused in one graph, not in another), the folded one: the block was reused."""
    bugs: dict[str, Finding] = {}
    for finding in findings:
        key = bug_signature(finding)
        if key not in bugs or (finding.aliasing and not bugs[key].aliasing):
            bugs[key] = finding
    return bugs


def compare(a: Side, b: Side) -> list[DiffEntry]:
    """The entries of the diff: B's findings in their order (appeared or persisted), then the
    ones only A has (disappeared), each aliasing one that came, went or flipped explained."""
    in_a, in_b = _by_bug(a.findings), _by_bug(b.findings)
    entries = [DiffEntry(PERSISTED if key in in_a else APPEARED, in_a.get(key), found) for key, found in in_b.items()]
    entries += [DiffEntry(DISAPPEARED, found, None) for key, found in in_a.items() if key not in in_b]
    for entry in entries:
        aliased = any(f is not None and f.aliasing for f in (entry.a, entry.b))
        if aliased and (entry.change != PERSISTED or entry.flipped):
            entry.block = explain(entry, a, b)
    return entries


def explain(entry: DiffEntry, a: Side, b: Side) -> dict[str, Any] | None:
    """The allocator's decisions that made the finding aliasing in one run and not the other."""
    shown = entry.a if entry.a is not None and entry.a.aliasing else entry.finding
    freed = shown.allocation
    if freed is None:
        return None
    # The allocation that took the block where one did: its call site is the one to follow.
    taker, position = None, 0
    for finding, side in ((entry.a, a), (entry.b, b)):
        reuse = finding.allocation.reused_by if finding is not None and finding.allocation else None
        if taker is None and reuse:
            taker = side.allocations.at_seq(reuse.get("alloc_seq"))
            position = side.allocations.ordinal(taker) if taker is not None else 0
    sides = {
        name: _side(finding, side, taker.location if taker else None, position)
        for name, finding, side in (("a", entry.a, a), ("b", entry.b, b))
    }
    return {
        "freed": {
            "alloc_location": freed.alloc_location,
            "free_location": freed.free_location,
            "stream_label": freed.stream_label,
            "requested": freed.size,
            "rounded": rounded(freed.size),
            "pool": size_class(freed.size),
            "graph_pool": freed.pool,
        },
        **sides,
    }


def _side(finding: Finding | None, side: Side, site: str | None, position: int) -> dict[str, Any]:
    """One run's part: the hazard's state there, the allocation that reused the block, and
    the allocation at the taker's call site (after this run's free of the block, else at the
    same program position), or the owner's next allocation after the free when no run reused it."""
    table = side.allocations
    freed = finding.allocation if finding is not None else None
    block = (freed.addr, rounded(freed.size)) if freed is not None else None
    reuse = freed.reused_by if freed is not None else None
    taker = table.at_seq(reuse.get("alloc_seq")) if reuse else None
    mine = None
    if freed is not None and freed.free_seq is not None:
        mine = table.next_on(freed.stream, freed.free_seq, site)
    if mine is None and site is not None:
        mine = table.nth_at(site, position)
    state = ABSENT if finding is None else MANIFEST if finding.aliasing else LATENT
    label = freed.stream_label if freed is not None else None

    def record(found: Any) -> dict[str, Any] | None:
        if found is None:
            return None
        return found.to_dict(block, label if freed is not None and found.stream == freed.stream else None)

    return {"hazard": state, "reused_by": record(taker), "allocation": record(mine)}
