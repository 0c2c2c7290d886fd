"""Writing the trace while the program runs, so a long recording keeps bounded memory.

With a trace path (``streamrace run``, ``STREAMRACE=1``, ``watch(trace=...)``) the recording's
settled events are flushed to the file (streamrace/trace/incremental.py) and let go, at points
the recorder controls: after a replay or a capture's end, once more than ``flush_events``
events have been numbered since the last flush. A flush waits while a capture is open (its
events are settled only at its end) and settles everything before it writes: the hooks'
events drained, allocations resolved (``Recorder.resolve_allocations``), the kernel events of
the captures read back completed. What stays in memory is the stack and stream definitions
(one per distinct stack and stream) and whatever a nested ``watch()`` view still needs
(``hold``).

Without a path nothing is flushed: the events stay in memory for the analysis at the end.
A program that never replays nor captures has no flush point; its events are written at the
end, as before.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Protocol

from streamrace.collector import collections_paused
from streamrace.trace.incremental import IncrementalTraceWriter
from streamrace.trace.json_lines import last_seq

if TYPE_CHECKING:
    from streamrace.record.allocations import AllocatorHistory
    from streamrace.record.captures import CaptureLifecycle
    from streamrace.record.event_log import EventLog
    from streamrace.trace.json_lines import EncodedLines


class OutputSeam(Protocol):
    """What the trace output uses of the recording (seams.py)."""

    @property
    def log(self) -> EventLog: ...

    @property
    def allocations(self) -> AllocatorHistory: ...

    @property
    def captures(self) -> CaptureLifecycle: ...

    def settle(self, lines: bool = False) -> None: ...


FLUSH_EVENTS = 20_000  # events numbered between flushes (about 10 MB of events in memory)


class TraceOutput:
    """The recording's trace file, written as the program runs (when it has a path)."""

    def __init__(self, recorder: OutputSeam, path: str | None, flush_events: int = FLUSH_EVENTS) -> None:
        if flush_events < 1:
            raise ValueError("flush_events must be at least 1")
        self._rec = recorder
        self.path = path
        self.flush_events = flush_events
        self.flushes = 0
        self.written_through = -1  # the seq of the last event in the file
        # After a failed flush (a full disk) its events stay, and every try writes the whole
        # backlog: the next try waits for twice as many events as the last wait, not the next
        # replay (tried at each, a disk that stayed full cost the square of the events).
        self._retry_from = -1  # no try before this seq
        self._retry_wait = flush_events
        self._writer: IncrementalTraceWriter | None = None
        self._holds: dict[int, int] = {}  # token -> the seq a view of the recording reads from
        self._tokens = itertools.count()

    @property
    def incremental(self) -> bool:
        """Whether the trace goes to a file as the program runs."""
        return self.path is not None

    def open(self, header: dict[str, Any]) -> None:
        """Create the partial file (under a provisional ``header``) before recording starts,
        so that a path that cannot be written fails before anything is installed."""
        if self.path is not None:
            self._writer = IncrementalTraceWriter(self.path, header)

    def hold(self, since: int) -> int:
        """Keep the events from seq ``since`` on in memory (a view of the recording reads
        them at its end); a token for ``release``."""
        token = next(self._tokens)
        self._holds[token] = since
        return token

    def release(self, token: int) -> None:
        self._holds.pop(token, None)

    def after_event(self, seq: int) -> None:
        """At a point the recorder controls (a replay, a capture's end, a reset): flush when
        more than ``flush_events`` events came since the last flush."""
        if self._writer is not None and seq - self.written_through > self.flush_events and seq >= self._retry_from:
            self.flush()

    def flush(self) -> bool:
        """Write the settled events out and let them go; False where it has to wait (no file,
        or a capture is open)."""
        rec = self._rec
        if self._writer is None or rec.captures.running():
            return False
        try:
            # A flush makes the drained events (about five containers each) and lets them go
            # before it returns; with the collector on, they started full collections of the
            # whole program's objects: 160 ms of a 220 ms flush of 20,000 events (CPU, native
            # hooks, docs/performance.md).
            with rec.log.lock, collections_paused():
                # Events a view of the recording will read stay dicts (hold).
                rec.settle(lines=not self._holds)
                events = rec.log.after(self.written_through, rec.allocations.unknown)
                lines = rec.log.lines
                self._writer.write(events, lines)
                self._wrote(events, lines)
                kept_from = min([self.written_through + 1, *self._holds.values()])
                rec.log.forget(kept_from)
                rec.allocations.forget(kept_from)
                del events  # gone before the collector is back (collections_paused)
        except Exception as exc:  # a full disk: the events stay, the program goes on
            rec.log.fail("trace output", exc)
            self._retry_from = rec.log.position() + self._retry_wait
            self._retry_wait *= 2
            return False
        self._retry_from, self._retry_wait = -1, self.flush_events
        self.flushes += 1
        return True

    def landed(self) -> None:
        """Wait until the last flush's chunk is in the file (it is compressed and written
        beside the program: incremental.py). A failure it met (a full disk) is a recorder
        error; the writer keeps its bytes, and ``finish`` writes them."""
        if self._writer is None:
            return
        try:
            self._writer.wait()
        except Exception as exc:
            self._rec.log.fail("trace output", exc)

    def finish(self, header: dict[str, Any]) -> None:
        """Write the trace file: ``header`` (the final one), then every event."""
        assert self._writer is not None, "the recording has no trace path"
        rec = self._rec
        with rec.log.lock:
            rec.settle()
            events = rec.log.after(self.written_through, rec.allocations.unknown)
            lines = rec.log.lines
            self._writer.finish(header, events, lines)
            self._wrote(events, lines)

    def _wrote(self, events: list[dict[str, Any]], lines: EncodedLines) -> None:
        """The writer has taken ``events`` and the log's ``lines``: the log lets the lines go."""
        self._rec.log.written()
        self.written_through = max(self.written_through, last_seq(events, lines))
