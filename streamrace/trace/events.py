"""Trace format v1: the event kinds, their fields, and the validation of one event.

The trace is the contract between the recorder (GPU side) and the analysis (CPU only), so
this module is the single place that says what a well-formed event is. docs/trace-format.md
describes the same table for people; keep the two in step.

Events stay plain dicts after validation: the analysis reads millions of them and a dict
lookup is the cheapest record Python has.
"""

from __future__ import annotations

from typing import Any

FORMAT_NAME = "streamrace-trace"
FORMAT_VERSION = 1

# Field kinds understood by the validator.
INT = "int"
NONNEG = "nonneg"  # int >= 0
POS = "pos"  # int > 0
STR = "str"
BOOL = "bool"
POOL = "pool"  # [int, int]
RANGES = "ranges"  # list of byte ranges, see validate_range
INTS = "ints"  # list of int
FRAMES = "frames"  # list of [file, line, function]
NODES = "nodes"  # list of graph node dicts
EDGES = "edges"  # list of [from, to] or [from, to, type]

# ev -> (required fields, optional fields). Every event also carries "seq" and "ev".
EVENT_FIELDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "stream": ({"stream": NONNEG}, {"device": NONNEG, "name": STR, "priority": INT}),
    "capture_begin": (
        {"graph": NONNEG, "stream": NONNEG},
        {"device": NONNEG, "pool": POOL, "mode": STR, "stack": NONNEG},
    ),
    # aborted: the capture failed (or never ended); what it recorded is still analysed.
    "capture_end": ({"graph": NONNEG}, {"stack": NONNEG, "aborted": BOOL}),
    "alloc": (
        {"addr": NONNEG, "size": POS, "stream": NONNEG},
        {"device": NONNEG, "pool": POOL, "stack": NONNEG},
    ),
    "free": ({"addr": NONNEG}, {"device": NONNEG, "stream": NONNEG, "stack": NONNEG}),
    "record_stream": ({"addr": NONNEG, "stream": NONNEG}, {"device": NONNEG, "stack": NONNEG}),
    "op": (
        {"op": STR, "stream": NONNEG, "reads": RANGES, "writes": RANGES},
        {"device": NONNEG, "stack": NONNEG, "nodes": INTS, "inferred": BOOL},
    ),
    "event_create": ({"event": NONNEG}, {}),
    "event_delete": ({"event": NONNEG}, {}),
    "event_record": ({"event": NONNEG, "stream": NONNEG}, {"stack": NONNEG}),
    "event_wait": ({"event": NONNEG, "stream": NONNEG}, {"stack": NONNEG}),
    "stream_sync": ({"stream": NONNEG}, {}),
    "event_sync": ({"event": NONNEG}, {}),
    "device_sync": ({}, {"device": NONNEG}),
    # frames: innermost (the user's own line) first, then its callers.
    "stack": ({"id": NONNEG, "frames": FRAMES}, {}),
    # Reserved for graph read-back and dispatcher-invisible kernels: accepted and kept,
    # and the v1 analysis does not yet use them for ordering.
    "graph": ({"graph": NONNEG, "nodes": NODES, "edges": EDGES}, {}),
    "kernel": (
        {"graph": NONNEG, "node": NONNEG, "name": STR, "reads": RANGES, "writes": RANGES},
        {"stream": NONNEG, "device": NONNEG, "inferred": BOOL, "stack": NONNEG},
    ),
    "recorder_error": ({"message": STR}, {"where": STR}),
}


class EventInvalid(ValueError):
    """One event is malformed; the loader adds the file and line."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_range(rng: Any) -> None:
    """A byte range is contiguous ``{addr, nbytes}`` or strided ``{addr, shape, stride, itemsize}``.

    ``stride`` is in elements, like ``Tensor.stride()``; ``addr`` is the byte address of
    element zero (storage base + storage_offset * itemsize), never ``data_ptr()`` of a base.
    """
    if not isinstance(rng, dict):
        raise EventInvalid("a range must be an object")
    if not _is_int(rng.get("addr")) or rng["addr"] < 0:
        raise EventInvalid("a range needs a non-negative integer 'addr'")
    if "nbytes" in rng:
        if not _is_int(rng["nbytes"]) or rng["nbytes"] < 0:
            raise EventInvalid("range 'nbytes' must be a non-negative integer")
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


def _check_field(name: str, kind: str, value: Any) -> None:
    if kind in (INT, NONNEG, POS):
        if not _is_int(value):
            raise EventInvalid(f"field '{name}' must be an integer")
        if kind == NONNEG and value < 0:
            raise EventInvalid(f"field '{name}' must be >= 0")
        if kind == POS and value <= 0:
            raise EventInvalid(f"field '{name}' must be > 0")
    elif kind == STR:
        if not isinstance(value, str):
            raise EventInvalid(f"field '{name}' must be a string")
    elif kind == BOOL:
        if not isinstance(value, bool):
            raise EventInvalid(f"field '{name}' must be true or false")
    elif kind == POOL:
        if not (isinstance(value, list) and len(value) == 2 and all(map(_is_int, value))):
            raise EventInvalid(f"field '{name}' must be a pair of integers")
    elif kind == INTS:
        if not (isinstance(value, list) and all(map(_is_int, value))):
            raise EventInvalid(f"field '{name}' must be a list of integers")
    elif kind == RANGES:
        if not isinstance(value, list):
            raise EventInvalid(f"field '{name}' must be a list of ranges")
        for rng in value:
            try:
                validate_range(rng)
            except EventInvalid as exc:
                raise EventInvalid(f"field '{name}': {exc}") from None
    elif kind == FRAMES:
        ok = isinstance(value, list) and all(
            isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and _is_int(f[1]) and isinstance(f[2], str)
            for f in value
        )
        if not ok:
            raise EventInvalid(f"field '{name}' must be a list of [file, line, function]")
    elif kind == NODES:
        ok = isinstance(value, list) and all(
            isinstance(n, dict) and _is_int(n.get("id")) and isinstance(n.get("type"), str) for n in value
        )
        if not ok:
            raise EventInvalid(f"field '{name}' must be a list of {{id, type}} objects")
    elif kind == EDGES:
        ok = isinstance(value, list) and all(
            isinstance(e, list) and len(e) in (2, 3) and _is_int(e[0]) and _is_int(e[1]) for e in value
        )
        if not ok:
            raise EventInvalid(f"field '{name}' must be a list of [from, to(, type)]")
    else:  # pragma: no cover - the table above is closed
        raise AssertionError(kind)


def validate_event(event: Any) -> None:
    """Raise EventInvalid if ``event`` is not a well-formed v1 event (unknown fields are allowed)."""
    if not isinstance(event, dict):
        raise EventInvalid("an event must be a JSON object")
    kind = event.get("ev")
    if not isinstance(kind, str):
        raise EventInvalid("missing event type 'ev'")
    spec = EVENT_FIELDS.get(kind)
    if spec is None:
        raise EventInvalid(f"unknown event type '{kind}'")
    if not _is_int(event.get("seq")) or event["seq"] < 0:
        raise EventInvalid(f"'{kind}' event needs a non-negative integer 'seq'")
    required, optional = spec
    for name, field_kind in required.items():
        if name not in event:
            raise EventInvalid(f"'{kind}' event is missing field '{name}'")
        _check_field(name, field_kind, event[name])
    for name, field_kind in optional.items():
        if name in event and event[name] is not None:
            _check_field(name, field_kind, event[name])


def validate_header(header: Any) -> None:
    """The first line: format name and version; everything else in it is descriptive."""
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
