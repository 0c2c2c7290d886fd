"""The memory captured ops wrote (a graph's static outputs and the buffers it fills), by
storage base address, while it lives: the one memory whose eager reads and views the trace
names by tensor (format 1.5: ``view`` events and an op's ``tensors``), so the static-output
check (analysis/static_outputs.py) can tell a value handed out after one replay from the
static output itself. Kept small on purpose: a set lookup per eager tensor read, and nothing
at all while no capture has written anything. The C++ twin is GraphMemory in
csrc/recorder/event_log.h."""

from __future__ import annotations

from typing import Any


def identity(t: Any) -> int:
    """A tensor's identity in the trace: the address of its TensorImpl (what the native hooks
    read with ``unsafeGetTensorImpl``), unique while the tensor lives."""
    return int(t._cdata)


class GraphMemory:
    __slots__ = ("bases",)

    def __init__(self) -> None:
        self.bases: set[int] = set()

    def captured_writes(self, tensors: list[Any]) -> None:
        """A captured op wrote these tensors: their storages are graph memory."""
        for t in tensors:
            base = t.untyped_storage().data_ptr()
            if base:
                self.bases.add(base)

    def freed(self, ptr: int) -> None:
        self.bases.discard(ptr)

    def holds(self, t: Any) -> bool:
        try:
            return t.untyped_storage().data_ptr() in self.bases
        except (RuntimeError, NotImplementedError):
            return False
