// Generated from streamrace/trace/kinds.py by python -m streamrace.trace.generate: edit that.
#pragma once

// X(name) for every field name a trace event, byte range or graph node may carry, seq and ev first.
#define STREAMRACE_TRACE_FIELDS(X) \
    X(seq) \
    X(ev) \
    X(stream) \
    X(device) \
    X(name) \
    X(priority) \
    X(graph) \
    X(pool) \
    X(mode) \
    X(stack) \
    X(aborted) \
    X(addr) \
    X(size) \
    X(op) \
    X(reads) \
    X(writes) \
    X(nodes) \
    X(inferred) \
    X(index) \
    X(tensors) \
    X(host_reads) \
    X(host_writes) \
    X(host_blocking) \
    X(event) \
    X(id) \
    X(frames) \
    X(edges) \
    X(node) \
    X(host_ranges) \
    X(message) \
    X(where) \
    X(call) \
    X(first) \
    X(tensor) \
    X(ranges) \
    X(base) \
    X(nbytes) \
    X(shape) \
    X(stride) \
    X(itemsize) \
    X(type)

// X(kind) for every event kind, in the declaration's order.
#define STREAMRACE_EVENT_KINDS(X) \
    X(stream) \
    X(capture_begin) \
    X(capture_end) \
    X(alloc) \
    X(free) \
    X(record_stream) \
    X(op) \
    X(event_create) \
    X(event_delete) \
    X(event_record) \
    X(event_wait) \
    X(stream_sync) \
    X(event_sync) \
    X(device_sync) \
    X(stack) \
    X(graph) \
    X(kernel) \
    X(replay) \
    X(graph_reset) \
    X(graph_destroy) \
    X(recorder_error) \
    X(library_call) \
    X(view) \
    X(pool_alloc) \
    X(pool_free) \
    X(host_alloc) \
    X(host_free) \
    X(host_op)
