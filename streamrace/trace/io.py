"""Reading and writing trace files (JSON Lines, optionally gzip-compressed).

Reading is streaming: ``iter_trace`` yields the header and then one validated event at a
time, so a trace larger than memory can be analysed in one pass. Every problem becomes a
``TraceError`` naming the file and the line.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from streamrace.errors import TraceError
from streamrace.trace.events import (
    FORMAT_NAME,
    FORMAT_VERSION,
    EventInvalid,
    validate_event,
    validate_header,
)

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Trace:
    """A whole trace in memory: the header, the events in seq order, and the stack table."""

    header: dict[str, Any]
    events: list[dict[str, Any]]
    path: str = "<memory>"
    stacks: dict[int, list[list[Any]]] = field(default_factory=dict)


def _open_text(path: str) -> IO[str]:
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


class _Checker:
    """Whole-trace rules that one event alone cannot show: order, references, pairing."""

    def __init__(self) -> None:
        self.last_seq = -1
        self.stacks: set[int] = set()
        self.open_graphs: set[int] = set()
        self.capturing_streams: set[int] = set()
        self.graph_stream: dict[int, int] = {}

    def check(self, ev: dict[str, Any]) -> None:
        if ev["seq"] <= self.last_seq:
            raise EventInvalid(f"seq {ev['seq']} does not increase (previous {self.last_seq})")
        self.last_seq = ev["seq"]
        stack = ev.get("stack")
        if stack is not None and stack not in self.stacks:
            raise EventInvalid(f"stack {stack} is used before its 'stack' entry")
        kind = ev["ev"]
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


def iter_trace(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the header, then every event, validated. Raises TraceError on the first problem."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TraceError(path, None, "no such file")
    if os.path.isdir(path):
        raise TraceError(path, None, "is a directory, not a trace file")
    lineno = 0
    checker = _Checker()
    try:
        with _open_text(path) as stream:
            for lineno, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    hint = " (truncated file?)" if not line.endswith("\n") else ""
                    raise TraceError(path, lineno, f"invalid JSON: {exc.msg}{hint}") from None
                try:
                    if lineno == 1:
                        validate_header(obj)
                    else:
                        validate_event(obj)
                        checker.check(obj)
                except EventInvalid as exc:
                    raise TraceError(path, lineno, str(exc)) from None
                yield obj
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, lineno + 1, f"truncated or corrupt gzip data ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(path, lineno + 1, "not text: the file is binary or corrupt") from None
    except OSError as exc:
        raise TraceError(path, None, exc.strerror or str(exc)) from None
    if lineno == 0:
        raise TraceError(path, None, "empty file: no trace header")
    if checker.open_graphs:
        graphs = ", ".join(map(str, sorted(checker.open_graphs)))
        raise TraceError(path, lineno, f"trace ends inside a capture of graph {graphs} (truncated?)")


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a whole trace into memory."""
    items = iter_trace(path)
    header = next(items)
    events = list(items)
    stacks = {ev["id"]: ev["frames"] for ev in events if ev["ev"] == "stack"}
    return Trace(header=header, events=events, path=os.fspath(path), stacks=stacks)


def make_header(**facts: Any) -> dict[str, Any]:
    """A v1 header; ``facts`` are the descriptive fields (torch, cuda, devices, ...)."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, **facts}


def write_trace(path: str | os.PathLike[str], header: dict[str, Any], events: Iterable[dict[str, Any]]) -> None:
    """Write a trace; a path ending in .gz is gzip-compressed."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write(json.dumps(header, separators=(",", ":")) + "\n")
        for ev in events:
            out.write(json.dumps(ev, separators=(",", ":")) + "\n")
