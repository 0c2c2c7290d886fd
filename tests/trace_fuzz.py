"""Mutation fuzzing of traces: hostile inputs made from the committed ones, and the check that
``streamrace analyze`` answers each one honestly on both engines (tests/test_fuzz.py).

Every input gets one of these answers, from the C++ core and the Python engine alike:

* a report: exit 0 or 1 (or 5, nothing recorded, with its one line), strict JSON on stdout;
* a refusal: exit 2, stdout empty, one line ``streamrace: error: ...`` on stderr.

Anything else is a failure: a traceback, an internal error (exit 4), another exit code, a
signal (a segfault), a hang past the per-input timeout, a text report with a raw control
character, or the two engines answering differently (exit code, stderr line or JSON).

The analyses run in a worker process that calls ``streamrace.cli.main`` in-process for each
input, so that a segfault or a hang costs one input and a restart, not the test run.
``python tests/trace_fuzz.py --worker`` is that worker; the rest of the module makes inputs
(``mutate``) and judges answers (``judge``).
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "examples" / "traces"
CORES = ("cpp", "python")

# -- the seeds ------------------------------------------------------------------------------


def seed_traces() -> dict[str, list[str]]:
    """Every committed trace, and the hand-built programs of the execution view (replays, resets,
    freed graph inputs: tests/test_execution_view.py), the application pools and pinned host
    memory, as their lines of text (header first)."""
    seeds = {}
    for path in sorted(TRACES.iterdir()):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as text:
            seeds[path.name] = [line.rstrip("\n") for line in text if line.strip()]
    from test_execution_view import PROGRAMS  # the fuzzer's parent process only (its worker needs none)

    for name, build in sorted(PROGRAMS.items()):
        trace = build().trace()
        seeds[f"execution view: {name}"] = [_dumps(trace.header), *map(_dumps, trace.events)]
    from test_app_pools import POOL_PROGRAMS  # application pools (format 1.4)

    for name, made in sorted(POOL_PROGRAMS.items()):
        trace = made()
        seeds[f"application pool: {name}"] = [_dumps(trace.header), *map(_dumps, trace.events)]
    from test_host_memory import HOST_PROGRAMS  # pinned host memory (format 1.5)

    for name, made in sorted(HOST_PROGRAMS.items()):
        trace = made()
        seeds[f"pinned memory: {name}"] = [_dumps(trace.header), *map(_dumps, trace.events)]

    from test_static_outputs import STALE_PROGRAMS  # views and read identities (format 1.5)

    for name, made in sorted(STALE_PROGRAMS.items()):
        trace = made().trace()
        seeds[f"static outputs: {name}"] = [_dumps(trace.header), *map(_dumps, trace.events)]

    from test_graph_event_nodes import EVENT_NODE_PROGRAMS  # graphs' event nodes, polling kernels (1.6)

    for name, made in sorted(EVENT_NODE_PROGRAMS.items()):
        trace = made()
        seeds[f"event nodes: {name}"] = [_dumps(trace.header), *map(_dumps, trace.events)]
    return seeds


# -- values a hostile writer would pick -----------------------------------------------------
BOUNDARY_INTS = (
    0,
    -1,
    1,
    2,
    255,
    4096,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**48,
    2**50,
    2**53 + 1,
    2**61,
    2**62 - 8,
    2**62 - 1,
    2**62,
    2**63 - 8,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**62),
    -(2**63),
    -(2**63) - 1,
    10**30,
)
HOSTILE_STRINGS = (
    "",
    " ",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "line\nbreak",
    "\r\x08\x00nul",
    "\u202eevil.py",
    "\ud800",
    "\udfff\ud83d",
    "☃" * 300,
    "<img src=x onerror=alert(1)>",
    "[link](https://evil.example)",
    "../../../../etc/passwd",
    "/proc/self/environ",
    "/dev/zero",
    "model.py:12",
    "a" * 5000,
    "torch.cuda.default_stream()",
    "stream#3",
    "import os",
)
HOSTILE_LITERALS = ("NaN", "Infinity", "-Infinity", "1e400", "-0.0", "1.5", "1" + "0" * 4400, "-" + "9" * 5000)


def _deep(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


# -- walking a JSON value -------------------------------------------------------------------
Path_ = tuple[Any, ...]


def _paths(value: Any, prefix: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _set(root: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    target = root
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return root


class _Raw:
    """A value written as raw JSON text (NaN, a 5,000-digit integer, deep nesting)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _dumps(value: Any) -> str:
    """json.dumps, with ``_Raw`` values spliced in as their text."""
    raws: list[str] = []

    def default(obj: Any) -> Any:
        if isinstance(obj, _Raw):
            raws.append(obj.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(obj))

    text = json.dumps(value, default=default, separators=(",", ":"))
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{index}\x00"), raw, 1)
    return text


