"""Everything the recorder asks torch.cuda and the CUDA driver, behind one object.

Both sets of hooks and every part of the Recorder reach CUDA through a ``CudaRuntime``: the
current device and stream, the tensors to record, the caching allocator's history and live
blocks, the graph class whose capture is wrapped, the ``torch.cuda._gpu_trace`` registries,
and the driver's capture and graph queries (``graph_readback.Driver``). This one is the real
thing. A test passes another with the same attributes (tests/fake_cuda.py scripts a capture
on the CPU), so that the capture path of both sets of hooks is compared where there is no GPU.

The native hooks ask two of these in C++: the driver (they take ``driver.addresses``; with
None, the real runtime's, they look libcuda up themselves) and the current stream (with
``native_current_stream`` None, torch's, from c10).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from streamrace.record import graph_readback
from streamrace.record.kernel_params import NodeAccess, node_access


class CudaRuntime:
    """torch.cuda and libcuda, as the recorder uses them."""

    device_type = 1  # c10::DeviceType::CUDA: whose tensors the native hooks record
    native_current_stream: Callable[[int], int] | None = None  # None: the native hooks ask c10

    def __init__(self) -> None:
        self.driver = graph_readback.LIBCUDA
        self.graphs = graph_readback.GraphReadback(self.driver)
        # Graphs are read back where both the driver and cuda-bindings (kernel parameters) load.
        self.reads_graphs = graph_readback.AVAILABLE

    # -- devices, streams, tensors ---------------------------------------------------------
    @staticmethod
    def is_recorded_tensor(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_cuda

    @staticmethod
    def tensor_device(tensor: torch.Tensor) -> int:
        return tensor.device.index

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
    def record_history(enabled: bool) -> None:
        """The allocator's own history (CPU only): each block's size and stream."""
        if enabled:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        else:
            torch.cuda.memory._record_memory_history(enabled=None)

    @staticmethod
    def allocation_history() -> list[dict[str, Any]]:
        """The history's allocations in order, as {addr, size, stream}."""
        traces = torch.cuda.memory._snapshot()["device_traces"]
        return [e for dev in traces for e in dev if e["action"] == "alloc"]

    @staticmethod
    def live_blocks() -> dict[int, tuple[int, int]]:
        """The allocator's live blocks right now: address -> (requested size, owning stream)."""
        live = {}
        for segment in torch.cuda.memory.memory_snapshot() if torch.cuda.is_initialized() else []:
            for block in segment["blocks"]:
                if block["state"] == "active_allocated":
                    live[block["address"]] = (block.get("requested_size") or block["size"], segment["stream"])
        return live

    # -- graph nodes ----------------------------------------------------------------------
    @staticmethod
    def node_access(node: int, type_name: str) -> NodeAccess:
        """What a captured node touches, from its parameters (cuda-bindings)."""
        return node_access(node, type_name)
