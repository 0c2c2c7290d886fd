"""Suppressions and baselines: accept known findings, so that a CI gate fails only on new ones.

A **suppressions file** (TOML, docs/ci.md) lists accepted findings, each by its ``signature``
or by a ``location`` (``file:line``) in any stack the finding shows: its accesses' (the
innermost frame or any caller), its allocation's and its free's. A location is read as the
report prints it: ``./``, a path through the working directory and a `` via helper`` suffix
are taken off. Optionally narrowed to one
``kind``, and each with a ``reason``::

    [[suppress]]
    signature = "b6f65c0d63ec7f36"
    reason = "SGLang #36547: fixed upstream, lands with the next bump"

A **baseline** is the JSON report of an earlier run (``--format json``): a finding whose
signature it holds is known, only new ones count.

Accepted findings leave ``findings`` and go to the report's ``suppressed`` list with who
accepted them and why; they do not count for the exit code. A suppression that matched
nothing is *stale*: the bug was fixed or moved, and the entry should go.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamrace.analysis.detectors import KINDS
from streamrace.analysis.findings import Access, Finding
from streamrace.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from streamrace.report import TraceResult

_SIGNATURE = re.compile(r"[0-9a-f]{16}")
_LOCATION = re.compile(r".+:[0-9]+")
_KEYS = ("signature", "location", "kind", "reason")

BY_BASELINE = "baseline"


@dataclass(frozen=True)
class Suppression:
    """One entry of a suppressions file; ``number`` is its position there, from 1."""

    number: int
    reason: str
    signature: str | None = None
    location: str | None = None
    kind: str | None = None

    @property
    def by(self) -> str:
        return "signature" if self.signature is not None else "location"

    def matches(self, finding: Finding) -> bool:
        if self.kind is not None and finding.kind != self.kind:
            return False
        if self.signature is not None:
            return finding.signature == self.signature
        if any(self.location in _locations(access) for access in finding.accesses):
            return True
        alloc = finding.allocation
        return alloc is not None and self.location in _frames(alloc.alloc_stack, alloc.free_stack)

    def describe(self) -> str:
        """``suppression 2 (location model.py:14)``: how messages name the entry."""
        what = self.signature if self.signature is not None else self.location
        kind = f", kind {self.kind}" if self.kind else ""
        return f"suppression {self.number} ({self.by} {what}{kind})"


def _locations(access: Access) -> set[str]:
    """Every ``file:line`` of an access's stack (and of the captured op's, for a replay): a
    report points at the caller's line when the innermost frame is a shared helper
    (``model.py:115 via rms_norm``), so an entry may name any frame, not only the innermost."""
    stacks = [access.stack]
    if access.captured:
        stacks.append(access.captured.get("stack") or [])
    found = _frames(*stacks)
    if access.location:
        found.add(access.location)
    return found


def _frames(*stacks: list[list[Any]]) -> set[str]:
    return {f"{frame[0]}:{frame[1]}" for stack in stacks for frame in stack if len(frame) >= 2}


def _as_reported(location: str) -> str:
    """A location as reports print it (and traces record it): ``model.py:115`` from
    ``./model.py:115``, from ``model.py:115 via rms_norm`` (a shared helper's caller, as the
    report shows it) and from a path through the working directory."""
    location = location.strip()
    location = re.sub(r" via \S+$", "", location)
    file, _, line = location.rpartition(":")
    if os.path.isabs(file):
        inside = os.path.relpath(file, os.getcwd())
        if not inside.startswith(os.pardir):
            file = inside
    file = posixpath.normpath(file.replace(os.sep, "/")) if file else file
    return f"{file}:{line}"


@dataclass(frozen=True)
class Suppressed:
    """A finding the gate accepted: by a suppression (``entry``) or by the baseline."""

    finding: Finding
    by: str  # "signature", "location" or "baseline"
    reason: str
    entry: int | None = None  # the suppression's number; None for the baseline

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "reason": self.reason, "entry": self.entry}


@dataclass(frozen=True)
class Gate:
    """What a CI gate accepts: suppressions and a baseline's signatures (both may be empty)."""

    suppressions: tuple[Suppression, ...] = ()
    baseline: frozenset[str] = frozenset()
    baseline_path: str | None = None
    source: str | None = None  # the suppressions file, for messages

    def __bool__(self) -> bool:
        return bool(self.suppressions or self.baseline_path)

    def split(self, findings: Iterable[Finding]) -> tuple[list[Finding], list[Suppressed]]:
        """The findings that still count, and those accepted (a suppression first, then the
        baseline)."""
        kept: list[Finding] = []
        accepted: list[Suppressed] = []
        for finding in findings:
            entry = next((s for s in self.suppressions if s.matches(finding)), None)
            if entry is not None:
                accepted.append(Suppressed(finding, entry.by, entry.reason, entry.number))
            elif finding.signature in self.baseline:
                accepted.append(Suppressed(finding, BY_BASELINE, f"in the baseline {self.baseline_path}"))
            else:
                kept.append(finding)
        return kept, accepted

    def apply(self, results: Sequence[TraceResult]) -> list[TraceResult]:
        """Each trace's result with its accepted findings moved to ``TraceResult.suppressed``."""
        out = []
        for item in results:
            kept, accepted = self.split(item.result.findings)
            result = dataclasses.replace(
                item.result, findings=kept, summary={**item.result.summary, "findings": len(kept)}
            )
            out.append(dataclasses.replace(item, result=result, suppressed=(*item.suppressed, *accepted)))
        return out

    def stale(self, used: Iterable[int]) -> list[Suppression]:
        """The suppressions whose number is not in ``used``: they matched nothing."""
        used = set(used)
        return [s for s in self.suppressions if s.number not in used]

    def stale_messages(self, used: Iterable[int]) -> list[str]:
        return [
            f"streamrace: warning: {self.source}: {entry.describe()} matched no finding; "
            f"remove it if the bug is fixed (reason given: {entry.reason})"
            for entry in self.stale(used)
        ]


