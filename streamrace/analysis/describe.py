"""Saying what was found: the pieces every detector builds its findings from.

Each finding kind's detector (streamrace/analysis/detectors/) turns its detections into
findings a person can act on: one sentence, the missing happens-before edge and a concrete
fix. What they share is here: streams get labels (their ``stream`` event's name,
``default`` for handle 0, else ``stream#K`` by first appearance), accesses the user's source
line (the innermost frame of their stack: the recorder writes stacks innermost first),
blocks their allocation sites, and fixes name streams as code.

Fixes point where a person acts: at the caller's line when the innermost frame is a shared
helper (``site``, call_sites.py), "near" a line that is only the next recorded event's (a
kernel the dispatcher never saw), and, when the source can be read, with the names it uses
(``qkv``, ``s.kv``: source_names.py), each only in code placed in the function it came from.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.call_sites import CallSites
from streamrace.analysis.clocks import Domain
from streamrace.analysis.engine import AnalysisEngine
from streamrace.analysis.findings import Access, Allocation
from streamrace.analysis.generated_code import GeneratedCode
from streamrace.analysis.lifetimes import Lifetime
from streamrace.analysis.ranges import Overlap
from streamrace.analysis.shadow import AccessRecord
from streamrace.analysis.source_names import Function, SourceNames, SourceText


class Describer:
    """An engine's labels, stack table and sites, for the detectors to build findings with."""

    def __init__(
        self, engine: AnalysisEngine, sources: SourceText | None = None, generated: GeneratedCode | None = None
    ) -> None:
        self._stacks = engine.stacks
        self._generated = generated if generated is not None else GeneratedCode()
        self._names = engine.names
        self._appearance = engine.appearance
        self._captures = engine.captures
        self._sites: dict[int, tuple[list[list[Any]], str | None]] = {}  # stack id -> frames, location
        self._source = SourceNames(sources)
        self._call_sites: CallSites | None = None  # built on first use: the stack table is complete

    def placement(self, frames: list[list[Any]]) -> tuple[str | None, str | None]:
        """(site, stream_code) of an access with these frames (see ``Access``)."""
        if self._call_sites is None:
            self._call_sites = CallSites(self._stacks)
        index = self._call_sites.actionable(frames)
        site = f"{frames[index][0]}:{frames[index][1]}" if index else None
        acting = frames[index or 0] if frames else None
        found = self._source.stream(frames)
        if found is None or acting is None or len(acting) < 3 or found[1] != (str(acting[0]), str(acting[2])):
            return site, None
        return site, found[0]

    def tensor(self, lifetime: Lifetime) -> tuple[str, Function] | None:
        """The name the source gives the block's tensor, and the function that binds it."""
        return self._source.tensor(self.site(lifetime.alloc)[0], self.site(lifetime.free)[0])

    def label(self, stream: int) -> str:
        name = self._names.get(stream)
        if name:
            return name
        if stream == 0:
            return "default"
        return f"stream#{self._appearance.get(stream, len(self._appearance))}"

    def stream_words(self, access: Access) -> str:
        """Which stream object the access's stream is, for a fix's placeholder: its label and
        handle, and the graph it is the capture stream of (what a program without a name for
        it knows it as: the stream current inside ``torch.cuda.graph``)."""
        words = stream_words(access)
        graphs = self._captures.get(access.stream)
        if not graphs:
            return words
        graph = access.graph if access.graph in graphs else graphs[0]
        return words.replace(",", f", graph {graph}'s capture stream,", 1)

    def launch(self, event: Mapping[str, Any], access: str) -> Access:
        """An op or kernel event as one side of a finding (for checks outside the engine)."""
        stack, location = self.site(event)
        site, code = self.placement(stack)
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
            site=site,
            near=_near(event),
            stream_code=code,
        )

    def site(self, event: Mapping[str, Any] | None) -> tuple[list[list[Any]], str | None]:
        """The event's stack (a fresh list) and its user location, ``file:line`` of the innermost
        frame outside generated code (generated_code.py: that frame comes first)."""
        stack = event.get("stack") if event else None
        if stack is None:
            return [], None
        site = self._sites.get(stack)
        if site is None:
            frames = self._generated.user_first(self._stacks.get(stack, ()))
            site = self._sites[stack] = (frames, f"{frames[0][0]}:{frames[0][1]}" if frames else None)
        return list(site[0]), site[1]

    def access(self, rec: AccessRecord, how: Overlap = Overlap.EXACT) -> Access:
        """An access record as one side of a finding; ``how`` its overlap with the other side.

        A replay's access is placed at the replay (where a fix goes) and names the captured
        op it runs again (``Access.captured``)."""
        ev = rec.event
        frames, location = self.site(ev)
        rng = dict(rec.raw)
        if how is Overlap.APPROXIMATE:
            rng["approximate"] = True
        captured = None
        seq = ev["seq"]
        near = _near(ev)
        if rec.replay is not None:
            captured = {"graph": rec.replay["graph"], "seq": seq, "location": location, "stack": frames, "near": near}
            frames, location = self.site(rec.replay)
            seq, near = rec.replay["seq"], False
        site, code = self.placement(frames)
        return Access(
            op=ev["op"] if ev["ev"] == "op" else ev["name"],
            stream=rec.stream,
            stream_label=self.label(rec.stream),
            access="write" if rec.write else "read",
            seq=seq,
            location=location,
            stack=frames,
            graph=rec.domain,
            range=rng,
            inferred=bool(ev.get("inferred", False)),
            site=site,
            near=near,
            stream_code=code,
            captured=captured,
        )

    def free_access(self, lifetime: Lifetime, domain: Domain) -> Access:
        """The free of a block as one side of a finding."""
        free = lifetime.free or {}
        frames, location = self.site(free)
        site, code = self.placement(frames)
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
            site=site,
            stream_code=code,
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


