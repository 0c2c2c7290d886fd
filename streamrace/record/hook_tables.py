"""The tables both sets of hooks keep, declared once.

The Python hooks read them here; the native hooks (csrc/recorder/) include ``hook_tables.h``,
which ``streamrace/record/native.py`` generates from this module into the build directory
when it builds them (``cpp_header``), so the two cannot drift apart. A table that changes
changes both, and the native build with it (the build directory is keyed by its text).
"""

from __future__ import annotations

from dataclasses import dataclass

# The events the hooks emit, in the order of the native hooks' ``Kind`` enum. The Recorder's
# own events (capture_begin, capture_end, graph) are not the hooks'; ``kernel`` events (nodes
# no recorded launch made, found by catching up) are the native hooks' and, with the Python
# hooks, the Recorder's; ``replay`` is made by the hooks' ``replay`` for the replays part
# (once a serving step: numbered and written without a Python event).
HOOK_EVENT_KINDS = (
    "stream",
    "stack",
    "alloc",
    "free",
    "op",
    "record_stream",
    "event_create",
    "event_delete",
    "event_record",
    "event_wait",
    "stream_sync",
    "event_sync",
    "device_sync",
    "recorder_error",
    "kernel",
    "host_op",
    "view",
    "replay",
)

# recorder_error events per recording, hooks and Recorder each: a broken recorder reports, and
# stops reporting.
MAX_ERRORS = 100

# PyTorch's own kernels are described by their schemas, and their by-value parameter structs
# (OffsetCalculator and friends) carry unused slots with stale stack bytes that look like live
# pointers: checking them only invents writes. Custom ops are where hidden pointers live.
TRUSTED_NAMESPACES = ("aten::", "prims::", "c10d::", "_c10d_functional::")

# CUgraphNodeType, by value: the names the trace uses (CUDA's own, lower case). A value past
# the table (a newer driver's node type) is named ``type<N>``.
NODE_TYPES = (
    "kernel",
    "memcpy",
    "memset",
    "host",
    "graph",
    "empty",
    "waitevent",
    "eventrecord",
    "extsemaphoresignal",
    "extsemaphorewait",
    "memalloc",
    "memfree",
    "batchmemop",
    "conditional",
)
UNLISTED_NODE_TYPE_PREFIX = "type"
# A kernel parameter's 8-byte words below this are sizes, flags and seeds, never device
# addresses (kernel_params.py, graph_reads.h).
MIN_POINTER = 1 << 16
# Bounds on what a kernel node's parameters are read through, so that a driver that never says
# "no more" cannot stall a capture's end: parameters (a launch passes at most 32 KiB of them),
# and (key, value) pairs of a launch's ``extra`` array.
MAX_KERNEL_PARAMS = 32768
MAX_EXTRA_PAIRS = 16
# Node types that read or write memory: a catch-up gives each such node a kernel event.
ACCESS_NODE_TYPES = ("kernel", "memset", "memcpy")

MAX_KERNEL_NAME = 200  # characters of a kernel's function name kept in the trace

CAPTURE_STATUS_ACTIVE = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE


def node_type_name(value: int) -> str:
    """The trace's name of a CUgraphNodeType value."""
    return NODE_TYPES[value] if 0 <= value < len(NODE_TYPES) else f"{UNLISTED_NODE_TYPE_PREFIX}{value}"


@dataclass(frozen=True)
class GpuTraceHook:
    """One ``torch.cuda._gpu_trace`` registry, the hook both sets attach to it, and torch's
    trace point that feeds it (the interposer's, trace_forwarding.py)."""

    registry: str  # the registry's name in torch.cuda._gpu_trace
    hook: str  # PythonHooks._<hook>; the native module's function of that name
    where: str  # a failure's recorder_error "where"
    direct: bool  # busy: the native hooks replace the registry's fire_callbacks
    trace_method: str  # c10's PyInterpreterVTable method torch calls
    arity: int  # the integers it passes after the device type


