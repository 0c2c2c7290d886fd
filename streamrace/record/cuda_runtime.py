"""Everything the recorder asks torch.cuda and the CUDA driver, behind one object.

Both sets of hooks and every part of the Recorder reach CUDA through a ``CudaRuntime``: the
current device and stream, the tensors to record, the caching allocator's history and live
blocks, the graph class whose capture is wrapped, the ``torch.cuda._gpu_trace`` registries,
and the driver's capture and graph queries (``graph_readback.Driver``). This one is the real
thing. A test passes another with the same attributes (tests/fake_cuda.py scripts a capture
on the CPU), so that the capture path of both sets of hooks is compared where there is no GPU.

The native hooks ask two of these in C++: the driver (they take ``driver.addresses``; with
None, the real runtime's, they look libcuda up themselves) and the current stream (with
``native_current_stream`` and ``native_stream_cell`` None, torch's, from c10; a scripted
runtime gives a function, or a ``ctypes.c_int64`` it keeps current, read without the GIL as
c10's stream is).
"""

from __future__ import annotations

import ctypes
import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from streamrace.record import graph_readback
from streamrace.record.kernel_params import NodeAccess, node_access

# An allocation's facts: the size asked for, the stream owning the block, the private pool it
# came from (None: the default pools).
AllocationFact = tuple[int, int, tuple[int, int] | None]

# The allocator's history while recording: at most this many entries per device between two
# reads (the recorder reads and restarts it at every resolve); past it, the reads say so.
HISTORY_MAX_ENTRIES = 1 << 18
# What the history need not keep: only allocations are matched.
_HISTORY_SKIPS = ["free_requested", "free_completed", "segment_alloc", "segment_free", "snapshot"]


@functools.cache
def _history_options() -> dict[str, Any]:
    """Keyword arguments of ``_record_memory_history`` that this torch takes."""
    accepted = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    options: dict[str, Any] = {"context": None, "stacks": "python", "max_entries": HISTORY_MAX_ENTRIES}
    if "clear_history" in accepted:
        options["clear_history"] = True
    if "skip_actions" in accepted:
        options["skip_actions"] = _HISTORY_SKIPS
    return options


def _segments() -> list[dict[str, Any]]:
    if "include_traces" in inspect.signature(torch.cuda.memory.memory_snapshot).parameters:
        return torch.cuda.memory.memory_snapshot(include_traces=False)
    return torch.cuda.memory.memory_snapshot()


