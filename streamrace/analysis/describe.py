"""Saying what was found: detections become findings a person can act on.

Streams get labels (their ``stream`` event's name, ``default`` for handle 0, else
``stream#K`` by first appearance), accesses get the user's source line (the innermost frame
of their stack: the recorder writes stacks innermost first), and every finding gets one
sentence, the missing happens-before edge and a concrete fix.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.clocks import Domain
from streamrace.analysis.engine import Detection, Engine, Race, RecordStreamNoop, UnsafeFree
from streamrace.analysis.findings import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE, Access, Allocation, Finding
from streamrace.analysis.lifetimes import Lifetime
from streamrace.analysis.ranges import Overlap
from streamrace.analysis.shadow import AccessRecord

_HAZARD = {(True, False): "RAW", (False, True): "WAR", (True, True): "WAW"}


class Describer:
    """Builds findings from an engine's detections, with its labels and stack table."""

    def __init__(self, engine: Engine) -> None:
        self._stacks = engine.stacks
        self._names = engine.names
        self._appearance = engine.appearance
        self._sites: dict[int, tuple[list[list[Any]], str | None]] = {}  # stack id -> frames, location

    def findings(self, detections: list[Detection]) -> list[Finding]:
        out: list[Finding] = []
        for det in detections:
            if isinstance(det, Race):
                out.append(self._race(det))
            elif isinstance(det, UnsafeFree):
                out.append(self._unsafe_free(det))
            else:
                out.append(self._noop(det))
        return out

    # -- pieces --------------------------------------------------------------------------------
    def label(self, stream: int) -> str:
        name = self._names.get(stream)
        if name:
            return name
        if stream == 0:
            return "default"
        return f"stream#{self._appearance.get(stream, len(self._appearance))}"

    def launch(self, event: Mapping[str, Any], access: str) -> Access:
        """An op or kernel event as one side of a finding (for checks outside the engine)."""
        stack, location = self._site(event)
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

    def _site(self, event: Mapping[str, Any] | None) -> tuple[list[list[Any]], str | None]:
        """The event's stack (a fresh list) and its user location, ``file:line`` of the innermost frame."""
        stack = event.get("stack") if event else None
        if stack is None:
            return [], None
        site = self._sites.get(stack)
        if site is None:
            frames = [list(frame) for frame in self._stacks.get(stack, ())]
            site = self._sites[stack] = (frames, f"{frames[0][0]}:{frames[0][1]}" if frames else None)
        return list(site[0]), site[1]

    def _access(self, rec: AccessRecord, how: Overlap) -> Access:
        ev = rec.event
        frames, location = self._site(ev)
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

    def _free_access(self, lifetime: Lifetime, domain: Domain) -> Access:
        free = lifetime.free or {}
        frames, location = self._site(free)
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

    def _allocation(self, lifetime: Lifetime, reuse: tuple[Access, Lifetime] | None = None) -> Allocation:
        alloc_frames, alloc_location = self._site(lifetime.alloc)
        free_frames, free_location = self._site(lifetime.free)
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
                "alloc_location": self._site(new.alloc)[1],
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

    # -- findings ------------------------------------------------------------------------------
    def _race(self, race: Race) -> Finding:
        first, second = self._access(race.earlier, race.how), self._access(race.later, race.how)
        hazard = _HAZARD[race.earlier.write, race.later.write]
        aliasing = race.reused is not None
        allocation = None
        if race.lifetime is not None:
            allocation = self._allocation(race.lifetime, (second, race.reused) if race.reused else None)
        message = (
            f"{_what(second)} {_verb(second)} bytes that {_what(first)} {_verb(first, past=True)}, "
            f"and nothing orders the two ({hazard})"
        )
        if aliasing:
            message += ": the block was freed and handed out again in between, so two tensors collide"
        return Finding(
            kind=DATA_RACE,
            hazard=hazard,
            accesses=[first, second],
            message=message + ".",
            missing_edge=f"no happens-before edge from {_what(first)} to {_what(second)}",
            fix=(
                f"record an event on {first.stream_label} after {first.op}{_at(first)} and wait on it "
                f"on {second.stream_label} before {second.op}{_at(second)}, e.g. "
                f"`{_join(second, first)}` just before {second.location or second.op}"
                + _where((second, _LATER), (first, _EARLIER))
            ),
            aliasing=aliasing,
            graph=race.later.domain,
            allocation=allocation,
        )

    def _unsafe_free(self, unsafe: UnsafeFree) -> Finding:
        lifetime = unsafe.lifetime
        use = self._access(unsafe.use, unsafe.how)
        free = self._free_access(lifetime, unsafe.domain)
        owner = free.stream_label
        site = self._site(lifetime.alloc)[1]
        message = (
            f"The block allocated{f' at {site}' if site else ''} is freed on {owner}{_at(free)} "
            f"while {_what(use)} may still {'write' if unsafe.use.write else 'read'} it"
        )
        second = free
        reuse = None
        if unsafe.racer is not None and unsafe.reused is not None:
            second = self._access(unsafe.racer, unsafe.how)
            reuse = (second, unsafe.reused)
            message += f"; the allocator handed it to {_what(second)}, which {_verb(second)} it concurrently"
        else:
            message += f"; the allocator can hand it to the next allocation on {owner}"
        return Finding(
            kind=UNSAFE_FREE,
            hazard="WAW" if unsafe.use.write else "WAR",
            accesses=[use, second],
            message=message + ".",
            missing_edge=(
                f"no happens-before edge from {_what(use)} to the next allocation on {owner} after the free{_at(free)}"
            ),
            fix=(
                f"keep the tensor alive until after `{_join(free, use)}` (join, then free), "
                f"or call `t.record_stream({_stream_code(use, _USER)})` after {use.op}{_at(use)}"
                + _where((free, _OWNER), (use, _USER))
            ),
            aliasing=reuse is not None,
            graph=unsafe.domain,
            allocation=self._allocation(lifetime, reuse),
        )

    def _noop(self, noop: RecordStreamNoop) -> Finding:
        ev = noop.event
        frames, location = self._site(ev)
        call = Access(
            op="record_stream",
            stream=ev["stream"],
            stream_label=self.label(ev["stream"]),
            access="record_stream",
            seq=ev["seq"],
            location=location,
            stack=frames,
            graph=noop.domain,
        )
        if noop.users:
            user = self.label(noop.users[0])
            consumer, where = _code_name(user), ""
            if consumer is None:
                consumer, where = _CONSUMER, f", where `{_CONSUMER}` is {user}"
        else:
            consumer, where = _CONSUMER, f", where `{_CONSUMER}` is the stream that uses the tensor"
        return Finding(
            kind=RECORD_STREAM_NOOP,
            hazard=None,
            accesses=[call],
            message=(
                f"record_stream{_at(call)} names {call.stream_label}, the stream that allocated the block, "
                "so it does nothing and the consumer stream's use stays unprotected."
            ),
            fix=f"record on the consumer stream, not the allocating one: `t.record_stream({consumer})`{where}",
            graph=noop.domain,
            allocation=self._allocation(noop.lifetime),
        )


