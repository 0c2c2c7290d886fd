"""Typed findings: what the analysis hands to reporters, the CLI, pytest and CI.

The JSON form (``to_dict``) is a documented, stable contract (docs/json-report.md): fields
are only ever added, never renamed or removed, within one major version of streamrace. The
finding kinds, with their severities, are their detectors' (streamrace/analysis/detectors/).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Access:
    """One side of a finding: an op (or a free) on a stream, and where the user issued it."""

    op: str
    stream: int
    stream_label: str
    access: str  # "read", "write", "free" (an unsafe free), "record_stream" (a lint) or "view" (a value made)
    seq: int
    location: str | None = None  # "file.py:LINE" of the innermost user frame
    stack: list[list[Any]] = field(default_factory=list)  # [[file, line, function], ...]
    graph: int | None = None
    range: dict[str, Any] | None = None
    inferred: bool = False
    # Where a fix points (streamrace/analysis/call_sites.py): the caller's "file.py:LINE" when
    # ``location`` is in a shared helper, a function the trace calls from several lines; else None.
    site: str | None = None
    # ``location`` is only near: a kernel the dispatcher never saw gets the next recorded event's line.
    near: bool = False
    # The stream as the source writes it (``s.kv``), valid in the function of the access's site
    # (streamrace/analysis/source_names.py); None when the source could not say.
    stream_code: str | None = None
    # A replay's access (the execution view): the captured op it runs again, as
    # {graph, seq, location, stack}; then ``location``, ``stack`` and ``seq`` are the replay's,
    # the line a fix goes before.
    captured: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Allocation:
    """The block a finding is about: where it was allocated, freed and, if so, reused."""

    addr: int
    size: int
    stream: int
    stream_label: str
    device: int = 0
    pool: list[int] | None = None
    alloc_seq: int | None = None
    alloc_location: str | None = None
    alloc_stack: list[list[Any]] = field(default_factory=list)
    free_seq: int | None = None
    free_location: str | None = None
    free_stack: list[list[Any]] = field(default_factory=list)
    reused_by: dict[str, Any] | None = None  # {op, stream, stream_label, seq, location, alloc_seq, alloc_location}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Finding:
    kind: str
    hazard: str | None  # "RAW", "WAR", "WAW" (None for lints)
    accesses: list[Access]
    message: str
    missing_edge: str | None = None
    fix: str | None = None
    aliasing: bool = False
    graph: int | None = None  # None: eager (outside any capture)
    allocation: Allocation | None = None
    count: int = 1
    graphs: list[int] = field(default_factory=list)
    fix_code: str | None = None  # the fix's join as one line of code: what the suggestion adds
    # The library protocol the finding is about (analysis/library_protocols.py), not the program's code.
    protocol: str | None = None

    @property
    def severity(self) -> str:
        """``error`` or ``warning``, as the kind's detector says."""
        # The detectors build findings, so they are imported here, not when this module is.
        from streamrace.analysis.detectors import detector

        return detector(self.kind).severity

    @property
    def signature(self) -> str:
        """Stable across runs: no addresses, handles or sequence numbers, only code and ops."""
        parts = [self.kind, self.hazard or ""]
        parts += [f"{a.access}:{a.op}@{a.location or '?'}" for a in self.accesses]
        if self.allocation is not None:
            parts.append(f"alloc@{self.allocation.alloc_location or '?'}")
        # surrogatepass: a trace string may hold a lone surrogate (JSON allows "\ud800")
        return hashlib.sha1("|".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "hazard": self.hazard,
            "aliasing": self.aliasing,
            "graph": self.graph,
            "graphs": self.graphs or ([self.graph] if self.graph is not None else []),
            "message": self.message,
            "accesses": [a.to_dict() for a in self.accesses],
            "allocation": self.allocation.to_dict() if self.allocation else None,
            "missing_edge": self.missing_edge,
            "fix": self.fix,
            "fix_code": self.fix_code,
            "signature": self.signature,
            "count": self.count,
            "protocol": self.protocol,
        }
