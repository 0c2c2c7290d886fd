"""The two ways the recorder sees ops, run on CPU tensors so that CI can compare them.

* ``python_ops``: a TorchDispatchMode with ``op_accesses``, what the Python hooks record;
* ``native_ops``: the native hooks (csrc/recorder/), tracking the CPU instead of CUDA.

Both return ``(op, reads, writes)`` for every op that touches bytes, in program order;
``INDEX_ENGINES`` the same two, as ``(op, index)``: the index operands (``index_operands``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from streamrace.record import native
from streamrace.record.hooks import HookOptions, NativeHooks, op_name
from streamrace.record.op_accesses import index_operands, op_accesses
from streamrace.record.stacks import UserCode

CPU = 0  # c10::DeviceType::CPU

Op = tuple[str, list[dict[str, Any]], list[dict[str, Any]]]


class _Accesses(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.index: list[tuple[str, list[dict[str, Any]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        reads, writes = op_accesses(func, args, kwargs, out, lambda t: isinstance(t, torch.Tensor))
        if reads or writes:
            self.ops.append((op_name(func), reads, writes))
            self.index.append(
                (op_name(func), index_operands(func, args, kwargs, lambda t: isinstance(t, torch.Tensor)))
            )
        return out


def python_ops(fn: Callable[[], object]) -> list[Op]:
    mode = _Accesses()
    with mode:
        fn()
    return mode.ops


def native_module() -> Any:
    """The built native hooks, or a skip saying why not (CI insists they build: .ci/run)."""
    try:
        return native.load()
    except native.NativeUnavailable as exc:
        pytest.skip(f"native hooks unavailable: {exc}")


def cpu_hooks(shown_path: Callable[[Any], str | None] | None = None):
    """Native hooks recording every op on CPU tensors (there is no capture on the CPU)."""
    options = HookOptions(True, 6, 48, shown_path or UserCode().shown_path)
    return NativeHooks(native_module(), options, device_type=CPU)


def native_events(fn: Callable[[], object], **options: Any) -> list[dict[str, Any]]:
    return native_drained(fn, lambda state: state.drain(), **options)


def native_drained(fn: Callable[[], object], drain: Callable[[Any], Any], **options: Any) -> Any:
    """``fn`` recorded by the native hooks on the CPU, its records as ``drain(state)`` takes them
    (``state.drain()``: dicts; ``state.drain_lines()``: as a flush to a trace file takes them)."""
    hooks = cpu_hooks(**options)
    hooks.start()
    try:
        fn()
    finally:
        hooks.stop()
        drained = drain(hooks.state)
        hooks.release_python()
    return drained


def native_ops(fn: Callable[[], object]) -> list[Op]:
    return [(e["op"], e["reads"], e["writes"]) for e in native_events(fn) if e["ev"] == "op"]


def python_index(fn: Callable[[], object]) -> list[tuple[str, list[dict[str, Any]]]]:
    mode = _Accesses()
    with mode:
        fn()
    return mode.index


def native_index(fn: Callable[[], object]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(e["op"], e.get("index", [])) for e in native_events(fn) if e["ev"] == "op"]


ENGINES = {"python": python_ops, "native": native_ops}
INDEX_ENGINES = {"python": python_index, "native": native_index}


def record_trace_calls(hooks: Any, fire: Callable[..., None]) -> list[dict[str, Any]]:
    """One scripted run of every GPU-trace hook through ``fire(hook, *args)`` (the native
    module's functions, or torch's trace points), around a capture whose event joins a
    second stream; the bookkeeping checked, the hooks' events returned."""
    state = hooks.state
    hooks.start()
    try:
        state.begin_capture(1, 0, 0)
        fire("on_alloc", 0x1000)
        fire("on_event_create", 7)
        fire("on_event_record", 7, 0)  # recorded on the capturing stream...
        fire("on_event_wait", 7, 0x77)  # ...so waiting on it joins stream 0x77 to the capture
        assert state.capture_streams(1) == [0, 0x77] and state.open_graphs() == [1]
        fire("on_free", 0x1000)
        fire("on_event_delete", 7)
        state.end_capture(1)
        assert state.capture_streams(1) == [] and state.open_graphs() == []
        fire("on_alloc", 0x2000)
        fire("on_stream_sync", 0x77)
        fire("on_event_sync", 7)
        fire("on_device_sync")
    finally:
        hooks.stop()
    events = state.drain()
    kinds = [e["ev"] for e in events if e["ev"] not in ("stack", "stream")]
    assert kinds == [
        "alloc",
        "event_create",
        "event_record",
        "event_wait",
        "free",
        "event_delete",
        "alloc",
        "stream_sync",
        "event_sync",
        "device_sync",
    ]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    allocs = [e for e in events if e["ev"] == "alloc"]
    assert allocs[0]["_graph"] == 1 and "_graph" not in allocs[1], "only the first was in the capture"
    assert [e["stream"] for e in events if e["ev"] == "stream"] == [0, 0x77], "each stream once"
    assert state.next_seq() == seqs[-1] + 1 == state.peek_seq() - 1
    return events
