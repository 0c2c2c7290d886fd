"""Saying what was found: the pieces every detector builds its findings from.

Each finding kind's detector (streamrace/analysis/detectors/) turns its detections into
findings a person can act on: one sentence, the missing happens-before edge and a concrete
fix. What they share is here: streams get labels (their ``stream`` event's name,
``default`` for handle 0, else ``stream#K`` by first appearance), accesses the user's source
line (the innermost frame of their stack: the recorder writes stacks innermost first),
blocks their allocation sites, and fixes name streams as code.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.clocks import Domain
from streamrace.analysis.engine import AnalysisEngine
from streamrace.analysis.findings import Access, Allocation
from streamrace.analysis.lifetimes import Lifetime
from streamrace.analysis.ranges import Overlap
from streamrace.analysis.shadow import AccessRecord


class Describer:
    """An engine's labels, stack table and sites, for the detectors to build findings with."""

    def __init__(self, engine: AnalysisEngine) -> None:
        self._stacks = engine.stacks
        self._names = engine.names
        self._appearance = engine.appearance
        self._sites: dict[int, tuple[list[list[Any]], str | None]] = {}  # stack id -> frames, location

    def label(self, stream: int) -> str:
        name = self._names.get(stream)
        if name:
            return name
        if stream == 0:
            return "default"
        return f"stream#{self._appearance.get(stream, len(self._appearance))}"

    def launch(self, event: Mapping[str, Any], access: str) -> Access:
        """An op or kernel event as one side of a finding (for checks outside the engine)."""
        stack, location = self.site(event)
        return Access(
            op=event.get("op") or event["name"],
            stream=event["stream"],
            stream_label=self.label(event["stream"]),
            access=access,
            seq=event["seq"],
            location=location,
            stack=stack,
            graph=event.get("graph"),
            inferred=bool(event.get("inferred")),
        )

    def site(self, event: Mapping[str, Any] | None) -> tuple[list[list[Any]], str | None]:
        """The event's stack (a fresh list) and its user location, ``file:line`` of the innermost frame."""
        stack = event.get("stack") if event else None
        if stack is None:
            return [], None
        site = self._sites.get(stack)
        if site is None:
            frames = [list(frame) for frame in self._stacks.get(stack, ())]
            site = self._sites[stack] = (frames, f"{frames[0][0]}:{frames[0][1]}" if frames else None)
        return list(site[0]), site[1]

    def access(self, rec: AccessRecord, how: Overlap) -> Access:
        """An access record as one side of a finding; ``how`` its overlap with the other side."""
        ev = rec.event
        frames, location = self.site(ev)
        rng = dict(rec.raw)
        if how is Overlap.APPROXIMATE:
            rng["approximate"] = True
        return Access(
            op=ev["op"] if ev["ev"] == "op" else ev["name"],
            stream=rec.stream,
            stream_label=self.label(rec.stream),
            access="write" if rec.write else "read",
            seq=ev["seq"],
            location=location,
            stack=frames,
            graph=rec.domain,
            range=rng,
            inferred=bool(ev.get("inferred", False)),
        )

    def free_access(self, lifetime: Lifetime, domain: Domain) -> Access:
        """The free of a block as one side of a finding."""
        free = lifetime.free or {}
        frames, location = self.site(free)
        return Access(
            op="free",
            stream=lifetime.owner,
            stream_label=self.label(lifetime.owner),
            access="free",
            seq=free["seq"],
            location=location,
            stack=frames,
            graph=domain,
            range={"addr": lifetime.addr, "nbytes": lifetime.size},
        )

    def allocation(self, lifetime: Lifetime, reuse: tuple[Access, Lifetime] | None = None) -> Allocation:
        """The block a finding is about; ``reuse``: the access of a later lifetime that reused it."""
        alloc_frames, alloc_location = self.site(lifetime.alloc)
        free_frames, free_location = self.site(lifetime.free)
        reused_by = None
        if reuse is not None:
            access, new = reuse
            reused_by = {
                "op": access.op,
                "stream": access.stream,
                "stream_label": access.stream_label,
                "seq": access.seq,
                "location": access.location,
                "alloc_seq": new.alloc["seq"],
                "alloc_location": self.site(new.alloc)[1],
            }
        return Allocation(
            addr=lifetime.addr,
            size=lifetime.size,
            stream=lifetime.owner,
            stream_label=self.label(lifetime.owner),
            device=lifetime.device,
            pool=lifetime.alloc.get("pool"),
            alloc_seq=lifetime.alloc["seq"],
            alloc_location=alloc_location,
            alloc_stack=alloc_frames,
            free_seq=lifetime.free["seq"] if lifetime.free else None,
            free_location=free_location,
            free_stack=free_frames,
            reused_by=reused_by,
        )


# -- wording -----------------------------------------------------------------------------------
def at(access: Access) -> str:
    """`` (file:line)`` of the access, or nothing."""
    return f" ({access.location})" if access.location else ""


def what(access: Access) -> str:
    """``op on stream (file:line)``."""
    return f"{access.op} on {access.stream_label}{at(access)}"


def verb(access: Access, past: bool = False) -> str:
    if access.access == "write":
        return "wrote" if past else "writes"
    return "read" if past else "reads"


# -- fixes as code -----------------------------------------------------------------------------
# A fix names streams in code. A recorded name that is a Python identifier is what the user
# called the stream (``name_stream(s, "side")``), so it stands as is; handle 0 is
# ``torch.cuda.default_stream()``; anything else (``stream#3``, "kv cache") is not Python, so
# the code uses a placeholder named for the stream's role and the fix says which stream it is.
LATER, EARLIER = "later_stream", "earlier_stream"
OWNER, USER, CONSUMER = "owner_stream", "user_stream", "consumer_stream"
_ROLE = {
    LATER: "the stream of {op}",
    EARLIER: "the stream of {op}",
    OWNER: "the stream that allocated the tensor",
    USER: "the stream of {op}",
}


def code_name(label: str) -> str | None:
    """The stream as a Python expression, or None when its label is not one."""
    if label == "default":
        return "torch.cuda.default_stream()"
    if label.isidentifier() and not keyword.iskeyword(label):
        return label
    return None


def stream_code(access: Access, placeholder: str) -> str:
    """The access's stream in code, or ``placeholder`` when its label is not Python."""
    return code_name(access.stream_label) or placeholder


def join_code(waiter: Access, waited: Access) -> str:
    """``waiter.wait_stream(waited)`` in code, with placeholders for streams without a name: a
    free waits as the owner for the user, a later access for the earlier one."""
    waiter_role, waited_role = (OWNER, USER) if waiter.access == "free" else (LATER, EARLIER)
    return f"{stream_code(waiter, waiter_role)}.wait_stream({stream_code(waited, waited_role)})"


def where(*streams: tuple[Access, str]) -> str:
    """The clause that names each placeholder's stream, e.g. ``where `later_stream` is stream#3``."""
    parts = [
        f"`{placeholder}` is {access.stream_label} ({_ROLE[placeholder].format(op=access.op)})"
        for access, placeholder in streams
        if code_name(access.stream_label) is None
    ]
    return f", where {' and '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class Suggestion:
    """The fix as one line of code to add just before a source line."""

    code: str
    before: str  # "file:line" where the code goes
    why: str  # what the line does, for a person
    exact: bool = True  # False: ``before`` is only where the effect shows (a free at a caller's line)
