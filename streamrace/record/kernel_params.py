"""What a captured graph node touches, read from the node itself (cuda-bindings).

Kernels the dispatcher never sees (Triton, CuPy, custom CUDA extensions, library calls) are
found as graph nodes with no op. A kernel node gives no read/write sets, only its parameter
bytes: every 8-byte word of every parameter (struct-by-value parameters included) is a
candidate pointer, resolved later against the allocations live when the node was created.
Memset and memcpy nodes describe their bytes exactly.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamrace.record.graph_readback import _drv, _ok, _rt
from streamrace.record.hook_tables import MAX_EXTRA_PAIRS, MAX_KERNEL_PARAMS, MIN_POINTER


@dataclass
class NodeAccess:
    """The raw facts of one node: exact ranges where CUDA gives them, candidate pointers otherwise."""

    kind: str  # "kernel", "memset", "memcpy" or another node type (no access)
    name: str | None = None
    reads: list[dict[str, int]] = field(default_factory=list)
    writes: list[dict[str, int]] = field(default_factory=list)
    params: list[list[int]] = field(default_factory=list)  # per kernel parameter: words that may be pointers

    @property
    def words(self) -> list[int]:
        return sorted({w for words in self.params for w in words})


def _param_layout(params: Any) -> list[tuple[int, int]]:
    """(offset, size) of each kernel parameter; cuFuncGetParamCount is unreliable on 13.0 drivers."""
    layout: list[tuple[int, int]] = []
    func, kern = params.func, getattr(params, "kern", None)
    while len(layout) < MAX_KERNEL_PARAMS:
        index = len(layout)
        if int(func):
            result = _drv.cuFuncGetParamInfo(func, index)
        elif kern is not None and int(kern):
            result = _drv.cuKernelGetParamInfo(kern, index)
        else:
            return layout
        if int(result[0]) != 0:
            return layout
        layout.append((int(result[1]), int(result[2])))
    return layout


def _words(raw: bytes) -> Iterable[int]:
    for j in range(0, len(raw) - 7, 8):
        value = int.from_bytes(raw[j : j + 8], "little")
        if value >= MIN_POINTER:
            yield value


def _kernel(node: Any) -> NodeAccess:
    params = _ok(_drv.cuGraphKernelNodeGetParams(_drv.CUgraphNode(init_value=int(node))))
    name = None
    if int(params.func):
        raw_name = _ok(_drv.cuFuncGetName(params.func))
        name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
    access = NodeAccess("kernel", name)
    layout = _param_layout(params)
    if int(params.kernelParams):
        pointers = (ctypes.c_void_p * len(layout)).from_address(int(params.kernelParams))
        access.params = [
            list(_words(ctypes.string_at(pointer, size))) if pointer else []
            for pointer, (_offset, size) in zip(pointers, layout, strict=True)
        ]
    elif int(params.extra):
        packed = extra_buffer(int(params.extra))
        if packed is not None:
            access.params = [list(_words(packed[offset : offset + n])) for offset, n in layout]
    return access


def extra_buffer(address: int) -> bytes | None:
    """The parameter buffer a launch's ``extra`` array passes: (key, value) pairs in any order
    up to CU_LAUNCH_PARAM_END (0), the buffer under CU_LAUNCH_PARAM_BUFFER_POINTER (1) and a
    pointer to its size under CU_LAUNCH_PARAM_BUFFER_SIZE (2); None without both."""
    buffer = size_at = None
    for k in range(0, 2 * MAX_EXTRA_PAIRS, 2):
        key = ctypes.c_void_p.from_address(address + 8 * k).value
        if not key:
            break
        value = ctypes.c_void_p.from_address(address + 8 * (k + 1)).value
        if key == 1:
            buffer = value
        elif key == 2:
            size_at = value
    if not buffer or not size_at:
        return None
    return ctypes.string_at(buffer, ctypes.c_size_t.from_address(size_at).value)


def _memset(node: Any) -> NodeAccess:
    p = _ok(_rt.cudaGraphMemsetNodeGetParams(_rt.cudaGraphNode_t(init_value=int(node))))
    width = int(p.width) * int(p.elementSize)
    nbytes = int(p.pitch) * (int(p.height) - 1) + width if int(p.height) > 1 else width
    return NodeAccess("memset", writes=[{"addr": int(p.dst), "nbytes": nbytes}])


def _memcpy(node: Any) -> NodeAccess:
    p = _ok(_rt.cudaGraphMemcpyNodeGetParams(_rt.cudaGraphNode_t(init_value=int(node))))
    extent = p.extent
    nbytes = int(extent.width) * max(int(extent.height), 1) * max(int(extent.depth), 1)
    access = NodeAccess("memcpy")
    if int(p.srcPtr.ptr):
        access.reads.append({"addr": int(p.srcPtr.ptr), "nbytes": nbytes})
    if int(p.dstPtr.ptr):
        access.writes.append({"addr": int(p.dstPtr.ptr), "nbytes": nbytes})
    return access


def node_access(node: Any, type_name: str) -> NodeAccess:
    if type_name == "kernel":
        return _kernel(node)
    if type_name == "memset":
        return _memset(node)
    if type_name == "memcpy":
        return _memcpy(node)
    return NodeAccess(type_name)


class LiveBlocks:
    """Allocations with their lifetimes in seq order, to resolve a pointer at a point in time."""

    def __init__(self, blocks: Sequence[tuple[int, int, int, int | None]]) -> None:
        # (addr, size, alloc seq, free seq or None), sorted by address for bisect
        self._blocks = sorted(blocks)
        self._starts = [b[0] for b in self._blocks]
        self._max_size = max((b[1] for b in self._blocks), default=0)

    def resolve(self, pointer: int, seq: int) -> tuple[int, int] | None:
        """The block [addr, addr+size) live at ``seq`` that holds ``pointer`` (interior allowed)."""
        i = bisect.bisect_right(self._starts, pointer) - 1
        # Lifetimes of different sizes can share addresses: look back as far as the largest block.
        while i >= 0 and pointer - self._starts[i] < self._max_size:
            addr, size, born, died = self._blocks[i]
            if pointer < addr + size and born <= seq and (died is None or died > seq):
                return addr, size
            i -= 1
        return None

    def ranges(self, words: Iterable[int], seq: int) -> list[dict[str, int]]:
        """One range per distinct block a word points into: from the pointer to the block's end."""
        found: dict[int, dict[str, int]] = {}
        for word in words:
            block = self.resolve(word, seq)
            if block is None:
                continue
            addr, size = block
            start = min(word, found[addr]["addr"]) if addr in found else word
            found[addr] = {"addr": start, "nbytes": addr + size - start}
        return [found[a] for a in sorted(found)]
