"""Trace format 1.5: the limits, and the validation of one event against the declared kinds.

The trace is the contract between the recorder (GPU side) and the analysis (CPU only). The
event kinds and their fields are declared once, in kinds.py; this module says what a
well-formed event is by that declaration.

Validation has two paths that ``EVENT_FIELDS`` drives alike. ``validate_event`` is the
reference: it walks every field and names the first problem. ``fast_checks()`` has one
precompiled check per kind that only answers "certainly valid" (True) or "look closer"
(False), with no messages; the reader runs it on every event and falls back to the reference
only when it says False, so a trace costs one cheap check per event and errors still read
the same. ``tests/test_trace_io.py`` holds the two to the same verdicts.

Events stay plain dicts after validation: the analysis reads millions of them and a dict
lookup is the cheapest record Python has.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TypeGuard

from streamrace.trace.kinds import (
    BLOCK_ENDS,
    BOOL,
    COMMON_FIELDS,
    EDGES,
    EVENT_KINDS,
    FRAMES,
    INT,
    INTS,
    NODES,
    NONNEG,
    POOL,
    POS,
    RANGES,
    STR,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/performance.md, start-up)
if TYPE_CHECKING:
    from typing import Any

FORMAT_NAME = "streamrace-trace"
FORMAT_VERSION = 1  # the major version: a reader refuses a major it does not know
FORMAT_MINOR = 7  # additive changes within the major (docs/trace-format.md, versioning)

# Limits, checked here so that every engine can hold what it is given (docs/trace-format.md).
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Every byte a block or range names lies below 2^62: the C++ core's overlap arithmetic holds
# 62 bits (csrc/ranges.h), and both engines must give the same answer. GPUs use 49 to 57.
ADDRESS_END = 1 << 62
MAX_STREAMS = 4096  # distinct streams in one trace; the engines' clocks are per stream
# The longest line a trace may hold, its newline not counted. Checked while reading, so a line
# with no end (a file of NUL bytes, /dev/zero, a gzip bomb) costs this much memory and no more;
# the largest line a recorder writes (a captured graph's read-back, a deep stack) is far shorter.
MAX_LINE_BYTES = 64 << 20
# The most frames one stack may hold. The recorder walks at most 128 (record/recorder.py); a
# stack of millions, which every report walks, took tens of seconds to report.
MAX_FRAMES = 10_000

# ev -> (required fields, optional fields), from the declaration (kinds.py). Every event also
# carries "seq" and "ev".
EVENT_FIELDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    kind.name: (kind.required, kind.optional) for kind in EVENT_KINDS
}


class EventInvalid(ValueError):
    """One event is malformed; the loader adds the file and line."""


class UnknownEvent(EventInvalid):
    """A well-formed event of a kind this version does not know (a newer minor version's):
    the reader skips it and notes it; the trace builder refuses it."""


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int64(value: Any) -> TypeGuard[int]:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def validate_range(rng: Any) -> None:
    """A byte range is contiguous ``{addr, nbytes}`` or strided ``{addr, shape, stride, itemsize}``.

    ``stride`` is in elements, like ``Tensor.stride()``; ``addr`` is the byte address of
    element zero (storage base + storage_offset * itemsize), never ``data_ptr()`` of a base.
    Every byte it names lies in ``[0, 2^62)``, and so does its address when it names none.
    """
    if not isinstance(rng, dict):
        raise EventInvalid("a range must be an object")
    addr = rng.get("addr")
    if not _is_int(addr) or addr < 0:
        raise EventInvalid("a range needs a non-negative integer 'addr'")
    if addr > INT64_MAX:
        raise EventInvalid("range 'addr' is outside the 64-bit integer range")
    if "nbytes" in rng:
        nbytes = rng["nbytes"]
        if not _is_int(nbytes) or nbytes < 0:
            raise EventInvalid("range 'nbytes' must be a non-negative integer")
        if addr + nbytes >= ADDRESS_END:
            raise EventInvalid("a range ends past 2^62 (addr + nbytes)")
        return
    shape, stride, itemsize = rng.get("shape"), rng.get("stride"), rng.get("itemsize")
    if not isinstance(shape, list) or not isinstance(stride, list):
        raise EventInvalid("a range needs 'nbytes', or 'shape', 'stride' and 'itemsize'")
    if len(shape) != len(stride):
        raise EventInvalid("range 'shape' and 'stride' differ in length")
    if not all(_is_int(n) and n >= 0 for n in shape):
        raise EventInvalid("range 'shape' must hold non-negative integers")
    if not all(_is_int(s) for s in stride):
        raise EventInvalid("range 'stride' must hold integers")
    if not _is_int(itemsize) or itemsize <= 0:
        raise EventInvalid("range 'itemsize' must be a positive integer")
    if not all(map(_is_int64, shape)) or not all(map(_is_int64, stride)) or itemsize > INT64_MAX:
        raise EventInvalid("range 'shape', 'stride' or 'itemsize' is outside the 64-bit integer range")
    lo, end = _strided_span(addr, shape, stride, itemsize)
    if lo < 0:
        raise EventInvalid("a strided range reaches below address 0")
    if end >= ADDRESS_END:
        raise EventInvalid("a strided range ends past 2^62")


def _strided_span(addr: int, shape: list[int], stride: list[int], itemsize: int) -> tuple[int, int]:
    """``[lo, hi)``: the bytes between a strided range's first and last; ``[addr, addr)`` when
    it is empty."""
    lo = hi = addr
    for n, s in zip(shape, stride, strict=True):
        if n == 0:
            return addr, addr
        reach = (n - 1) * s * itemsize
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return lo, hi + itemsize


def _check_int(name: str, kind: str, value: Any) -> None:
    if not _is_int(value):
        raise EventInvalid(f"field '{name}' must be an integer")
    if kind == NONNEG and value < 0:
        raise EventInvalid(f"field '{name}' must be >= 0")
    if kind == POS and value <= 0:
        raise EventInvalid(f"field '{name}' must be > 0")
    if not INT64_MIN <= value <= INT64_MAX:
        raise EventInvalid(f"field '{name}' is outside the 64-bit integer range")


def _check_nodes(name: str, value: Any) -> None:
    ok = isinstance(value, list) and all(
        isinstance(n, dict) and _is_int(n.get("id")) and isinstance(n.get("type"), str) for n in value
    )
    if not ok:
        raise EventInvalid(f"field '{name}' must be a list of {{id, type}} objects")
    # The recorder numbers a graph's nodes in creation order; holding ids to 0..n-1 keeps
    # every structure indexed by node id as small as the graph.
    ids = [n["id"] for n in value]
    if sorted(ids) != list(range(len(ids))):
        raise EventInvalid(f"field '{name}': node ids must be 0 to {len(ids) - 1}, each once")
    for node in value:
        op, label = node.get("op"), node.get("name")
        if op is not None and not (_is_int64(op) and op >= 0):
            raise EventInvalid(f"field '{name}': node {node['id']} has an 'op' that is not a seq (integer >= 0)")
        if label is not None and not isinstance(label, str):
            raise EventInvalid(f"field '{name}': node {node['id']} has a 'name' that is not a string")
        event = node.get("event")
        if event is not None and not (_is_int64(event) and event >= 0):
            raise EventInvalid(f"field '{name}': node {node['id']} has an 'event' that is not an event (integer >= 0)")


def _check_edges(name: str, value: Any) -> None:
    ok = isinstance(value, list) and all(
        isinstance(e, list)
        and len(e) in (2, 3)
        and _is_int(e[0])
        and _is_int(e[1])
        and (len(e) == 2 or isinstance(e[2], str))
        for e in value
    )
    if not ok:
        raise EventInvalid(f"field '{name}' must be a list of [from, to(, type)]")


def _check_graph(event: dict[str, Any]) -> None:
    """A graph's edges join its own nodes, and CUDA graphs have no cycle."""
    count = len(event["nodes"])
    successors: list[list[int]] = [[] for _ in range(count)]
    incoming = [0] * count
    for edge in event["edges"]:
        src, dst = edge[0], edge[1]
        if not (0 <= src < count and 0 <= dst < count):
            raise EventInvalid(f"graph edge [{src}, {dst}] names a node the graph does not have")
        if src == dst:
            raise EventInvalid(f"graph edge [{src}, {dst}] is a self-loop")
        successors[src].append(dst)
        incoming[dst] += 1
    ready = [node for node in range(count) if incoming[node] == 0]
    seen = 0
    while ready:  # Kahn's topological sort: nodes left over lie on a cycle
        node = ready.pop()
        seen += 1
        for dst in successors[node]:
            incoming[dst] -= 1
            if incoming[dst] == 0:
                ready.append(dst)
    if seen != count:
        raise EventInvalid("graph edges form a cycle")


def _check_field(name: str, kind: str, value: Any) -> None:
    if kind in (INT, NONNEG, POS):
        _check_int(name, kind, value)
    elif kind == STR:
        if not isinstance(value, str):
            raise EventInvalid(f"field '{name}' must be a string")
    elif kind == BOOL:
        if not isinstance(value, bool):
            raise EventInvalid(f"field '{name}' must be true or false")
    elif kind == POOL:
        if not (isinstance(value, list) and len(value) == 2 and all(map(_is_int, value))):
            raise EventInvalid(f"field '{name}' must be a pair of integers")
        if not all(map(_is_int64, value)):
            raise EventInvalid(f"field '{name}' is outside the 64-bit integer range")
    elif kind == INTS:
        if not (isinstance(value, list) and all(map(_is_int, value))):
            raise EventInvalid(f"field '{name}' must be a list of integers")
        if not all(map(_is_int64, value)):
            raise EventInvalid(f"field '{name}' is outside the 64-bit integer range")
    elif kind == RANGES:
        if not isinstance(value, list):
            raise EventInvalid(f"field '{name}' must be a list of ranges")
        for rng in value:
            try:
                validate_range(rng)
            except EventInvalid as exc:
                raise EventInvalid(f"field '{name}': {exc}") from None
    elif kind == FRAMES:
        if isinstance(value, list) and len(value) > MAX_FRAMES:
            raise EventInvalid(f"field '{name}' holds more than {MAX_FRAMES:,} frames (the limit of this streamrace)")
        ok = isinstance(value, list) and all(
            isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and _is_int(f[1]) and isinstance(f[2], str)
            for f in value
        )
        if not ok:
            raise EventInvalid(f"field '{name}' must be a list of [file, line, function]")
        if not all(_is_int64(f[1]) for f in value):
            raise EventInvalid(f"field '{name}': a line number is outside the 64-bit integer range")
    elif kind == NODES:
        _check_nodes(name, value)
    elif kind == EDGES:
        _check_edges(name, value)
    else:  # pragma: no cover - the table above is closed
        raise AssertionError(kind)


def validate_event(event: Any) -> None:
    """Raise EventInvalid if ``event`` is not a well-formed event (unknown fields are allowed);
    ``UnknownEvent`` if it is well formed as far as any event can be but of an unknown kind."""
    if not isinstance(event, dict):
        raise EventInvalid("an event must be a JSON object")
    kind = event.get("ev")
    if not isinstance(kind, str):
        raise EventInvalid("missing event type 'ev'")
    if not _is_int(event.get("seq")) or event["seq"] < 0:
        raise EventInvalid(f"'{kind}' event needs a non-negative integer 'seq'")
    if event["seq"] > INT64_MAX:
        raise EventInvalid("field 'seq' is outside the 64-bit integer range")
    spec = EVENT_FIELDS.get(kind)
    if spec is None:
        raise UnknownEvent(f"unknown event type '{kind}'")
    required, optional = spec
    for name, field_kind in required.items():
        if name not in event:
            raise EventInvalid(f"'{kind}' event is missing field '{name}'")
        _check_field(name, field_kind, event[name])
    for name, field_kind in optional.items():
        if name in event and event[name] is not None:
            _check_field(name, field_kind, event[name])
    for name, field_kind in COMMON_FIELDS.items():
        if name not in required and name not in optional and event.get(name) is not None:
            _check_field(name, field_kind, event[name])
    block = BLOCK_ENDS.get(kind)
    if block is not None and event[block[0]] + event[block[1]] >= ADDRESS_END:
        raise EventInvalid(f"'{kind}' block ends past 2^62 ({block[0]} + {block[1]})")
    if kind == "graph":
        _check_graph(event)


# -- the fast path ------------------------------------------------------------------------
# One check per kind, compiled from EVENT_FIELDS into straight-line Python (as dataclasses
# and namedtuple compile theirs): a generic walk over the table costs a call per field, and
# the reader runs this on every event. It says False for anything unusual (the reference
# then decides, so it may for a valid event) and never True for an invalid one.


def _fast_ranges(value: Any) -> bool:
    if type(value) is not list:
        return False
    for rng in value:
        if type(rng) is not dict:
            return False
        addr = rng.get("addr")
        nbytes = rng.get("nbytes")
        if type(addr) is int and type(nbytes) is int and addr >= 0 and nbytes >= 0 and addr + nbytes < ADDRESS_END:
            continue
        if nbytes is not None or "nbytes" in rng or type(addr) is not int or addr < 0:
            return False
        if not _fast_strided(addr, rng):
            return False
    return True


def _fast_strided(addr: int, rng: dict[str, Any]) -> bool:
    shape, stride, itemsize = rng.get("shape"), rng.get("stride"), rng.get("itemsize")
    if type(shape) is not list or type(stride) is not list or type(itemsize) is not int:
        return False
    if len(shape) != len(stride) or not 0 < itemsize <= INT64_MAX:
        return False
    lo = hi = addr
    empty = False
    for n, s in zip(shape, stride, strict=True):
        if type(n) is not int or type(s) is not int or not 0 <= n <= INT64_MAX or not INT64_MIN <= s <= INT64_MAX:
            return False
        if n == 0:
            empty = True
        elif s > 0:
            hi += (n - 1) * s * itemsize
        else:
            lo += (n - 1) * s * itemsize
    if empty:
        return addr < ADDRESS_END
    return lo >= 0 and hi + itemsize < ADDRESS_END


def _fast_frames(value: Any) -> bool:
    if type(value) is not list or len(value) > MAX_FRAMES:
        return False
    for frame in value:
        if type(frame) is not list or len(frame) != 3:
            return False
        file, line, function = frame
        if type(file) is not str or type(function) is not str or type(line) is not int:
            return False
        if not INT64_MIN <= line <= INT64_MAX:
            return False
    return True


def _fast_ints(value: Any) -> bool:
    return type(value) is list and all(type(v) is int and INT64_MIN <= v <= INT64_MAX for v in value)


# field kind -> the test of one value ``v``, as a Python expression.
_FAST_TEST: dict[str, str] = {
    INT: "type(v) is int and INT64_MIN <= v <= INT64_MAX",
    NONNEG: "type(v) is int and 0 <= v <= INT64_MAX",
    POS: "type(v) is int and 0 < v <= INT64_MAX",
    STR: "type(v) is str",
    BOOL: "type(v) is bool",
    POOL: "type(v) is list and len(v) == 2 and _fast_ints(v)",
    INTS: "_fast_ints(v)",
    RANGES: "_fast_ranges(v)",
    FRAMES: "_fast_frames(v)",
}


# One field of a kind's fast check: (name, field kind, required). An optional field may be
# absent or null.
FastField = tuple[str, str, bool]


@cache
def fast_table(graphs: bool = False) -> dict[str, tuple[tuple[FastField, ...], tuple[str, str] | None]]:
    """kind -> (its fields, ``seq`` first, then the required, optional and common ones; its
    block end, ``BLOCK_ENDS``), for every kind whose fields the fast path can check: graphs
    are left to the reference, unless ``graphs`` (the C++ reader checks a graph's nodes and
    edges, and the whole graph, itself). Both fast paths are built from it: ``fast_checks()``
    here, and the C++ core's reader (csrc/reader.h)."""
    checked = {*_FAST_TEST, NODES, EDGES} if graphs else set(_FAST_TEST)
    table = {}
    for kind, (required, optional) in EVENT_FIELDS.items():
        fields = [("seq", NONNEG, True), *((name, k, True) for name, k in required.items())]
        fields += [(name, k, False) for name, k in optional.items()]
        fields += [(name, k, False) for name, k in COMMON_FIELDS.items() if name not in {**required, **optional}]
        if all(k in checked for _, k, _ in fields):
            table[kind] = (tuple(fields), BLOCK_ENDS.get(kind))
    return table


def _fast_source(kind: str, fields: tuple[FastField, ...], block: tuple[str, str] | None) -> str:
    """The source of one kind's check."""
    lines = [f"def check_{kind}(event):", "    get = event.get"]
    for name, field_kind, required in fields:
        test = _FAST_TEST[field_kind]
        condition = f"not ({test})" if required else f"v is not None and not ({test})"
        lines += [f"    v = get({name!r})", f"    if {condition}:", "        return False"]
    if block is not None:
        lines += [f"    return event[{block[0]!r}] + event[{block[1]!r}] < ADDRESS_END"]
    else:
        lines += ["    return True"]
    return "\n".join(lines) + "\n"


@cache
def fast_checks() -> dict[str, Callable[[dict[str, Any]], bool]]:
    """kind -> its fast check, compiled on first use (a few milliseconds the command line's
    start-up does not need)."""
    names = {
        "INT64_MIN": INT64_MIN,
        "INT64_MAX": INT64_MAX,
        "ADDRESS_END": ADDRESS_END,
        "_fast_ints": _fast_ints,
        "_fast_ranges": _fast_ranges,
        "_fast_frames": _fast_frames,
    }
    checks: dict[str, Callable[[dict[str, Any]], bool]] = {}
    for kind, (fields, block) in fast_table().items():
        namespace: dict[str, Any] = dict(names)
        exec(compile(_fast_source(kind, fields, block), f"<fast check of {kind!r} events>", "exec"), namespace)
        checks[kind] = namespace[f"check_{kind}"]
    return checks


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# Header facts the analysis reads (notes, the graph check): each must have its type when present.
_HEADER_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "minor": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    "recorder_errors": (_is_str_list, "a list of strings"),
    "allocations_dropped": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    "allocator": (
        lambda v: (
            isinstance(v, dict)
            and isinstance(v.get("backend"), (str, type(None)))
            and isinstance(v.get("caching"), (bool, type(None)))
            and isinstance(v.get("conf"), (str, type(None)))
        ),
        "an object of 'backend' (string), 'caching' (true or false) and 'conf' (string)",
    ),
    "graph_readback": (lambda v: isinstance(v, bool), "true or false"),
    # 1.1: what was recorded: the whole program (eager work and replays too) or captures only
    "recording": (lambda v: v in ("program", "captures"), "'program' or 'captures'"),
    # 1.1: replays the recorder counted but could not record (graphs captured before it started)
    "replays_unrecorded": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    # 1.3: directories of code a compiler generated (inductor's cache): a finding's line is the caller's
    "generated_code": (_is_str_list, "a list of strings"),
    # 1.4: the pool annotations the recording made (streamrace.annotate); 0: no pool check needed
    "app_pools": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    # 1.5: whether pinned host memory was recorded (host_alloc, host_free, host_op, an op's host ranges)
    "host_memory": (lambda v: isinstance(v, bool), "true or false"),
    # 1.4: ops that write through an index (an op event's index); 0: no padded-scatter check needed
    "index_ops": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    # 1.5: the view events the recording made; 0: no static-output check needed
    "views": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    # 1.6: the host_alloc, host_free and host_op events the recording made; 0: no pinned-memory check needed
    "host_events": (lambda v: _is_int64(v) and v >= 0, "a non-negative integer"),
    # a .partial file's provisional header: the recording never finished (the incomplete note)
    "incomplete": (lambda v: isinstance(v, bool), "true or false"),
}


def validate_header(header: Any) -> None:
    """The first line: format name and version; the facts the analysis reads have their types;
    everything else in it is descriptive."""
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise EventInvalid(f"not a streamrace trace (the first line must have format '{FORMAT_NAME}')")
    version = header.get("version")
    if not _is_int(version):
        raise EventInvalid("trace header has no integer 'version'")
    if version > FORMAT_VERSION:
        raise EventInvalid(
            f"trace format version {version} is newer than this streamrace reads "
            f"(up to {FORMAT_VERSION}); upgrade streamrace"
        )
    if version < 1:
        raise EventInvalid(f"unknown trace format version {version}")
    for name, (ok, what) in _HEADER_FIELDS.items():
        value = header.get(name)
        if value is not None and not ok(value):
            raise EventInvalid(f"trace header field '{name}' must be {what}")
