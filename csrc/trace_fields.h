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

// X(kind, field) for every field the declaration gives a kind.
#define STREAMRACE_KIND_FIELDS(X) \
    X(stream, stream) \
    X(stream, device) \
    X(stream, name) \
    X(stream, priority) \
    X(capture_begin, graph) \
    X(capture_begin, stream) \
    X(capture_begin, device) \
    X(capture_begin, pool) \
    X(capture_begin, mode) \
    X(capture_begin, stack) \
    X(capture_end, graph) \
    X(capture_end, stack) \
    X(capture_end, aborted) \
    X(alloc, addr) \
    X(alloc, size) \
    X(alloc, stream) \
    X(alloc, device) \
    X(alloc, pool) \
    X(alloc, stack) \
    X(free, addr) \
    X(free, device) \
    X(free, stream) \
    X(free, stack) \
    X(record_stream, addr) \
    X(record_stream, stream) \
    X(record_stream, device) \
    X(record_stream, stack) \
    X(op, op) \
    X(op, stream) \
    X(op, reads) \
    X(op, writes) \
    X(op, device) \
    X(op, stack) \
    X(op, nodes) \
    X(op, inferred) \
    X(op, index) \
    X(op, tensors) \
    X(op, host_reads) \
    X(op, host_writes) \
    X(op, host_blocking) \
    X(event_create, event) \
    X(event_delete, event) \
    X(event_record, event) \
    X(event_record, stream) \
    X(event_record, stack) \
    X(event_record, inferred) \
    X(event_wait, event) \
    X(event_wait, stream) \
    X(event_wait, stack) \
    X(stream_sync, stream) \
    X(event_sync, event) \
    X(device_sync, device) \
    X(stack, id) \
    X(stack, frames) \
    X(graph, graph) \
    X(graph, nodes) \
    X(graph, edges) \
    X(kernel, graph) \
    X(kernel, node) \
    X(kernel, name) \
    X(kernel, reads) \
    X(kernel, writes) \
    X(kernel, stream) \
    X(kernel, device) \
    X(kernel, inferred) \
    X(kernel, stack) \
    X(kernel, host_ranges) \
    X(replay, graph) \
    X(replay, stream) \
    X(replay, device) \
    X(replay, stack) \
    X(graph_reset, graph) \
    X(graph_reset, stack) \
    X(graph_destroy, graph) \
    X(recorder_error, message) \
    X(recorder_error, where) \
    X(library_call, call) \
    X(library_call, first) \
    X(view, tensor) \
    X(view, op) \
    X(view, ranges) \
    X(view, base) \
    X(view, stream) \
    X(view, device) \
    X(view, stack) \
    X(pool_alloc, addr) \
    X(pool_alloc, size) \
    X(pool_alloc, stream) \
    X(pool_alloc, device) \
    X(pool_alloc, name) \
    X(pool_alloc, stack) \
    X(pool_free, addr) \
    X(pool_free, stream) \
    X(pool_free, device) \
    X(pool_free, name) \
    X(pool_free, stack) \
    X(host_alloc, addr) \
    X(host_alloc, size) \
    X(host_alloc, stream) \
    X(host_alloc, device) \
    X(host_alloc, stack) \
    X(host_free, addr) \
    X(host_free, stack) \
    X(host_op, op) \
    X(host_op, reads) \
    X(host_op, writes) \
    X(host_op, stack)

// X(field) for the fields any event may carry besides its kind's own.
#define STREAMRACE_COMMON_FIELDS(X) \
    X(seq) \
    X(ev) \
    X(stream) \
    X(device) \
    X(stack) \
    X(graph)