GPU_TRACE_HOOKS = (
    GpuTraceHook("MemoryAllocationCallbacks", "on_alloc", "memory allocation", True, "trace_gpu_memory_allocation", 1),
    GpuTraceHook(
        "MemoryDeallocationCallbacks", "on_free", "memory deallocation", True, "trace_gpu_memory_deallocation", 1
    ),
    GpuTraceHook("EventCreationCallbacks", "on_event_create", "event creation", False, "trace_gpu_event_creation", 1),
    GpuTraceHook("EventDeletionCallbacks", "on_event_delete", "event deletion", False, "trace_gpu_event_deletion", 1),
    GpuTraceHook("EventRecordCallbacks", "on_event_record", "event record", True, "trace_gpu_event_record", 2),
    GpuTraceHook("EventWaitCallbacks", "on_event_wait", "event wait", True, "trace_gpu_event_wait", 2),
    GpuTraceHook(
        "StreamSynchronizationCallbacks",
        "on_stream_sync",
        "stream synchronization",
        False,
        "trace_gpu_stream_synchronization",
        1,
    ),
    GpuTraceHook(
        "EventSynchronizationCallbacks",
        "on_event_sync",
        "event synchronization",
        False,
        "trace_gpu_event_synchronization",
        1,
    ),
    GpuTraceHook(
        "DeviceSynchronizationCallbacks",
        "on_device_sync",
        "device synchronization",
        False,
        "trace_gpu_device_synchronization",
        0,
    ),
)

# What an op's schema name says about its accesses (op_accesses.py, schema_plan.h), by the
# name without its namespace:
# ops with a write annotation that launch no kernel: record_stream only tells the allocator,
# set_ rebinds storage (metadata-only in-place views carry a tag instead);
NO_ACCESS_OPS = ("record_stream", "set_")
# factories (``new_*``, ``*_like``), whose tensor arguments are templates, never read;
FACTORY_PREFIX = "new_"
FACTORY_SUFFIX = "_like"
# ops that only allocate (no kernel touches the result), also with the factory prefix.
ALLOCATE_ONLY_OPS = ("empty", "empty_like", "empty_strided", "empty_permuted")
# The schema return types of a value handed to the host (``torch.equal``'s bool, ``item``'s
# Scalar). One of PyTorch's own ops that returns only such values, and writes nothing, reads its
# tensors on the device only to synchronize and copy the result back, which a capture forbids:
# in a capture that succeeded it launched nothing (``torch.equal(x, x)`` short-circuits), so
# a captured one touches nothing at replay.
HOST_RESULT_TYPES = ("bool", "int", "float", "complex", "Scalar", "number", "SymInt", "SymFloat", "SymBool")
# ops that write through an index: where they write is picked by the tensors passed as
# INDEX_ARGUMENTS (the trace's ``index`` ranges, docs/trace-format.md), in place or into a
# copy of ``self`` (``index_put``, ``scatter``); by the name without a trailing ``_``.
# Gathers (index_select, gather, embedding) only read through theirs.
INDEX_WRITE_OPS = (
    "index_put",
    "_index_put_impl",
    "index_copy",
    "index_add",
    "index_fill",
    "index_reduce",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "put",
)
INDEX_ARGUMENTS = ("index", "indices")

# The c10d collectives (torch.distributed's ops, whatever the backend), by full name: the
# arguments each one writes. Their schemas carry no write annotation (they return their
# outputs instead, so the rule for returns would miss ``alltoall_base_`` and the coalesced
# ones), so these replace the schema's rule: every listed argument is written, every other
# tensor argument read, no return written (each aliases an argument). ``allreduce_`` and
# ``broadcast_`` read and write in place, and the write covers the read. ``reduce_`` writes
# only on the root rank, which the schema cannot tell: counted as a write everywhere.
COLLECTIVE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "c10d::allreduce_": ("tensors",),
    "c10d::allreduce_coalesced_": ("tensors",),
    "c10d::broadcast_": ("tensors",),
    "c10d::reduce_": ("tensors",),
    "c10d::_allgather_base_": ("output_tensor",),
    "c10d::allgather_": ("output_tensors",),
    "c10d::allgather_coalesced_": ("output_lists",),
    "c10d::allgather_into_tensor_coalesced_": ("outputs",),
    "c10d::_reduce_scatter_base_": ("output_tensor",),
    "c10d::reduce_scatter_": ("output_tensors",),
    "c10d::reduce_scatter_tensor_coalesced_": ("outputs",),
    "c10d::alltoall_": ("output_tensors",),
    "c10d::alltoall_base_": ("output",),
    "c10d::gather_": ("output_tensors",),
    "c10d::scatter_": ("output_tensors",),
    "c10d::recv_": ("tensors",),
    "c10d::recv_any_source_": ("tensors",),
    "c10d::send": (),
}

