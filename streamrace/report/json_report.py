"""The JSON report: one document for all traces of a run (schema in docs/json-report.md).

The top level is the analysis contract (``AnalysisResult.to_dict``): ``streamrace``,
``trace_format``, ``findings`` and ``summary``, so a consumer written for one trace reads a
run over several unchanged. Several traces merge into it: every finding names its ``trace``,
``summary`` adds the counts up and gains ``traces``, and the ``traces`` list keeps each
trace's own summary. Output is byte-identical for the same inputs: no timestamps, no
absolute paths the user did not give, insertion-ordered keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrace import __version__
from streamrace.trace import FORMAT_VERSION

if TYPE_CHECKING:
    from streamrace.report import TraceResult


def document(traces: Sequence[TraceResult]) -> dict[str, Any]:
    """The report as a JSON-ready dict."""
    findings: list[dict[str, Any]] = []
    summary: dict[str, int] = {}
    per_trace: list[dict[str, Any]] = []
    for item in traces:
        part = item.result.to_dict(__version__)
        for finding in part["findings"]:
            findings.append({**finding, "trace": item.path})
        for key, value in part["summary"].items():
            summary[key] = summary.get(key, 0) + value
        per_trace.append({"path": item.path, "summary": part["summary"]})
    summary["traces"] = len(per_trace)
    return {
        "streamrace": __version__,
        "trace_format": FORMAT_VERSION,
        "findings": findings,
        "summary": summary,
        "traces": per_trace,
    }


def render(traces: Sequence[TraceResult]) -> str:
    return json.dumps(document(traces), indent=2, ensure_ascii=False) + "\n"
