"""Build traces by hand: for tests, hand-written examples and documentation.

The builder writes the same events the recorder writes, with made-up but consistent stream
handles, event ids and addresses, so a test reads like the program it models::

    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main):
        x = tb.alloc(1 << 20, main)
        tb.wait_stream(side, main)
        tb.op("aten::sum", side, reads=[tb.span(x, 1 << 20)], at="model.py:12")
        tb.free(x)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from streamrace.trace.events import validate_event
from streamrace.trace.io import Trace, make_header, write_trace
from streamrace.trace.records import ByteRange

Site = str | Sequence[str]  # "file.py:LINE in func", or such frames innermost first

_STREAM_BASE = 0x5000
_ADDR_BASE = 0x7F00_0000_0000
_HOST_BASE = 0x2000_0000_0000  # pinned host memory: another part of the one (UVA) address space
_ALIGN = 512


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return strides[::-1]


def _frame(text: str) -> list[Any]:
    where, _, func = text.partition(" in ")
    file, _, line = where.rpartition(":")
    return [file, int(line), func or "<module>"]


class TraceBuilder:
    """Accumulates validated v1 events; ``trace()`` returns a ``Trace``."""

    def __init__(self, **header: Any) -> None:
        self.header = make_header(**header)
        self.events: list[dict[str, Any]] = []
        self._seq = itertools.count()
        self._streams = itertools.count()
        self._events_ids = itertools.count(1)
        self._graphs = itertools.count(1)
        self._next_addr = _ADDR_BASE
        self._next_host = _HOST_BASE
        self._stacks: dict[str, int] = {}
        self._block_stream: dict[int, int] = {}

    # -- raw ---------------------------------------------------------------------------
    def emit(self, ev: str, **fields: Any) -> dict[str, Any]:
        event = {"seq": next(self._seq), "ev": ev, **{k: v for k, v in fields.items() if v is not None}}
        validate_event(event)
        self.events.append(event)
        return event

    def _stack(self, at: Site | None) -> int | None:
        """``at`` is "file.py:LINE" or "file.py:LINE in func", or a list of those, innermost
        first (a deeper stack); one stack entry per distinct stack."""
        if at is None:
            return None
        frames = [at] if isinstance(at, str) else list(at)
        key = "\n".join(frames)
        if key not in self._stacks:
            stack_id = len(self._stacks) + 1
            self.emit("stack", id=stack_id, frames=[_frame(text) for text in frames])
            self._stacks[key] = stack_id
        return self._stacks[key]

    # -- streams, events, syncs ----------------------------------------------------------
    def stream(self, name: str | None = None, device: int = 0) -> int:
        handle = _STREAM_BASE + next(self._streams) * 0x10
        self.emit("stream", stream=handle, device=device, name=name)
        return handle

    def event(self) -> int:
        event = next(self._events_ids)
        self.emit("event_create", event=event)
        return event

    def record(self, event: int, stream: int, at: Site | None = None) -> None:
        self.emit("event_record", event=event, stream=stream, stack=self._stack(at))

    def wait(self, event: int, stream: int, at: Site | None = None) -> None:
        self.emit("event_wait", event=event, stream=stream, stack=self._stack(at))

    def delete_event(self, event: int) -> None:
        self.emit("event_delete", event=event)

    def wait_stream(self, waiter: int, waited: int, at: Site | None = None) -> None:
        """``waiter.wait_stream(waited)``: a fresh event recorded on waited, waited on by waiter."""
        event = self.event()
        self.record(event, waited, at)
        self.wait(event, waiter, at)
        self.delete_event(event)

    def stream_sync(self, stream: int) -> None:
        self.emit("stream_sync", stream=stream)

    def event_sync(self, event: int) -> None:
        self.emit("event_sync", event=event)

    def device_sync(self, device: int = 0) -> None:
        self.emit("device_sync", device=device)

    # -- captures ------------------------------------------------------------------------
    @contextmanager
    def capture(self, stream: int, pool: tuple[int, int] | None = None) -> Iterator[int]:
        graph = next(self._graphs)
        self.emit(
            "capture_begin",
            graph=graph,
            stream=stream,
            device=0,
            pool=list(pool) if pool else [graph, 0],
            mode="global",
        )
        yield graph
        self.emit("capture_end", graph=graph)

    def read_back(self, graph: int, nodes: Sequence[dict[str, Any]], edges: Sequence[Sequence[Any]] = ()) -> None:
        """The graph event of ``graph`` (after its capture_end): nodes as ``{"type": ...}``
        (``event`` on an event record or wait node), numbered here in order."""
        numbered = [{"id": i, **n} for i, n in enumerate(nodes)]
        self.emit("graph", graph=graph, nodes=numbered, edges=[list(e) for e in edges])

    # -- memory --------------------------------------------------------------------------
    def alloc(
        self,
        size: int,
        stream: int,
        addr: int | None = None,
        at: Site | None = None,
        pool: tuple[int, int] | None = None,
    ) -> int:
        """Allocate ``size`` bytes on ``stream``; a fresh address unless ``addr`` reuses one."""
        if addr is None:
            addr = self._next_addr
            self._next_addr += -(-size // _ALIGN) * _ALIGN + _ALIGN
        self._block_stream[addr] = stream
        self.emit(
            "alloc",
            addr=addr,
            size=size,
            stream=stream,
            device=0,
            pool=list(pool) if pool else None,
            stack=self._stack(at),
        )
        return addr

    def free(self, addr: int, at: Site | None = None) -> None:
        self.emit("free", addr=addr, device=0, stream=self._block_stream.get(addr), stack=self._stack(at))

    def pool_alloc(self, addr: int, size: int, stream: int, name: str = "kv", at: Site | None = None) -> None:
        """The program's own pool gives ``[addr, addr+size)`` out, from ``stream`` (1.4)."""
        self.emit("pool_alloc", addr=addr, size=size, stream=stream, device=0, name=name, stack=self._stack(at))
        self.header["app_pools"] = self.header.get("app_pools", 0) + 1

    def pool_free(self, addr: int, stream: int, name: str = "kv", at: Site | None = None) -> None:
        """The pool takes the range at ``addr`` back; work on ``stream`` may get it (1.4)."""
        self.emit("pool_free", addr=addr, stream=stream, device=0, name=name, stack=self._stack(at))
        self.header["app_pools"] = self.header.get("app_pools", 0) + 1

    # -- pinned host memory (1.5) ---------------------------------------------------------
    def host_alloc(self, size: int, stream: int, addr: int | None = None, at: Site | None = None) -> int:
        """Pinned host memory of ``size`` bytes, ``stream`` current (capturing: allocated inside
        that capture); a fresh host address unless ``addr`` reuses one."""
        if addr is None:
            addr = self._next_host
            self._next_host += -(-size // _ALIGN) * _ALIGN + _ALIGN
        self.emit("host_alloc", addr=addr, size=size, stream=stream, device=0, stack=self._stack(at))
        self.header["host_memory"] = True
        return addr

    def host_free(self, addr: int, at: Site | None = None) -> None:
        self.emit("host_free", addr=addr, stack=self._stack(at))

    def host_op(
        self,
        name: str,
        reads: Sequence[dict[str, Any]] = (),
        writes: Sequence[dict[str, Any]] = (),
        at: Site | None = None,
    ) -> int:
        """An op the host ran on pinned memory (``pinned.fill_(x)``, ``pinned[i].item()``)."""
        self.header["host_memory"] = True
        return self.emit("host_op", op=name, reads=list(reads), writes=list(writes), stack=self._stack(at))["seq"]

    def copy(
        self,
        stream: int,
        *,
        device_reads: Sequence[dict[str, Any]] = (),
        device_writes: Sequence[dict[str, Any]] = (),
        host_reads: Sequence[dict[str, Any]] = (),
        host_writes: Sequence[dict[str, Any]] = (),
        blocking: bool = False,
        at: Site | None = None,
    ) -> int:
        """A copy between pinned host memory and the device on ``stream`` (``aten::copy_``):
        H2D reads host bytes, D2H writes them; ``blocking``: without ``non_blocking``."""
        self.header["host_memory"] = True
        return self.emit(
            "op",
            op="aten::copy_",
            stream=stream,
            device=0,
            reads=list(device_reads),
            writes=list(device_writes),
            host_reads=list(host_reads) or None,
            host_writes=list(host_writes) or None,
            host_blocking=True if blocking else None,
            stack=self._stack(at),
        )["seq"]

    def record_stream(self, addr: int, stream: int, at: Site | None = None) -> None:
        self.emit("record_stream", addr=addr, stream=stream, device=0, stack=self._stack(at))

    # -- ranges and ops ------------------------------------------------------------------
    @staticmethod
    def span(addr: int, nbytes: int) -> ByteRange:
        """A contiguous byte range."""
        return {"addr": addr, "nbytes": nbytes}

    @staticmethod
    def view(
        base: int,
        shape: Sequence[int],
        stride: Sequence[int] | None = None,
        itemsize: int = 4,
        offset: int = 0,
    ) -> ByteRange:
        """A tensor view: ``offset`` and ``stride`` in elements, as torch reports them."""
        return {
            "addr": base + offset * itemsize,
            "shape": list(shape),
            "stride": list(stride) if stride is not None else _contiguous_strides(shape),
            "itemsize": itemsize,
        }

    def op(
        self,
        name: str,
        stream: int,
        reads: Sequence[dict[str, Any]] = (),
        writes: Sequence[dict[str, Any]] = (),
        at: Site | None = None,
        index: Sequence[dict[str, Any]] = (),
        tensors: Sequence[int] = (),
    ) -> int:
        """An op on ``stream``; returns its seq. ``index``: of the reads, those that pick where
        an op that writes through an index writes (1.2); ``tensors``: the identity behind each
        read of graph memory, 0 for other reads (1.5)."""
        if index:
            self.header["index_ops"] = self.header.get("index_ops", 0) + 1
        return self.emit(
            "op",
            op=name,
            stream=stream,
            device=0,
            reads=list(reads),
            writes=list(writes),
            index=list(index) or None,
            tensors=list(tensors) or None,
            stack=self._stack(at),
        )["seq"]

    def make_view(
        self,
        tensor: int,
        rng: dict[str, Any],
        stream: int,
        op: str = "aten::slice.Tensor",
        base: int | None = None,
        at: Site | None = None,
    ) -> int:
        """An eager view op made tensor ``tensor`` (an identity) over graph memory (1.5)."""
        self.header["views"] = self.header.get("views", 0) + 1
        return self.emit(
            "view", tensor=tensor, op=op, ranges=[rng], base=base, stream=stream, device=0, stack=self._stack(at)
        )["seq"]

    # -- the execution view (1.1) ------------------------------------------------------
    def replay(self, graph: int, stream: int, at: Site | None = None) -> dict[str, Any]:
        """One ``CUDAGraph.replay()`` of the graph captured as ``graph``, on ``stream``."""
        return self.emit("replay", graph=graph, stream=stream, stack=self._stack(at))

    def reset_graph(self, graph: int, at: Site | None = None) -> None:
        self.emit("graph_reset", graph=graph, stack=self._stack(at))

    def destroy_graph(self, graph: int) -> None:
        self.emit("graph_destroy", graph=graph)

    # -- output --------------------------------------------------------------------------
    def trace(self) -> Trace:
        stacks = {ev["id"]: ev["frames"] for ev in self.events if ev["ev"] == "stack"}
        return Trace(header=self.header, events=list(self.events), stacks=stacks)

    def write(self, path: str) -> None:
        write_trace(path, self.header, self.events)
