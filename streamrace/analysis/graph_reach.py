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
and are left out. A graph that cannot be a captured graph (a node id twice, an edge to a
node it does not have, a cycle, an ``op`` that is not a seq) is a ``GraphInvalid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamrace.errors import StreamraceError

Clock = dict[int, int]  # chain -> the last position on it that reaches the node(s)


class GraphInvalid(StreamraceError):
    """A ``graph`` event that no capture could have produced: the trace is corrupt."""


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
        self._where = f"graph {graph_ev.get('graph')} (seq {graph_ev.get('seq')})"
        nodes = graph_ev["nodes"]
        index: dict[int, int] = {}  # node id -> its position in ``nodes``
        self.nodes_of: dict[int, list[int]] = {}  # launch seq -> its node ids, in creation order
        hint: list[int | None] = []  # node -> the stream of the launch that created it
        for node in nodes:
            node_id, op = self._node_fields(node)
            if node_id in index:
                raise self._invalid(f"node id {node_id} appears twice")
            index[node_id] = len(index)
            if op is not None:
                self.nodes_of.setdefault(op, []).append(node_id)
            hint.append(stream_of.get(op) if op is not None else None)
        self._index = index
        preds = self._ordering_preds(graph_ev["edges"], index)
        order = self._topological_order(preds, nodes)
        self._chain: list[int] = [0] * len(preds)
        self._position: list[int] = [0] * len(preds)
        self._clock: list[Clock] = [{}] * len(preds)
        self._build_clocks(order, preds, hint)

    def launch(self, seq: int) -> LaunchReach:
        """The reach of the launch with this seq (which must own nodes: see ``nodes_of``)."""
        ids = [self._index[node_id] for node_id in self.nodes_of[seq]]
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

    def _invalid(self, problem: str) -> GraphInvalid:
        return GraphInvalid(f"{self._where}: {problem}; a captured graph cannot be so, the trace is corrupt")

    def _node_fields(self, node: Any) -> tuple[int, int | None]:
        if not isinstance(node, Mapping) or type(node.get("id")) is not int:
            raise self._invalid(f"node {_short(node)} has no integer 'id'")
        op = node.get("op")
        if op is not None and (type(op) is not int or op < 0):
            raise self._invalid(f"node {node['id']} has op {_short(op)}, not the seq of the launch that created it")
        return node["id"], op

    def _ordering_preds(self, edges: Any, index: dict[int, int]) -> list[list[int]]:
        """Per node, the nodes with an edge into it that orders completion."""
        preds: list[list[int]] = [[] for _ in index]
        for edge in edges:
            if not isinstance(edge, list | tuple) or len(edge) not in (2, 3):
                raise self._invalid(f"edge {_short(edge)} is not [from, to] or [from, to, type]")
            for end in edge[:2]:
                if type(end) is not int or end not in index:
                    raise self._invalid(f"edge {_short(edge)} names node {_short(end)}, which the graph does not have")
            if len(edge) == 3:  # programmatic: the next kernel may start early, nothing completes
                continue
            source, target = index[edge[0]], index[edge[1]]
            if source == target:
                raise self._invalid(f"edge {_short(edge)} makes node {edge[0]} depend on itself")
            preds[target].append(source)
        return preds

    def _topological_order(self, preds: list[list[int]], nodes: list[Any]) -> range | list[int]:
        """Creation order when every edge goes forward in it (as capture makes them), else
        Kahn's order; a cycle is reported."""
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
        if len(order) < len(preds):
            cycle = _a_cycle(preds, waiting)
            ids = " -> ".join(str(nodes[i]["id"]) for i in cycle[:8]) + (" -> ..." if len(cycle) > 8 else "")
            raise self._invalid(f"its edges form a cycle ({ids} -> {nodes[cycle[0]]['id']})")
        return order

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
            if hint[node] is not None:
                stream_chain[hint[node]] = chain

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


def _a_cycle(preds: list[list[int]], waiting: list[int]) -> list[int]:
    """Nodes on one cycle, given Kahn's leftovers (``waiting`` > 0): each leftover has a
    leftover predecessor, so walking back from one must come round."""
    node = next(i for i, n in enumerate(waiting) if n > 0)
    seen: dict[int, int] = {}
    path: list[int] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = next(source for source in preds[node] if waiting[source] > 0)
    return path[seen[node] :][::-1]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