class CudaRuntime:
    """torch.cuda and libcuda, as the recorder uses them."""

    device_type = 1  # c10::DeviceType::CUDA: whose tensors the native hooks record
    native_current_stream: Callable[[int], int] | None = None  # None: the native hooks ask c10
    native_stream_cell: ctypes.c_int64 | None = None  # or read the current stream here
    interposes_gpu_trace = True  # torch's own GPU-trace calls reach the native hooks from C++

    def __init__(self) -> None:
        self.driver = graph_readback.LIBCUDA
        self.graphs = graph_readback.GraphReadback(self.driver)
        # Graphs are read back where both the driver and cuda-bindings (kernel parameters) load.
        self.reads_graphs = graph_readback.AVAILABLE

    @staticmethod
    def missing() -> str | None:
        """Why nothing can be recorded here, or None: a torch built without CUDA (or ROCm).
        Only the build is asked, not the driver: initializing CUDA before the program does
        would break the children a program forks."""
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return f"torch {torch.__version__} is built without CUDA"
        return None

    # -- devices, streams, tensors ---------------------------------------------------------
    @staticmethod
    def is_recorded_tensor(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_cuda

    @staticmethod
    def tensor_device(tensor: torch.Tensor) -> int:
        return tensor.device.index

    @staticmethod
    def is_host_tensor(value: Any) -> bool:
        """A tensor in host memory: pinned memory is among these (host_memory.py)."""
        return isinstance(value, torch.Tensor) and value.device.type == "cpu"

    @staticmethod
    def is_pinned(tensor: torch.Tensor) -> bool:
        """Whether a host tensor's memory is the host caching allocator's (pinned)."""
        return bool(tensor.is_pinned())

    @staticmethod
    def current_device() -> int:
        return torch.cuda.current_device()

    @staticmethod
    def current_stream(device: int) -> int:
        """The raw handle (cudaStream_t) of the device's current stream."""
        return torch._C._cuda_getCurrentRawStream(device)

    @staticmethod
    def raw_stream(device_type: int, device_index: int, stream_id: int) -> int:
        """A torch stream id as its raw handle, asked once per stream by the native hooks; the
        CPU's one stream is 0."""
        if device_type != 1:
            return 0
        return torch.cuda.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type).cuda_stream

    @staticmethod
    def stream_handle(stream: Any) -> int:
        """The raw handle of a torch stream object (``record_stream``'s argument)."""
        return torch.cuda.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
        ).cuda_stream

    # -- what the recording installs into -------------------------------------------------
    @staticmethod
    def gpu_trace() -> ModuleType:
        """``torch.cuda._gpu_trace``, with torch told to call it (one-way in torch)."""
        from torch.cuda import _gpu_trace

        torch._C._activate_gpu_trace()
        return _gpu_trace

    @property
    def graph_class(self) -> type:
        """The class whose capture_begin/capture_end the recorder wraps."""
        return torch.cuda.graphs.CUDAGraph

    # -- the caching allocator ------------------------------------------------------------
    @staticmethod
    def initialized() -> bool:
        return torch.cuda.is_initialized()

    @staticmethod
    def history_enabled() -> bool:
        """Whether the allocator's history is on already (the program records its own)."""
        query = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        return bool(query()) if query is not None and torch.cuda.is_initialized() else False

    @staticmethod
    def record_history(enabled: bool) -> None:
        """The allocator's own history (CPU only): each allocation's size, stream and pool,
        from empty, bounded (HISTORY_MAX_ENTRIES)."""
        if enabled:
            torch.cuda.memory._record_memory_history(enabled="all", **_history_options())
        else:
            torch.cuda.memory._record_memory_history(enabled=None)

    @staticmethod
    def take_history() -> tuple[list[dict[str, Any]], bool]:
        """The history's allocations since the last take, in order ({addr, size, stream,
        pool_id where torch gives it}), and whether none was lost (no device's history
        filled up); the history starts again from empty."""
        traces = torch.cuda.memory._snapshot()["device_traces"]
        torch.cuda.memory._record_memory_history(enabled="all", **_history_options())
        complete = all(len(device) < HISTORY_MAX_ENTRIES for device in traces)
        if "clear_history" not in _history_options():
            complete = False  # a torch that cannot restart it: entries would be read twice
        return [e for device in traces for e in device if e["action"] == "alloc"], complete

    @staticmethod
    def live_blocks() -> dict[int, AllocationFact]:
        """The allocator's live blocks right now: address -> (requested size, owning stream,
        private pool or None)."""
        live: dict[int, AllocationFact] = {}
        for segment in _segments() if torch.cuda.is_initialized() else []:
            pool = tuple(segment.get("segment_pool_id") or (0, 0))
            for block in segment["blocks"]:
                if block["state"] == "active_allocated":
                    size = block.get("requested_size") or block["size"]
                    live[block["address"]] = (size, segment["stream"], pool if any(pool) else None)
        return live

    @staticmethod
    def attach_allocator_tracker(native_hooks: Any, module: ModuleType) -> str:
        """The native hooks' allocator trace tracker on torch's caching allocator: "" when
        allocations now come with their facts, else why not."""
        del module  # the tracker is C++'s own
        return native_hooks.use_allocator_facts(False)

    # -- graph nodes ----------------------------------------------------------------------
    @staticmethod
    def node_access(node: int, type_name: str) -> NodeAccess:
        """What a captured node touches, from its parameters (cuda-bindings)."""
        return node_access(node, type_name)
