"""A trace written while it is being made: events go out in chunks, the header comes last.

A long recording (a serving loop of thousands of replays) cannot keep its events in memory
until the end, and the header holds facts known only then (the recorder's errors, the
allocations it dropped). So the events are appended to ``PATH.partial`` as they settle, behind
a provisional header (``incomplete``): until the recording ends that file is itself a valid
trace of everything flushed so far, which a process killed mid-run leaves behind. ``finish``
writes ``PATH``: the final header, the partial file's events (copied as bytes, not parsed
again), the last events; then the partial file goes.

Compressed traces (``.gz``) are written as one gzip member per chunk: concatenated members are
one gzip stream (RFC 1952), which every gzip reader, ``iter_trace`` included, reads whole. Each
chunk is written with one ``os.write`` loop on a raw descriptor, so nothing is buffered in the
process: a child forked from it (``fork`` without ``exec``) has nothing to flush into the
file, and writes nothing itself (``write`` and ``finish`` do nothing outside the process that
opened the file).

A chunk is encoded in the caller's thread (it reads the events), then compressed and written
by a thread of its own, which zlib lets run beside the program (it releases the GIL): a
recorded serving loop spent about 14 us a step compressing. One chunk is in flight at a time:
the next ``write``, and ``finish``, wait for it first, so the chunks land in order; a failure
of that thread (a full disk) is raised by the next call, as a failed write always was. It
is no daemon: a program that ends after a flush waits for its chunk.

Each seq is written once. The events come in seq order, and the writer notes the last seq of
each chunk it takes; a later call leaves out what it took already. A flush cut short after its
chunk was handed over (a KeyboardInterrupt, a signal handler's exception: they land in the
program's thread) passes those events again, and they were written twice, which made the trace
unreadable.

Nothing taken is lost. A chunk whose write fails (a full disk) is taken back out of the file
(so the partial file stays a trace) and kept, and the next write, or ``finish``, writes it
first; a chunk whose compression failed (no memory) is kept as lines. The recorder has let
their events go by then, and a trace missing a chunk refers to stacks it never defined.
``finish`` writes ``PATH.writing`` and renames it: ``PATH`` appears whole or not at all, and a
finish that failed can be run again.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import threading
from collections.abc import Iterable
from typing import Any

from streamrace.trace.json_lines import EncodedLines, encode_lines, last_seq

PARTIAL_SUFFIX = ".partial"
WRITING_SUFFIX = ".writing"  # PATH while finish writes it, renamed once whole
GZIP_LEVEL = 6  # zlib's default: within a few per cent of 9's size at about twice its speed


class IncrementalTraceWriter:
    """``PATH.partial`` while recording, ``PATH`` once ``finish`` has run."""

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = os.fspath(path)
        self.partial_path = self.path + PARTIAL_SUFFIX
        self._compress = self.path.endswith(".gz")
        self._pid = os.getpid()
        self.events_written = 0
        self.landed_through = -1  # the last seq in the file (set by the writer's thread)
        # The last seq of the chunks taken (set by the writer's thread): in the file, or kept
        # below until a later write lands them. Whatever comes again up to it is left out.
        self.taken_through = -1
        self._unencoded = b""  # taken lines whose compression failed (no memory), in order
        self._unwritten = b""  # bytes a failed write (a full disk) did not get into the file
        self._in_flight: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._fd: int | None = os.open(self.partial_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        head = self._encode([header])
        self._head_bytes = len(head)  # what ``finish`` skips of the partial file: its header
        self._write(head)

    def _encode(self, items: Iterable[dict[str, Any]], lines: EncodedLines | None = None) -> bytes:
        return self._compressed(encode_lines(items, lines))  # strict JSON, as write_trace writes it

    def _compressed(self, data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0) if self._compress else data

    def _compress_and_write(self, data: bytes, last_seq: int) -> None:
        # Noted here, in the writer's thread, where no signal handler runs: a KeyboardInterrupt
        # in the program's thread cannot come between the chunk going out and this.
        self.taken_through = last_seq
        try:
            self._unencoded += data
            self._land()
            self.landed_through = last_seq
        except BaseException as exc:  # raised in the program's thread, by the next call
            self._failure = exc

    def _land(self) -> None:
        """Every taken byte into the file: what earlier tries kept, then the newest lines."""
        if self._unencoded:
            self._unwritten += self._compressed(self._unencoded)
            self._unencoded = b""
        self._write(b"")

    def wait(self) -> None:
        """Wait for the chunk in flight to land; raise what it met."""
        thread = self._in_flight
        if thread is not None:
            # A thread whose start was cut short (a KeyboardInterrupt in start(), no thread
            # left to start) never took its chunk: its events are still the recorder's.
            if thread.ident is not None:
                thread.join()
            self._in_flight = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _write(self, data: bytes) -> None:
        """``data`` into the file, after what an earlier write left unwritten. A write that
        fails (a full disk) takes back what it got into the file (the partial file stays a
        readable trace) and keeps all of it for the next one: the chunk's events are gone from
        the recorder's memory by then."""
        assert self._fd is not None, "the trace is finished"
        self._unwritten += data
        start = os.lseek(self._fd, 0, os.SEEK_CUR)
        view = memoryview(self._unwritten)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except BaseException:
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:  # left as it is: the rest, to the byte, follows it next time
                self._unwritten = bytes(view)
            raise
        self._unwritten = b""

    def _ours(self) -> bool:
        """False in a forked child: the file is its parent's."""
        return os.getpid() == self._pid and self._fd is not None

    def _not_taken(
        self, events: list[dict[str, Any]], lines: EncodedLines | None
    ) -> tuple[list[dict[str, Any]], EncodedLines | None]:
        """``events`` (in seq order) and ``lines``, less what was taken already."""
        if events and events[0]["seq"] <= self.taken_through:
            events = [e for e in events if e["seq"] > self.taken_through]
        return events, lines.after(self.taken_through) if lines else None

    def write(self, events: list[dict[str, Any]], lines: EncodedLines | None = None) -> None:
        """Append events (in seq order), merged by seq with ``lines`` (written already), less
        those already written."""
        if (events or lines) and self._ours():
            self.wait()
            events, lines = self._not_taken(events, lines)
            if not events and not lines:
                return
            data = encode_lines(events, lines)
            self._in_flight = threading.Thread(
                target=self._compress_and_write, args=(data, last_seq(events, lines)), name="streamrace-trace-writer"
            )
            self._in_flight.start()
            self.events_written += len(events) + (len(lines) if lines else 0)

    def finish(self, header: dict[str, Any], events: list[dict[str, Any]], lines: EncodedLines | None = None) -> None:
        """Write ``PATH``: ``header``, every event written so far, then ``events`` merged with
        ``lines``; remove the partial file. ``PATH`` appears whole or not at all: a finish that
        fails (a full disk, a KeyboardInterrupt) can be called again."""
        if not self._ours():
            return
        assert self._fd is not None
        with contextlib.suppress(Exception):  # said already (TraceOutput.landed); its bytes are kept
            self.wait()
        events, lines = self._not_taken(events, lines)
        self._land()  # what failed writes kept: the partial file is copied next
        writing = self.path + WRITING_SUFFIX
        try:
            with open(writing, "wb") as out:
                out.write(self._encode([header]))
                with open(self.partial_path, "rb") as partial:
                    partial.seek(self._head_bytes)
                    shutil.copyfileobj(partial, out, 1 << 20)
                if events or lines:
                    out.write(self._encode(events, lines))
            os.replace(writing, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(writing)
            raise
        os.close(self._fd)
        self._fd = None
        self.events_written += len(events) + (len(lines) if lines else 0)
        os.remove(self.partial_path)
