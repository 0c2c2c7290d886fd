"""``data-race``: two streams touch overlapping bytes with nothing ordering them
(docs/findings.md; the rule is docs/analysis.md §4). The engines detect it as a ``Race``."""

from __future__ import annotations

from streamrace.analysis.clocks import Domain
from streamrace.analysis.describe import (
    EARLIER,
    LATER,
    Describer,
    Suggestion,
    at,
    join_code,
    op_name,
    verb,
    what,
    where,
)
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.engine import Race
from streamrace.analysis.findings import Access, Finding

KIND = "data-race"

_HAZARD = {(True, False): "RAW", (False, True): "WAR", (True, True): "WAW"}


class DataRaceDetector(Detector[Race]):
    kind = KIND
    severity = "error"
    docs_anchor = "data-race-error"
    records = (Race,)
    rule = SarifRule(
        name="DataRace",
        short="Two streams touch overlapping bytes with nothing ordering them",
        full=(
            "Two streams touch overlapping bytes, at least one of them writes, and no chain of event "
            "records and waits orders the first before the second. At replay the graph may run them in "
            "either order or at once."
        ),
        fix=(
            "Record an event on the first stream after the first op and wait on it on the second before "
            "the second op, usually as `second.wait_stream(first)` just before the second access's line."
        ),
    )

    def describe(self, race: Race, describer: Describer) -> Finding:
        first, second = describer.access(race.earlier, race.how), describer.access(race.later, race.how)
        hazard = _HAZARD[race.earlier.write, race.later.write]
        aliasing = race.reused is not None
        allocation = None
        if race.lifetime is not None:
            allocation = describer.allocation(race.lifetime, (second, race.reused) if race.reused else None)
        message = (
            f"{what(second)} {verb(second)} bytes that {what(first)} {verb(first, past=True)}, "
            f"and nothing orders the two ({hazard})"
        )
        if aliasing:
            message += ": the block was freed and handed out again in between, so two tensors collide"
        join = join_code(second, first)
        return Finding(
            kind=KIND,
            hazard=hazard,
            accesses=[first, second],
            message=message + ".",
            missing_edge=f"no happens-before edge from {what(first)} to {what(second)}",
            fix=(
                f"record an event on {first.stream_label} after {op_name(first)}{at(first)} and wait on it "
                f"on {second.stream_label} before {op_name(second)}{at(second)}, e.g. "
                f"`{join}` just before {_before(second) or op_name(second)}"
                + where((join,), (second, LATER), (first, EARLIER), describer=describer)
            ),
            fix_code=join,
            aliasing=aliasing,
            graph=race.later.domain,
            allocation=allocation,
        )

    def suggestion(self, finding: Finding) -> Suggestion | None:
        """A join just before the later access."""
        if len(finding.accesses) != 2:
            return None
        earlier, later = finding.accesses
        before = _before(later)
        if not before:
            return None
        code = finding.fix_code or join_code(later, earlier)
        return Suggestion(code, before, f"order {op_name(later)} after {op_name(earlier)}")

    def unordered_launch(self, race: Race) -> tuple[Domain, int]:
        return race.later.domain, race.later.event["seq"]


def _before(access: Access) -> str | None:
    """The line the join goes before: the access's site (its caller's, for a shared helper)."""
    return access.site or access.location


DETECTOR = DataRaceDetector()