# Pinned host memory (host_memory.py; op_hooks.h): ops after which the host has waited for the
# device work they read (a device op, by the name without its namespace); copies between host
# and device, done when they return unless ``non_blocking``; factories whose results are pinned.
HOST_WAIT_OPS = ("_local_scalar_dense", "nonzero")
HOST_COPY_OPS = ("copy_", "_to_copy", "_copy_from", "_copy_from_and_resize")
PIN_FACTORY_OPS = ("_pin_memory", "pin_memory")


def _strings(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _pairs(table: dict[str, tuple[str, ...]]) -> str:
    return ", ".join(f'{{"{op}", "{arg}"}}' for op, args in table.items() for arg in args)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def cpp_header() -> str:
    """``hook_tables.h``: these tables for the native hooks."""
    kinds = "\n".join(f"    {_camel(kind)}," for kind in HOOK_EVENT_KINDS)
    hooks = " \\\n".join(f'    X({h.hook}, "{h.where}", {"true" if h.direct else "false"})' for h in GPU_TRACE_HOOKS)
    return f"""\
// Generated from streamrace/record/hook_tables.py by streamrace/record/native.py: edit that.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streamrace::tables {{

// The records the hooks emit, in HOOK_EVENT_KINDS order.
enum class Kind : uint8_t {{
{kinds}
}};
inline constexpr const char* kKindNames[] = {{{_strings(HOOK_EVENT_KINDS)}}};

inline constexpr int kMaxErrors = {MAX_ERRORS};
inline constexpr const char* kTrustedNamespaces[] = {{{_strings(TRUSTED_NAMESPACES)}}};
inline constexpr const char* kNodeTypes[] = {{{_strings(NODE_TYPES)}}};
inline constexpr const char* kUnlistedNodeTypePrefix = "{UNLISTED_NODE_TYPE_PREFIX}";
inline constexpr const char* kAccessNodeTypes[] = {{{_strings(ACCESS_NODE_TYPES)}}};
inline constexpr uint64_t kMinPointer = {MIN_POINTER};
inline constexpr size_t kMaxKernelParams = {MAX_KERNEL_PARAMS};
inline constexpr size_t kMaxExtraPairs = {MAX_EXTRA_PAIRS};
inline constexpr size_t kMaxKernelName = {MAX_KERNEL_NAME};
inline constexpr int kCaptureStatusActive = {CAPTURE_STATUS_ACTIVE};

// X(hook, where, direct) for each torch.cuda._gpu_trace hook.
#define STREAMRACE_GPU_TRACE_HOOKS(X) \\
{hooks}

inline constexpr const char* kNoAccessOps[] = {{{_strings(NO_ACCESS_OPS)}}};
inline constexpr const char* kFactoryPrefix = "{FACTORY_PREFIX}";
inline constexpr const char* kFactorySuffix = "{FACTORY_SUFFIX}";
inline constexpr const char* kAllocateOnlyOps[] = {{{_strings(ALLOCATE_ONLY_OPS)}}};
inline constexpr const char* kHostResultTypes[] = {{{_strings(HOST_RESULT_TYPES)}}};
inline constexpr const char* kIndexWriteOps[] = {{{_strings(INDEX_WRITE_OPS)}}};
inline constexpr const char* kIndexArguments[] = {{{_strings(INDEX_ARGUMENTS)}}};

inline constexpr const char* kHostWaitOps[] = {{{_strings(HOST_WAIT_OPS)}}};
inline constexpr const char* kHostCopyOps[] = {{{_strings(HOST_COPY_OPS)}}};
inline constexpr const char* kPinFactoryOps[] = {{{_strings(PIN_FACTORY_OPS)}}};

// COLLECTIVE_OUTPUTS: each collective, and {{collective, written argument}} pairs.
inline constexpr const char* kCollectives[] = {{{_strings(tuple(COLLECTIVE_OUTPUTS))}}};
inline constexpr const char* kCollectiveOutputs[][2] = {{{_pairs(COLLECTIVE_OUTPUTS)}}};

}}  // namespace streamrace::tables
"""
