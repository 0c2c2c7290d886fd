"""What a finding kind's detector declares, and what a whole-trace pass is.

A detector owns one finding kind: its name, its severity, its SARIF rule, its section in
docs/findings.md, the detection records it describes (the engines' ``Race`` and so on, or
a pass's own) and the code that turns each into a ``Finding``. The per-access logic that makes
detections stays in the engines (streamrace/analysis/engine.py, csrc/engine.h); a check that
needs the whole trace (the graph-truth check) is a ``TracePass`` a detector brings along: it
sees the events on their way to the engine, then the engine's results, and makes detections
of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from streamrace.analysis.clocks import Domain

if TYPE_CHECKING:
    from streamrace.analysis.describe import Describer, Suggestion
    from streamrace.analysis.event_order import EventWatch
    from streamrace.analysis.findings import Finding

Severity = Literal["error", "warning"]

DetectionT = TypeVar("DetectionT")


@dataclass(frozen=True)
class SarifRule:
    """A kind's rule in the SARIF report (its id is the kind). The sentences are those of the
    kind's section in docs/findings.md, word for word (tests/test_detectors.py checks)."""

    name: str  # PascalCase, as SARIF names rules
    short: str  # shortDescription
    full: str  # fullDescription: what the finding means
    fix: str  # how to fix it, for the rule's help


@dataclass(frozen=True)
class EngineResults:
    """What a whole-trace pass reads once the engine has seen every event."""

    detections: Sequence[object]  # the engine's, in detection order
    # graph -> seqs of the launches the model reports as racing with an earlier conflicting
    # launch of that capture (``Detector.unordered_launch``)
    unordered: Mapping[int, frozenset[int]]


class TracePass(Protocol):
    """A check over the whole trace, beside the engine's one pass over the accesses."""

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
        """Pass every event through unchanged, looking at each on the way (or hand them on
        as they are, for a pass that reads none)."""
        ...

    def watch(self) -> EventWatch | None:
        """The events the pass reads, taken one at a time (the C++ core reading the trace's
        lines itself makes only those into Python objects); None: it must ``observe`` them."""
        ...

    def detections(self, results: EngineResults) -> list[object]:
        """The pass's own detections, once the engine is done."""
        ...

    def explains(self, detection: object) -> bool:
        """Whether an engine detection is one of the pass's own, seen from the side (a race the
        pass reports, with its cause, as a finding of its kind): it is left out."""
        ...


class EventCheck(Protocol):
    """A check that makes its detections from the events alone (padded_index.py's,
    static_outputs.py's): fed every event in order, it keeps them in ``found``."""

    @property
    def found(self) -> Sequence[object]: ...  # read-only here, so a check's list of its own records fits

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]: ...

    def watch(self) -> EventWatch: ...


class CheckPass:
    """An ``EventCheck`` as a ``TracePass``: it reads nothing of the engine's, so both engines
    give the same findings, and no engine detection is one of its own."""

    def __init__(self, check: EventCheck) -> None:
        self.check = check

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        return self.check.observe(events)

    def watch(self) -> EventWatch:
        return self.check.watch()

    def detections(self, results: EngineResults) -> list[object]:
        return list(self.check.found)

    def explains(self, detection: object) -> bool:
        return False


class Detector(ABC, Generic[DetectionT]):
    """One finding kind; subclasses set the class attributes and ``describe``."""

    kind: ClassVar[str]  # the finding's ``kind`` and its SARIF rule id
    severity: ClassVar[Severity]
    rule: ClassVar[SarifRule]
    docs_anchor: ClassVar[str]  # the anchor of the kind's section in docs/findings.md
    records: ClassVar[tuple[type, ...]]  # the detection records it describes
    # The finding's two accesses lack a happens-before edge (the report draws the missing edge);
    # a padded scatter's are ordered: its bug is what the first one left unwritten.
    pair_unordered: ClassVar[bool] = True

    @abstractmethod
    def describe(self, detection: DetectionT, describer: Describer) -> Finding:
        """The finding for one detection (one detected instance)."""

    def suggestion(self, finding: Finding) -> Suggestion | None:
        """The fix as a line of code before a source line, where the finding's structure says
        where it goes; None when it does not (the default)."""
        return None

    def dedup_key(self, detection: DetectionT) -> tuple[Hashable, Domain] | None:
        """(key, the finding's graph): two detections of this kind with equal keys describe to
        findings with equal signatures and counts, so where only the deduplicated findings are
        wanted one is described for both (detectors.deduplicated). None (the default): describe
        it to know."""
        return None

    def unordered_launch(self, detection: DetectionT) -> tuple[Domain, int] | None:
        """(domain, seq) of the launch this detection says runs unordered with an earlier
        conflicting access, for the graph-truth check; None when it says nothing of the kind."""
        return None

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """The whole-trace pass this kind needs on a trace with this header; None: none."""
        return None
