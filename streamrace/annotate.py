"""Annotations for memory the program hands out itself: an application pool's logical alloc
and free (HAZARDS.md M7; docs/annotate.md).

A serving engine gives pages of its KV cache, or slots of a table, to requests from one big
tensor; the caching allocator sees one block that lives as long as the engine. When the
scheduler runs a step ahead of the GPU, a page taken back from a finished request and handed
to the next one can still be read by the step in flight. The pool tells streamrace::

    from streamrace import annotate

    annotate.alloc(kv[page], pool="kv")   # the page is a request's, from the current stream
    annotate.free(kv[page], pool="kv")    # taken back: work on the current stream may get it

and the analysis treats each range as an allocation of its own: a free while another stream
may still use the range is a ``pool-unsafe-free`` finding, named at the free, with the use it
may cut short and, where one came, the next owner's access that raced with it.

``memory`` is a tensor (the bytes of the view, from its first byte to its last) or an
``(address, nbytes)`` pair. ``stream`` is the stream whose work may use the range from this
point (``alloc``), or be given it from this point (``free``): by default the current stream of
the range's device. Reusing a range is a new ``alloc`` of it after its ``free``.

Outside a recording each call returns at once (one global read), and this module imports
neither torch nor the recorder: a pool may call it unconditionally.
"""

from __future__ import annotations

from typing import Any

from streamrace.record import installation

__all__ = ["alloc", "free"]


def alloc(memory: Any, *, pool: str = "app", stream: Any = None) -> None:
    """The pool ``pool`` gives ``memory`` to a new owner, from ``stream`` (default: current)."""
    recorder = installation.active()
    if recorder is not None:
        recorder.app_pools.annotate("pool_alloc", memory, pool, stream)


def free(memory: Any, *, pool: str = "app", stream: Any = None) -> None:
    """The pool ``pool`` takes ``memory`` back; work on ``stream`` (default: current) may be
    given it from here on."""
    recorder = installation.active()
    if recorder is not None:
        recorder.app_pools.annotate("pool_free", memory, pool, stream)
