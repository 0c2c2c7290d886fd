"""Trace format v1: the contract between the recorder and the analysis (docs/trace-format.md)."""

from streamrace.trace.events import FORMAT_NAME, FORMAT_VERSION
from streamrace.trace.io import Trace, iter_trace, load_trace, make_header, write_trace

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "Trace", "iter_trace", "load_trace", "make_header", "write_trace"]