def _at(access: Access) -> str:
    return f" ({access.location})" if access.location else ""


def _what(access: Access) -> str:
    return f"{access.op} on {access.stream_label}{_at(access)}"


def _verb(access: Access, past: bool = False) -> str:
    if access.access == "write":
        return "wrote" if past else "writes"
    return "read" if past else "reads"


# -- fixes as code -----------------------------------------------------------------------------
# A fix names streams in code. A recorded name that is a Python identifier is what the user
# called the stream (``name_stream(s, "side")``), so it stands as is; handle 0 is
# ``torch.cuda.default_stream()``; anything else (``stream#3``, "kv cache") is not Python, so
# the code uses a placeholder named for the stream's role and the fix says which stream it is.
_LATER, _EARLIER = "later_stream", "earlier_stream"
_OWNER, _USER, _CONSUMER = "owner_stream", "user_stream", "consumer_stream"
_ROLE = {
    _LATER: "the stream of {op}",
    _EARLIER: "the stream of {op}",
    _OWNER: "the stream that allocated the tensor",
    _USER: "the stream of {op}",
}


def _code_name(label: str) -> str | None:
    """The stream as a Python expression, or None when its label is not one."""
    if label == "default":
        return "torch.cuda.default_stream()"
    if label.isidentifier() and not keyword.iskeyword(label):
        return label
    return None


def _stream_code(access: Access, placeholder: str) -> str:
    return _code_name(access.stream_label) or placeholder


def _join(waiter: Access, waited: Access) -> str:
    """``waiter.wait_stream(waited)`` in code, with placeholders for streams without a name: a
    free waits as the owner for the user, a later access for the earlier one."""
    waiter_role, waited_role = (_OWNER, _USER) if waiter.access == "free" else (_LATER, _EARLIER)
    return f"{_stream_code(waiter, waiter_role)}.wait_stream({_stream_code(waited, waited_role)})"


def _where(*streams: tuple[Access, str]) -> str:
    """The clause that names each placeholder's stream, e.g. ``where `later_stream` is stream#3``."""
    parts = [
        f"`{placeholder}` is {access.stream_label} ({_ROLE[placeholder].format(op=access.op)})"
        for access, placeholder in streams
        if _code_name(access.stream_label) is None
    ]
    return f", where {' and '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class Suggestion:
    """The fix as one line of code to add just before a source line."""

    code: str
    before: str  # "file:line" where the code goes
    why: str  # what the line does, for a person
    exact: bool = True  # False: ``before`` is only where the effect shows (a free at a caller's line)


def suggestion(finding: Finding) -> Suggestion | None:
    """The fix of a finding as code at a source line, where its structure says where: a race
    is fixed by a join just before the later access, an unsafe free by a join just before the
    free. None when there is no such line (a lint, or no source line recorded)."""
    if finding.kind == DATA_RACE and len(finding.accesses) == 2:
        earlier, later = finding.accesses
        if later.location:
            return Suggestion(_join(later, earlier), later.location, f"order {later.op} after {earlier.op}")
    if finding.kind == UNSAFE_FREE and finding.allocation is not None and finding.allocation.free_location:
        use, alloc = finding.accesses[0], finding.allocation
        owner = Access("free", alloc.stream, alloc.stream_label, "free", alloc.free_seq or 0)
        # A free in the function that allocated is a statement there (``del x``, a rebinding):
        # the join goes just before it. A free elsewhere is where a local died as its function
        # returned, so that line (the call) is not where the join goes.
        exact = _function(alloc.alloc_stack) is not None and _function(alloc.alloc_stack) == _function(alloc.free_stack)
        why = f"join {use.stream_label} before the {'free' if exact else 'last reference to the tensor dies'}"
        return Suggestion(_join(owner, use), alloc.free_location, why, exact)
    return None


def _function(stack: list[list[Any]]) -> tuple[str, str] | None:
    """(file, function) of a stack's innermost frame."""
    return (str(stack[0][0]), str(stack[0][2])) if stack and len(stack[0]) > 2 else None
