"""``pinned-read-before-copy``: the host reads (or writes) pinned memory that a copy from the
device has not yet written (an eager ``non_blocking`` D2H copy, or a replay of a graph that
captured one): the host gets the old bytes (docs/findings.md; the rule is docs/analysis.md
§8.11; HAZARDS.md M2). Found by the pinned-memory pass (pinned_write_during_copy.py's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.detectors.pinned_words import describe_host_race
from streamrace.analysis.detectors.pinned_write_during_copy import DeviceUse
from streamrace.analysis.findings import Finding

KIND = "pinned-read-before-copy"


@dataclass(eq=False)
class PinnedReadBeforeCopy:
    """``host`` (a host_op) read (``host_write``: wrote) bytes that ``use`` (a D2H copy not yet
    done) writes; ``block``: the pinned block's host_alloc, when seen."""

    host: Mapping[str, Any]
    host_write: bool
    use: DeviceUse
    block: Mapping[str, Any] | None
    count: int = 1
    last_seq: int = -1  # the latest host access counted


class PinnedReadBeforeCopyDetector(Detector[PinnedReadBeforeCopy]):
    kind = KIND
    severity = "error"
    docs_anchor = "pinned-read-before-copy-error"
    records = (PinnedReadBeforeCopy,)
    rule = SarifRule(
        name="PinnedReadBeforeCopy",
        short="The host reads pinned memory before the copy from the device has landed",
        full=(
            "A non_blocking copy from the device into pinned host memory (or a replay of a graph that "
            "captured one) was issued, and the host read those bytes before anything made it wait for the "
            "copy. The copy is still queued on its stream: the host reads what the buffer held before (the "
            "previous step's values, or garbage)."
        ),
        fix=(
            "Record an event after the copy on its stream and synchronize it (event.synchronize()) before the "
            "host reads the buffer; or synchronize the copy's stream first."
        ),
    )

    def describe(self, found: PinnedReadBeforeCopy, describer: Describer) -> Finding:
        return describe_host_race(KIND, found, describer)


DETECTOR = PinnedReadBeforeCopyDetector()
