"""The analysis: trace events in, findings out (docs/analysis.md). Pure Python, no torch.

``analyze(trace)`` reads a whole ``Trace``; ``analyze(header, events)`` reads any iterable of
events in seq order, so a streaming reader (``iter_trace``) feeds it without holding the trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace import __version__
from streamrace.analysis.dedup import deduplicate
from streamrace.analysis.describe import Describer
from streamrace.analysis.engine import Engine
from streamrace.analysis.findings import Finding
from streamrace.trace.events import FORMAT_VERSION
from streamrace.trace.io import Trace


@dataclass
class AnalysisResult:
    findings: list[Finding]  # deduplicated, by first occurrence
    raw_findings: list[Finding]  # one per detected instance, in detection order
    summary: dict[str, int] = field(default_factory=dict)

    def to_dict(self, streamrace_version: str = __version__) -> dict[str, Any]:
        return {
            "streamrace": streamrace_version,
            "trace_format": FORMAT_VERSION,
            "findings": [f.to_dict() for f in self.findings],
            "summary": dict(self.summary),
        }


def analyze(trace: Trace | Mapping[str, Any], events: Iterable[Mapping[str, Any]] | None = None) -> AnalysisResult:
    """Analyse a ``Trace``, or a header and its events (validated, in seq order)."""
    if isinstance(trace, Trace):
        engine = Engine(trace.stacks)
        events = trace.events
    else:
        engine = Engine()
    for ev in events or ():
        engine.feed(ev)
    raw = Describer(engine).findings(engine.detections)
    summary = {
        "findings": 0,
        "graphs": engine.graphs,
        "ops": engine.ops,
        "accesses": engine.accesses,
    }
    findings = deduplicate(raw)
    summary["findings"] = len(findings)
    return AnalysisResult(findings=findings, raw_findings=raw, summary=summary)


__all__ = ["AnalysisResult", "Finding", "analyze"]