def access_key(rec: AccessRecord) -> tuple[Any, ...]:
    """What of an access record its Access's part of a signature comes from (op, read or
    write, the stack its location is read from: the replay's for a replayed access), for
    Detector.dedup_key. Keep it in step with Describer.access."""
    ev = rec.event
    where = rec.replay if rec.replay is not None else ev
    return (ev["op"] if ev["ev"] == "op" else ev["name"], rec.write, where.get("stack"))


def _near(event: Mapping[str, Any]) -> bool:
    """A kernel the recorder caught up on (not a Triton launch it saw): its stack is the next
    recorded event's (docs/trace-format.md, dispatcher-invisible kernels)."""
    return event.get("ev") == "kernel" and not str(event.get("name", "")).startswith("triton:")


# -- wording -----------------------------------------------------------------------------------
def at(access: Access) -> str:
    """`` (file:line)`` of the access, or nothing: ``near`` a line that is only the next
    recorded event's, and the caller's line ``via`` a shared helper."""
    if not access.location:
        return ""
    near = "near " if access.near else ""
    captured = access.captured.get("location") if access.captured else None
    also = f", captured at {captured}" if captured else ""
    if access.site:
        helper = access.stack[0][2] if access.stack and len(access.stack[0]) > 2 else None
        return f" ({near}{access.site}{f' via {helper}' if helper else ''}{also})"
    return f" ({near}{access.location}{also})"


def function_of(access: Access) -> Function | None:
    """(file, function) of the frame a fix for ``access`` goes in: its site's, else the innermost."""
    frames = access.stack
    if access.site:
        frames = [f for f in frames if f"{f[0]}:{f[1]}" == access.site] or frames
    return (str(frames[0][0]), str(frames[0][2])) if frames and len(frames[0]) > 2 else None


def what(access: Access) -> str:
    """``op on stream (file:line)``; a replay's: ``op of graph G's replay on stream (file:line,
    captured at file:line)``."""
    return f"{op_name(access)} on {access.stream_label}{at(access)}"


def op_name(access: Access) -> str:
    """The op, and for a replay's access which graph's replay runs it."""
    if access.captured is None:
        return access.op
    return f"{access.op} of graph {access.captured['graph']}'s replay"


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


def stream_code(access: Access, placeholder: str, place: Function | None = None) -> str:
    """The access's stream in code for a line in function ``place`` (the access's own when
    None): as the source writes it there, else its label when that is Python, else
    ``placeholder``."""
    if access.stream_code and function_of(access) == (place or function_of(access)):
        return access.stream_code
    return code_name(access.stream_label) or placeholder


def join_code(waiter: Access, waited: Access) -> str:
    """``waiter.wait_stream(waited)`` in code, for a line in the waiter's function, with
    placeholders for streams without a name: a free waits as the owner for the user, a later
    access for the earlier one."""
    waiter_role, waited_role = (OWNER, USER) if waiter.access == "free" else (LATER, EARLIER)
    place = function_of(waiter)
    return f"{stream_code(waiter, waiter_role, place)}.wait_stream({stream_code(waited, waited_role, place)})"


def stream_words(access: Access) -> str:
    """The access's stream as the report's reader finds it: label and handle."""
    return f"{access.stream_label}, handle {access.stream:#x}"


def where(codes: tuple[str, ...], *streams: tuple[Access, str], describer: Describer | None = None) -> str:
    """The clause that names each placeholder the ``codes`` use, e.g. ``where `later_stream`
    is stream#3, graph 1's capture stream, handle 0x5010 (the stream of aten::mul)``; without
    a ``describer`` it cannot say which graph captured on the stream."""
    used = {name for code in codes for name in re.findall(r"\w+", code)}
    words = describer.stream_words if describer is not None else stream_words
    parts = [
        f"`{placeholder}` is {words(access)} ({_ROLE[placeholder].format(op=access.op)})"
        for access, placeholder in streams
        if placeholder in used
    ]
    return f", where {' and '.join(parts)}" if parts else ""


TENSOR = "t"  # the tensor in code when the source does not name it


def tensor_code(describer: Describer, lifetime: Lifetime, place: Function | None) -> tuple[str, str]:
    """(the tensor in code for a line in ``place``, the clause that explains a placeholder)."""
    named = describer.tensor(lifetime)
    if named is not None and named[1] == place:
        return named[0], ""
    site = describer.site(lifetime.alloc)[1]
    return TENSOR, f", where `{TENSOR}` is the tensor allocated{f' at {site}' if site else ''}"


@dataclass(frozen=True)
class Suggestion:
    """The fix as one line of code to add just before a source line."""

    code: str
    before: str  # "file:line" where the code goes
    why: str  # what the line does, for a person
    exact: bool = True  # False: ``before`` is only where the effect shows (a free at a caller's line)
