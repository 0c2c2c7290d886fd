"""The program's own pools (``streamrace.annotate``): its logical alloc and free of ranges inside
a block the caching allocator gave it, as ``pool_alloc`` and ``pool_free`` events.

A serving engine hands out pages of its KV cache, or slots of a table, from one big tensor: the
allocator sees one block that lives as long as the engine, never a page going back and out
again. The pool says so with ``annotate.alloc`` and ``annotate.free``; each call becomes an
event at its point in program order, on the stream whose work may use the range from then on
(the given one, else the current stream of the range's device), with the user's stack.
"""

from __future__ import annotations

from typing import Any

from streamrace.record.op_accesses import tensor_range
from streamrace.record.seams import RecordingSeam

POOL_ALLOC = "pool_alloc"
POOL_FREE = "pool_free"


def _span(memory: Any) -> tuple[int, int] | None:
    """[start, end) of a tensor view's bytes (its first byte to its last), or of an
    ``(address, nbytes)`` pair; None for no bytes."""
    if isinstance(memory, tuple):
        addr, nbytes = memory
        if not (isinstance(addr, int) and isinstance(nbytes, int)) or addr < 0 or nbytes < 0:
            raise TypeError("an (address, nbytes) pair of non-negative integers")
        return (addr, addr + nbytes) if nbytes else None
    rng = tensor_range(memory)
    if rng is None:
        return None
    if "nbytes" in rng:
        return rng["addr"], rng["addr"] + rng["nbytes"]
    lo = hi = rng["addr"]
    for n, stride in zip(rng["shape"], rng["stride"], strict=True):
        step = (n - 1) * stride * rng["itemsize"]
        lo, hi = (lo, hi + step) if step >= 0 else (lo + step, hi)
    return lo, hi + rng["itemsize"]


class AppPools:
    """Turns the program's pool annotations into events; never fails the program."""

    def __init__(self, recorder: RecordingSeam) -> None:
        self._rec = recorder
        self.count = 0  # annotations recorded: the header's app_pools (0: the analysis skips its check)

    def annotate(self, kind: str, memory: Any, pool: str, stream: Any) -> None:
        rec = self._rec
        try:
            span = _span(memory)
            if span is None:
                return
            runtime = rec.runtime
            if runtime.is_recorded_tensor(memory):
                device = runtime.tensor_device(memory)
            elif stream is not None and getattr(stream, "device_index", None) is not None:
                device = stream.device_index
            else:
                device = runtime.current_device()
            if stream is None:
                handle = rec.current_stream(device)
            else:
                handle = runtime.stream_handle(stream)
                rec.started_hooks.state.see_stream(handle, device)
            addr, end = span
            fields: dict[str, Any] = {"addr": addr, "stream": handle, "device": device, "name": str(pool)}
            if kind == POOL_ALLOC:
                fields["size"] = end - addr
            rec.log.emit(kind, **fields, stack=rec.log.stack())
            self.count += 1
        except Exception as exc:  # the user's program must go on
            rec.log.fail("pool annotation", exc)
