"""The Perfetto report: the timeline as Chrome trace-event JSON (docs/report.md).

``streamrace analyze TRACE --format perfetto -o trace.json``, then open the file in
https://ui.perfetto.dev or ``chrome://tracing``. The JSON object format: ``traceEvents`` and
``displayTimeUnit``. Each view of the timeline (streamrace/report/timeline.py) is a process
(``pid``), each of its streams a thread (``tid``) named by the stream's label; ops, kernels
and replays are complete slices (``ph: "X"``), event records and waits short slices joined by
a flow (``ph: "s"`` / ``"f"``). Each finding adds a flow between its two accesses, named
``missing edge``, an instant event (``ph: "i"``) on the second access with the finding in its
``args``, and a slice for its block (allocation to free, then reuse) on a track of its own.

A trace has no times, only program order: a column is ``COLUMN_US`` microseconds, so ``ts``
says where in program order, never when. Output is byte-identical for the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrace.report.demangle import demangled
from streamrace.report.escape import printable_strings
from streamrace.report.json_report import to_json
from streamrace.report.options import DEFAULT, ReportOptions
from streamrace.report.text import by_graph
from streamrace.report.timeline import KIND_NAMES, RECORD, WAIT, Timeline, View, block_span, spot, timeline_of

if TYPE_CHECKING:
    from streamrace.analysis.findings import Finding
    from streamrace.report import TraceResult

COLUMN_US = 10  # one column of program order, in the format's microseconds
SLICE_US = 8  # a slice is a little narrower than its column, so neighbours stay apart
MARK_US = 2  # event records and waits: a sliver


def track_name(timeline: Timeline, stream: int) -> str:
    """A stream's thread name: the program's name for it; an unnamed stream's label and handle
    (``stream#1 (0x5010)``), since its label alone says nothing outside this trace."""
    name = timeline.stream_names.get(stream)
    if name:
        return name
    label = timeline.labels.get(stream, f"{stream:#x}")
    return f"{label} ({stream:#x})" if label != f"{stream:#x}" else label


def _slice_start(column: int) -> int:
    return column * COLUMN_US


class _Events:
    """The traceEvents list, with flow ids counted."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._flows = 0

    def meta(self, pid: int, tid: int | None, name: str, args: dict[str, Any]) -> None:
        event: dict[str, Any] = {"ph": "M", "pid": pid, "name": name, "args": args}
        if tid is not None:
            event["tid"] = tid
        self.events.append(event)

    def flow(self, name: str, cat: str, pid: int, start: tuple[int, int], end: tuple[int, int]) -> None:
        """A flow arrow from the slice on ``start`` (tid, ts) to the one on ``end``."""
        self._flows += 1
        base = {"name": name, "cat": cat, "id": self._flows, "pid": pid}
        self.events.append({**base, "ph": "s", "tid": start[0], "ts": start[1]})
        self.events.append({**base, "ph": "f", "bp": "e", "tid": end[0], "ts": end[1]})


def _view(out: _Events, view: View, timeline: Timeline, pid: int, path: str, sort: int, shown: dict[str, str]) -> None:
    out.meta(pid, None, "process_name", {"name": f"{path}: {view.title}"})
    out.meta(pid, None, "process_sort_index", {"sort_index": sort})
    for lane, stream in enumerate(view.streams):
        out.meta(pid, lane + 1, "thread_name", {"name": track_name(timeline, stream)})
        out.meta(pid, lane + 1, "thread_sort_index", {"sort_index": lane})
    for column in range(len(view)):
        kind = view.kinds[column]
        site = view.sites[column]
        args: dict[str, Any] = {"seq": view.seqs[column], "stream": f"{view.streams[view.lanes[column]]:#x}"}
        if site >= 0:
            args["at"] = timeline.sites[site]
        name = timeline.names[view.names[column]]
        if name in shown:  # a kernel's symbol: demangled for the eye, raw for a search
            args["symbol"] = name
        out.events.append(
            {
                "name": shown.get(name, name),
                "cat": KIND_NAMES[kind],
                "ph": "X",
                "pid": pid,
                "tid": view.lanes[column] + 1,
                "ts": _slice_start(column),
                "dur": MARK_US if kind in (RECORD, WAIT) else SLICE_US,
                "args": args,
            }
        )
    for record, wait, event in view.edges:
        out.flow(
            f"event {event}",
            "event",
            pid,
            (view.lanes[record] + 1, _slice_start(record)),
            (view.lanes[wait] + 1, _slice_start(wait)),
        )


def _finding(
    out: _Events, number: int, finding: Finding, timeline: Timeline, pids: dict[int, int], path: str, track: int
) -> None:
    """The finding's marks: the missing edge, an instant naming it, and its block's track."""
    placed = [spot(timeline, a.graph, a.stream, a.seq) for a in finding.accesses]
    spots = [p for p in placed if p is not None]
    if not spots:
        return
    last = spots[-1]
    pid = pids[id(last.view)]
    args = {
        "finding": number,
        "kind": finding.kind,
        "hazard": finding.hazard,
        "signature": finding.signature,
        "message": finding.message,
        "missing_edge": finding.missing_edge,
        "fix": finding.fix,
        "trace": path,
    }
    ts = _slice_start(last.column)
    out.events.append(
        {"name": f"finding {number}: {finding.kind}", "cat": "streamrace.finding", "ph": "i", "s": "t",
         "pid": pid, "tid": last.lane + 1, "ts": ts, "args": args}
    )  # fmt: skip
    if len(spots) == 2 and spots[0].view is last.view:
        first = spots[0]
        start = (first.lane + 1, _slice_start(first.column))
        out.flow("missing edge", "streamrace.finding", pid, start, (last.lane + 1, ts))
    alloc = finding.allocation
    if alloc is None:
        return
    reuse = alloc.reused_by or {}
    span = block_span(last.view, alloc.alloc_seq, alloc.free_seq, reuse.get("alloc_seq"))
    tid = len(last.view.streams) + track
    out.meta(pid, tid, "thread_name", {"name": f"finding {number}: the block"})
    out.meta(pid, tid, "thread_sort_index", {"sort_index": tid})
    end = span.end if span.end is not None else len(last.view)
    block_args = {"size": alloc.size, "allocated_at": alloc.alloc_location, "freed_at": alloc.free_location}
    out.events.append(
        {"name": f"block allocated at {alloc.alloc_location or '?'} ({alloc.size} bytes)", "cat": "streamrace.block",
         "ph": "X", "pid": pid, "tid": tid, "ts": _slice_start(span.start),
         "dur": max(1, (end - span.start) * COLUMN_US), "args": block_args}
    )  # fmt: skip
    if span.reuse is not None:
        out.events.append(
            {"name": f"reused by {reuse.get('op', '?')} at {reuse.get('location') or '?'}", "cat": "streamrace.block",
             "ph": "X", "pid": pid, "tid": tid, "ts": _slice_start(max(span.reuse, end)),
             "dur": max(1, (len(last.view) - max(span.reuse, end)) * COLUMN_US), "args": {"op": reuse.get("op")}}
        )  # fmt: skip


def document(traces: Sequence[TraceResult]) -> dict[str, Any]:
    """The trace-event JSON object."""
    out = _Events()
    pid = 0
    shown = demangled(name for item in traces for name in timeline_of(item).names)  # one c++filt for all
    for item in traces:
        timeline = timeline_of(item)
        pids: dict[int, int] = {}
        for view in timeline.views:
            pid += 1
            pids[id(view)] = pid
            _view(out, view, timeline, pid, item.path, pid, shown)
        number = 0
        for members in by_graph(item.result.findings).values():
            for finding in members:
                number += 1
                _finding(out, number, finding, timeline, pids, item.path, number)
    other = {"columns": f"{COLUMN_US} us each: program order, not time"}
    return printable_strings({"traceEvents": out.events, "displayTimeUnit": "ns", "otherData": other})


def render(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> str:
    """The Perfetto report; ``options`` are for people's formats and change nothing here."""
    return to_json(document(traces), compact=True)
