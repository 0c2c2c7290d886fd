"""Collectives on the stream they really run on: NCCL's internal stream, between its event edges.

PyTorch's NCCL process group (ProcessGroupNCCL.cpp, ``collective()``) runs an
``async_op=True`` collective on an internal stream of its own, one per device: it records an
event on the caller's current stream and makes the internal stream wait for it (the fork:
``syncStream``), launches the NCCL kernel there, and records the work's end event on the
internal stream. ``work.wait()`` makes the caller's current stream wait for that end event
(the join). With ``async_op=False`` (torch 2.7 and later) the kernel goes on the caller's
stream itself, with no events. Those events are ``c10::cuda::CUDAEvent``s, which report to
``torch.cuda._gpu_trace``: the hooks see the fork's record and wait and the end event's
record, on the internal stream's real handle, while the collective's op (``c10d::allreduce_``
and friends) runs. But the hooks write the op when it returns, on the caller's stream: after
the end event's record, on the wrong stream.

``order_collectives`` puts it right in the hooks' drained events before anything else reads
them: a collective op preceded, inside its own call (the same user stack, no op between), by
that fork and a record on the internal stream is moved onto the internal stream, right after
the fork's wait, before the first record there, which is the end event ``work.wait()`` waits
on (on the H200 with torch 2.11 the group records a second event after it; placing the op
after that one made a correct ``wait()`` look unordered). The events between the wait and the
op each move one seq later, so host order stays strictly increasing; and the internal
stream is named. Everything else is ordinary events: the
fork and join are event edges both engines already know, in captures (where CUDA makes them
graph edges) and in the execution view alike. A collective that ran on the caller's stream
has no fork and is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamrace.record.hook_tables import COLLECTIVE_OUTPUTS

Event = dict[str, Any]

NCCL_STREAM_NAME = "nccl"  # the internal stream's name in reports, where the program gave none


# The namespaces of the collectives: an op outside them is none, without splitting its name
# (order_collectives looks at every op of every drain).
_COLLECTIVE_NAMESPACES = tuple(sorted({name.split("::", 1)[0] + "::" for name in COLLECTIVE_OUTPUTS}))


def collective_name(op: str) -> str | None:
    """``c10d::allreduce_`` for an op event's name (``c10d::allreduce_`` or with an overload)
    that is a collective, else None."""
    if not op.startswith(_COLLECTIVE_NAMESPACES):
        return None
    name = op.split(".", 1)[0]
    return name if name in COLLECTIVE_OUTPUTS else None


@dataclass
class MovedCollective:
    """A collective put on NCCL's internal stream: the op, the seq of its fork's wait, and the
    seq of its end event's record there (after the move)."""

    op: Event
    stream: int
    after: int
    ends: int


def order_collectives(events: list[Event]) -> list[MovedCollective]:
    """Move each async collective in ``events`` (one drain of the hooks, in seq order) onto
    the stream it ran on; returns those moved."""
    moved: list[MovedCollective] = []
    start = 0  # the first event after the previous op: a collective's own events come after it
    for index, event in enumerate(events):
        if event["ev"] != "op":
            continue
        if collective_name(event["op"]) is not None:
            found = _move_onto_internal_stream(event, events, start, index)
            if found is not None:
                moved.append(found)
        start = index + 1
    return moved


def own_catch_up_kernel(moved: MovedCollective, logged: list[Event]) -> Event | None:
    """In a capture, the node a collective launched on the internal stream is one the hooks
    saw no launch make there (the op is written on the caller's stream when it returns), so
    the recorder caught it up as a ``kernel`` event inside the collective's call. Of ``logged``
    (the events kept so far, newest last), that kernel event if it lies between the fork's
    wait and the end event's record, or None (one caught up later stays a kernel of its own:
    the op cannot move past its end event).

    The event log makes that event the op itself (``absorb``), so the node is the
    collective's: one launch, named for the collective, with its semantic reads and writes
    (an NCCL kernel's parameters say neither), and the graph check sees the node as the op's."""
    op = moved.op
    for event in reversed(logged[-_LOOK_BACK:]):  # kept in the order they came, not by seq
        if (
            moved.after < event["seq"] < moved.ends
            and event["ev"] == "kernel"
            and event.get("inferred")
            and event["stream"] == moved.stream
            and event.get("stack") == op.get("stack")
        ):
            return event
    return None


_LOOK_BACK = 64  # events kept since the collective's fork: its own catch-ups are among them


def absorb(kernel: Event, op: Event) -> None:
    """The catch-up ``kernel`` event becomes the collective ``op``, at the kernel's seq: the
    capture's node records name that seq (read at the capture's end, maybe before this), and
    it lies between the fork's wait and the end event, where the op belongs."""
    seq = kernel["seq"]
    kernel.clear()
    kernel.update(op)
    kernel["seq"] = seq


def _move_onto_internal_stream(op: Event, events: list[Event], start: int, end: int) -> MovedCollective | None:
    """The fork among ``events[start:end]`` (the collective's own): the caller's record and
    the internal stream's wait for it, then a record on the internal stream (the end event).
    When found, the op moves to just after the fork's wait and the internal stream is
    returned; the events between the wait and the op each move one seq later."""
    caller, stack = op["stream"], op.get("stack")
    fork_wait_at = None
    for index in range(end - 1, start - 1, -1):
        event = events[index]
        if event["ev"] == "event_wait" and event["stream"] != caller and event.get("stack") == stack:
            fork_wait_at = index
            break
    if fork_wait_at is None:
        return None
    fork_wait = events[fork_wait_at]
    internal = fork_wait["stream"]
    forked = any(
        e["ev"] == "event_record" and e["event"] == fork_wait["event"] and e["stream"] == caller
        for e in events[start:fork_wait_at]
    )
    # The end event is the first record on the internal stream after the wait: work.wait()
    # waits on it, so the kernel is before it (a later record there is the group's own).
    ended = any(e["ev"] == "event_record" and e["stream"] == internal for e in events[fork_wait_at + 1 : end])
    if not (forked and ended):
        return None
    moved = events[fork_wait_at + 1 : end]
    seqs = [e["seq"] for e in moved] + [op["seq"]]
    for event, seq in zip([op, *moved], seqs, strict=True):
        event["seq"] = seq
    op["stream"] = internal
    ends = min(e["seq"] for e in moved if e["ev"] == "event_record" and e["stream"] == internal)
    return MovedCollective(op, internal, fork_wait["seq"], ends)
