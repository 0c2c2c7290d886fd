"""Trace lines written from events: strict JSON (NaN is refused), one object a line.

The bytes are the standard library's (``json.dumps`` with ``(",", ":")`` separators and
``ensure_ascii``); the C++ core writes them where it is built (csrc/trace_json_write.h), about
ten times faster, which matters where the recorder writes the trace while the program runs, in
the program's own thread. It gives up on anything but the plain types a trace holds, and the
standard library then writes (or refuses) the batch as it always did. ``STREAMRACE_CORE=python``
asks for no compiled code here too.
"""

from __future__ import annotations

import heapq
import json
import os
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any


@cache
def _native() -> Callable[..., bytes | None] | None:
    if os.environ.get("STREAMRACE_CORE", "").strip().lower() == "python":
        return None
    try:
        import streamrace._core as _core
    except ImportError:
        return None
    return getattr(_core, "encode_lines", None)  # a core built before it has none


@dataclass(frozen=True)
class EncodedLines:
    """Trace lines written already, one per seq, in seq order: the events the native hooks
    write themselves at a flush (csrc/recorder/event_log.h, ``drain_lines``), which never
    become Python objects. Never changed in place: a Ctrl-C between its two parts' updates
    would leave seqs without their lines."""

    seqs: array = field(default_factory=lambda: array("q"))
    data: bytes = b""

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def last_seq(self) -> int:
        return self.seqs[-1] if self.seqs else -1

    def extended(self, seqs: bytes, data: bytes) -> EncodedLines:
        """These lines and then those of a later drain."""
        more = array("q", self.seqs)
        more.frombytes(seqs)
        return EncodedLines(more, self.data + data)

    def after(self, seq: int) -> EncodedLines:
        """The lines whose seq is above ``seq``."""
        drop = bisect_right(self.seqs, seq)
        if drop == 0:
            return self
        at = 0
        for _ in range(drop):
            at = self.data.index(b"\n", at) + 1
        return EncodedLines(self.seqs[drop:], self.data[at:])


def last_seq(events: list[dict[str, Any]], lines: EncodedLines | None) -> int:
    """The last seq of ``events`` (in seq order) merged with ``lines``; -1 for none."""
    return max(events[-1]["seq"] if events else -1, lines.last_seq if lines else -1)


def encode_lines(items: Iterable[Any], lines: EncodedLines | None = None) -> bytes:
    """Each item as one line of strict JSON, UTF-8 (all ASCII), each line ending in a newline;
    with ``lines``, merged with them by seq (the items are then events in seq order)."""
    batch = items if isinstance(items, list) else list(items)
    native = _native()
    if lines:
        if native is not None:
            try:
                data = native(batch, lines.seqs, lines.data)
            except TypeError:  # a core built before it merged lines: the merge below
                data = None
            if data is not None:
                return data
        mine = encode_lines(batch).split(b"\n")[:-1]
        theirs = lines.data.split(b"\n")[:-1]
        merged = heapq.merge(zip((e["seq"] for e in batch), mine, strict=True), zip(lines.seqs, theirs, strict=True))
        return b"".join(line + b"\n" for _, line in merged)
    if native is not None:
        data = native(batch)
        if data is not None:
            return data
    return "".join(json.dumps(item, separators=(",", ":"), allow_nan=False) + "\n" for item in batch).encode("utf-8")
