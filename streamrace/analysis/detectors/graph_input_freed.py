"""``graph-input-freed``: a tensor made outside a graph's capture, that the graph reads or
writes at every replay, is freed while the graph can still be replayed (docs/findings.md; the
rule is docs/analysis.md §8.5; HAZARDS.md X5). Its block goes back to the allocator and the
next allocation of that size takes it, so the graph's replays touch another tensor's memory.
Reported at the free, whether or not a replay followed yet (latent): it is enough that the
graph was replayed after the free, or was still alive when the trace ended. The block's next
owner (the allocation that took it while the graph lived) is named, and its first access is
``allocation.reused_by``. The engines detect it as a ``GraphInputFreed``."""

from __future__ import annotations

from streamrace.analysis.describe import Describer, at, tensor_code, what
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.engine import GraphInputFreed
from streamrace.analysis.findings import Finding

KIND = "graph-input-freed"


class GraphInputFreedDetector(Detector[GraphInputFreed]):
    kind = KIND
    severity = "error"
    docs_anchor = "graph-input-freed-error"
    records = (GraphInputFreed,)
    rule = SarifRule(
        name="GraphInputFreed",
        short="A tensor a captured graph uses is freed while the graph can still be replayed",
        full=(
            "A CUDA graph bakes in the addresses of the tensors it captured. A tensor made outside the "
            "capture (an input, a workspace, a communication buffer) was freed while the graph was alive; "
            "its block goes back to the allocator and the next allocation of that size takes it, so every "
            "later replay reads or writes another tensor's memory."
        ),
        fix=(
            "Keep the tensor alive as long as the graph: hold a reference next to the graph (as "
            "make_graphed_callables does for its static inputs), or copy new data into it instead of "
            "replacing it."
        ),
    )

    def describe(self, freed: GraphInputFreed, describer: Describer) -> Finding:
        lifetime, graph = freed.lifetime, freed.graph
        use = describer.access(freed.use)
        free = describer.free_access(lifetime, None)
        site = describer.site(lifetime.alloc)[1]
        nodes = freed.use.event.get("nodes")
        node = f" (node {nodes[0]})" if nodes else ""
        uses = "writes" if freed.use.write else "reads"
        message = (
            f"The tensor allocated{f' at {site}' if site else ''} is freed on {free.stream_label}{at(free)} "
            f"while graph {graph} still {uses} it: {what(use)}{node} was captured with its address, and "
            "the allocator can hand the block to the next allocation"
        )
        if freed.reused is not None:
            owner_site = describer.site(freed.reused.alloc)[1]
            message += f"; it went to the tensor allocated{f' at {owner_site}' if owner_site else ''}, its next owner"
        if freed.replay is not None:
            replay_site = describer.site(freed.replay)[1]
            message += f"; graph {graph} is replayed after the free{f' at {replay_site}' if replay_site else ''}"
            if freed.clobbered is not None:
                clobber = describer.access(freed.clobbered.writer)
                message += f", and {what(clobber)} wrote the block through the allocation that took it"
        else:
            message += f" (latent: graph {graph} was still alive when the trace ended)"
        named = describer.tensor(lifetime)  # one name in both halves of the fix, where the source has one
        tensor, which = tensor_code(describer, lifetime, named[1] if named is not None else None)
        keep = f"`{tensor}`" if named is not None else "the tensor"
        reuse = None
        if freed.reused is not None and freed.reuser is not None:
            reuse = (describer.access(freed.reuser), freed.reused)
        return Finding(
            kind=KIND,
            hazard=None,
            accesses=[use, free],
            message=message + ".",
            missing_edge=f"the free{at(free)} comes before the end of graph {graph}'s life",
            fix=(
                f"keep {keep} alive as long as graph {graph} (hold a reference next to the graph), "
                f"or copy new data into `{tensor}` instead of freeing it" + which
            ),
            aliasing=freed.clobbered is not None,
            graph=graph,
            allocation=describer.allocation(lifetime, reuse),
            count=freed.count,
        )


DETECTOR = GraphInputFreedDetector()
