"""The HTML report: one self-contained file that draws the timeline and the findings on it.

``streamrace analyze TRACE --format html -o report.html`` (docs/report.md). The page is one
file: its style and script are inline (assets/timeline.css, assets/timeline.js), it fetches
nothing, and it opens from ``file://`` in any browser. A Content-Security-Policy allows no
source at all but that one script (by its hash) and that style, so even markup that got into
the page could neither load nor run anything.

The data is JSON inside ``<script type="application/json">`` with every ``<``, ``>`` and
``&`` written as a JSON escape, so no trace string (``</script>``, ``<!--``) can end or change
that element; the script builds the page with ``textContent`` and ``createElement`` only, so
trace strings are text wherever they show. Ops are drawn on a ``<canvas>``, only the columns in
sight (several to a pixel when zoomed out), so the DOM holds one element per finding, lane and
view, none per op: a trace of 100,000 ops is a page of the same few hundred elements, and its
data costs a dozen bytes an op (columns as flat arrays, seqs as differences, names and source
lines in tables).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from streamrace import __version__
from streamrace.analysis.detectors import detector
from streamrace.outcome import recorded_nothing
from streamrace.report.demangle import demangled
from streamrace.report.escape import for_terminal, printable_strings
from streamrace.report.options import DEFAULT, ReportOptions
from streamrace.report.sources import SourceLines
from streamrace.report.text import by_graph, finding_text, split_location
from streamrace.report.timeline import KIND_NAMES, Timeline, View, block_span, spot, timeline_of

if TYPE_CHECKING:
    from streamrace.analysis.findings import Access, Finding
    from streamrace.report import TraceResult

DATA_ID = "streamrace-data"


def _asset(name: str) -> str:
    return (resources.files("streamrace.report") / "assets" / name).read_text(encoding="utf-8")


def _differences(values: Sequence[int]) -> list[int]:
    previous, out = 0, []
    for value in values:
        out.append(value - previous)
        previous = value
    return out


def _view(view: View, timeline: Timeline, trace: int) -> dict[str, Any]:
    return {
        "trace": trace,
        "title": view.title,
        "graph": view.graph,
        # A lane shows the program's name for its stream; the handle is the page's secondary text.
        "lanes": [timeline.labels.get(s, f"{s:#x}") for s in view.streams],
        "handles": [f"{s:#x}" for s in view.streams],
        "seq": _differences(view.seqs),
        "lane": view.lanes.tolist(),
        "kind": view.kinds.tolist(),
        "name": view.names.tolist(),
        "site": view.sites.tolist(),
        "edges": [value for edge in view.edges for value in edge],
    }


def _access(timeline: Timeline, access: Access, views: dict[int, int], shown: dict[str, str]) -> dict[str, Any]:
    placed = spot(timeline, access.graph, access.stream, access.seq)
    return {
        "view": views[id(placed.view)] if placed is not None else None,
        "lane": placed.lane if placed is not None else None,
        "column": placed.column if placed is not None else None,
        "exact": placed.exact if placed is not None else False,
        "access": access.access,
        "op": shown.get(access.op, access.op),
        "stream": access.stream_label,
        "handle": f"{access.stream:#x}",
        "location": access.location,
        "seq": access.seq,
        "captured": (access.captured or {}).get("location"),
    }


def _block(
    finding: Finding, view_index: int | None, view: View | None, lines: SourceLines, workdir: str | None
) -> dict[str, Any] | None:
    alloc = finding.allocation
    if alloc is None or view is None:
        return None
    reuse = alloc.reused_by or {}
    span = block_span(view, alloc.alloc_seq, alloc.free_seq, reuse.get("alloc_seq"))
    source = None
    parsed = split_location(alloc.alloc_location) if alloc.alloc_location else None
    if parsed is not None:
        source = lines.get(parsed[0], parsed[1], workdir)
    return {
        "view": view_index,
        "start": span.start,
        "end": span.end,
        "reuse": span.reuse,
        "starts_before": span.starts_before,
        "size": alloc.size,
        "stream": alloc.stream_label,
        "handle": f"{alloc.stream:#x}",
        "alloc_location": alloc.alloc_location,
        "free_location": alloc.free_location,
        "source": source.strip() if source else None,
        "reused_by": reuse.get("op"),
    }


def _finding(
    number: int,
    finding: Finding,
    timeline: Timeline,
    views: dict[int, int],
    trace: int,
    options: ReportOptions,
    lines: SourceLines,
    workdir: str | None,
    shown: dict[str, str],
) -> dict[str, Any]:
    accesses = [_access(timeline, access, views, shown) for access in finding.accesses]
    # The view the finding is shown in: its later access's (where the bug bites), else any.
    placed = [a["view"] for a in reversed(accesses) if a["view"] is not None]
    view_index = placed[0] if placed else None
    view = next((v for v in timeline.views if views[id(v)] == view_index), None)
    return {
        "trace": trace,
        "number": number,
        "kind": finding.kind,
        "severity": finding.severity,
        "hazard": finding.hazard,
        "aliasing": finding.aliasing,
        "count": finding.count,
        "signature": finding.signature,
        "message": finding.message,
        "missing_edge": finding.missing_edge,
        "unordered": detector(finding.kind).pair_unordered,  # so the page draws a missing edge
        "text": finding_text(finding, number, options, workdir),
        "view": view_index,
        "accesses": accesses,
        "block": _block(finding, view_index, view, lines, workdir),
    }


def document(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> dict[str, Any]:
    """What the page draws, as JSON-ready data (the script's only input)."""
    out: dict[str, Any] = {"streamrace": __version__, "kinds": list(KIND_NAMES)}
    out.update(traces=[], views=[], findings=[])
    lines = SourceLines(options.source_roots)
    number = 0  # one sidebar for every trace: numbered through, or each trace's first is [1]
    # Kernel symbols demangled for the page (one c++filt for the report); the text in
    # "text" is the text report's, which, like the JSON and SARIF, keeps the raw name.
    shown = demangled(
        [name for item in traces for name in timeline_of(item).names]
        + [a.op for item in traces for f in item.result.findings for a in f.accesses]
    )
    for trace_index, item in enumerate(traces):
        timeline = timeline_of(item)
        views: dict[int, int] = {}
        for view in timeline.views:
            views[id(view)] = len(out["views"])
            out["views"].append(_view(view, timeline, trace_index))
        for members in by_graph(item.result.findings).values():
            for finding in members:
                number += 1
                out["findings"].append(
                    _finding(number, finding, timeline, views, trace_index, options, lines, item.workdir, shown)
                )
        summary = item.result.summary
        out["traces"].append(
            {
                "path": item.path,
                "names": [shown.get(name, name) for name in timeline.names],
                "sites": timeline.sites,
                "summary": {key: summary.get(key, 0) for key in ("findings", "graphs", "replays", "ops", "accesses")},
                "notes": [note.message for note in item.machine_notes()],
                "suppressed": len(item.suppressed),
                "recorded_nothing": recorded_nothing(summary),
            }
        )
    # "text" is the text report's, escaped already and with its own line breaks.
    return printable_strings(out, keep=frozenset({"text"}), cut=True)


def embedded_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: ASCII only (a lone
    surrogate from a trace stays an escape), and no ``<``, ``>`` or ``&`` that could end the
    element or start a comment in it."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _title(traces: Sequence[TraceResult]) -> str:
    names = ", ".join(item.path for item in traces[:3]) + (", ..." if len(traces) > 3 else "")
    # for_terminal: the title is text outside the JSON, where a lone surrogate cannot be encoded
    return for_terminal(f"streamrace: {names}" if names else "streamrace")


def render(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> str:
    """The HTML report: one page for all traces."""
    script = _asset("timeline.js")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{digest}'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(_title(traces))}</title>\n"
        f"<style>\n{_asset('timeline.css')}</style>\n</head>\n<body>\n"
        f"{_asset('timeline.html')}"
        f'<script type="application/json" id="{DATA_ID}">{embedded_json(document(traces, options))}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )
