"""Python's cyclic garbage collector held off around work that makes many containers and no
reference cycle: the analysis on the C++ core (the events it holds) and a recording's flush
(the events it drains and lets go). A collection there walks every one of them to find no
cycle; reference counting frees meanwhile as before."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collections_paused() -> Iterator[None]:
    """No cyclic collection inside; after it, the collector as it was (one the program turned
    off stays off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