# -- the mutators ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Mutant:
    """One hostile input: its bytes and how it was made (for the failure report)."""

    seed: str
    mutator: str
    detail: str
    data: bytes


Lines = list[str]
Mutator = Callable[[random.Random, Lines], tuple[Lines, str]]


def _load(line: str) -> dict[str, Any] | None:
    """A line as a JSON object, or None when an earlier mutation made it something else."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _event_line(rng: random.Random, lines: Lines, want: Callable[[dict[str, Any]], bool] = lambda ev: True) -> int:
    """The index of a random event line (not the header) that ``want`` accepts, or 0 (the header)."""
    candidates = [i for i in range(1, len(lines)) if (obj := _load(lines[i])) is not None and want(obj)]
    return rng.choice(candidates) if candidates else 0


def _last_seq(lines: Lines) -> int:
    seqs = [obj.get("seq") for obj in map(_load, lines[1:]) if obj is not None]
    return max((s for s in seqs if isinstance(s, int) and not isinstance(s, bool)), default=0)


def _mutate_value(rng: random.Random, lines: Lines, make: Callable[[random.Random, Any], Any], leaves: bool) -> str:
    index = _event_line(rng, lines) if rng.random() < 0.9 else 0
    obj = _load(lines[index]) or {}
    paths = [p for p, v in _paths(obj) if p and (not leaves or not isinstance(v, (dict, list)))]
    if not paths:
        return "nothing to change"
    path = rng.choice(paths)
    old = _value_at(obj, path)
    new = make(rng, old)
    lines[index] = _dumps(_set(obj, path, new))
    return f"line {index + 1} {'/'.join(map(str, path))}: {_short(old)} -> {_short(new)}"


def _value_at(obj: Any, path: Path_) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _short(value: Any) -> str:
    text = value.text if isinstance(value, _Raw) else repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def int_boundary(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """An integer (any, or an address, size, stream, seq) set to a boundary value."""

    def make(rng: random.Random, old: Any) -> Any:
        if isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.3:
            return old + rng.choice((-1, 1, 2**62, 2**63, -(old * 2) - 1))
        return rng.choice(BOUNDARY_INTS)

    index = _event_line(rng, lines)
    obj = _load(lines[index]) or {}
    paths = [p for p, v in _paths(obj) if p and isinstance(v, int) and not isinstance(v, bool)]
    if not paths:
        return lines, "no integer"
    path = rng.choice(paths)
    old = _value_at(obj, path)
    new = make(rng, old)
    lines[index] = _dumps(_set(obj, path, new))
    return lines, f"line {index + 1} {'/'.join(map(str, path))}: {old} -> {new}"


def wrong_type(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A value replaced by one of another type (string, list, object, null, bool, float)."""
    choices: tuple[Any, ...] = ("x", [1, 2], {"a": [1]}, None, True, False, 1.5, [], {}, [[1, 2]], [None], "12")
    return lines, _mutate_value(rng, lines, lambda rng, old: copy.deepcopy(rng.choice(choices)), leaves=False)


