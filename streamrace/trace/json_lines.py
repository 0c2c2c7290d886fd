"""Trace lines written from events: strict JSON (NaN is refused), one object a line.

The bytes are the standard library's (``json.dumps`` with ``(",", ":")`` separators and
``ensure_ascii``); the C++ core writes them where it is built (csrc/trace_json_write.h), about
ten times faster, which matters where the recorder writes the trace while the program runs, in
the program's own thread. It gives up on anything but the plain types a trace holds, and the
standard library then writes (or refuses) the batch as it always did. ``STREAMRACE_CORE=python``
asks for no compiled code here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any


@cache
def _native() -> Callable[[list[Any]], bytes | None] | None:
    if os.environ.get("STREAMRACE_CORE", "").strip().lower() == "python":
        return None
    try:
        import streamrace._core as _core
    except ImportError:
        return None
    return getattr(_core, "encode_lines", None)  # a core built before it has none


def encode_lines(items: Iterable[Any]) -> bytes:
    """Each item as one line of strict JSON, UTF-8 (all ASCII), each line ending in a newline."""
    batch = items if isinstance(items, list) else list(items)
    native = _native()
    if native is not None:
        data = native(batch)
        if data is not None:
            return data
    return "".join(json.dumps(item, separators=(",", ":"), allow_nan=False) + "\n" for item in batch).encode("utf-8")
