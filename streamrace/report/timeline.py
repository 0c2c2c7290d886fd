"""The timeline of a trace: lanes, slices and event edges per view, with the findings placed on it.

The visual reports (html.py, perfetto.py) draw what this module builds; neither reads a trace.
A trace has no times, only program order, so the horizontal axis is **columns**: every op,
kernel, replay, event record and event wait takes one column of its view, in seq order. A view
is one capture (its member streams, as the engines define membership: the capturing stream and
every stream that waited on an event recorded inside it, docs/analysis.md §1) or the execution
view (eager work and replays, §8). A lane is a stream of that view.

The timeline is built on the events' way to the engine (``TimelineBuilder.observe``), so a
streamed trace is still read once; it holds a few integers per column, never an event. Allocs
and frees take no column: a seq that is not a column's falls at the boundary before the next
column (``View.boundary``), which is where the block bars of a finding start and end, in
whichever view they are drawn, clipped to it.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from streamrace.analysis.clocks import HappensBefore

if TYPE_CHECKING:
    from streamrace.report import TraceResult

# What a column holds.
OP, KERNEL, REPLAY, RECORD, WAIT = range(5)
KIND_NAMES = ("op", "kernel", "replay", "record", "wait")

EXECUTION = "execution"

Event = TypeVar("Event", bound=Mapping[str, Any])


@dataclass
class View:
    """One capture, or the execution view: its lanes (streams) and columns (work, in order)."""

    key: str  # "execution", or "graph G"
    graph: int | None
    streams: list[int] = field(default_factory=list)  # lane -> stream, by first appearance here
    lane_of: dict[int, int] = field(default_factory=dict)
    seqs: array = field(default_factory=lambda: array("q"))  # column -> seq (strictly increasing)
    lanes: array = field(default_factory=lambda: array("l"))  # column -> lane
    kinds: array = field(default_factory=lambda: array("b"))  # column -> OP ... WAIT
    names: array = field(default_factory=lambda: array("l"))  # column -> index in Timeline.names
    sites: array = field(default_factory=lambda: array("l"))  # column -> index in Timeline.sites, -1: none
    edges: list[tuple[int, int, int]] = field(default_factory=list)  # (record column, wait column, event)
    aborted: bool = False

    @property
    def title(self) -> str:
        if self.graph is None:
            return "execution view: eager work and replays"
        return f"graph {self.graph} (capture{', aborted' if self.aborted else ''})"

    def lane(self, stream: int) -> int:
        lane = self.lane_of.get(stream)
        if lane is None:
            lane = self.lane_of[stream] = len(self.streams)
            self.streams.append(stream)
        return lane

    def column(self, seq: int) -> int | None:
        """The column of the event at ``seq``, or None if it took none here."""
        index = bisect.bisect_left(self.seqs, seq)
        return index if index < len(self.seqs) and self.seqs[index] == seq else None

    def boundary(self, seq: int) -> int:
        """How many columns came before ``seq``: where a seq without a column falls."""
        return bisect.bisect_left(self.seqs, seq)

    def __len__(self) -> int:
        return len(self.seqs)


@dataclass
class Timeline:
    """Every view of one trace, the stream labels and the string tables the columns index."""

    views: list[View]
    labels: dict[int, str]  # stream -> label, as findings name streams
    names: list[str]  # op and kernel names, each once
    sites: list[str]  # "file:line in function" of the columns' innermost frames, each once
    stream_names: dict[int, str] = field(default_factory=dict)  # stream -> the program's name, if it gave one

    def view(self, graph: int | None) -> View | None:
        key = EXECUTION if graph is None else f"graph {graph}"
        return next((view for view in self.views if view.key == key), None)

    @property
    def columns(self) -> int:
        return sum(len(view) for view in self.views)


class TimelineBuilder:
    """Sees the events on their way to the engine (``observe``), then gives the ``Timeline``."""

    def __init__(self, stacks: Mapping[int, Sequence[Sequence[Any]]] | None = None) -> None:
        self._domains = HappensBefore()  # membership only: no op ticks, so its clocks stay empty
        self._execution = View(EXECUTION, None)
        self._views: list[View] = [self._execution]
        self._capture: dict[int, View] = {}  # graph -> the view of its capture
        self._records: dict[int, tuple[View, int]] = {}  # event -> its latest record's view and column
        self._stream_names: dict[int, str] = {}
        self._appearance: dict[int, int] = {}
        self._names: dict[str, int] = {}
        self._sites: dict[str, int] = {}
        self._stack_sites: dict[int, int] = {}  # stack id -> index in sites
        for stack_id, frames in (stacks or {}).items():
            self._stack(stack_id, frames)

    def observe(self, events: Iterable[Event]) -> Iterator[Event]:
        """``events``, unchanged, each noted on the way."""
        for ev in events:
            self.add(ev)
            yield ev

    def add(self, ev: Mapping[str, Any]) -> None:
        kind = ev["ev"]
        stream = ev.get("stream")
        if stream is not None and stream not in self._appearance:
            self._appearance[stream] = len(self._appearance)
        if kind == "op" or (kind == "kernel" and stream is not None):
            name = ev["op"] if kind == "op" else ev["name"]
            self._column(ev, OP if kind == "op" else KERNEL, name)
        elif kind == "replay":
            self._column(ev, REPLAY, f"replay of graph {ev['graph']}")
        elif kind == "event_record":
            view, column = self._column(ev, RECORD, f"record event {ev['event']}")
            self._records[ev["event"]] = (view, column)
            self._domains.record(ev["event"], ev["stream"])
        elif kind == "event_wait":
            self._domains.wait(ev["event"], ev["stream"])  # may pull the stream into a capture
            view, column = self._column(ev, WAIT, f"wait event {ev['event']}")
            record = self._records.get(ev["event"])
            if record is not None and record[0] is view:  # a wait across domains orders nothing
                view.edges.append((record[1], column, ev["event"]))
        elif kind in ("alloc", "free", "record_stream") and stream is not None:
            self._view_of(stream).lane(stream)  # the block's stream is a lane of its view
        elif kind == "stack":
            self._stack(ev["id"], ev["frames"])
        elif kind == "stream":
            if ev.get("name"):
                self._stream_names[stream] = ev["name"]  # type: ignore[index]
        elif kind == "capture_begin":
            view = View(f"graph {ev['graph']}", ev["graph"])
            self._capture[ev["graph"]] = view
            self._views.append(view)
            self._domains.capture_begin(ev["graph"], ev["stream"])
            view.lane(ev["stream"])
        elif kind == "capture_end":
            view = self._capture.pop(ev["graph"])
            view.aborted = bool(ev.get("aborted"))
            self._domains.capture_end(ev["graph"])
            for event in [event for event, (where, _) in self._records.items() if where is view]:
                del self._records[event]
        elif kind in ("event_create", "event_delete"):
            self._records.pop(ev["event"], None)
            self._domains.forget(ev["event"])

    def _view_of(self, stream: int) -> View:
        graph = self._domains.domain(stream)
        return self._execution if graph is None else self._capture[graph]

    def _column(self, ev: Mapping[str, Any], kind: int, name: str) -> tuple[View, int]:
        view = self._view_of(ev["stream"])
        column = len(view.seqs)
        view.seqs.append(ev["seq"])
        view.lanes.append(view.lane(ev["stream"]))
        view.kinds.append(kind)
        view.names.append(_intern(self._names, name))
        stack = ev.get("stack")
        view.sites.append(self._stack_sites.get(stack, -1) if stack is not None else -1)
        return view, column

    def _stack(self, stack_id: int, frames: Sequence[Sequence[Any]]) -> None:
        if frames and len(frames[0]) >= 3:
            file, line, function = frames[0][:3]
            self._stack_sites[stack_id] = _intern(self._sites, f"{file}:{line} in {function}")

    def timeline(self) -> Timeline:
        views = [view for view in self._views if view.graph is not None or len(view) or view.streams]
        labels = {stream: self._label(stream) for stream in self._appearance}
        return Timeline(views, labels, list(self._names), list(self._sites), dict(self._stream_names))

    def _label(self, stream: int) -> str:
        """A stream's label as findings give it (streamrace/analysis/describe.py)."""
        name = self._stream_names.get(stream)
        if name:
            return name
        return "default" if stream == 0 else f"stream#{self._appearance[stream]}"


