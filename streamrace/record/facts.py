"""Header facts that make a trace reproducible: versions, devices, allocator settings."""

from __future__ import annotations

import copy
import functools
import os
import sys
from typing import Any

import torch

from streamrace.record import graph_readback, installation


def process_facts(recorder: Any = None) -> dict[str, Any]:
    """Header facts that make a trace reproducible: versions, devices, allocator settings, and
    where the recording's allocation facts came from (``recorder``: default, the one running
    or that ran last)."""
    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "process": {
            "pid": os.getpid(),
            "rank": int(os.environ["RANK"]) if os.environ.get("RANK", "").isdigit() else None,
            "argv": sys.argv[:20],
            "cwd": os.getcwd(),  # where the trace's relative paths start (the report's source lines)
        },
        "allocator": {
            "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") in ("", "0"),
        },
        "graph_readback": graph_readback.AVAILABLE,
        # inductor's own cache directory, when the program chose one (the default is recognised by name)
        "generated_code": [os.environ["TORCHINDUCTOR_CACHE_DIR"]] if os.environ.get("TORCHINDUCTOR_CACHE_DIR") else [],
    }
    try:
        facts["allocator"]["backend"] = torch.cuda.get_allocator_backend()
    except Exception:  # not initialised or no CUDA
        facts["allocator"]["backend"] = None
    recorder = recorder if recorder is not None else installation.latest()
    if recorder is not None:
        # "allocator trace tracker", "allocator history", "live blocks", or None (no allocation)
        facts["allocator"]["facts"] = recorder.allocation_facts
    try:
        from cuda import bindings

        facts["cuda_bindings"] = bindings.__version__
    except Exception:
        facts["cuda_bindings"] = None
    facts.update(copy.deepcopy(_nvml_facts()))
    return facts


@functools.cache
def _nvml_facts() -> dict[str, Any]:
    """The driver and devices, asked of NVML once a process: they do not change while it runs,
    and every recording's header wants them (pytest --streamrace ends one recording a test)."""
    try:
        import pynvml
    except ImportError:
        return {"driver": None, "devices": []}
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver on this machine
        return {"driver": None, "devices": []}
    devices = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            device: dict[str, Any] = {"index": i}
            for key, query in (
                ("name", pynvml.nvmlDeviceGetName),
                ("uuid", pynvml.nvmlDeviceGetUUID),
                ("compute_capability", pynvml.nvmlDeviceGetCudaComputeCapability),
                ("memory_total", lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).total),
            ):
                try:
                    value = query(handle)
                    device[key] = list(value) if isinstance(value, tuple) else value
                except Exception:  # MIG/ECC-style queries may be unsupported
                    device[key] = None
            devices.append(device)
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return {"driver": driver, "devices": devices}
