"""Reachability in one captured graph, for every node at once, in one pass over its edges.

The nodes are split into chains (paths), greedily in a topological order: a node continues a
chain whose last node reaches it, its launch's stream's chain first, so a capture's chains
are about its streams. Each node gets a clock: per chain, the position of the last node on
that chain that reaches it (itself included). Node ``u`` reaches node ``v`` exactly when
``u``'s position is at most ``v``'s clock entry for ``u``'s chain: a chain is a path, so what
reaches one of its nodes reaches every node before it. Building costs O(edges x chains), a
question one dictionary lookup.

A launch (an op or kernel event) may own several nodes. ``LaunchReach`` keeps, for a launch,
where its nodes sit and two clocks: ``join``, reached by some node of it, and ``meet``,
reached by every node of it. Programmatic (dependent-launch) edges do not order completion
and are left out. A graph is held to the trace format's rules (node ids ``0..n-1``, edges
between them, no cycle: ``streamrace.trace.events``, which the reader applies to every line);
one handed over in memory that breaks them is a ``GraphInvalid`` with the reader's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamrace.errors import StreamraceError
from streamrace.trace.events import EventInvalid, validate_event

Clock = dict[int, int]  # chain -> the last position on it that reaches the node(s)


class GraphInvalid(StreamraceError):
    """A ``graph`` event that breaks the trace format's rules: the trace is corrupt."""


class LaunchReach:
    """Where one launch's nodes sit in the graph, and what reaches them."""

    __slots__ = ("join", "marks", "meet")

    def __init__(self, marks: tuple[tuple[int, int], ...], join: Clock, meet: Clock) -> None:
        self.marks = marks  # (chain, position) of each of its nodes
        self.join = join  # per chain, the last position that reaches some node of the launch
        self.meet = meet  # per chain, the last position that reaches every node of the launch


def reaches(marks: tuple[tuple[int, int], ...], clock: Clock) -> bool:
    """Does a node at one of ``marks`` reach what ``clock`` describes?"""
    # A loop, not any(): this is the check's innermost question, and a generator costs 5x.
    for chain, position in marks:  # noqa: SIM110
        if clock.get(chain, -1) >= position:
            return True
    return False


class GraphReach:
    """The chain clocks of one ``graph`` event's nodes; ``stream_of`` (launch seq -> stream)
    lets a launch's nodes continue its stream's chain."""

    def __init__(self, graph_ev: Mapping[str, Any], stream_of: Mapping[int, int]) -> None:
        try:
            validate_event(graph_ev)
        except EventInvalid as exc:
            where = f"graph {graph_ev.get('graph')} (seq {graph_ev.get('seq')})"
            raise GraphInvalid(f"{where}: {exc}; the trace is corrupt") from None
        nodes = graph_ev["nodes"]
        # Node ids are 0..n-1 (the format's rule), so they index the node lists directly.
        self.nodes_of: dict[int, list[int]] = {}  # launch seq -> its node ids, in creation order
        hint: list[int | None] = [None] * len(nodes)  # node -> the stream of the launch that created it
        for node in nodes:
            op = node.get("op")
            if op is not None:
                self.nodes_of.setdefault(op, []).append(node["id"])
                hint[node["id"]] = stream_of.get(op)
        preds: list[list[int]] = [[] for _ in nodes]  # per node, the edges into it that order completion
        for edge in graph_ev["edges"]:
            if len(edge) == 2:  # a third element: programmatic, the next kernel may start early
                preds[edge[1]].append(edge[0])
        self._chain: list[int] = [0] * len(nodes)
        self._position: list[int] = [0] * len(nodes)
        self._clock: list[Clock] = [{}] * len(nodes)
        self._build_clocks(_topological_order(preds), preds, hint)

    def launch(self, seq: int) -> LaunchReach:
        """The reach of the launch with this seq (which must own nodes: see ``nodes_of``)."""
        ids = self.nodes_of[seq]
        marks = tuple((self._chain[i], self._position[i]) for i in ids)
        first = self._clock[ids[0]]
        if len(ids) == 1:
            return LaunchReach(marks, first, first)
        join, meet = dict(first), dict(first)
        for i in ids[1:]:
            clock = self._clock[i]
            for chain, position in clock.items():
                if join.get(chain, -1) < position:
                    join[chain] = position
            for chain in list(meet):
                meet[chain] = min(meet[chain], clock.get(chain, -1))
        return LaunchReach(marks, join, meet)

    def _build_clocks(self, order: range | list[int], preds: list[list[int]], hint: list[int | None]) -> None:
        chain_of, position_of, clock_of = self._chain, self._position, self._clock
        tail_position: list[int] = []  # chain -> position of its last node so far
        tail: list[int] = []  # chain -> its last node so far
        stream_chain: dict[int, int] = {}  # stream -> the chain its launches' nodes last continued
        for node in order:
            sources = preds[node]
            clock = dict(clock_of[sources[0]]) if sources else {}
            for source in sources[1:]:
                for chain, position in clock_of[source].items():
                    if clock.get(chain, -1) < position:
                        clock[chain] = position
            chain = self._chain_to_continue(node, clock, sources, hint[node], stream_chain, tail, tail_position)
            if chain == len(tail):
                tail.append(node)
                tail_position.append(-1)
            position = tail_position[chain] + 1
            tail[chain], tail_position[chain] = node, position
            clock[chain] = position
            chain_of[node], position_of[node], clock_of[node] = chain, position, clock
            stream = hint[node]
            if stream is not None:
                stream_chain[stream] = chain

    def _chain_to_continue(
        self,
        node: int,
        clock: Clock,
        sources: list[int],
        stream: int | None,
        stream_chain: dict[int, int],
        tail: list[int],
        tail_position: list[int],
    ) -> int:
        """A chain whose last node reaches ``node`` (its stream's, a predecessor's, any), or a
        new one: fewer chains, smaller clocks."""
        chain = stream_chain.get(stream) if stream is not None else None
        if chain is not None and clock.get(chain, -1) == tail_position[chain]:
            return chain
        for source in sources:
            if tail[self._chain[source]] == source:
                return self._chain[source]
        for chain, position in clock.items():
            if position == tail_position[chain]:
                return chain
        return len(tail)


def _topological_order(preds: list[list[int]]) -> range | list[int]:
    """Id order when every edge goes forward in it (the recorder numbers nodes as capture
    creates them), else Kahn's order (the graph is acyclic: the format's rule)."""
    if all(source < target for target, sources in enumerate(preds) for source in sources):
        return range(len(preds))
    succs: list[list[int]] = [[] for _ in preds]
    waiting = [len(sources) for sources in preds]
    for target, sources in enumerate(preds):
        for source in sources:
            succs[source].append(target)
    order = [i for i, n in enumerate(waiting) if n == 0]
    for node in order:  # grows while it is walked
        for succ in succs[node]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                order.append(succ)
    return order