@dataclass(frozen=True)
class Spot:
    """Where one side of a finding is on the timeline."""

    view: View
    lane: int
    column: int  # the access's own column, or, for a free, the boundary it falls at
    exact: bool  # the access took ``column`` (an op, a kernel, a replay); False: a boundary


def spot(timeline: Timeline, graph: int | None, stream: int, seq: int) -> Spot | None:
    """The place of the event at ``seq`` on ``stream`` in the view of ``graph`` (None: the
    execution view); None when that view or lane is not in the timeline."""
    view = timeline.view(graph)
    if view is None or stream not in view.lane_of:
        return None
    column = view.column(seq)
    if column is not None:
        return Spot(view, view.lane_of[stream], column, True)
    return Spot(view, view.lane_of[stream], view.boundary(seq), False)


@dataclass(frozen=True)
class BlockSpan:
    """A finding's block in one view: from its allocation to its free, then its reuse; each a
    boundary, clipped to the view (``starts_before``: allocated before the view's first column;
    ``end`` None: not freed while the view lasts)."""

    start: int
    end: int | None
    reuse: int | None
    starts_before: bool


def block_span(view: View, alloc_seq: int | None, free_seq: int | None, reuse_seq: int | None) -> BlockSpan:
    """The block of a finding (its allocation's seqs) as boundaries of ``view``."""

    def inside(seq: int | None) -> int | None:
        at = view.boundary(seq) if seq is not None else None
        return at if at is not None and at < len(view) else None

    start = view.boundary(alloc_seq) if alloc_seq is not None else 0
    starts_before = alloc_seq is None or not view.seqs or alloc_seq < view.seqs[0]
    return BlockSpan(start, inside(free_seq), inside(reuse_seq), starts_before)


def _intern(table: dict[str, int], text: str) -> int:
    index = table.get(text)
    if index is None:
        index = table[text] = len(table)
    return index


def build_timeline(
    events: Iterable[Mapping[str, Any]], stacks: Mapping[int, Sequence[Sequence[Any]]] | None = None
) -> Timeline:
    """The timeline of events already in hand (a loaded ``Trace``'s)."""
    builder = TimelineBuilder(stacks)
    for ev in events:
        builder.add(ev)
    return builder.timeline()


class NoTimeline(ValueError):
    """A result without its trace's timeline: the visual reports draw the trace's events."""


def timeline_of(item: TraceResult) -> Timeline:
    if item.timeline is None:
        raise NoTimeline(f"{item.path}: the html and perfetto reports need the trace's events, not only its analysis")
    return item.timeline
