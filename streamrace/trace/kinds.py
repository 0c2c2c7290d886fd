"""The trace's event kinds, declared once: each kind's fields, their types, required or
optional, the format version that added it and its line in docs/trace-format.md.

Everything else about the contract is made from this table: the validator's ``EVENT_FIELDS``
and fast checks (events.py), and, by ``python -m streamrace.trace.generate``, the typed Python
records (``records.py``), the C++ core's field names (``csrc/trace_fields.h``) and the events
table of docs/trace-format.md. ``tests/test_trace_contract.py`` fails when any of them drifts
from it. A field a kind does not list is allowed and ignored (a newer recorder may add one).
"""

from __future__ import annotations

# Field types understood by the validator (events.py).
INT = "int"
NONNEG = "nonneg"  # int >= 0
POS = "pos"  # int > 0
STR = "str"
BOOL = "bool"
POOL = "pool"  # [int, int]
RANGES = "ranges"  # list of byte ranges, see events.validate_range
INTS = "ints"  # list of int
FRAMES = "frames"  # list of [file, line, function]
NODES = "nodes"  # list of graph node dicts
EDGES = "edges"  # list of [from, to] or [from, to, type]


class Field:
    """One field of a kind (plain classes: dataclasses would cost the command line's start-up
    the import of inspect, docs/performance.md)."""

    __slots__ = ("added", "name", "required", "type")

    def __init__(self, name: str, type: str, required: bool, added: str = "1.0") -> None:
        self.name = name
        self.type = type
        self.required = required
        self.added = added  # the format version that added it to its kind

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, required={self.required}, added={self.added!r})"


def required(name: str, type: str) -> Field:
    return Field(name, type, True)


def optional(name: str, type: str, *, added: str = "1.0") -> Field:
    return Field(name, type, False, added)


class EventKind:
    """One event kind: its fields, what it says happened, the format version that added it."""

    __slots__ = ("added", "doc", "fields", "name")

    def __init__(self, name: str, fields: tuple[Field, ...], doc: str, added: str = "1.0") -> None:
        self.name = name
        self.fields = fields
        self.doc = doc  # what happened, as docs/trace-format.md's table says it
        self.added = added

    def __repr__(self) -> str:
        return f"EventKind({self.name!r}, added={self.added!r})"

    @property
    def required(self) -> dict[str, str]:
        return {f.name: f.type for f in self.fields if f.required}

    @property
    def optional(self) -> dict[str, str]:
        return {f.name: f.type for f in self.fields if not f.required}


