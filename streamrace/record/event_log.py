"""The recording's events in host program order: the Recorder's own and the hooks'.

Every event's ``seq`` comes from the hooks' one counter (emit takes the next). The hooks keep
their events until they are drained (``ingest``: at each capture's end, before a flush and when
recording stops); what does not need the moment it happened is settled then, off the hot path:
stream names and recorder errors here, the rest by the part that owns it (``settle``: the
allocator history for allocations and frees, the capture lifecycle for an allocation's pool).

A recording that writes its trace as it goes (trace_output.py) takes the settled events after
the ones already written (``after``) and lets them go (``forget``): the stack and stream
definitions stay, since a later view of the recording (a nested ``watch()``) needs them.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any

from streamrace.record.collectives import NCCL_STREAM_NAME, absorb, order_collectives, own_catch_up_kernel
from streamrace.record.hook_tables import MAX_ERRORS
from streamrace.record.hooks import HookState
from streamrace.trace.json_lines import EncodedLines

Event = dict[str, Any]

_STREAM_NAMES: dict[int, str] = {}
DEFINITIONS = ("stack", "stream")  # events that define what later events refer to


def name_stream(stream: Any, name: str) -> None:
    """Give a stream a name for reports (``torch.cuda.Stream`` or a raw handle)."""
    _STREAM_NAMES[int(getattr(stream, "cuda_stream", stream))] = name


class EventLog:
    """The events so far, their order, and the recorder's own failures."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.errors: list[str] = []
        self.hooks: HookState | None = None  # the hooks' bookkeeping, set when recording starts
        self._sorted = True
        self._settlers: dict[str, list[Callable[[Event], Event]]] = {}
        self._detached: list[Event] = []  # emitted from a garbage collection, joined at the next ingest
        self._collective_streams: set[int] = set()  # NCCL's internal streams (collectives.py)
        self.index_ops = 0  # ops that write through an index: the header's index_ops (0: no padded check)
        self.views = 0  # view events: the header's views (0: no static-output check)
        self.host_events = 0  # host_alloc, host_free, host_op: the header's host_events (0: no pinned check)
        # The native hooks' events drained as trace lines (ingest's ``lines``), until written.
        self.lines = EncodedLines()
        # Taken by emit and by a flush's taking of events: a Recorder event numbered on one
        # thread is in the log before another thread's flush takes the events around it.
        self.lock = threading.RLock()

    def settle(self, ev: str, settler: Callable[[Event], Event]) -> None:
        """Run ``settler`` on every drained hook event of kind ``ev``; it returns the event to
        keep (the same one or a replacement). Settlers of one kind run in the order given."""
        self._settlers.setdefault(ev, []).append(settler)

    def _started(self) -> HookState:
        assert self.hooks is not None, "recording has not started"
        return self.hooks

    def emit(self, ev: str, **fields: Any) -> Event:
        """A Recorder event, numbered now: fields that are None are left out."""
        with self.lock:
            event = self._numbered(ev, fields)
            self.events.append(event)
            self._sorted = False
        return event

    def emit_detached(self, ev: str, **fields: Any) -> None:
        """A Recorder event from a callback that may run inside the log's own bookkeeping (a
        weakref callback, in a garbage collection): numbered now, so in program order, and
        joined to the events at the next ingest."""
        self._detached.append(self._numbered(ev, fields))

    def _numbered(self, ev: str, fields: dict[str, Any]) -> Event:
        """The event, with the next seq; fields that are None left out."""
        event = {"seq": self._started().next_seq(), "ev": ev}
        if ev.startswith("host_"):  # the host memory part emits these; the native hooks drain host_op
            self.host_events += 1
        for key, value in fields.items():  # a loop: half the time of update() over a generator
            if value is not None:
                event[key] = value
        return event

    def stack(self) -> int | None:
        """The user stack here, as an event's ``stack`` field."""
        stack = self._started().stack()
        return None if stack < 0 else stack

    def position(self) -> int:
        """The seq the next event will have: a session started now sees from here."""
        return self.hooks.peek_seq() if self.hooks is not None else 0

    def fail(self, where: str, exc: BaseException) -> None:
        """A failure of the recorder itself: kept for the header, and as an event."""
        message = f"{type(exc).__name__}: {exc}"
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{where}: {message}")
            self.emit("recorder_error", message=message, where=where)

    def ingest(self, lines: bool = False) -> None:
        """Take the hooks' events, settled, and keep them. With ``lines`` (a flush to a trace
        file that nothing else will read them from), the native hooks give the events the
        recorder passes through as their trace lines (``self.lines``), not as dicts: most of a
        flush's time was spent making, settling and writing those dicts in Python."""
        if self._detached:
            detached, self._detached = self._detached, []
            self.events.extend(detached)
            self._sorted = False
        if self.hooks is None:
            return
        drain_lines = getattr(self.hooks, "drain_lines", None) if lines else None
        if drain_lines is not None:
            drained, data, seqs, index_ops, views, host_ops = drain_lines()
            if data:
                self.lines = self.lines.extended(seqs, data)  # one store: a Ctrl-C leaves the old or the new
                self.index_ops += index_ops
                self.views += views
                self.host_events += host_ops
        else:
            drained = self.hooks.drain()
        if not drained:
            return
        # Collectives onto the stream they ran on, before anything reads their seqs.
        moved = {id(m.op): m for m in order_collectives(drained)}
        self._collective_streams |= {m.stream for m in moved.values()}
        settlers, keep = self._settlers, self.events.append  # locals: this loop sees every event
        for event in drained:
            ev = event["ev"]
            if ev == "op":
                if "index" in event:
                    self.index_ops += 1
            elif ev == "view":
                self.views += 1
            elif ev == "host_op":
                self.host_events += 1
            elif ev == "stream":
                name = _STREAM_NAMES.get(event["stream"]) or self._default_name(event["stream"])
                if name is not None:
                    event["name"] = name
            elif ev == "recorder_error" and len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{event['where']}: {event['message']}")
            collective = moved.get(id(event)) if moved else None
            for settler in settlers.get(ev, ()):
                event = settler(event)
            if collective is None:
                keep(event)
                continue
            collective.op = event
            kernel = own_catch_up_kernel(collective, self.events)
            if kernel is not None:
                absorb(kernel, event)  # the node the capture caught up is the collective's
            else:
                keep(event)
        self._sorted = False

    def _default_name(self, stream: int) -> str | None:
        """A stream's name where the program gave it none."""
        if stream == 0:
            return "default"
        return NCCL_STREAM_NAME if stream in self._collective_streams else None

    def _sort(self) -> None:
        if not self._sorted:
            self.events.sort(key=operator.itemgetter("seq"))
            self._sorted = True

    def in_order(self, since: int, left_out: set[int]) -> list[Event]:
        """The events from seq ``since`` on, in seq order, with the stacks and streams defined
        earlier, less the seqs in ``left_out``."""
        self._sort()
        return [e for e in self.events if e["seq"] not in left_out and (e["seq"] >= since or e["ev"] in DEFINITIONS)]

    def after(self, written: int, left_out: set[int]) -> list[Event]:
        """The events after seq ``written`` (the last one a trace file holds), in seq order,
        less the seqs in ``left_out``: what a flush writes next."""
        self._sort()
        return [e for e in self.events if e["seq"] > written and e["seq"] not in left_out]

    def written(self) -> None:
        """The lines are in the trace file."""
        self.lines = EncodedLines()

    def forget(self, before: int) -> None:
        """Let go of the events before seq ``before`` (written out), but for the definitions."""
        self.events = [e for e in self.events if e["seq"] >= before or e["ev"] in DEFINITIONS]
