"""Trace format 1.0: the contract between the recorder and the analysis (docs/trace-format.md).

The reader and writer (``streamrace.trace.io``: gzip, JSON) load on first use, so that the
version constants cost the command line nothing at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamrace.trace.events import FORMAT_MINOR, FORMAT_NAME, FORMAT_VERSION

if TYPE_CHECKING:  # the type checker sees the names that __getattr__ loads on first use
    from streamrace.trace.io import Trace as Trace
    from streamrace.trace.io import iter_trace as iter_trace
    from streamrace.trace.io import load_trace as load_trace
    from streamrace.trace.io import make_header as make_header
    from streamrace.trace.io import write_trace as write_trace

_IO_API = ("Trace", "iter_trace", "load_trace", "make_header", "write_trace")

__all__ = ["FORMAT_MINOR", "FORMAT_NAME", "FORMAT_VERSION", *_IO_API]


def __getattr__(name: str) -> object:
    if name not in _IO_API:
        raise AttributeError(f"module 'streamrace.trace' has no attribute {name!r}")
    from streamrace.trace import io

    return getattr(io, name)