# Every event also carries "seq" and "ev". In trace order of first appearance, roughly.
EVENT_KINDS: tuple[EventKind, ...] = (
    EventKind(
        "stream",
        (required("stream", NONNEG), optional("device", NONNEG), optional("name", STR), optional("priority", INT)),
        "a stream was seen for the first time; `name` labels it in reports",
    ),
    EventKind(
        "capture_begin",
        (
            required("graph", NONNEG),
            required("stream", NONNEG),
            optional("device", NONNEG),
            optional("pool", POOL),
            optional("mode", STR),
            optional("stack", NONNEG),
        ),
        (
            "`stream` begins capturing into graph `graph`; `pool` is the allocator pool id (below), `mode` "
            'the capture mode (`"global"`, `"thread_local"`, `"relaxed"`)'
        ),
    ),
    EventKind(
        "capture_end",
        (required("graph", NONNEG), optional("stack", NONNEG), optional("aborted", BOOL)),
        (
            "the capture of `graph` ended; `aborted`: it failed or never ended (the recorder closes it so "
            "what was captured is still analysed)"
        ),
    ),
    EventKind(
        "alloc",
        (
            required("addr", NONNEG),
            required("size", POS),
            required("stream", NONNEG),
            optional("device", NONNEG),
            optional("pool", POOL),
            optional("stack", NONNEG),
        ),
        "the caching allocator gave the block `[addr, addr+size)` to a tensor on `stream`",
    ),
    EventKind(
        "free",
        (required("addr", NONNEG), optional("device", NONNEG), optional("stream", NONNEG), optional("stack", NONNEG)),
        "the block at `addr` went back to the allocator (its last tensor reference died)",
    ),
    EventKind(
        "record_stream",
        (required("addr", NONNEG), required("stream", NONNEG), optional("device", NONNEG), optional("stack", NONNEG)),
        "`tensor.record_stream(stream)` on the block at `addr`",
    ),
    EventKind(
        "op",
        (
            required("op", STR),
            required("stream", NONNEG),
            required("reads", RANGES),
            required("writes", RANGES),
            optional("device", NONNEG),
            optional("stack", NONNEG),
            optional("nodes", INTS),
            optional("inferred", BOOL),
            optional("index", RANGES, added="1.2"),
            optional("tensors", INTS, added="1.5"),
            optional("host_reads", RANGES, added="1.5"),
            optional("host_writes", RANGES, added="1.5"),
            optional("host_blocking", BOOL, added="1.5"),
        ),
        (
            'an operator (`"aten::mm"`, `"aten::mm.out"`) ran (or was captured) on `stream`, reading and '
            "writing those bytes; `nodes`: ids of the graph nodes it created; `inferred`: the read/write "
            "split was guessed (unknown directions count as writes); `index` (1.2): of an op that writes "
            "through an index (below), the ranges of its index operands; `tensors` (1.5): of an eager op that "
            "reads memory a captured op wrote, the identity of the tensor behind each of its `reads`, in order "
            "(0: a read of other memory); `host_reads`, `host_writes` (1.5): the pinned host bytes it copies "
            "from and to (an H2D source, a D2H destination); `host_blocking` (1.5): the host waited for it (a "
            "copy without `non_blocking`)"
        ),
    ),
    EventKind(
        "event_create",
        (required("event", NONNEG),),
        "a CUDA event was created; it has no recorded state",
    ),
    EventKind(
        "event_delete",
        (required("event", NONNEG),),
        "the event was destroyed; an id used again later is a new event",
    ),
    EventKind(
        "event_record",
        (
            required("event", NONNEG),
            required("stream", NONNEG),
            optional("stack", NONNEG),
            optional("inferred", BOOL, added="1.7"),
        ),
        (
            "`event.record(stream)`: the event now stands for everything issued on `stream` so far (replacing"
            " any earlier record); `inferred` (1.7): a record no hook heard (a library's own), stood in for at"
            " the wait that joined its stream's work, where that stream's whole frontier is what the wait"
            " brought in"
        ),
    ),
    EventKind(
        "event_wait",
        (required("event", NONNEG), required("stream", NONNEG), optional("stack", NONNEG)),
        "`stream.wait_event(event)`; `wait_stream` is written as a record plus a wait",
    ),
    EventKind(
        "stream_sync",
        (required("stream", NONNEG),),
        "the host waited for `stream` (`stream.synchronize()`)",
    ),
    EventKind(
        "event_sync",
        (required("event", NONNEG),),
        "the host waited for the event (`event.synchronize()`)",
    ),
    EventKind(
        "device_sync",
        (optional("device", NONNEG),),
        "the host waited for the whole device (`torch.cuda.synchronize()`)",
    ),
    EventKind(
        "stack",
        (required("id", NONNEG), required("frames", FRAMES)),
        "defines a stack for the `stack` fields of later events",
    ),
    EventKind(
        "graph",
        (required("graph", NONNEG), required("nodes", NODES), required("edges", EDGES)),
        "the captured graph read back at the end of its capture (below)",
    ),
    EventKind(
        "kernel",
        (
            required("graph", NONNEG),
            required("node", NONNEG),
            required("name", STR),
            required("reads", RANGES),
            required("writes", RANGES),
            optional("stream", NONNEG),
            optional("device", NONNEG),
            optional("inferred", BOOL),
            optional("stack", NONNEG),
            optional("host_ranges", RANGES, added="1.6"),
        ),
        (
            "a kernel node the dispatcher never saw (Triton, custom CUDA, library calls) with the bytes its "
            "pointer arguments reach; `host_ranges` (1.6): the pinned host bytes they reach (a flag the "
            "kernel may poll: direction unknown)"
        ),
    ),
    EventKind(
        "replay",
        (required("graph", NONNEG), required("stream", NONNEG), optional("device", NONNEG), optional("stack", NONNEG)),
        (
            "one `CUDAGraph.replay()` of the graph captured as `graph` (the id its `capture_begin` had) on "
            "`stream`, the current stream of `device` when it was called; `stack`: the line that replayed it"
        ),
        added="1.1",
    ),
    EventKind(
        "graph_reset",
        (required("graph", NONNEG), optional("stack", NONNEG)),
        "`CUDAGraph.reset()`: the graph is gone; its object may capture again, as a new `graph`",
        added="1.1",
    ),
    EventKind(
        "graph_destroy",
        (required("graph", NONNEG),),
        "the CUDAGraph object holding `graph` was collected: the graph is gone",
        added="1.1",
    ),
    EventKind(
        "recorder_error",
        (required("message", STR), optional("where", STR)),
        "the recorder failed somewhere (`where`) and went on; the user's program was not affected",
    ),
    EventKind(
        "library_call",
        (required("call", STR), required("first", NONNEG)),
        (
            "the events from seq `first` up to this one were made inside a library's own entry point `call` "
            "(`CUDAGraph.capture_begin`, `CUDAGraph.replay`, `CUDAGraph.reset`, "
            "`CUDAGraph.register_generator_state`, `cudagraph_trees.CUDAGraphNode._record`); written only for"
            " a call that recorded something. The [library protocols](library-protocols.md) judge findings by"
            " it"
        ),
        added="1.3",
    ),
    EventKind(
        "view",
        (
            required("tensor", POS),
            required("op", STR),
            required("ranges", RANGES),
            optional("base", NONNEG),
            optional("stream", NONNEG),
            optional("device", NONNEG),
            optional("stack", NONNEG),
        ),
        (
            "an eager view op (`op`: `aten::detach`, `aten::slice.Tensor`) made the tensor `tensor` (an "
            "identity: the address of its TensorImpl) over memory a captured op wrote; `ranges`: its bytes "
            "(one range); `base`: the identity of the tensor it views"
        ),
        added="1.5",
    ),
    EventKind(
        "pool_alloc",
        (
            required("addr", NONNEG),
            required("size", POS),
            required("stream", NONNEG),
            optional("device", NONNEG),
            optional("name", STR),
            optional("stack", NONNEG),
        ),
        (
            "the program's own pool (`name`: KV pages, table slots) gave the range `[addr, addr+size)` to a "
            "new owner, from `stream` at this point (`streamrace.annotate.alloc`); it lies inside a block "
            "of the caching allocator, which sees nothing of it"
        ),
        added="1.4",
    ),
    EventKind(
        "pool_free",
        (
            required("addr", NONNEG),
            required("stream", NONNEG),
            optional("device", NONNEG),
            optional("name", STR),
            optional("stack", NONNEG),
        ),
        (
            "the program's pool took back the range its `pool_alloc` at `addr` gave out: from this point, "
            "work on `stream` may be given it (`streamrace.annotate.free`)"
        ),
        added="1.4",
    ),
    EventKind(
        "host_alloc",
        (
            required("addr", NONNEG),
            required("size", POS),
            required("stream", NONNEG),
            optional("device", NONNEG),
            optional("stack", NONNEG),
        ),
        (
            "pinned host memory `[addr, addr+size)` (the host caching allocator's) was first seen, given to a "
            "tensor while `stream` was current (a capturing stream: allocated inside that capture)"
        ),
        added="1.5",
    ),
    EventKind(
        "host_free",
        (required("addr", NONNEG), optional("stack", NONNEG)),
        "the pinned host memory at `addr` went back to the host caching allocator (its storage died)",
        added="1.5",
    ),
    EventKind(
        "host_op",
        (
            required("op", STR),
            required("reads", RANGES),
            required("writes", RANGES),
            optional("stack", NONNEG),
        ),
        (
            "an operator ran on the host (CPU), reading and writing those bytes of pinned host memory "
            "(`fill_`, `copy_`, indexing, `item`)"
        ),
        added="1.5",
    ),
)

# The analysis reads these on any event that has them, whatever its kind, so they are held
# to one type everywhere: an event that does not define one may still carry it.
COMMON_FIELDS: dict[str, str] = {"stream": NONNEG, "device": NONNEG, "stack": NONNEG, "graph": NONNEG}

# Kinds that name a block of memory: kind -> (address field, size field); the block ends
# below 2^62, like every range.
BLOCK_ENDS: dict[str, tuple[str, str]] = {
    "alloc": ("addr", "size"),
    "pool_alloc": ("addr", "size"),
    "host_alloc": ("addr", "size"),
}

# The fields of a byte range (events.validate_range): contiguous {addr, nbytes} or strided
# {addr, shape, stride, itemsize}.
RANGE_FIELDS: tuple[str, ...] = ("addr", "nbytes", "shape", "stride", "itemsize")
# The fields of a graph event's node objects (`nodes`: an id and a type, and where they apply
# the launch's seq, the kernel's name and the event a record or wait node names).
NODE_FIELDS: tuple[str, ...] = ("id", "type", "op", "name", "event")
