"""Happens-before between stream work: vector clocks per domain (docs/analysis.md §1–2).

Capture is not execution, so every capture is a domain of its own with its own clocks, and
the eager domain holds the work that ran outside any capture. A stream is in a graph's domain
while it is a member of that capture: the capturing stream from ``capture_begin``, and any
stream that waited on an event recorded inside the capture. Clocks are sparse dicts (stream
-> tick, missing = 0) holding only the streams their stream was ordered after, so a join is
O(what the clocks hold) and memory grows with the orderings, not with the square of the
stream count; an access only keeps its epoch ``(stream, tick)``.

The host clock (what host synchronizations ordered before all later eager work) is kept
apart, not joined into every eager clock at its next op: after a synchronization of many
streams that would copy all of them into the clock of every stream used later.
``ordered_before`` looks at both; it is the one happens-before test of the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

VectorClock = dict[int, int]
Domain = int | None  # a graph id, or EAGER

EAGER: Final = None
# The host clock of work in a capture: host synchronizations order no captured work.
NO_HOST: Mapping[int, int] = {}


def join(into: VectorClock, other: Mapping[int, int]) -> None:
    """``into = max(into, other)`` element-wise, in place."""
    for stream, tick in other.items():
        if tick > into.get(stream, 0):
            into[stream] = tick


def ordered_before(stream: int, tick: int, clock: Mapping[int, int], host: Mapping[int, int] = NO_HOST) -> bool:
    """Is the epoch ``(stream, tick)`` ordered before work issued at ``clock`` (its stream's
    clock in its domain), with ``host`` the host clock of that domain (``host_clock``)?"""
    return tick <= clock.get(stream, 0) or tick <= host.get(stream, 0)


def _events_of(nodes: list[Mapping[str, Any]], node_type: str) -> tuple[int, ...]:
    return tuple(n["event"] for n in nodes if n.get("type") == node_type and n.get("event") is not None)


class HappensBefore:
    """Vector clocks of every stream in every domain, event snapshots, and the host clock."""

    def __init__(self) -> None:
        self._clocks: dict[Domain, dict[int, VectorClock]] = {EAGER: {}}
        self._host: VectorClock = {}
        self._graph_of: dict[int, int] = {}  # stream -> the active capture it is a member of
        self._members: dict[int, set[int]] = {}  # active capture -> its member streams
        self._snapshots: dict[int, tuple[Domain, VectorClock]] = {}
        # graph -> (events its event record nodes record, events its event wait nodes wait
        # on): what each replay of it records and waits on (an Event(external=True)'s record
        # or wait in the capture), from its graph event.
        self._graph_events: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        # Eager streams whose clock grew since the last device_sync: the others are in the
        # host clock already, so a device_sync need not join them again.
        self._unsynced: set[int] = set()

    def host_clock(self, domain: Domain) -> Mapping[int, int]:
        """What host synchronizations have ordered before all later work in ``domain``
        (nothing, in a capture)."""
        return self._host if domain is EAGER else NO_HOST

    # -- domains ---------------------------------------------------------------------------
    def domain(self, stream: int) -> Domain:
        """The domain work issued on ``stream`` now belongs to."""
        return self._graph_of.get(stream, EAGER)

    def members(self, graph: int) -> frozenset[int]:
        """The streams capturing into ``graph`` (empty once the capture ended)."""
        return frozenset(self._members.get(graph, ()))

    def capture_begin(self, graph: int, stream: int) -> None:
        self._graph_events.pop(graph, None)  # a graph id captured again is a new graph
        self._clocks[graph] = {}
        self._members[graph] = set()
        self._enter(graph, stream)

    def capture_end(self, graph: int) -> None:
        """Members leave; the graph's clocks and snapshots are gone (they order nothing now)."""
        for stream in self._members.pop(graph, ()):
            del self._graph_of[stream]
        self._clocks.pop(graph, None)
        stale = [event for event, (domain, _) in self._snapshots.items() if domain == graph]
        for event in stale:
            del self._snapshots[event]

    def _enter(self, graph: int, stream: int) -> None:
        """``stream`` becomes a member of ``graph`` with a fresh clock there."""
        old = self._graph_of.get(stream)
        if old is not None:  # only a malformed trace moves a capturing stream
            self._members[old].discard(stream)
        self._graph_of[stream] = graph
        self._members[graph].add(stream)
        self._clocks[graph][stream] = {}

    # -- clocks ------------------------------------------------------------------------------
    def _clock(self, domain: Domain, stream: int) -> VectorClock:
        clocks = self._clocks[domain]
        clock = clocks.get(stream)
        if clock is None:
            clock = clocks[stream] = {}
        return clock

    def op(self, stream: int) -> tuple[Domain, VectorClock, int]:
        """Issue one op on ``stream``: its domain, the stream's clock after it, and its tick.

        The clock is the live one: read it before the next event, never modify it. The op is
        also ordered after ``host_clock(domain)``.
        """
        domain, clock = self.current(stream)
        tick = clock.get(stream, 0) + 1
        clock[stream] = tick
        if domain is EAGER:
            self._unsynced.add(stream)
        return domain, clock, tick

    def current(self, stream: int) -> tuple[Domain, VectorClock]:
        """Domain and clock of a host action on ``stream`` now (a free): like an op, no tick."""
        domain = self._graph_of.get(stream, EAGER)
        return domain, self._clock(domain, stream)

    def order_after(self, stream: int, clock: Mapping[int, int]) -> None:
        """Order eager ``stream``'s next work after ``clock`` (an implicit record and wait: the
        previous launch of the graph it replays, since launches of one graph are serialized)."""
        join(self._clock(EAGER, stream), clock)
        self._unsynced.add(stream)

    # -- events --------------------------------------------------------------------------------
    def record(self, event: int, stream: int) -> None:
        """Snapshot the stream's clock into ``event``, replacing any earlier record.

        An eager snapshot leaves out the host clock: whoever reads it (an eager wait, an
        event_sync) is ordered after the host clock already, which only grows."""
        domain, clock = self.current(stream)
        self._snapshots[event] = (domain, dict(clock))

    def wait(self, event: int, stream: int) -> None:
        """Order ``stream`` after the event's latest record, if that record is in its domain."""
        snapshot = self._snapshots.get(event)
        if snapshot is None:
            return
        domain, clock = snapshot
        current = self._graph_of.get(stream, EAGER)
        if domain is not EAGER and current is EAGER:
            self._enter(domain, stream)  # side.wait_stream(capturing) pulls side into the capture
        elif domain != current:
            return
        join(self._clock(domain, stream), clock)
        if domain is EAGER:
            self._unsynced.add(stream)

    def forget(self, event: int) -> None:
        """``event_create`` / ``event_delete``: the event has no snapshot."""
        self._snapshots.pop(event, None)

    # -- a replay's own event nodes ----------------------------------------------------------
    def graph_read(self, graph: int, nodes: list[Mapping[str, Any]]) -> None:
        """The graph event of ``graph``: its event record and wait nodes (format 1.6 names
        each one's event) are what its replays record and wait on."""
        records = _events_of(nodes, "eventrecord")
        waits = _events_of(nodes, "waitevent")
        if records or waits:
            self._graph_events[graph] = (records, waits)
        else:
            self._graph_events.pop(graph, None)

    def replay(self, graph: int, stream: int) -> tuple[Domain, VectorClock, int]:
        """A replay of ``graph`` on eager ``stream``, issued as one op (``op``'s answer). It first
        waits on the latest record of each event its wait nodes name, as of its launch, and
        then each event its record nodes name stands for it, as if recorded on ``stream``
        right after it. A replay is one op, so all of it is ordered after those waits and
        before those records (not only the nodes behind them)."""
        records, waits = self._graph_events.get(graph, ((), ()))
        for event in waits:
            self.wait(event, stream)
        issued = self.op(stream)
        for event in records:
            self.record(event, stream)
        return issued

    # -- host synchronization (eager only) -----------------------------------------------------
    def stream_sync(self, stream: int) -> None:
        if stream not in self._graph_of:
            join(self._host, self._clock(EAGER, stream))

    def event_sync(self, event: int) -> None:
        snapshot = self._snapshots.get(event)
        if snapshot is not None and snapshot[0] is EAGER:
            join(self._host, snapshot[1])

    def device_sync(self) -> None:
        eager = self._clocks[EAGER]
        for stream in self._unsynced:
            join(self._host, eager[stream])
        self._unsynced.clear()
