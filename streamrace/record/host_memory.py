"""Pinned host memory (trace format 1.5): the host caching allocator's blocks as the program's
ops meet them, the host bytes of every copy between them and the device, and the host's own
ops on them (docs/trace-format.md, docs/analysis.md §8.11).

Where pinned memory is seen, at a cost only where it can be:

* an op that touches a CUDA tensor (a copy, ``to``): its CPU tensors are asked ``is_pinned()``
  (the host allocator's lookup), once per storage; a pinned one's bytes are the op's
  ``host_reads`` / ``host_writes``. A copy between host and device without ``non_blocking``
  (and ``item``) returned only once done: ``host_blocking``.
* an op on CPU tensors alone: only while some pinned storage is known, and only the tensors
  whose storage is one of those (a dict lookup) count: its reads and writes of them are a
  ``host_op``. A factory asked for pinned memory (``pin_memory=True``, ``pin_memory()``) makes
  a block known.
* a pinned storage, first seen, is a ``host_alloc`` (with the current stream: a capturing one
  says it was allocated inside that capture); its death (a weakref finalizer on the storage,
  which torch keeps as one Python object for as long as the storage lives) is a ``host_free``:
  the moment the block goes back to the host allocator.

The Python hooks call this part at every op; the native hooks do the same in C++
(csrc/recorder/host_memory.h, op_hooks.h: CUDA is asked there, and the live pinned storages
are known there too) and call in here only for a pinned storage they meet first.

Not seen: writes through ``numpy()`` views and other memory no aten op touches (``from_numpy``
tensors are seen when an op uses them), and pinned memory no op met while recording.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from streamrace.record.hook_tables import HOST_COPY_OPS, HOST_WAIT_OPS, PIN_FACTORY_OPS
from streamrace.record.op_accesses import op_accesses
from streamrace.record.seams import RecordingSeam

HOST_ALLOC = "host_alloc"
HOST_FREE = "host_free"
HOST_OP = "host_op"

_HOST_WAITS = frozenset(HOST_WAIT_OPS)  # the host waited for the device work they read
_COPIES = frozenset(HOST_COPY_OPS)  # between host and device: done on return unless non_blocking
_PIN_FACTORIES = frozenset(PIN_FACTORY_OPS)


class HostMemory:
    """Turns pinned memory the ops meet into events; never fails the program."""

    def __init__(self, recorder: RecordingSeam) -> None:
        self._rec = recorder
        self._live: dict[int, int] = {}  # start of a live pinned storage seen -> its bytes
        self._finalizers: dict[int, weakref.finalize] = {}
        self._native: Any = None  # the native hooks, when they record: they keep the live starts too
        self.seen = 0  # pinned storages seen: the header's host_memory says whether any was

    # -- blocks --------------------------------------------------------------------------------
    def _known(self, t: Any) -> bool:
        try:
            return t.untyped_storage().data_ptr() in self._live
        except (RuntimeError, NotImplementedError):
            return False

    def _pinned(self, t: Any, known: bool = False) -> bool:
        """Whether a CPU tensor's memory is pinned; a storage seen first is a host_alloc.
        ``known``: the op made it pinned (a factory asked to), so CUDA is not asked."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return False
        start = storage.data_ptr()
        if start in self._live:
            return True
        if not start or not (known or self._native is not None or self._rec.runtime.is_pinned(t)):
            return False
        size = storage.nbytes()
        if size <= 0:
            return False
        rec = self._rec
        device = rec.runtime.current_device()
        stream = rec.current_stream(device)
        rec.log.emit(HOST_ALLOC, addr=start, size=size, stream=stream, device=device, stack=rec.log.stack())
        self._live[start] = size
        self._finalizers[start] = weakref.finalize(storage, self._freed, start)
        if self._native is not None:
            self._native.host_known(start, True)
        self.seen += 1
        return True

    def live_blocks(self) -> list[tuple[int, int]]:
        """(start, bytes) of each live pinned storage seen (a capture's end keeps them)."""
        return list(self._live.items())

    def see(self, t: Any) -> None:
        """A tensor the program pinned, announced by it (the fake CUDA of the tests): a
        host_alloc now, as both sets of hooks would make at its factory."""
        self.guarded(self._pinned, t, True)

    def native_part(self, native: Any) -> Callable[[Any, bool], bool]:
        """What the native hooks' C++ calls for a pinned storage it meets first (it asks CUDA
        itself, and knows the live ones: ``native.host_known``)."""
        self._native = native
        return self._native_pinned

    def _native_pinned(self, t: Any, known: bool) -> bool:
        return bool(self.guarded(self._pinned, t, known))

    def _freed(self, start: int) -> None:
        """The storage died: its block went back to the host allocator."""
        if self._live.pop(start, None) is None:
            return
        self._finalizers.pop(start, None)
        if self._native is not None:
            self._native.host_known(start, False)
        rec = self._rec
        try:
            rec.log.emit_detached(HOST_FREE, addr=start, stack=rec.log.stack())
        except Exception as exc:  # the user's program must go on
            rec.log.fail("pinned memory free", exc)

    def stop(self) -> None:
        """Recording ends: the finalizers go (the storages outlive the recording)."""
        for finalizer in self._finalizers.values():
            finalizer.detach()
        self._finalizers.clear()
        self._live.clear()

    # -- ops -----------------------------------------------------------------------------------
    def device_op_fields(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, capturing: bool
    ) -> dict[str, Any]:
        """The host fields of an op that touches a CUDA tensor: the pinned bytes it copies and
        whether the host waited for it. While any stream captures, only pinned storages seen
        already count: CUDA is not asked about a pointer in the middle of a capture."""
        runtime = self._rec.runtime
        is_host = runtime.is_host_tensor
        base = func._schema.name.split("::", 1)[-1]
        crossing = _any(args, kwargs, is_host) or _any((outputs,), {}, is_host)
        fields: dict[str, Any] = {}
        if crossing:
            pinned = self._known if capturing else self._pinned
            host_reads, host_writes = op_accesses(func, args, kwargs, outputs, lambda t: is_host(t) and pinned(t))
            if host_reads:
                fields["host_reads"] = host_reads
            if host_writes:
                fields["host_writes"] = host_writes
        if base in _HOST_WAITS or (crossing and base in _COPIES and not _non_blocking(func, args, kwargs)):
            fields["host_blocking"] = True
        return fields

    def cpu_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any, stack: int | None) -> None:
        """An op on CPU tensors alone: a host_op if it touches known pinned memory."""
        base = func._schema.name.split("::", 1)[-1]
        if base in _PIN_FACTORIES or kwargs.get("pin_memory"):
            is_host = self._rec.runtime.is_host_tensor
            for t in _tensors(outputs, is_host):
                self._pinned(t, known=True)
        if not self._live:
            return
        is_host = self._rec.runtime.is_host_tensor
        reads, writes = op_accesses(func, args, kwargs, outputs, lambda t: is_host(t) and self._known(t))
        if reads or writes:
            name = func._schema.name + (f".{func._overloadname}" if func._overloadname != "default" else "")
            self._rec.log.emit(HOST_OP, op=name, reads=reads, writes=writes, stack=stack)

    def guarded(self, hook: Callable[..., Any], *args: Any) -> Any:
        try:
            return hook(*args)
        except Exception as exc:  # the user's program must go on
            self._rec.log.fail("pinned memory", exc)
            return None


def _tensors(value: Any, is_tensor: Callable[[Any], bool]) -> list[Any]:
    found: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif is_tensor(item):
            found.append(item)
    return found


def _any(args: tuple[Any, ...], kwargs: dict[str, Any], is_tensor: Callable[[Any], bool]) -> bool:
    return bool(_tensors((args, kwargs), is_tensor))


def _non_blocking(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The op's ``non_blocking`` argument, by name or by its place in the schema."""
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    for i, argument in enumerate(func._schema.arguments):
        if argument.name == "non_blocking":
            return bool(args[i]) if i < len(args) and not argument.kwarg_only else False
    return False
