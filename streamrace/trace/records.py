"""Typed records of the trace's events, one TypedDict per kind.

Generated from streamrace/trace/kinds.py by ``python -m streamrace.trace.generate``: edit that.
Events stay plain dicts; these say which keys each kind has and their types. An optional
field may be absent or None; a field a kind does not list may be there too (COMMON_FIELDS).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class ByteRange(TypedDict, total=False):
    """Contiguous ``{addr, nbytes}`` or strided ``{addr, shape, stride, itemsize}``."""

    addr: int
    nbytes: int
    shape: list[int]
    stride: list[int]
    itemsize: int


class _StreamEventRequired(TypedDict):
    seq: int
    ev: Literal["stream"]
    stream: int


class StreamEvent(_StreamEventRequired, total=False):
    """``stream``."""

    device: int | None
    name: str | None
    priority: int | None


class _CaptureBeginEventRequired(TypedDict):
    seq: int
    ev: Literal["capture_begin"]
    graph: int
    stream: int


class CaptureBeginEvent(_CaptureBeginEventRequired, total=False):
    """``capture_begin``."""

    device: int | None
    pool: list[int] | None
    mode: str | None
    stack: int | None


class _CaptureEndEventRequired(TypedDict):
    seq: int
    ev: Literal["capture_end"]
    graph: int


class CaptureEndEvent(_CaptureEndEventRequired, total=False):
    """``capture_end``."""

    stack: int | None
    aborted: bool | None


class _AllocEventRequired(TypedDict):
    seq: int
    ev: Literal["alloc"]
    addr: int
    size: int
    stream: int


class AllocEvent(_AllocEventRequired, total=False):
    """``alloc``."""

    device: int | None
    pool: list[int] | None
    stack: int | None


class _FreeEventRequired(TypedDict):
    seq: int
    ev: Literal["free"]
    addr: int


class FreeEvent(_FreeEventRequired, total=False):
    """``free``."""

    device: int | None
    stream: int | None
    stack: int | None


class _RecordStreamEventRequired(TypedDict):
    seq: int
    ev: Literal["record_stream"]
    addr: int
    stream: int


class RecordStreamEvent(_RecordStreamEventRequired, total=False):
    """``record_stream``."""

    device: int | None
    stack: int | None


class _OpEventRequired(TypedDict):
    seq: int
    ev: Literal["op"]
    op: str
    stream: int
    reads: list[ByteRange]
    writes: list[ByteRange]


class OpEvent(_OpEventRequired, total=False):
    """``op``."""

    device: int | None
    stack: int | None
    nodes: list[int] | None
    inferred: bool | None
    index: list[ByteRange] | None  # since 1.2
    tensors: list[int] | None  # since 1.5
    host_reads: list[ByteRange] | None  # since 1.5
    host_writes: list[ByteRange] | None  # since 1.5
    host_blocking: bool | None  # since 1.5


class _EventCreateEventRequired(TypedDict):
    seq: int
    ev: Literal["event_create"]
    event: int


class EventCreateEvent(_EventCreateEventRequired, total=False):
    """``event_create``."""


class _EventDeleteEventRequired(TypedDict):
    seq: int
    ev: Literal["event_delete"]
    event: int


class EventDeleteEvent(_EventDeleteEventRequired, total=False):
    """``event_delete``."""


class _EventRecordEventRequired(TypedDict):
    seq: int
    ev: Literal["event_record"]
    event: int
    stream: int


class EventRecordEvent(_EventRecordEventRequired, total=False):
    """``event_record``."""

    stack: int | None
    inferred: bool | None  # since 1.7


class _EventWaitEventRequired(TypedDict):
    seq: int
    ev: Literal["event_wait"]
    event: int
    stream: int


class EventWaitEvent(_EventWaitEventRequired, total=False):
    """``event_wait``."""

    stack: int | None


class _StreamSyncEventRequired(TypedDict):
    seq: int
    ev: Literal["stream_sync"]
    stream: int


class StreamSyncEvent(_StreamSyncEventRequired, total=False):
    """``stream_sync``."""


class _EventSyncEventRequired(TypedDict):
    seq: int
    ev: Literal["event_sync"]
    event: int


class EventSyncEvent(_EventSyncEventRequired, total=False):
    """``event_sync``."""


class _DeviceSyncEventRequired(TypedDict):
    seq: int
    ev: Literal["device_sync"]


class DeviceSyncEvent(_DeviceSyncEventRequired, total=False):
    """``device_sync``."""

    device: int | None


class _StackEventRequired(TypedDict):
    seq: int
    ev: Literal["stack"]
    id: int
    frames: list[list[Any]]


class StackEvent(_StackEventRequired, total=False):
    """``stack``."""


class _GraphEventRequired(TypedDict):
    seq: int
    ev: Literal["graph"]
    graph: int
    nodes: list[dict[str, Any]]
    edges: list[list[Any]]


class GraphEvent(_GraphEventRequired, total=False):
    """``graph``."""


class _KernelEventRequired(TypedDict):
    seq: int
    ev: Literal["kernel"]
    graph: int
    node: int
    name: str
    reads: list[ByteRange]
    writes: list[ByteRange]


class KernelEvent(_KernelEventRequired, total=False):
    """``kernel``."""

    stream: int | None
    device: int | None
    inferred: bool | None
    stack: int | None
    host_ranges: list[ByteRange] | None  # since 1.6


class _ReplayEventRequired(TypedDict):
    seq: int
    ev: Literal["replay"]
    graph: int
    stream: int


class ReplayEvent(_ReplayEventRequired, total=False):
    """``replay`` (since 1.1)."""

    device: int | None
    stack: int | None


class _GraphResetEventRequired(TypedDict):
    seq: int
    ev: Literal["graph_reset"]
    graph: int


class GraphResetEvent(_GraphResetEventRequired, total=False):
    """``graph_reset`` (since 1.1)."""

    stack: int | None


class _GraphDestroyEventRequired(TypedDict):
    seq: int
    ev: Literal["graph_destroy"]
    graph: int


class GraphDestroyEvent(_GraphDestroyEventRequired, total=False):
    """``graph_destroy`` (since 1.1)."""


class _RecorderErrorEventRequired(TypedDict):
    seq: int
    ev: Literal["recorder_error"]
    message: str


class RecorderErrorEvent(_RecorderErrorEventRequired, total=False):
    """``recorder_error``."""

    where: str | None


class _LibraryCallEventRequired(TypedDict):
    seq: int
    ev: Literal["library_call"]
    call: str
    first: int


class LibraryCallEvent(_LibraryCallEventRequired, total=False):
    """``library_call`` (since 1.3)."""


class _ViewEventRequired(TypedDict):
    seq: int
    ev: Literal["view"]
    tensor: int
    op: str
    ranges: list[ByteRange]


class ViewEvent(_ViewEventRequired, total=False):
    """``view`` (since 1.5)."""

    base: int | None
    stream: int | None
    device: int | None
    stack: int | None


class _PoolAllocEventRequired(TypedDict):
    seq: int
    ev: Literal["pool_alloc"]
    addr: int
    size: int
    stream: int


class PoolAllocEvent(_PoolAllocEventRequired, total=False):
    """``pool_alloc`` (since 1.4)."""

    device: int | None
    name: str | None
    stack: int | None


class _PoolFreeEventRequired(TypedDict):
    seq: int
    ev: Literal["pool_free"]
    addr: int
    stream: int


class PoolFreeEvent(_PoolFreeEventRequired, total=False):
    """``pool_free`` (since 1.4)."""

    device: int | None
    name: str | None
    stack: int | None


class _HostAllocEventRequired(TypedDict):
    seq: int
    ev: Literal["host_alloc"]
    addr: int
    size: int
    stream: int


class HostAllocEvent(_HostAllocEventRequired, total=False):
    """``host_alloc`` (since 1.5)."""

    device: int | None
    stack: int | None


class _HostFreeEventRequired(TypedDict):
    seq: int
    ev: Literal["host_free"]
    addr: int


class HostFreeEvent(_HostFreeEventRequired, total=False):
    """``host_free`` (since 1.5)."""

    stack: int | None


class _HostOpEventRequired(TypedDict):
    seq: int
    ev: Literal["host_op"]
    op: str
    reads: list[ByteRange]
    writes: list[ByteRange]


class HostOpEvent(_HostOpEventRequired, total=False):
    """``host_op`` (since 1.5)."""

    stack: int | None


Event = (
    StreamEvent
    | CaptureBeginEvent
    | CaptureEndEvent
    | AllocEvent
    | FreeEvent
    | RecordStreamEvent
    | OpEvent
    | EventCreateEvent
    | EventDeleteEvent
    | EventRecordEvent
    | EventWaitEvent
    | StreamSyncEvent
    | EventSyncEvent
    | DeviceSyncEvent
    | StackEvent
    | GraphEvent
    | KernelEvent
    | ReplayEvent
    | GraphResetEvent
    | GraphDestroyEvent
    | RecorderErrorEvent
    | LibraryCallEvent
    | ViewEvent
    | PoolAllocEvent
    | PoolFreeEvent
    | HostAllocEvent
    | HostFreeEvent
    | HostOpEvent
)

KIND_RECORDS: dict[str, type] = {
    "stream": StreamEvent,
    "capture_begin": CaptureBeginEvent,
    "capture_end": CaptureEndEvent,
    "alloc": AllocEvent,
    "free": FreeEvent,
    "record_stream": RecordStreamEvent,
    "op": OpEvent,
    "event_create": EventCreateEvent,
    "event_delete": EventDeleteEvent,
    "event_record": EventRecordEvent,
    "event_wait": EventWaitEvent,
    "stream_sync": StreamSyncEvent,
    "event_sync": EventSyncEvent,
    "device_sync": DeviceSyncEvent,
    "stack": StackEvent,
    "graph": GraphEvent,
    "kernel": KernelEvent,
    "replay": ReplayEvent,
    "graph_reset": GraphResetEvent,
    "graph_destroy": GraphDestroyEvent,
    "recorder_error": RecorderErrorEvent,
    "library_call": LibraryCallEvent,
    "view": ViewEvent,
    "pool_alloc": PoolAllocEvent,
    "pool_free": PoolFreeEvent,
    "host_alloc": HostAllocEvent,
    "host_free": HostFreeEvent,
    "host_op": HostOpEvent,
}
