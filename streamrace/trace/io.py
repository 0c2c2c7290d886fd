"""Reading and writing trace files (JSON Lines, optionally gzip-compressed).

Reading is streaming: ``iter_trace`` yields the header and then one validated event at a
time, so a trace larger than memory can be analysed in one pass. Every problem becomes a
``TraceError`` naming the file and the line.

Each line takes the fast path first: orjson (where it is installed) and the kind's
precompiled check (``events.FAST_CHECKS``). A line that path does not accept, whatever the
reason, is read again by the reference path, the standard library's strict JSON and
``validate_event``, which names the problem; so orjson only ever makes reading faster, and
messages and verdicts are those of the reference with or without it.

The file is opened once, and gzip is recognised from its first bytes on that same stream, so
a pipe, a FIFO or standard input (the path ``-``) is read like a file.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from typing import IO, Any, cast

from streamrace.errors import TraceError
from streamrace.trace.events import (
    EVENT_FIELDS,
    FORMAT_MINOR,
    FORMAT_NAME,
    FORMAT_VERSION,
    INT64_MAX,
    MAX_LINE_BYTES,
    MAX_STREAMS,
    EventInvalid,
    UnknownEvent,
    fast_checks,
    fast_table,
    validate_event,
    validate_header,
)
from streamrace.trace.json_lines import encode_lines

orjson: Any
try:
    import orjson
except ImportError:  # optional speed-up; the standard library reads the same traces
    orjson = None

_GZIP_MAGIC = b"\x1f\x8b"
STDIN = "-"
STDIN_NAME = "<stdin>"  # how messages and reports name standard input
SKIPPED_EVENTS = "skipped_events"  # header field the reader writes: {kind: count} of unknown events


@dataclass
class Trace:
    """A whole trace in memory: the header, the events in seq order, and the stack table."""

    header: dict[str, Any]
    events: list[dict[str, Any]]
    path: str = "<memory>"
    stacks: dict[int, list[list[Any]]] = field(default_factory=dict)


def display_name(path: str | os.PathLike[str]) -> str:
    """The name messages and reports give a trace path (``-`` is standard input)."""
    path = os.fspath(path)
    return STDIN_NAME if path == STDIN else path


# -- opening ---------------------------------------------------------------------------------
class _Replay(io.RawIOBase):
    """``head``, then the rest of ``raw``: the bytes read to recognise gzip are not lost, even
    on a stream that cannot seek back (a pipe)."""

    def __init__(self, head: bytes, raw: Any) -> None:
        self._head = head
        # One read at a time, as much as is there: a pipe's data flows as it comes.
        self._read_into = getattr(raw, "readinto1", None) or raw.readinto

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        return self._read_into(buffer)


@contextmanager
def _open_binary(path: str) -> Iterator[IO[bytes]]:
    """The trace's bytes, decompressed when they start with gzip's magic; one open per trace,
    and everything opened is closed again (standard input stays open for the caller)."""
    with ExitStack() as opened:
        # Standard input stays open for the caller.
        raw = sys.stdin.buffer if path == STDIN else opened.enter_context(open(path, "rb", buffering=0))
        head = b""
        while len(head) < len(_GZIP_MAGIC):  # a pipe may hand over one byte at a time
            chunk = raw.read(len(_GZIP_MAGIC) - len(head))
            if not chunk:
                break
            head += chunk
        stream: io.BufferedReader = opened.enter_context(io.BufferedReader(_Replay(head, raw), buffer_size=1 << 16))
        if head == _GZIP_MAGIC:
            # GzipFile's own readline is Python, a call per line; a buffer over it reads lines in C.
            unpacked = opened.enter_context(gzip.GzipFile(fileobj=stream, mode="rb"))
            stream = opened.enter_context(io.BufferedReader(unpacked, buffer_size=1 << 16))
        yield stream


# -- parsing ---------------------------------------------------------------------------------
# Both readers hand on at most this much of a line: a longer one arrives cut, without its newline.
_LINE_READ = MAX_LINE_BYTES + 1


def _check_length(line: bytes) -> None:
    """EventInvalid for the cut start of a line longer than the limit (MAX_LINE_BYTES)."""
    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
        raise EventInvalid(f"line longer than {MAX_LINE_BYTES:,} bytes (the limit of this streamrace)")


class _Refused(ValueError):
    """Valid JSON syntax that a trace may not hold (NaN, infinities: reports stay strict JSON)."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a number a trace may hold")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text} is too large for a number")
    return value


