"""The JSON report: one document for all traces of a run (schema in docs/json-report.md).

The top level starts with the analysis contract (``AnalysisResult.to_dict``): ``streamrace``,
``trace_format``, ``findings``, ``summary`` and ``notes``, so a consumer written for one trace
reads a run over several unchanged. Several traces merge into it: every finding and note
names its ``trace``, ``summary`` adds the counts up and gains ``traces``, and the ``traces``
list keeps each trace's own summary. Findings a CI gate accepted are in ``suppressed``, not in
``findings``, each with ``suppressed_by``; findings about a library's own protocol are in
``library_findings``, each naming its ``protocol``. Output is byte-identical for the same inputs: no
timestamps, no absolute paths the user did not give, insertion-ordered keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrace import __version__
from streamrace.report.options import DEFAULT, ReportOptions
from streamrace.trace import FORMAT_VERSION

if TYPE_CHECKING:
    from streamrace.report import TraceResult


def document(traces: Sequence[TraceResult]) -> dict[str, Any]:
    """The report as a JSON-ready dict."""
    findings: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    suppressed: list[dict[str, Any]] = []
    library: list[dict[str, Any]] = []
    summary: dict[str, int] = {}
    per_trace: list[dict[str, Any]] = []
    for item in traces:
        part = item.result.to_dict(__version__)
        for finding in part["findings"]:
            findings.append({**finding, "trace": item.path})
        library += [{**finding, "trace": item.path} for finding in part.pop("library_findings")]
        part["notes"] = [note.to_dict() for note in item.machine_notes()]
        for note in part["notes"]:
            notes.append({**note, "trace": item.path})
        for accepted in item.suppressed:
            suppressed.append({**accepted.finding.to_dict(), "trace": item.path, "suppressed_by": accepted.to_dict()})
        baselined = sum(accepted.entry is None for accepted in item.suppressed)
        counts = {**part["summary"], "suppressed": len(item.suppressed) - baselined, "baselined": baselined}
        for key, value in counts.items():
            summary[key] = summary.get(key, 0) + value
        per_trace.append({"path": item.path, "summary": counts, "notes": part["notes"]})
    summary["traces"] = len(per_trace)
    return {
        "streamrace": __version__,
        "trace_format": FORMAT_VERSION,
        "findings": findings,
        "summary": summary,
        "notes": notes,
        "traces": per_trace,
        "suppressed": suppressed,
        # findings about a library's own protocol (each names its "protocol"): not the program's
        "library_findings": library,
        # every trace empty: what exit code 5 means, readable where --exit-zero hid the code
        "nothing_recorded": bool(traces) and all(item.recorded_nothing for item in traces),
    }


def to_json(document: Any, compact: bool = False) -> str:
    """A machine report as text: UTF-8 as it is, unless a trace string holds a lone surrogate
    (JSON allows ``"\\ud800"``, UTF-8 cannot encode it), then every non-ASCII character as
    a JSON escape. Strict JSON either way: NaN and infinities are refused. ``compact``: no
    indentation or spaces, for documents of one entry per op (the Perfetto report)."""
    layout: dict[str, Any] = {"separators": (",", ":")} if compact else {"indent": 2}
    text = json.dumps(document, ensure_ascii=False, allow_nan=False, **layout)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(document, ensure_ascii=True, allow_nan=False, **layout)
    return text + "\n"


def render(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> str:
    """The JSON report; ``options`` are for people's formats and change nothing here."""
    return to_json(document(traces))
