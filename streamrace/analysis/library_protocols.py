"""Library protocols: findings about work a library does by a protocol of its own, set aside.

Some of torch's entry points do GPU work on the program's streams that the program never
sees: ``CUDAGraph.capture_begin`` and ``replay`` fill the graph's random-number state on their
own streams (docs/library-protocols.md). Checked by the rules of CUDA alone, that work races;
but it is torch's, and nothing the program could change would order it. A finding the user
cannot act on is a false positive to them. So the analysis matches each finding against a
shipped, reviewed list of protocols (streamrace/library_protocols.toml, one entry per protocol
with its reason, the versions it was read for and a test), the way ThreadSanitizer applies its
default suppressions. A finding one matches is the library's: it is reported apart
(``AnalysisResult.library_findings``, with ``Finding.protocol``) and fails nothing unless the
front end is asked to (``--library-findings fail``).

Whether a finding is the protocol's is decided from the trace alone: the ``library_call``
events say which events were made inside which library entry point (record/library_calls.py).
A finding is the protocol's when its block was allocated inside one of the entry points that
allocate the protocol's state (at most ``max_bytes``); when every write in it is one of the
protocol's own ops made inside one of its entry points, or the later write is, through a block
the protocol allocated; or when the graph's accesses in it were captured inside one of the
entry points that own their graphs (cudagraph trees' recording).
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from streamrace.analysis.findings import Access, Finding

PROTOCOLS_FILE = "library_protocols.toml"


@dataclass(frozen=True)
class LibraryProtocol:
    """One entry of the shipped list (its fields are documented in the file itself)."""

    id: str
    library: str
    versions: str
    where: str
    reason: str
    kinds: frozenset[str]
    max_bytes: int
    allocated_in: frozenset[str] = frozenset()
    writes_in: frozenset[str] = frozenset()
    writes_by: frozenset[str] = frozenset()
    captured_in: frozenset[str] = frozenset()

    def matches(self, finding: Finding, calls: LibraryCalls) -> bool:
        if finding.kind not in self.kinds:
            return False
        allocation = finding.allocation
        if (
            allocation is not None
            and self.allocated_in
            and allocation.size <= self.max_bytes
            and self._allocated_here(allocation.alloc_seq, calls)
        ):
            return True
        writes = [a for a in finding.accesses if a.access == "write"]
        if writes and self.writes_in:
            if all(self._protocol_write(a, calls) for a in writes):
                return True
            # The block went to the protocol's own new allocation, which it then wrote from
            # another stream than it allocated on: the program freed its tensor in order.
            reused = allocation.reused_by if allocation is not None else None
            if reused and self._allocated_here(reused.get("alloc_seq"), calls):
                later = next((a for a in finding.accesses if a.seq == reused.get("seq")), None)
                if later is not None and later.access == "write" and self._protocol_write(later, calls):
                    return True
        captured = [a for a in finding.accesses if a.graph is not None and a.captured is None]
        return bool(captured and self.captured_in) and all(calls.call_at(a.seq) in self.captured_in for a in captured)

    def _allocated_here(self, seq: object, calls: LibraryCalls) -> bool:
        return isinstance(seq, int) and calls.call_at(seq) in self.allocated_in

    def _protocol_write(self, access: Access, calls: LibraryCalls) -> bool:
        size = _extent(access.range)
        if access.op not in self.writes_by or size is None or size > self.max_bytes:
            return False
        # A replayed access is the captured op's: its own seq says where it was made.
        seq = access.captured.get("seq") if access.captured else access.seq
        return isinstance(seq, int) and calls.call_at(seq) in self.writes_in


def _extent(rng: Mapping[str, Any] | None) -> int | None:
    """The bytes a range spans (its ``nbytes``, or what its shape and strides reach), or None."""
    if not rng:
        return None
    if isinstance(rng.get("nbytes"), int):
        return int(rng["nbytes"])
    shape, stride, itemsize = rng.get("shape"), rng.get("stride"), rng.get("itemsize")
    if not isinstance(shape, list) or not isinstance(stride, list) or not isinstance(itemsize, int):
        return None
    if any(not isinstance(n, int) or n <= 0 for n in shape):
        return 0
    if any(not isinstance(st, int) for st in stride) or len(stride) != len(shape):
        return None
    return itemsize * (1 + sum((n - 1) * abs(st) for n, st in zip(shape, stride, strict=True)))


_KEYS = {
    "id": str,
    "library": str,
    "versions": str,
    "where": str,
    "reason": str,
    "kinds": list,
    "max_bytes": int,
    "allocated_in": list,
    "writes_in": list,
    "writes_by": list,
    "captured_in": list,
}
_REQUIRED = ("id", "library", "versions", "where", "reason", "kinds", "max_bytes")


def parse_protocols(text: str, known_kinds: Iterable[str]) -> tuple[LibraryProtocol, ...]:
    """The entries of a protocols file; ValueError naming the entry and the problem."""
    # Imported here: every analysis imports this module, and only one with library calls reads the file.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    doc = tomllib.loads(text)
    if set(doc) - {"protocol"}:
        raise ValueError(f"unknown table or key {sorted(set(doc) - {'protocol'})[0]!r}; entries are [[protocol]]")
    kinds = set(known_kinds)
    protocols = []
    for number, entry in enumerate(doc.get("protocol", []), start=1):
        where = f"protocol {number} ({entry.get('id', '?')})"
        unknown = sorted(set(entry) - set(_KEYS))
        missing = [key for key in _REQUIRED if key not in entry]
        if unknown or missing:
            raise ValueError(f"{where}: {'unknown key ' + repr(unknown[0]) if unknown else 'missing ' + missing[0]}")
        for key, kind in _KEYS.items():
            if key in entry and not isinstance(entry[key], kind):
                raise ValueError(f"{where}: {key!r} must be a {kind.__name__}")
        if not set(entry["kinds"]) <= kinds:
            raise ValueError(f"{where}: unknown finding kind in {entry['kinds']}")
        judged_by = entry.get("allocated_in") or entry.get("captured_in") or entry.get("writes_in")
        if not judged_by or (entry.get("writes_in") and not entry.get("writes_by")):
            raise ValueError(
                f"{where}: give allocated_in, captured_in, or writes_in with writes_by: what makes a finding its own"
            )
        protocols.append(
            LibraryProtocol(
                id=entry["id"],
                library=entry["library"],
                versions=" ".join(entry["versions"].split()),
                where=entry["where"],
                reason=" ".join(entry["reason"].split()),
                kinds=frozenset(entry["kinds"]),
                max_bytes=entry["max_bytes"],
                allocated_in=frozenset(entry.get("allocated_in", ())),
                writes_in=frozenset(entry.get("writes_in", ())),
                writes_by=frozenset(entry.get("writes_by", ())),
                captured_in=frozenset(entry.get("captured_in", ())),
            )
        )
    if len({p.id for p in protocols}) != len(protocols):
        raise ValueError("two protocols have the same id")
    return tuple(protocols)


@cache
def shipped() -> tuple[LibraryProtocol, ...]:
    """The list streamrace ships (a broken one is streamrace's bug: tests load it)."""
    from importlib import resources

    from streamrace.analysis.detectors import KINDS

    text = resources.files("streamrace").joinpath(PROTOCOLS_FILE).read_text(encoding="utf-8")
    return parse_protocols(text, KINDS)


def by_id(protocol_id: str) -> LibraryProtocol | None:
    return next((p for p in shipped() if p.id == protocol_id), None)


class LibraryCalls:
    """Which library call each seq of the trace was made inside (the ``library_call`` events:
    the events from ``first`` up to the call's own seq). Calls nest (a replay inside a
    capture's callback): the innermost, the one that began last, wins."""

    def __init__(self, events: Iterable[Mapping[str, Any]]) -> None:
        spans = sorted(
            (e["first"], e["seq"], e["call"])
            for e in events
            if isinstance(e.get("first"), int) and isinstance(e.get("seq"), int) and isinstance(e.get("call"), str)
        )
        self._starts = [first for first, _, _ in spans]
        self._spans = spans
        self._reach: list[int] = []  # the furthest end of the spans up to each: where a search stops
        for _, end, _ in spans:
            self._reach.append(max(end, self._reach[-1]) if self._reach else end)

    def __bool__(self) -> bool:
        return bool(self._spans)

    def call_at(self, seq: int) -> str | None:
        index = bisect.bisect_right(self._starts, seq) - 1
        while index >= 0 and self._reach[index] > seq:
            first, end, call = self._spans[index]
            if first <= seq < end:
                return call
            index -= 1
        return None


def set_aside(
    findings: Sequence[Finding], calls: LibraryCalls, protocols: Sequence[LibraryProtocol] | None = None
) -> tuple[list[Finding], list[Finding]]:
    """(the program's findings, the library's: each with ``protocol`` set), in order."""
    if not calls:  # nothing was made inside a library call: nothing to judge
        return list(findings), []
    protocols = shipped() if protocols is None else protocols
    own: list[Finding] = []
    library: list[Finding] = []
    for finding in findings:
        protocol = next((p for p in protocols if p.matches(finding, calls)), None)
        if protocol is None:
            own.append(finding)
        else:
            finding.protocol = protocol.id
            library.append(finding)
    return own, library
