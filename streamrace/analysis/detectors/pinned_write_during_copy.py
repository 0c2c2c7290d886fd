"""``pinned-write-during-copy``: the host writes pinned memory that a copy to the device still
reads (an eager ``non_blocking`` H2D copy, or a replay of a graph that captured one), so the
device gets some of the new bytes (docs/findings.md; the rule is docs/analysis.md §8.11;
HAZARDS.md M1).

The check (streamrace/analysis/host_memory.py) is a pass over the events; it reads nothing of
the engine's, so both engines give the same findings. This detector brings the pass for all
three pinned-memory kinds (M1, M2, M3): it runs for traces that recorded pinned host memory
(format 1.5 and later).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer
from streamrace.analysis.detectors.detector import CheckPass, Detector, SarifRule, TracePass
from streamrace.analysis.detectors.pinned_words import describe_host_race
from streamrace.analysis.findings import Finding
from streamrace.analysis.ranges import ByteRange

KIND = "pinned-write-during-copy"


@dataclass(eq=False)
class DeviceUse:
    """A device copy's use of host bytes: an eager op, or (``replay`` set) a captured op run again
    by a replay of its graph, placed at the replay on the replay's stream."""

    stream: int
    tick: int
    event: Mapping[str, Any]  # the op (a replay's: the captured op)
    write: bool  # the copy writes the host bytes (D2H)
    rng: ByteRange
    replay: Mapping[str, Any] | None = None
    # The clock of its stream when issued, kept only while some kernel that polls host bytes
    # was pending then: whether that kernel is ordered before it (a host signal releases it).
    issued_after: Mapping[int, int] | None = None


@dataclass(eq=False)
class PinnedWriteDuringCopy:
    """``host`` (a host_op) wrote bytes that ``use`` (an H2D copy not yet done) reads; ``block``:
    the pinned block's host_alloc, when seen; ``count``: the same pair again (a loop)."""

    host: Mapping[str, Any]
    host_write: bool
    use: DeviceUse
    block: Mapping[str, Any] | None
    count: int = 1
    last_seq: int = -1  # the latest host access counted


class PinnedWriteDuringCopyDetector(Detector[PinnedWriteDuringCopy]):
    kind = KIND
    severity = "error"
    docs_anchor = "pinned-write-during-copy-error"
    records = (PinnedWriteDuringCopy,)
    rule = SarifRule(
        name="PinnedWriteDuringCopy",
        short="The host writes pinned memory that a copy to the device is still reading",
        full=(
            "A non_blocking copy from pinned host memory to the device (or a replay of a graph that "
            "captured one) was issued, and the host wrote those bytes before anything made it wait for the "
            "copy. The copy runs later, on its stream, and reads some of the new bytes: the device gets the "
            "next step's inputs, or a mix."
        ),
        fix=(
            "Double-buffer the staging tensor (the host fills the other buffer while the copy reads this "
            "one), or record an event after the copy and synchronize it before the host writes the buffer "
            "again."
        ),
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """Host memory is in format 1.5 traces that say they recorded it (``host_memory``); a
        recording of the captures alone has none of the host's work. A recording that made no
        host event (``host_events: 0``, 1.6) has nothing for it to find: each finding needs a
        host access (``host_op``) or a pinned block's free. A trace that does not say (made by
        hand) gets it when it is 1.5."""
        if (header.get("minor") or 0) < 5 or header.get("recording") == "captures":
            return None
        if header.get("host_memory") is False or header.get("host_events") == 0:
            return None  # not looked at, or none seen: no host access, no pinned block to free
        from streamrace.analysis.host_memory import HostMemoryCheck  # loads only for traces that need it

        return CheckPass(HostMemoryCheck())

    def describe(self, found: PinnedWriteDuringCopy, describer: Describer) -> Finding:
        return describe_host_race(KIND, found, describer)


DETECTOR = PinnedWriteDuringCopyDetector()