# The reference parser: the standard library, strict. orjson refuses the same constants itself.
_STRICT = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _stdlib_loads(line: bytes) -> Any:
    """The fast path without orjson. A surrogate escape goes to the reference, which refuses
    lone surrogates (orjson does too): such strings cannot be printed."""
    text = line.decode("utf-8")
    if "\\ud" in text or "\\uD" in text:
        raise ValueError("surrogate escape: let the reference decide")
    return _STRICT.decode(text)


_fast_loads: Callable[[bytes], Any] = orjson.loads if orjson is not None else _stdlib_loads

_BLANK = object()


def _reference_parse(line: bytes) -> Any:
    """The line's JSON value, ``_BLANK`` for a blank line; EventInvalid names what is wrong."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise EventInvalid("not text: the file is binary or corrupt") from None
    if not text.strip():
        return _BLANK
    try:
        value = _STRICT.decode(text)
    except json.JSONDecodeError as exc:
        hint = " (truncated file?)" if not text.endswith("\n") else ""
        raise EventInvalid(f"invalid JSON: {exc.msg}{hint}") from None
    except RecursionError:
        raise EventInvalid("invalid JSON: nested too deeply") from None
    except _Refused as exc:
        raise EventInvalid(f"invalid JSON: {exc}") from None
    except ValueError:  # Python's limit on the digits of an integer (sys.get_int_max_str_digits)
        raise EventInvalid("invalid JSON: an integer has too many digits") from None
    if "\\u" in text:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise EventInvalid("invalid JSON: a string holds a lone surrogate (\\ud800-\\udfff)") from None
        except RecursionError:
            raise EventInvalid("invalid JSON: nested too deeply") from None
    return value


# -- reading ---------------------------------------------------------------------------------
class _Checker:
    """Whole-trace rules that one event alone cannot show: order, references, pairing, limits."""

    def __init__(self) -> None:
        self.last_seq = -1
        self.stacks: set[int] = set()
        self.streams: set[int] = set()
        self.open_graphs: set[int] = set()
        self.capturing_streams: set[int] = set()
        self.graph_stream: dict[int, int] = {}
        self.ended: dict[int, str] = {}  # graph -> the event that ended it (graph_reset, graph_destroy)
        self.captures_only = False  # the header's recording is "captures": no graph lifetime events

    def order(self, ev: dict[str, Any]) -> None:
        if ev["seq"] <= self.last_seq:
            raise EventInvalid(f"seq {ev['seq']} does not increase (previous {self.last_seq})")
        self.last_seq = ev["seq"]

    def check(self, ev: dict[str, Any]) -> None:
        self.order(ev)
        stack = ev.get("stack")
        if stack is not None and stack not in self.stacks:
            raise EventInvalid(f"stack {stack} is used before its 'stack' entry")
        stream = ev.get("stream")
        if stream is not None and stream not in self.streams:
            self.new_stream(stream)
        kind = ev["ev"]
        if kind in _STATEFUL:
            self.stateful(kind, ev)

    def new_stream(self, stream: int) -> None:
        if len(self.streams) >= MAX_STREAMS:
            raise EventInvalid(f"more than {MAX_STREAMS} distinct streams (the limit of this streamrace)")
        self.streams.add(stream)

    def stateful(self, kind: str, ev: dict[str, Any]) -> None:
        if kind == "stack":
            self.stacks.add(ev["id"])
        elif kind == "capture_begin":
            graph, stream = ev["graph"], ev["stream"]
            if graph in self.open_graphs or graph in self.graph_stream:
                raise EventInvalid(f"graph {graph} is captured twice")
            if stream in self.capturing_streams:
                raise EventInvalid(f"stream {stream} begins a capture while already capturing")
            self.open_graphs.add(graph)
            self.capturing_streams.add(stream)
            self.graph_stream[graph] = stream
        elif kind == "capture_end":
            graph = ev["graph"]
            if graph not in self.open_graphs:
                raise EventInvalid(f"capture_end of graph {graph}, which is not being captured")
            self.open_graphs.discard(graph)
            self.capturing_streams.discard(self.graph_stream[graph])
        else:  # replay, graph_reset, graph_destroy: a graph's life after its capture
            self.lifetime(kind, ev["graph"])

    def lifetime(self, kind: str, graph: int) -> None:
        """The rules of docs/trace-format.md (replays and graph lifetimes) that a recorder never
        breaks: a graph is replayed, reset or destroyed only once its capture has ended, and
        never again once it is gone. A graph the trace never captured is the engine's to count
        (a replay of it gets the replays-unknown-graph note)."""
        if self.captures_only and kind == "replay":
            raise EventInvalid(
                "'replay' event in a trace whose header says recording 'captures' (the captures alone and the "
                "graphs' lifetimes: no replay)"
            )
        if graph in self.open_graphs:
            raise EventInvalid(f"{kind} of graph {graph} before its capture ends")
        ended = self.ended.get(graph)
        if ended is not None:
            raise EventInvalid(f"{kind} of graph {graph} after its {ended}: the graph is gone")
        if kind != "replay" and graph in self.graph_stream:
            self.ended[graph] = kind


_STATEFUL = frozenset({"stack", "capture_begin", "capture_end", "replay", "graph_reset", "graph_destroy"})


def _read_header(line: bytes) -> dict[str, Any]:
    _check_length(line)
    header = _reference_parse(line)
    if header is _BLANK:
        header = None
    validate_header(header)
    header.pop(SKIPPED_EVENTS, None)  # the reader's own field: a trace cannot set it
    return header


def _read_event(line: bytes, checker: _Checker, header: dict[str, Any]) -> dict[str, Any] | None:
    """The reference path for one line: the event, or None for a line that holds none (blank,
    or an event of a kind this version does not know, counted in the header)."""
    event = _reference_parse(line)
    if event is _BLANK:
        return None
    try:
        validate_event(event)
    except UnknownEvent:
        _skip(event, checker, header)
        return None
    checker.check(event)
    return event


def _skip(event: dict[str, Any], checker: _Checker, header: dict[str, Any]) -> None:
    """An event of a kind this version does not know: in seq order still, and counted."""
    checker.order(event)
    skipped = header.setdefault(SKIPPED_EVENTS, {})
    skipped[event["ev"]] = skipped.get(event["ev"], 0) + 1


def _unknown_but_well_formed(event: dict[str, Any], kind: Any) -> bool:
    """What validate_event raises UnknownEvent for, checked on an object the fast path parsed:
    a kind no event has, and a seq as every event has it."""
    seq = event.get("seq")
    return type(kind) is str and kind not in EVENT_FIELDS and type(seq) is int and 0 <= seq <= INT64_MAX


def _line_taker(checker: _Checker, header: dict[str, Any]) -> Callable[[bytes], dict[str, Any] | None]:
    """What the reader makes of one line after the header: its event, validated and checked
    against the trace so far, or None for a line that holds none; EventInvalid names what
    is wrong with it. The fast path first, inline; a line it does not accept goes to
    _read_event."""
    loads, checks, stacks, streams = _fast_loads, fast_checks(), checker.stacks, checker.streams

    def take(line: bytes) -> dict[str, Any] | None:
        if len(line) > MAX_LINE_BYTES:  # before parsing: the cut start of a line may be JSON
            _check_length(line)
        if not line or line.isspace():  # a blank line holds no event (the reference path's rule, cheaply)
            return None
        unknown = False
        try:
            event = loads(line)
            kind = event["ev"]
            check = checks.get(kind)
            if check is None:  # a kind of a newer version, cheaply: a million of them took 7 s
                unknown = fast = _unknown_but_well_formed(event, kind)
            else:
                fast = check(event)
        except Exception:  # not JSON, not an object, no kind: the reference says
            fast = False
        if not fast:
            return _read_event(line, checker, header)
        if unknown:
            _skip(event, checker, header)
            return None
        seq = event["seq"]
        if seq <= checker.last_seq:
            checker.order(event)
        checker.last_seq = seq
        stack = event.get("stack")
        if stack is not None and stack not in stacks:
            raise EventInvalid(f"stack {stack} is used before its 'stack' entry")
        stream_id = event.get("stream")
        if stream_id is not None and stream_id not in streams:
            checker.new_stream(stream_id)
        kind = event["ev"]
        if kind in _STATEFUL:
            checker.stateful(kind, event)
        return event

    return take


def _native_line_reader() -> Callable[..., Any] | None:
    """The C++ core's reader of the lines after the header (csrc/reader.h), which takes the
    lines _line_taker would accept on its fast path and hands it every other line; None when
    the core is not built, or STREAMRACE_CORE=python asks for no compiled code."""
    if os.environ.get("STREAMRACE_CORE", "").strip().lower() == "python":
        return None
    try:
        import streamrace._core as _core
    except ImportError:
        return None
    return cast("Callable[..., Any]", _core.line_reader)


@cache
def _native_table() -> dict[str, Any]:
    """The kinds the C++ reader checks itself: all of events.fast_table() (graphs included:
    it checks them whole) but the stateful ones, whose whole-trace rules only _Checker knows
    (their lines go to _line_taker)."""
    return {kind: spec for kind, spec in fast_table(graphs=True).items() if kind not in _STATEFUL}


def _read_failed(name: str, lineno: int, exc: Exception) -> TraceError:
    if isinstance(exc, EventInvalid):
        return TraceError(name, lineno, str(exc))
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
        return TraceError(name, lineno + 1, f"truncated or corrupt gzip data ({exc})")
    assert isinstance(exc, OSError)
    return TraceError(name, None, exc.strerror or str(exc))


class TraceEvents(Iterator[dict[str, Any]]):
    """What ``iter_trace`` returns: the header, then the events, as an iterator; and, once the
    header alone has been taken, the rest of the trace handed over whole to a consumer of the
    C++ line reader (``hand_over``), so that the C++ core reads the lines itself (the direct
    reader, docs/analysis.md) while errors are raised and worded as they are when iterating."""

    def __init__(self, path: str) -> None:
        self._consumer: Callable[[Any], None] | None = None
        self._taken = 0
        self._stream: IO[bytes] | None = None
        self._native = _native_line_reader()
        self._lines = _read_lines(path, self._native, self._hand_over_to, self._opened)

    def __next__(self) -> dict[str, Any]:
        item = next(self._lines)
        self._taken += 1
        return item

    def _hand_over_to(self) -> Callable[[Any], None] | None:
        return self._consumer

    def _opened(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def position(self) -> int | None:
        """How much of the trace's text has been read so far (bytes, uncompressed), where the
        stream can tell (a progress bar's measure); else None."""
        try:
            return self._stream.tell() if self._stream is not None else 0
        except (OSError, ValueError):  # a pipe, or the stream closed at the end
            return None

    def can_hand_over(self) -> bool:
        """Whether ``hand_over`` will hand the lines over: the C++ reader is built, and exactly
        the header has been taken."""
        return self._native is not None and self._taken == 1

    def hand_over(self, consumer: Callable[[Any], None]) -> None:
        """Call ``consumer`` with the C++ line reader of the lines after the header (csrc/reader.h)
        instead of yielding their events; a ``TraceError`` for what the reader meets, as iterating
        raises it. Only where ``can_hand_over()``."""
        if not self.can_hand_over():
            raise RuntimeError("the trace's lines can be handed over only once, right after its header")
        self._consumer = consumer
        for _ in self._lines:  # the consumer took every line: nothing is yielded
            raise AssertionError("a trace handed over yielded an event")


def iter_trace(path: str | os.PathLike[str]) -> TraceEvents:
    """Yield the header, then every event, validated; ``-`` reads standard input. Raises
    TraceError on the first problem.

    Events of kinds this version does not know (a newer minor version's) are skipped; the
    header then gets ``skipped_events``, ``{kind: count}``, complete once the events run out.
    """
    return TraceEvents(os.fspath(path))


def _read_lines(
    path: str,
    native: Callable[..., Any] | None,
    consumer: Callable[[], Callable[[Any], None] | None],
    opened: Callable[[IO[bytes]], None],
) -> Iterator[dict[str, Any]]:
    """iter_trace's generator; the C++ reader, once made, goes to ``consumer()`` where it names
    one (TraceEvents.hand_over); the stream, once open, to ``opened``."""
    name = display_name(path)
    if path != STDIN:
        if not os.path.exists(path):
            raise TraceError(name, None, "no such file")
        if os.path.isdir(path):
            raise TraceError(name, None, "is a directory, not a trace file")
    lineno = 0
    checker = _Checker()
    lines = None  # the C++ reader, once it reads: it counts the lines then
    try:
        with _open_binary(path) as stream:
            opened(stream)
            first = stream.readline(_LINE_READ)
            if not first:
                raise TraceError(name, None, "empty file: no trace header")
            lineno = 1
            header = _read_header(first)
            checker.captures_only = header.get("recording") == "captures"
            yield header
            take = _line_taker(checker, header)
            if native is not None:
                lines = native(stream, _native_table(), checker, take, lineno, MAX_STREAMS, _LINE_READ)
                direct = consumer()
                if direct is not None:
                    direct(lines)
                else:
                    yield from lines
                lineno = lines.lineno
            else:
                for line in iter(partial(stream.readline, _LINE_READ), b""):
                    lineno += 1
                    event = take(line)
                    if event is not None:
                        yield event
    except (EventInvalid, EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        raise _read_failed(name, lines.lineno if lines is not None else lineno, exc) from None
    if checker.open_graphs:
        graphs = ", ".join(map(str, sorted(checker.open_graphs)))
        raise TraceError(name, lineno, f"trace ends inside a capture of graph {graphs} (truncated?)")


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace into memory."""
    items = iter_trace(path)
    header = next(items)
    events = list(items)
    stacks = {ev["id"]: ev["frames"] for ev in events if ev["ev"] == "stack"}
    return Trace(header=header, events=events, path=display_name(path), stacks=stacks)


def make_header(**facts: Any) -> dict[str, Any]:
    """A header of this format version; ``facts`` are the descriptive fields (torch, cuda, ...).
    ``minor`` is written only once there is one (absent means 0)."""
    minor = {"minor": FORMAT_MINOR} if FORMAT_MINOR else {}
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, **minor, **facts}


_WRITE_CHUNK = 10_000  # events encoded at a time: bounded memory for a long generator


def write_trace(path: str | os.PathLike[str], header: dict[str, Any], events: Iterable[dict[str, Any]]) -> None:
    """Write a trace; a path ending in .gz is gzip-compressed. Strict JSON: NaN is refused."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as out:
        out.write(encode_lines([header]))
        rest = iter(events)
        while chunk := list(itertools.islice(rest, _WRITE_CHUNK)):
            out.write(encode_lines(chunk))
