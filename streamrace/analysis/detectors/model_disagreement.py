"""``model-disagreement``: streamrace's clock model and a captured graph's own edges disagree,
a fault in streamrace or its recording, said loudly (docs/findings.md). The graph-truth check
(streamrace/analysis/graph_truth.py) runs as a pass over the trace and the engine's results
wherever the recorder read the graphs back; each ``Disagreement`` it finds is one finding.

The check is imported only when a trace needs it (docs/performance.md, start-up: a trace
without graphs loads none of it), so its record is declared here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer
from streamrace.analysis.detectors.detector import Detector, EngineResults, SarifRule, TracePass
from streamrace.analysis.findings import Finding

KIND = "model-disagreement"

# What a disagreement is about.
MISSED = "missed"  # no path in the graph between two conflicting launches, but the model orders them
SAME_STREAM = "same-stream"  # two conflicting launches of one stream, and no path between them
UNFOUNDED = "unfounded"  # the model reports a race at a launch every conflicting launch reaches


@dataclass(frozen=True, eq=False)
class Disagreement:
    """The model and graph ``graph`` disagree about the launch with seq ``later``."""

    what: str  # MISSED, SAME_STREAM or UNFOUNDED
    graph: int
    later: int
    nodes: Mapping[int, list[int]]  # seq -> the graph's node ids, for the launches named
    launches: tuple[Mapping[str, Any], ...] = ()  # (earlier, later) launch events; none when UNFOUNDED


_FIX = (
    "a fault in streamrace or in its recording, not a verdict on your program: please report it with the trace "
    "(streamrace run -o trace.jsonl.gz)"
)
_WHAT = {
    MISSED: "no path in the graph, but the model orders them",
    SAME_STREAM: "same stream, yet no path between them in the graph",
}


class GraphTruthPass:
    """The graph-truth check as a pass: it collects each capture's launches and graph from the
    events, then compares the graphs with the races the engine reported."""

    def __init__(self) -> None:
        from streamrace.analysis.graph_truth import GraphTruth  # the graph check loads only for traces with graphs

        self.truth = GraphTruth()

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        return self.truth.observe(events)

    def watch(self) -> None:
        """None: it observes (with the C++ core, through the core's own collector, which the
        direct reader feeds)."""
        return None

    def detections(self, results: EngineResults) -> list[object]:
        return list(self.truth.disagreements(results.unordered))

    def explains(self, detection: object) -> bool:
        return False


class ModelDisagreementDetector(Detector[Disagreement]):
    kind = KIND
    severity = "error"
    docs_anchor = "model-disagreement-error"
    records = (Disagreement,)
    rule = SarifRule(
        name="ModelDisagreement",
        short="streamrace's model and a captured graph disagree: a fault in streamrace, not your program",
        full=(
            "Not a finding about your program: streamrace's clock model and a captured graph's own edges "
            "(read back by the recorder) disagree about two launches of one capture."
        ),
        fix="Report it to streamrace with the trace.",
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """Recorded traces carry each capture's graph (``graph_readback`` in the header)."""
        return GraphTruthPass() if header.get("graph_readback") else None

    def describe(self, disagreement: Disagreement, describer: Describer) -> Finding:
        graph, nodes = disagreement.graph, disagreement.nodes
        if disagreement.what == UNFOUNDED:
            later = disagreement.later
            message = (
                f"streamrace's model reports a race at the launch with seq {later} (nodes {nodes[later]}) "
                f"of graph {graph}, but in the graph every conflicting launch reaches it"
            )
            return Finding(kind=KIND, hazard=None, accesses=[], message=message, fix=_FIX, graph=graph)
        first, second = disagreement.launches
        message = (
            f"streamrace's model and graph {graph} disagree about {_name(first)} (nodes {nodes[first['seq']]}) "
            f"and {_name(second)} (nodes {nodes[second['seq']]}): {_WHAT[disagreement.what]}"
        )
        return Finding(
            kind=KIND,
            hazard=None,
            accesses=[describer.launch(launch, "write" if launch["writes"] else "read") for launch in (first, second)],
            message=message,
            fix=_FIX,
            graph=graph,
        )


def _name(launch: Mapping[str, Any]) -> str:
    return str(launch.get("op") or launch.get("name"))


DETECTOR = ModelDisagreementDetector()
