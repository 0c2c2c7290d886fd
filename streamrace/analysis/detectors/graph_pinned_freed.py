"""``graph-pinned-freed``: pinned host memory baked into a graph (the source or destination of a
captured copy) was freed while the graph lives; the host caching allocator, which protects
eager copies with events, does not protect replays, and hands the block to the next owner,
whose bytes every later replay copies (docs/findings.md; the rule is docs/analysis.md §8.11;
HAZARDS.md M3). Found by the pinned-memory pass (pinned_write_during_copy.py's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer, at, what
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.detectors.pinned_words import host_access, host_allocation
from streamrace.analysis.findings import Finding

KIND = "graph-pinned-freed"


@dataclass(eq=False)
class GraphPinnedFreed:
    """``free`` gave back the pinned block ``block`` (its host_alloc, outside any capture) that
    ``op``, captured into ``graph``, copies; ``stands``: None while the graph lives unreplayed
    (latent), True once it was replayed after the free (``replay``: the first), False when the
    graph went first; ``reused``: the host_alloc of the next owner of those bytes."""

    block: Mapping[str, Any]
    free: Mapping[str, Any]
    block_end: int
    graph: int
    op: Mapping[str, Any]
    stands: bool | None = None
    replay: Mapping[str, Any] | None = None
    reused: Mapping[str, Any] | None = None


class GraphPinnedFreedDetector(Detector[GraphPinnedFreed]):
    kind = KIND
    severity = "error"
    docs_anchor = "graph-pinned-freed-error"
    records = (GraphPinnedFreed,)
    rule = SarifRule(
        name="GraphPinnedFreed",
        short="Pinned host memory a captured copy uses is freed while its graph lives",
        full=(
            "A graph captured a copy from (or to) pinned host memory allocated outside the capture, and the "
            "pinned tensor was freed while the graph still lives. The graph keeps the raw host address; the "
            "host caching allocator hands the block to the next pinned allocation, and every later replay "
            "copies the new owner's bytes (or overwrites them)."
        ),
        fix=(
            "Keep the pinned tensor alive as long as the graph (hold a reference next to the graph object), "
            "or allocate it inside the capture, whose pinned blocks are never handed out again."
        ),
    )

    def describe(self, found: GraphPinnedFreed, describer: Describer) -> Finding:
        captured = describer.launch(found.op, "write" if found.op.get("host_writes") else "read")
        captured.graph = found.graph
        free = host_access(describer, found.free, "host_free", "free")
        message = (
            f"The pinned host memory that {what(captured)} copies in graph {found.graph} is freed{at(free)} "
            f"while the graph lives"
        )
        accesses = [captured, free]
        if found.reused is not None:
            owner = host_access(describer, found.reused, "host_alloc", "write")
            message += f"; the host allocator gives it to the next pinned tensor{at(owner)}"
        if found.replay is not None:
            replay = host_access(describer, found.replay, f"replay of graph {found.graph}", "read")
            message += f"; the graph is replayed after the free{at(replay)} and copies whatever that memory now holds"
            accesses.append(replay)
        else:
            message += " (latent: no replay yet)"
        return Finding(
            kind=KIND,
            hazard=None,
            accesses=accesses,
            message=message + ".",
            missing_edge=None,
            fix=(
                f"keep the pinned tensor freed{at(free)} alive as long as graph {found.graph} (hold a reference "
                "next to the graph object, e.g. an attribute of the object that owns the graph), or allocate "
                "it inside the capture, whose pinned blocks are never handed out again"
            ),
            aliasing=found.reused is not None,
            graph=found.graph,
            allocation=host_allocation(describer, found.block, found.free, found.reused),
        )


DETECTOR = GraphPinnedFreedDetector()
