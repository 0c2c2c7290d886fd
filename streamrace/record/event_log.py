"""The recording's events in host program order: the Recorder's own and the hooks'.

Every event's ``seq`` comes from the hooks' one counter (emit takes the next). The hooks keep
their events until they are drained (``ingest``: at each capture's end and when recording
stops); what does not need the moment it happened is settled then, off the hot path: stream
names and recorder errors here, the rest by the part that owns it (``settle``: the allocator
history for allocations and frees, the capture lifecycle for an allocation's pool).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from streamrace.record.hook_tables import MAX_ERRORS
from streamrace.record.hooks import Hooks

Event = dict[str, Any]

_STREAM_NAMES: dict[int, str] = {}


def name_stream(stream: Any, name: str) -> None:
    """Give a stream a name for reports (``torch.cuda.Stream`` or a raw handle)."""
    _STREAM_NAMES[int(getattr(stream, "cuda_stream", stream))] = name


class EventLog:
    """The events so far, their order, and the recorder's own failures."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.errors: list[str] = []
        self.hooks: Hooks | None = None  # set when recording starts
        self._sorted = True
        self._settlers: dict[str, list[Callable[[Event], Event]]] = {}

    def settle(self, ev: str, settler: Callable[[Event], Event]) -> None:
        """Run ``settler`` on every drained hook event of kind ``ev``; it returns the event to
        keep (the same one or a replacement). Settlers of one kind run in the order given."""
        self._settlers.setdefault(ev, []).append(settler)

    def _started(self) -> Hooks:
        assert self.hooks is not None, "recording has not started"
        return self.hooks

    def emit(self, ev: str, **fields: Any) -> Event:
        """A Recorder event, numbered now: fields that are None are left out."""
        event = {"seq": self._started().next_seq(), "ev": ev}
        event.update((k, v) for k, v in fields.items() if v is not None)
        self.events.append(event)
        self._sorted = False
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

    def ingest(self) -> None:
        """Take the hooks' events, settled, and keep them."""
        if self.hooks is None:
            return
        for event in self.hooks.drain():
            ev = event["ev"]
            if ev == "stream":
                name = _STREAM_NAMES.get(event["stream"]) or ("default" if event["stream"] == 0 else None)
                if name is not None:
                    event["name"] = name
            elif ev == "recorder_error" and len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{event['where']}: {event['message']}")
            for settler in self._settlers.get(ev, ()):
                event = settler(event)
            self.events.append(event)
            self._sorted = False

    def in_order(self, since: int, left_out: set[int]) -> list[Event]:
        """The events from seq ``since`` on, in seq order, with the stacks and streams defined
        earlier, less the seqs in ``left_out``."""
        if not self._sorted:
            self.events.sort(key=operator.itemgetter("seq"))
            self._sorted = True
        return [
            e for e in self.events if e["seq"] not in left_out and (e["seq"] >= since or e["ev"] in ("stack", "stream"))
        ]