def used_entries(results: Iterable[TraceResult]) -> set[int]:
    return {s.entry for item in results for s in item.suppressed if s.entry is not None}


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as src:
            return src.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def load_suppressions(path: str) -> tuple[Suppression, ...]:
    """Read and check a suppressions file; every problem is a one-line ``UsageError``."""
    raw = _read(path, "suppressions file")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not text: a suppressions file is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    unknown = sorted(set(doc) - {"suppress"})
    if unknown:
        raise UsageError(f"{path}: unknown table or key {unknown[0]!r}; entries are [[suppress]] tables")
    entries = doc.get("suppress", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{path}: 'suppress' must be an array of tables: write each entry as [[suppress]]")
    return tuple(_entry(path, number, entry) for number, entry in enumerate(entries, start=1))


def _entry(path: str, number: int, entry: dict[str, Any]) -> Suppression:
    def bad(problem: str) -> UsageError:
        return UsageError(f"{path}: suppression {number}: {problem}")

    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    for key in _KEYS:
        if key in entry and not isinstance(entry[key], str):
            raise bad(f"{key!r} must be a string")
    reason = entry.get("reason", "").strip()
    if not reason:
        raise bad("missing 'reason': say why this finding is accepted")
    signature, location, kind = entry.get("signature"), entry.get("location"), entry.get("kind")
    if (signature is None) == (location is None):
        raise bad("give exactly one of 'signature' or 'location'")
    if signature is not None and not _SIGNATURE.fullmatch(signature):
        raise bad(f"signature {signature!r} is not 16 lowercase hex digits, as reports print it")
    if location is not None:
        location = _as_reported(location)
        if not _LOCATION.fullmatch(location):
            raise bad(f"location {entry['location']!r} is not 'file:line'")
    if kind is not None and kind not in KINDS:
        raise bad(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    return Suppression(number, reason, signature, location, kind)


def load_baseline(path: str) -> frozenset[str]:
    """The finding signatures of an earlier JSON report; every problem is a one-line ``UsageError``."""
    raw = _read(path, "baseline file")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not text: a baseline is a JSON report (--format json)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}): a baseline is a JSON report") from None
    findings = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(findings, list) or "streamrace" not in doc:
        raise UsageError(f"{path}: not a streamrace JSON report (write one with --format json)")
    signatures = set()
    for number, finding in enumerate(findings, start=1):
        signature = finding.get("signature") if isinstance(finding, dict) else None
        if not isinstance(signature, str):
            raise UsageError(f"{path}: finding {number} has no 'signature'")
        signatures.add(signature)
    return frozenset(signatures)


def load_gate(suppressions: str | None = None, baseline: str | None = None) -> Gate:
    """The gate for ``--suppressions FILE`` and ``--baseline FILE`` (either may be None)."""
    return Gate(
        suppressions=load_suppressions(suppressions) if suppressions else (),
        baseline=load_baseline(baseline) if baseline else frozenset(),
        baseline_path=baseline,
        source=suppressions,
    )


__all__ = [
    "BY_BASELINE",
    "Gate",
    "Suppressed",
    "Suppression",
    "load_baseline",
    "load_gate",
    "load_suppressions",
    "used_entries",
]