def raw_literal(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """NaN, infinities, floats and integers of thousands of digits, as JSON text."""
    return lines, _mutate_value(rng, lines, lambda rng, old: _Raw(rng.choice(HOSTILE_LITERALS)), leaves=True)


def deep_nesting(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A value replaced by lists or objects nested hundreds to thousands deep."""
    depth = rng.choice((64, 500, 999, 1000, 1500, 5000, 100_000))
    kind = rng.choice(("list", "object"))
    return lines, _mutate_value(rng, lines, lambda rng, old: _Raw(_deep(depth, kind)), leaves=False)


def hostile_string(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A string (a path, a function, an op, a stream name, a message) made hostile."""

    def make(rng: random.Random, old: Any) -> Any:
        return rng.choice(HOSTILE_STRINGS) if rng.random() < 0.7 else f"{old}{rng.choice(HOSTILE_STRINGS)}"

    index = _event_line(rng, lines)
    obj = _load(lines[index]) or {}
    paths = [p for p, v in _paths(obj) if p and isinstance(v, str) and p[-1] not in ("ev", "format")]
    if not paths:
        return lines, "no string"
    path = rng.choice(paths)
    lines[index] = _dumps(_set(obj, path, make(rng, _value_at(obj, path))))
    return lines, f"line {index + 1} {'/'.join(map(str, path))}"


def field_change(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A field deleted, or one added that the event kind does not define (``stream`` on a
    device_sync), or an event's kind changed."""
    index = _event_line(rng, lines)
    obj = _load(lines[index]) or {}
    what = rng.choice(("delete", "add", "kind"))
    if what == "delete" and len(obj) > 1:
        key = rng.choice(sorted(obj))
        del obj[key]
        detail = f"line {index + 1}: deleted {key}"
    elif what == "kind" and index:
        kinds = ("op", "kernel", "alloc", "free", "stream", "graph", "stack", "capture_begin", "capture_end")
        obj["ev"] = rng.choice(kinds)
        detail = f"line {index + 1}: ev -> {obj['ev']}"
    else:
        key = rng.choice(("stream", "device", "stack", "graph", "nodes", "name", "seq", "addr", "extra"))
        obj[key] = copy.deepcopy(rng.choice(("s", [1], {"x": 1}, None, -1, 2**63, 0, 1, True)))
        detail = f"line {index + 1}: {key} = {_short(obj[key])}"
    lines[index] = _dumps(obj)
    return lines, detail


def line_edit(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A line deleted, duplicated, moved, or replaced by garbage."""
    if len(lines) < 2:
        return lines, "too short"
    what = rng.choice(("delete", "duplicate", "swap", "move", "garbage", "blank", "header twice"))
    i = rng.randrange(len(lines))
    j = rng.randrange(len(lines))
    if what == "delete":
        del lines[i]
    elif what == "duplicate":
        lines.insert(j, lines[i])
    elif what == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif what == "move":
        lines.insert(j, lines.pop(i))
    elif what == "garbage":
        lines[i] = rng.choice(("{", "}", "[]", "null", "42", '"s"', "{}", "\x00\x01", lines[i][: len(lines[i]) // 2]))
    elif what == "blank":
        lines.insert(i, " \t")
    else:
        lines.insert(i, lines[0])
    return lines, f"{what} line {i + 1} ({j + 1})"


def seq_shuffle(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """Sequence numbers renumbered out of order, repeated, or spread far apart."""
    how = rng.choice(("repeat", "reverse", "spread"))
    for k in range(1, len(lines)):
        obj = _load(lines[k])
        if obj is None:
            continue
        if how == "repeat" and rng.random() < 0.2:
            obj["seq"] = max(0, obj.get("seq", 0) - 1) if isinstance(obj.get("seq"), int) else 0
        elif how == "reverse":
            obj["seq"] = len(lines) - k
        elif how == "spread":
            obj["seq"] = k * (2**58)
        lines[k] = _dumps(obj)
    return lines, how


def ranges(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """An op or kernel's byte range (an op's index operand too) made extreme: near 2^62 and
    2^63, huge counts, negative and zero strides, shapes and strides of different lengths."""
    index = _event_line(rng, lines, lambda ev: ev.get("ev") in ("op", "kernel", "alloc"))
    if not index:
        return lines, "no range"
    obj = _load(lines[index]) or {}
    big = rng.choice((2**40, 2**50, 2**61, 2**62 - 4096, 2**62, 2**63 - 4096, 2**63 - 1))
    if obj["ev"] == "alloc":
        obj[rng.choice(("addr", "size"))] = big
        addr = obj["addr"] if isinstance(obj.get("addr"), int) else 0
        obj["size"] = rng.choice((obj.get("size"), big, 2**62, 2**63 - 1 - addr if 0 <= addr < 2**63 else 1))
        lines[index] = _dumps(obj)
        return lines, f"line {index + 1}: alloc at {_short(obj.get('addr'))} size {_short(obj['size'])}"
    # An op's index operands (1.2) are ranges too: the padded-scatter check reads them.
    key = rng.choice(("reads", "writes", "index") if obj["ev"] == "op" else ("reads", "writes"))
    shape = [rng.choice((1, 2, 3, 1 << 20, 1 << 31, 2**62)) for _ in range(rng.randint(1, 4))]
    stride = [rng.choice((0, 1, -1, 7, 1 << 20, -(1 << 40), 2**61)) for _ in shape]
    if rng.random() < 0.1:
        stride.append(1)
    made = rng.choice(
        (
            {"addr": big, "nbytes": rng.choice((1, 8, 4096, big))},
            {"addr": big, "shape": shape, "stride": stride, "itemsize": rng.choice((1, 4, 8, 2**32))},
            {"addr": rng.choice((0, 4096, big)), "shape": shape, "stride": stride, "itemsize": 4},
        )
    )
    obj[key] = [*obj.get(key, [])[:2], made]
    lines[index] = _dumps(obj)
    return lines, f"line {index + 1} {key}: {_short(made)}"


def _renumbered(lines: Lines) -> Lines:
    """The events' seqs made 0, 1, 2, ... in line order again (the graph nodes' ``op`` with
    them), after events were inserted."""
    objs = [_load(line) for line in lines[1:]]
    new_seq = {}
    for number, obj in enumerate(objs):
        if obj is not None and isinstance(obj.get("seq"), int) and obj["seq"] >= 0:  # -1: inserted
            new_seq.setdefault(obj["seq"], number)
    out = [lines[0]]
    for number, (line, obj) in enumerate(zip(lines[1:], objs, strict=True)):
        if obj is None or "seq" not in obj:
            out.append(line)
            continue
        obj["seq"] = number
        for node in obj.get("nodes", []) if obj.get("ev") == "graph" and isinstance(obj.get("nodes"), list) else []:
            if isinstance(node, dict) and isinstance(node.get("op"), int) and node["op"] in new_seq:
                node["op"] = new_seq[node["op"]]
        out.append(_dumps(obj))
    return out


def execution_view(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """Replays, resets and destructions put into the program: replays of its graphs after
    their captures (a loop of them, on any stream), and the hostile ones: of a graph during
    its own capture, of graph ids never captured (huge ones too), a graph reset or destroyed
    before its capture ends, or replayed after it is gone, a replay without a stream."""
    objs = [_load(line) for line in lines]
    begins: dict[Any, int] = {}
    ends: dict[Any, int] = {}
    for index, obj in enumerate(objs[1:], 1):
        graph = obj.get("graph") if obj is not None else None
        if obj is not None and obj.get("ev") in ("capture_begin", "capture_end") and isinstance(graph, int):
            (begins if obj["ev"] == "capture_begin" else ends).setdefault(graph, index)
    streams = sorted({obj["stream"] for obj in objs[1:] if obj and isinstance(obj.get("stream"), int)}) or [0]
    graphs = sorted(begins, key=repr) or [1]
    inserts: list[tuple[int, dict[str, Any]]] = []
    done = []
    for _ in range(rng.randint(1, 4)):
        graph = rng.choice(graphs)
        after = ends.get(graph, begins.get(graph, 0))
        within = (begins.get(graph, 0) + 1, max(begins.get(graph, 0) + 1, ends.get(graph, 1)))
        what = rng.choice(("loop", "replay", "replay", "own capture", "unknown", "reset", "destroy early", "no stream"))
        stream = rng.choice(streams)
        if what == "loop":
            at = rng.randint(after + 1, len(lines))
            inserts += [(at, {"ev": "replay", "graph": graph, "stream": stream}) for _ in range(rng.randint(2, 30))]
        elif what == "replay":
            event = {"ev": "replay", "graph": graph, "stream": stream, **({"device": 0} if rng.random() < 0.5 else {})}
            inserts.append((rng.randint(1, len(lines)), event))
        elif what == "own capture":
            inserts.append((rng.randint(*within), {"ev": "replay", "graph": graph, "stream": stream}))
        elif what == "unknown":
            huge = rng.choice((999, 2**31, 2**62, 2**63 - 1, 2**63, -1, 10**30, "g", None))
            inserts.append((rng.randint(1, len(lines)), {"ev": "replay", "graph": huge, "stream": stream}))
        elif what == "reset":
            kind = rng.choice(("graph_reset", "graph_destroy"))
            inserts.append((rng.randint(after + 1, len(lines)), {"ev": kind, "graph": graph}))
            inserts.append((rng.randint(after + 1, len(lines)) + 1, {"ev": "replay", "graph": graph, "stream": stream}))
        elif what == "destroy early":
            inserts.append((rng.randint(*within), {"ev": rng.choice(("graph_reset", "graph_destroy")), "graph": graph}))
        else:
            inserts.append((rng.randint(1, len(lines)), {"ev": "replay", "graph": graph}))
        done.append(what)
    out = list(lines)
    for at, event in sorted(inserts, key=lambda item: item[0], reverse=True):
        out.insert(min(at, len(out)), _dumps({"seq": -1, **event}))
    return _renumbered(out), ", ".join(done)


LIBRARY_CALLS = (
    "CUDAGraph.capture_begin",
    "CUDAGraph.replay",
    "CUDAGraph.register_generator_state",
    "cudagraph_trees.CUDAGraphNode._record",
    "CUDAGraph.reset",
    "",
    "x" * 300,
)


def library_calls(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """library_call events (1.3) a hostile writer would make: a range over the whole trace, one
    that starts after it ends, nested and overlapping ones, unknown and empty call names, and
    first values at the integer boundaries."""
    out = list(lines)
    done = []
    for _ in range(rng.randint(1, 5)):
        at = rng.randint(1, len(out))
        what = rng.choice(("whole", "backwards", "boundary", "nested", "name"))
        call = rng.choice(LIBRARY_CALLS)
        if what == "whole":
            first: Any = 0
            at = len(out)
        elif what == "backwards":
            first = at + rng.randint(1, 1000)
        elif what == "boundary":
            first = rng.choice(BOUNDARY_INTS)
        elif what == "nested":
            first = max(0, at - rng.randint(0, 20))
            out.insert(at, _dumps({"seq": -1, "ev": "library_call", "call": rng.choice(LIBRARY_CALLS), "first": first}))
        else:
            first = max(0, at - 5)
            call = rng.choice((None, 7, ["CUDAGraph.replay"], "CUDAGraph.replay\u0000"))
        out.insert(min(at, len(out)), _dumps({"seq": -1, "ev": "library_call", "call": call, "first": first}))
        done.append(what)
    return _renumbered(out), "library calls: " + ", ".join(done)


def graph_nodes(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """A read-back graph made hostile: self-loops and cycles, negative or huge node ids,
    duplicate ids, a node whose op is a list, edges to nodes that do not exist."""
    index = _event_line(rng, lines, lambda ev: ev.get("ev") == "graph")
    if not index:
        return lines, "no graph"
    obj = _load(lines[index]) or {}
    nodes, edges = obj.get("nodes", []), obj.get("edges", [])
    ids = [n["id"] for n in nodes if isinstance(n, dict) and "id" in n] or [0]
    what = rng.choice(("self loop", "cycle", "node id", "op list", "dangling", "duplicate", "many edges"))
    if what == "self loop":
        edges.append([ids[0], ids[0]])
    elif what == "cycle" and len(ids) > 1:
        edges += [[ids[0], ids[-1]], [ids[-1], ids[0]]]
    elif what == "node id" and nodes:
        rng.choice(nodes)["id"] = rng.choice((-1, -(2**63), 2**63, 2**62, 10**20))
    elif what == "op list" and nodes:
        rng.choice(nodes)["op"] = rng.choice(([1, 2], {"x": 1}, "11", -5, 2**70))
    elif what == "dangling":
        edges.append([rng.choice(ids), rng.choice((999_999, -3, 2**64))])
    elif what == "duplicate" and nodes:
        nodes.append(copy.deepcopy(nodes[0]))
    else:
        edges += [[a, b] for a in ids for b in ids if a != b]
    obj["nodes"], obj["edges"] = nodes, edges
    lines[index] = _dumps(obj)
    return lines, f"line {index + 1}: {what}"


def header_change(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """Header facts of the wrong type or shape (recorder_errors, allocator, graph_readback,
    process, allocations_dropped) or a wrong version."""
    obj = _load(lines[0]) or {}
    key = rng.choice(
        ("recorder_errors", "allocator", "graph_readback", "process", "allocations_dropped", "version", "kernel_nodes")
    )
    obj[key] = copy.deepcopy(
        rng.choice(
            (
                "x",
                7,
                -1,
                2**64,
                None,
                True,
                [1, {"a": 2}],
                {"backend": ["cudaMallocAsync"], "caching": "no"},
                {"cwd": ["/"]},
                [None],
                {},
                1.5,
            )
        )
    )
    lines[0] = _dumps(obj)
    return lines, f"header {key} = {_short(obj[key])}"


def many_streams(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """Thousands of streams (declared, or each with one op): clocks must not grow with the
    square of the stream count."""
    count = rng.choice((2_000, 5_000))
    seq = _last_seq(lines)
    extra = []
    for k in range(count):
        seq += 1
        stream = 10_000_000 + k
        if rng.random() < 0.5:
            extra.append(_dumps({"seq": seq, "ev": "stream", "stream": stream, "name": f"s{k}"}))
        else:
            rng_ = {"addr": 4096 * k, "nbytes": 64}
            extra.append(_dumps({"seq": seq, "ev": "op", "op": "k", "stream": stream, "reads": [rng_], "writes": []}))
    return [*lines, *extra], f"{count} streams"


def descending_allocations(rng: random.Random, lines: Lines) -> tuple[Lines, str]:
    """Thousands of live allocations at descending addresses: no quadratic path."""
    count = rng.choice((5_000, 20_000))
    seq = _last_seq(lines)
    stream = 778706304
    extra = []
    top = 2**40
    for k in range(count):
        seq += 1
        extra.append(_dumps({"seq": seq, "ev": "alloc", "addr": top - 512 * k, "size": 256, "stream": stream}))
    return [*lines, *extra], f"{count} allocations"


MUTATORS: dict[str, Mutator] = {
    "int-boundary": int_boundary,
    "wrong-type": wrong_type,
    "raw-literal": raw_literal,
    "deep-nesting": deep_nesting,
    "hostile-string": hostile_string,
    "field-change": field_change,
    "line-edit": line_edit,
    "seq-shuffle": seq_shuffle,
    "ranges": ranges,
    "graph-nodes": graph_nodes,
    "header-change": header_change,
    "execution-view": execution_view,
    "library-calls": library_calls,
}
# Inputs that are large by design: a few of each per run, not one in eleven.
HEAVY_MUTATORS: dict[str, Mutator] = {"many-streams": many_streams, "descending-allocations": descending_allocations}


def _encode(lines: Lines, rng: random.Random) -> tuple[bytes, str]:
    """The lines as a file: plain or gzip, sometimes truncated at a random byte."""
    text = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    how = ""
    if rng.random() < 0.08:
        cut = rng.randrange(len(text) + 1)
        text, how = text[:cut], f", truncated at byte {cut}"
    if rng.random() < 0.3:
        data = gzip.compress(text, mtime=0)
        if rng.random() < 0.1:
            cut = rng.randrange(len(data) + 1)
            data, how = data[:cut], how + f", gzip truncated at byte {cut}"
        return data, "gzip" + how
    return text, "text" + how


def mutate(seeds: dict[str, list[str]], rng: random.Random, heavy: bool = False) -> Mutant:
    """One hostile input: a seed trace with one to three mutations."""
    name = rng.choice(sorted(seeds))
    lines = list(seeds[name])
    table = HEAVY_MUTATORS if heavy else MUTATORS
    done = []
    for _ in range(1 if heavy else rng.choice((1, 1, 1, 2, 3))):
        mutator = rng.choice(sorted(table))
        lines, detail = table[mutator](rng, lines)
        done.append((mutator, detail))
    data, encoding = _encode(lines, rng)
    return Mutant(name, "+".join(m for m, _ in done), "; ".join(d for _, d in done) + f" [{encoding}]", data)


def mutants(count: int, seed: int, heavy: int = 0) -> list[Mutant]:
    """``count`` inputs, the same ones for the same seed; ``heavy`` of them large by design."""
    rng = random.Random(seed)
    seeds = seed_traces()
    made = [mutate(seeds, rng) for _ in range(count - heavy)]
    made += [mutate(seeds, rng, heavy=True) for _ in range(heavy)]
    return made


# -- judging an answer ----------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    code: int | None  # None: no answer (a hang or a crash of the process)
    out: str
    err: str
    how: str = ""  # "timeout", "signal 11", ... when there was no answer


def _no_constants(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def judge(answer: Answer, fmt: str) -> str | None:
    """None when ``answer`` is an honest one (module docstring), else what is wrong with it."""
    if answer.code is None:
        return answer.how
    if "Traceback" in answer.err:
        return "traceback: " + answer.err.strip().splitlines()[-1][:160]
    lines = answer.err.splitlines()
    if answer.code == 2:
        if answer.out or len(lines) != 1 or not lines[0].startswith("streamrace: error: "):
            return f"exit 2 without exactly one error line: {answer.err[:160]!r}"
        return None
    if answer.code == 4:
        return "internal error: " + answer.err.strip()[:200]
    if answer.code not in (0, 1, 5):
        return f"exit code {answer.code}: {answer.err.strip()[:160]}"
    if answer.code == 5 and not (len(lines) == 1 and lines[0].startswith("streamrace: nothing recorded")):
        return f"exit 5 without its one line: {answer.err[:160]!r}"
    if answer.code in (0, 1) and answer.err:
        return f"exit {answer.code} with stderr: {answer.err[:160]!r}"
    if fmt == "text":
        bad = [line for line in answer.out.splitlines() if not line.isprintable()]
        return f"unescaped character in the text report: {bad[0][:80]!r}" if bad else None
    try:
        doc = json.loads(answer.out, parse_constant=_no_constants)
    except ValueError as exc:
        return f"report is not strict JSON: {exc}"
    if fmt == "json" and (answer.code == 1) != bool(doc.get("findings")):
        return f"exit {answer.code} but {len(doc.get('findings', []))} findings"
    return None


# -- the worker ------------------------------------------------------------------------------
def _serve() -> None:
    """Answer requests (one JSON line each: path, core, format) with main()'s exit code and output."""
    from streamrace.cli import main

    for request_line in sys.stdin:
        request = json.loads(request_line)
        os.environ["STREAMRACE_CORE"] = request["core"]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["analyze", "--format", request["format"], request["path"]])
        reply = {"code": code, "out": out.getvalue(), "err": err.getvalue()}
        sys.__stdout__.write(json.dumps(reply, ensure_ascii=True) + "\n")
        sys.__stdout__.flush()


class Worker:
    """A ``--worker`` process, restarted after a crash or a hang."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("STREAMRACE_DEBUG", "FORCE_COLOR")}
        env["PYTHONFAULTHANDLER"] = ""
        return subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            env=env,
        )

    def ask(self, path: str, core: str, fmt: str) -> Answer:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"path": path, "core": core, "format": fmt}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.close()
            return Answer(None, "", "", f"hang: no answer in {self.timeout:.0f} s")
        reply = self.proc.stdout.readline()
        if not reply:
            code = self.proc.wait()
            self.proc = None
            return Answer(None, "", "", f"worker died: {'signal ' + str(-code) if code < 0 else 'exit ' + str(code)}")
        answer = json.loads(reply)
        return Answer(answer["code"], answer["out"], answer["err"])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@dataclass
class Failure:
    mutant: Mutant
    problem: str  # what was wrong, with the engine(s)
    path: str


def run(made: list[Mutant], directory: Path, timeout: float) -> tuple[list[Failure], int]:
    """Analyse every input on both engines (JSON) and, on the C++ core, as text or SARIF
    (alternately); returns the failures and the number of analyses."""
    workers = {core: Worker(timeout) for core in CORES}
    failures: list[Failure] = []
    analyses = 0
    try:
        for index, mutant in enumerate(made):
            path = directory / f"input-{index:05d}.jsonl"
            path.write_bytes(mutant.data)
            answers = {}
            for core in CORES:
                answers[core] = workers[core].ask(str(path), core, "json")
                analyses += 1
                problem = judge(answers[core], "json")
                if problem:
                    failures.append(Failure(mutant, f"{core}: {problem}", str(path)))
            cpp, python = answers["cpp"], answers["python"]
            if (
                cpp.code is not None
                and python.code is not None
                and (cpp.code, cpp.out, cpp.err)
                != (
                    python.code,
                    python.out,
                    python.err,
                )
            ):
                what = f"exit {cpp.code} vs {python.code}" if cpp.code != python.code else "different output"
                detail = (cpp.err or cpp.out)[:100] + " | " + (python.err or python.out)[:100]
                failures.append(Failure(mutant, f"engines disagree ({what}): {detail}", str(path)))
            fmt = "text" if index % 2 else "sarif"
            problem = judge(workers["cpp"].ask(str(path), "cpp", fmt), fmt)
            analyses += 1
            if problem:
                failures.append(Failure(mutant, f"cpp {fmt}: {problem}", str(path)))
    finally:
        for worker in workers.values():
            worker.close()
    return failures, analyses


def failure_classes(failures: list[Failure]) -> dict[str, list[Failure]]:
    """Failures grouped by what went wrong (the problem's first words, numbers dropped)."""
    import re

    classes: dict[str, list[Failure]] = {}
    for failure in failures:
        key = re.sub(r"\d+", "N", failure.problem)[:90]
        classes.setdefault(key, []).append(failure)
    return classes


def describe(failures: list[Failure]) -> str:
    lines = []
    for key, members in sorted(failure_classes(failures).items(), key=lambda kv: -len(kv[1])):
        first = members[0]
        lines.append(f"{len(members):4d} x {key}")
        lines.append(f"       e.g. {first.mutant.seed} {first.mutant.mutator}: {first.mutant.detail[:140]}")
        lines.append(f"       input kept at {first.path}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python tests/trace_fuzz.py [N [SEED]]``: a long run by hand, inputs kept in a temp dir."""
    import tempfile

    count = int(argv[0]) if argv else 2000
    seed = int(argv[1]) if len(argv) > 1 else int(time.time())
    directory = Path(tempfile.mkdtemp(prefix="streamrace-fuzz-"))
    started = time.time()
    failures, analyses = run(mutants(count, seed, heavy=max(2, count // 200)), directory, timeout=60)
    print(f"seed {seed}: {count} inputs, {analyses} analyses in {time.time() - started:.0f} s; inputs in {directory}")
    print(describe(failures) if failures else "no failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.path.insert(0, str(REPO))
        _serve()
    else:
        sys.exit(main(sys.argv[1:]))
