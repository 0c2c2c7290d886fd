// Operators, from the global RecordFunction callback: each op's read and write byte ranges
// from its schema, its stream and the user's stack, recorded where a TorchDispatchMode would
// see the op (composite ops are looked through while autograd is on, as the dispatcher
// decomposes them above the Python key; ops inside another op's kernel are its own). And the
// same bracket around launches Python sees (Triton). The C++ twin of PythonHooks' _OpMode,
// before_op, on_op, begin_launch and end_launch.
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "capture_tracker.h"
#include "event_log.h"
#include "hook_stacks.h"
#include "hook_timers.h"
#include "host_memory.h"
#include "schema_plan.h"
#include "streams.h"
#include "tensor_range.h"
#include "thread_state.h"
#include "unseen_launches.h"

namespace streamrace {

inline PlanCache& plans() {
    static PlanCache cache;
    return cache;
}

class OpHooks {
   public:
    OpHooks(bool eager_ops, EventLog& log, CaptureTracker& captures, StreamSource& streams, HookStacks& stacks,
            UnseenLaunches& unseen, HostMemory& host)
        : eager_ops_(eager_ops),
          device_type_(streams.device_type()),
          log_(log),
          captures_(captures),
          streams_(streams),
          stacks_(stacks),
          unseen_(unseen),
          host_(host) {}

    void op_start(const at::RecordFunction& fn) {
        STREAMRACE_TIMED(OpStart);
        ThreadState& t = tls;
        size_t index = t.frames.size();
        t.frames.emplace_back().uncaught = std::uncaught_exceptions();
        const SchemaPlan* plan = plans().lookup(fn);
        if (plan == nullptr) return;  // a named range, not an operator
        // Its own arguments (vmap's for-loop fallback calls each slice's op boxed, over the
        // batched originals).
        const c10::ArrayRef<const c10::IValue> inputs = own(fn.inputs(), plan->args.size());
        c10::DispatchKeySet keys;
        int32_t device = -1;
        bool wrapper = false, any_tensor = false;
        for (const c10::IValue& value : inputs) {
            each_tensor(value, [&](const at::Tensor& tensor) {
                if (!tensor.defined()) return;
                any_tensor = true;
                keys = keys | tensor.key_set();
                wrapper |= is_wrapper(tensor);
                if (device < 0 && tensor.device().type() == device_type_) device = index_of(tensor.device());
            });
        }
        // A subclass's own ops come through here again, on the tensors it holds.
        if (wrapper) return;
        // Inside a torch.func transform (vmap, grad, jvp) an op is dispatched first with the
        // transform's layer in place, then, from its DynamicLayerBackMode fallback, again
        // (boxed) below it, on the tensors its rule works on: that call is the one recorded,
        // as a TorchDispatchMode below the transforms sees it.
        if (in_a_transform_layer()) return;
        // An op dispatched with autograd on, inside a composite op, is part of its
        // decomposition (taken apart above the Python dispatch key), not of a kernel (which
        // runs below autograd): the parts are what is recorded, as a TorchDispatchMode would
        // see them.
        if (t.opaque_depth > 0 && autograd_on(keys, any_tensor)) decomposed(t, index);
        if (index > 0) called_by(t.frames[index - 1]);
        t.frames[index].opaque = true;
        t.frames[index].plan = plan;
        if (may_silence_) silence_kernel(t.frames[index], keys);
        if (t.opaque_depth++ > 0) return;
        if (!eager_ops_ && !captures_.any_open()) return;
        if (device < 0) device = streams_.current_device();
        int64_t stream = streams_.current_stream(device);
        int32_t stack = stacks_.python_stack();
        t.op_stack = stack;
        int32_t graph = 0;
        Frontier before;
        {
            STREAMRACE_TIMED(LaunchCheck);
            LaunchView view = captures_.launch_view(stream);
            graph = view.graph;
            if (graph != 0) before = unseen_.checked_before_launch(stream, view);
        }
        OpFrame& frame = t.frames[index];  // Python may have run above: nested ops came and went
        frame.recorded = true;
        frame.plan = plan;
        frame.device = device;
        frame.stack = stack;
        if (graph != 0) {
            frame.graph = graph;
            frame.stream = stream;
            frame.before = std::move(before);
        }
        if (plan->record_stream) {
            if (inputs.size() >= 2 && inputs[0].isTensor() && inputs[1].isStream()) {
                frame.written.push_back(inputs[0].toTensor());
                frame.recorded_on = inputs[1].toStream();
            }
            return;
        }
        if (!plan->touches) return;
        if (frame.reads.capacity() == 0) frame.reads.swap(t.spare_reads);
        GraphMemory& memory = log_.graph_memory();
        bool track_reads = graph == 0 && memory.any();  // eager reads of graph memory are named by tensor
        if (plan->view_of >= 0 && track_reads && static_cast<size_t>(plan->view_of) < inputs.size() &&
            inputs[plan->view_of].isTensor()) {
            frame.view_base = identity(inputs[plan->view_of].toTensor());
        }
        if (plan->any_return_written) {
            for (const c10::IValue& value : inputs) {
                each_tensor(value, [&](const at::Tensor& tensor) {
                    if (!tensor.defined() || is_wrapper(tensor) || !tensor.has_storage()) return;
                    const c10::Storage& storage = tensor.storage();
                    auto start = reinterpret_cast<int64_t>(storage.data());
                    if (start != 0) {
                        frame.input_storages.emplace_back(start, start + static_cast<int64_t>(storage.nbytes()));
                    }
                });
            }
        }
        bool host_on = eager_ops_ && host_.enabled();
        if (host_on) {
            frame.non_blocking = bool_argument(inputs, plan->non_blocking_arg);
            frame.pin_memory = bool_argument(inputs, plan->pin_memory_arg);
        }
        for (size_t i = 0; i < inputs.size() && i < plan->args.size(); ++i) {
            Role role = plan->args[i];
            if (role == Role::Skip) continue;
            each_tensor(inputs[i], [&](const at::Tensor& tensor) {
                if (!tensor.defined()) return;
                if (host_on && host_.is_host(tensor)) {  // its pinned bytes are known when the op ends
                    frame.host.emplace_back(tensor, role == Role::Write);
                    return;
                }
                if (tensor.device().type() != device_type_) return;
                if (role == Role::Write) {
                    frame.written.push_back(tensor);
                    return;
                }
                if (!tensor_range(tensor, frame.reads.emplace_back())) {  // described in place
                    frame.reads.pop_back();
                    return;
                }
                if (role == Role::Index) frame.index.push_back(frame.reads.back());
                if (track_reads) frame.read_ids.push_back(memory.holds(tensor) ? identity(tensor) : 0);
            });
        }
    }

    void op_end(const at::RecordFunction& fn) {
        STREAMRACE_TIMED(OpEnd);
        ThreadState& t = tls;
        if (t.frames.empty()) return;  // began before recording did
        OpFrame frame = std::move(t.frames.back());
        t.frames.pop_back();
        if (frame.opaque) --t.opaque_depth;
        if (!frame.recorded) return;
        t.op_stack = -1;
        // An op that raised ends here as its exception unwinds (RecordFunction's guard): it
        // is no access, as a TorchDispatchMode (the Python hooks) never sees it return. A
        // refused out= write (a library probing for a kernel) never happened. Where its
        // kernel ran in a capture and something above it raised (a saved-tensor hook), the
        // node is caught up as a kernel of its own, from its parameters. It raised if an
        // exception is unwinding that was not when it began, or if it has results and
        // RecordFunction got none: torch's CUDA builds throw through a C++ runtime whose
        // count of uncaught exceptions this module may not share (seen on an H100).
        if (std::uncaught_exceptions() > frame.uncaught ||
            (!frame.plan->returns.empty() && fn.outputs().empty())) {
            SpareRanges given_back(t.spare_reads, std::move(frame.reads));
            return;
        }
        if (frame.plan->record_stream) {
            record_stream(frame);
            return;
        }
        if (!frame.plan->touches) return;
        SpareRanges spare_reads(t.spare_reads, std::move(frame.reads)), spare_writes(t.spare_writes);
        std::vector<ByteRange>& reads = spare_reads.v;
        std::vector<ByteRange>& writes = spare_writes.v;
        std::vector<int64_t> read_ids = std::move(frame.read_ids);
        c10::SmallVector<int64_t, 4> written_bases;  // storages it writes: graph memory, if captured
        ByteRange range;
        for (const at::Tensor& tensor : frame.written) {
            if (tensor_range(tensor, writes.emplace_back())) {
                written_bases.push_back(reinterpret_cast<int64_t>(tensor.storage().data()));
            } else {
                writes.pop_back();
            }
        }
        frame.written.clear();
        const auto& returns = frame.plan->returns;
        bool returned = false, only_views = true;  // of its tensors returned fresh by the schema
        bool host_on = eager_ops_ && host_.enabled();
        c10::SmallVector<at::Tensor, 2> host_outputs;  // fresh host tensors it returned
        bool host_returned = false;
        if (frame.plan->any_return_written) {
            sort_spans(frame.input_storages);
            const auto outputs = own_outputs(fn, *frame.plan);
            for (size_t i = 0; i < outputs.size() && !returns.empty(); ++i) {
                if (!returns[std::min(i, returns.size() - 1)]) continue;
                each_tensor(outputs[i], [&](const at::Tensor& tensor) {
                    if (!tensor.defined()) return;
                    if (host_on && host_.is_host(tensor)) {
                        if (!inside_an_input(tensor, frame.input_storages)) host_outputs.push_back(tensor);
                        host_returned = true;
                        return;
                    }
                    if (tensor.device().type() != device_type_) return;
                    returned = true;
                    if (inside_an_input(tensor, frame.input_storages)) return;
                    only_views = false;
                    if (tensor_range(tensor, range = ByteRange()) &&
                        std::find(writes.begin(), writes.end(), range) == writes.end()) {
                        writes.push_back(range);
                        written_bases.push_back(reinterpret_cast<int64_t>(tensor.storage().data()));
                    }
                });
            }
        }
        // An op that only returns views of its inputs, writing nothing, launches nothing: its
        // schema's reads are not real.
        if (returned && only_views && writes.empty()) reads.clear();
        if (!writes.empty() && !reads.empty()) {
            // An in-place op reads and writes self: the write covers it for race checking.
            size_t kept = 0;
            for (size_t i = 0; i < reads.size(); ++i) {
                if (std::find(writes.begin(), writes.end(), reads[i]) != writes.end()) continue;
                if (!read_ids.empty()) read_ids[kept] = read_ids[i];
                reads[kept++] = std::move(reads[i]);
            }
            reads.resize(kept);
            if (!read_ids.empty()) read_ids.resize(kept);
        }
        if (reads.empty() && writes.empty()) {
            if (frame.view_base != 0) view(fn, frame);
            if (host_on) host_op(fn, frame, host_outputs, host_returned);
            return;
        }
        std::vector<ByteRange> host_reads, host_writes;
        bool host_blocking = false;
        if (host_on) {
            // CUDA is not asked about a pointer while any stream captures (a query from another
            // thread could break a global capture).
            bool capturing = captures_.any_open();
            bool crossing = !frame.host.empty() || host_returned;
            if (crossing) {
                host_ranges(frame, host_outputs, host_returned,
                            [&](const at::Tensor& t) { return host_.pinned(t, capturing); }, host_reads,
                            host_writes);
            }
            host_blocking = frame.plan->host_wait || (crossing && frame.plan->host_copy && !frame.non_blocking);
        }
        frame.host.clear();
        int64_t stream = streams_.current_stream(frame.device);
        Frontier after = frame.graph != 0 && stream == frame.stream ? unseen_.frontier(stream) : Frontier();
        Locked held = log_.lock();
        log_.see_stream(held, stream, frame.device);
        int32_t graph = captures_.graph_of(held, stream);
        if (graph == 0 && !eager_ops_) return;
        // A capture that succeeded holds no kernel of it (hook_tables.HOST_RESULT_TYPES).
        if (graph != 0 && frame.plan->host_result) return;
        Record r;
        r.kind = Kind::Op;
        r.text = op_text(held, *frame.plan);
        r.stream = stream;
        r.device = frame.device;
        r.stack = frame.stack;
        log_.add_ranges(held, r, reads, writes, frame.index);
        if (!host_reads.empty() || !host_writes.empty()) log_.add_host_ranges(held, r, host_reads, host_writes);
        r.host_blocking = host_blocking;
        if (graph != 0) {
            for (int64_t base : written_bases) log_.graph_memory().add(base);
        } else if (read_ids.size() == reads.size() &&
                   std::any_of(read_ids.begin(), read_ids.end(), [](int64_t id) { return id != 0; })) {
            log_.add_tensors(held, r, read_ids);
        }
        log_.append(held, r);
        if (frame.graph != 0 && frame.graph == graph && stream == frame.stream) {
            STREAMRACE_TIMED(LaunchClaim);
            if (!after.empty() && after != frame.before) {
                captures_.claim(held, graph, r.seq, after.back(), frame.plan->trusted);
                // An op that joins streams of its own ends with several: all of them are its.
                captures_.account(held, graph, after);
            }
            captures_.set_known_cached(held, stream, after);
        }
    }

    // -- launches Python sees (Triton): the same bracket as an op ---------------------------
    py::object begin_launch() {
        ThreadState& t = tls;
        int32_t stack = stacks_.stack();
        t.op_stack = stack;
        ++t.launches;
        int64_t stream = streams_.current_stream(streams_.current_device());
        LaunchView view = captures_.launch_view(stream);
        if (view.graph == 0) return py::make_tuple(stack, py::none(), 0);
        Frontier now = unseen_.checked_before_launch(stream, view);
        return py::make_tuple(stack, view.graph, now.empty() ? 0 : now.back());
    }

    void end_launch() {
        ThreadState& t = tls;
        if (t.launches > 0) --t.launches;
        t.op_stack = -1;
    }

    void set_may_silence(bool may) { may_silence_ = may; }

   private:
    static bool bool_argument(c10::ArrayRef<const c10::IValue> inputs, int index) {
        if (index < 0 || static_cast<size_t>(index) >= inputs.size()) return false;
        const c10::IValue& value = inputs[static_cast<size_t>(index)];
        return value.isBool() && value.toBool();
    }

    // The pinned bytes of an op's host tensors (HostMemory.device_op_fields and cpu_op, over
    // op_accesses' rules): read or written by their role, fresh returns written; a read the
    // write covers left out; only views returned, nothing written: nothing.
    template <typename Pinned>
    static void host_ranges(const OpFrame& frame, const c10::SmallVector<at::Tensor, 2>& outputs, bool returned,
                            Pinned&& pinned, std::vector<ByteRange>& reads, std::vector<ByteRange>& writes) {
        ByteRange range;
        for (const auto& [tensor, written] : frame.host) {
            if (!pinned(tensor) || !tensor_range(tensor, range = ByteRange())) continue;
            (written ? writes : reads).push_back(range);
        }
        bool only_views = true;
        for (const at::Tensor& tensor : outputs) {
            if (!pinned(tensor)) continue;
            only_views = false;
            if (tensor_range(tensor, range = ByteRange()) &&
                std::find(writes.begin(), writes.end(), range) == writes.end()) {
                writes.push_back(range);
            }
        }
        if (returned && only_views && outputs.empty() && writes.empty()) {
            reads.clear();
            return;
        }
        if (!writes.empty() && !reads.empty()) {
            reads.erase(std::remove_if(reads.begin(), reads.end(),
                                       [&](const ByteRange& r) {
                                           return std::find(writes.begin(), writes.end(), r) != writes.end();
                                       }),
                        reads.end());
        }
    }

    // An op on host tensors alone (HostMemory.cpu_op): a factory asked for pinned memory makes
    // its results known; then, while some pinned storage is known, its accesses to known ones
    // are a host_op.
    void host_op(const at::RecordFunction& fn, OpFrame& frame, const c10::SmallVector<at::Tensor, 2>& outputs,
                 bool returned) {
        if (frame.pin_memory || frame.plan->pin_factory) {
            for (const c10::IValue& value : own_outputs(fn, *frame.plan)) {
                each_tensor(value, [&](const at::Tensor& tensor) {
                    if (host_.is_host(tensor)) host_.pinned(tensor, false, true);
                });
            }
        }
        if (frame.host.empty() && outputs.empty()) return;
        if (!host_.any_known()) {
            frame.host.clear();
            return;
        }
        std::vector<ByteRange> reads, writes;
        host_ranges(frame, outputs, returned, [&](const at::Tensor& t) { return host_.known(t); }, reads, writes);
        frame.host.clear();
        if (reads.empty() && writes.empty()) return;
        Locked held = log_.lock();
        Record r;
        r.kind = Kind::HostOp;
        r.text = op_text(held, *frame.plan);
        r.stack = frame.stack;
        log_.add_ranges(held, r, {}, {}, {});
        log_.add_host_ranges(held, r, reads, writes);
        log_.append(held, r);
    }

    // The text id of an op's name in this log: looked up once per op and log, kept in its plan
    // (hashing the name for every op cost as much as the rest of writing its record).
    int32_t op_text(const Locked& held, const SchemaPlan& plan) {
        uint64_t kept = plan.text_id.load(std::memory_order_relaxed);
        if (static_cast<uint32_t>(kept >> 32) == log_.serial()) return static_cast<int32_t>(kept & 0xffffffffu);
        int32_t id = log_.text(held, plan.name);
        plan.text_id.store((static_cast<uint64_t>(log_.serial()) << 32) | static_cast<uint32_t>(id),
                           std::memory_order_relaxed);
        return id;
    }

    template <typename F>
    static void each_tensor(const c10::IValue& value, F&& f) {
        if (value.isTensor()) {
            f(value.toTensor());
        } else if (value.isList()) {
            for (const c10::IValue& item : value.toListRef()) each_tensor(item, f);
        } else if (value.isTuple()) {
            for (const c10::IValue& item : value.toTupleRef().elements()) each_tensor(item, f);
        }
    }

    // Whether a returned tensor's memory lies in an input's storage: a view the schema does not
    // declare, not memory the op allocated and wrote. The spans are sorted by start, each end
    // raised to the largest so far (storages may nest), so a foreach op's thousand outputs cost
    // a binary search each, not a scan of its thousand inputs.
    template <typename Spans>
    static void sort_spans(Spans& spans) {
        std::sort(spans.begin(), spans.end());
        for (size_t i = 1; i < spans.size(); ++i) spans[i].second = std::max(spans[i].second, spans[i - 1].second);
    }

    template <typename Spans>
    static bool inside_an_input(const at::Tensor& tensor, const Spans& sorted_spans) {
        if (sorted_spans.empty() || !tensor.has_storage()) return false;
        auto start = reinterpret_cast<int64_t>(tensor.storage().data());
        auto after = std::upper_bound(sorted_spans.begin(), sorted_spans.end(), start,
                                      [](int64_t value, const auto& span) { return value < span.first; });
        return after != sorted_spans.begin() && start < std::prev(after)->second;
    }

    // What an op's kernel calls is part of it: nothing in it is recorded. For PyTorch's own
    // C++ kernels of ops that are never taken apart, nothing in it can make an op recorded
    // either, and no Python runs in it. Those calls, most of a model's dispatches (addmm calls
    // expand, as_strided, resize...), each cost a RecordFunction with boxed inputs and outputs
    // and both hooks. So while such an op runs, RecordFunction is off on this thread (on_op_end
    // turns it back on), where its kernel was seen calling ops, and only where this
    // recording's callback is the only one a call would run: under the profiler every call is
    // made. (Composites are left alone: a kernel below them may lift the thread's autograd
    // exclusion, as functionalize does, and take one apart after all; custom ops' kernels,
    // and any op under a dispatch mode or a functorch transform, may run Python that starts a
    // profiler or forks a thread, which takes this thread's RecordFunction state along.)
    static void silence_kernel(OpFrame& frame, c10::DispatchKeySet tensor_keys) {
        const SchemaPlan* plan = frame.plan;
        if (!plan->silenceable || !plan->calls_ops.load(std::memory_order_relaxed)) return;
        // Python may run below it all the same: a TorchDispatchMode's __torch_dispatch__, a
        // functorch transform's, a tensor's.
        static const c10::DispatchKeySet python_below({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                                       c10::DispatchKey::PythonDispatcher, c10::DispatchKey::PreDispatch,
                                                       c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                                                       c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                                                       c10::DispatchKey::Functionalize});
        if (!((c10::impl::tls_local_dispatch_key_set().included_ | tensor_keys) & python_below).empty()) return;
        auto function = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
        if (!function.has_value() || function->callbacks_.size() != 1) return;
        if (at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value()) return;
        at::enableRecordFunction(false);
        frame.silenced = true;
    }

    // The op's own `count` arguments or results: a boxed call (Dispatcher::callBoxed) hands
    // RecordFunction its whole stack (a TorchScript function's other values, a fallback's
    // originals), with the op's own on top.
    template <typename Value>
    static c10::ArrayRef<Value> own(c10::ArrayRef<Value> stack, size_t count) {
        return stack.size() > count ? stack.slice(stack.size() - count) : stack;
    }

    static c10::ArrayRef<c10::IValue> own_outputs(const at::RecordFunction& fn, const SchemaPlan& plan) {
        return own(c10::ArrayRef<c10::IValue>(fn.outputs()), plan.returns.size());
    }

    // Whether a torch.func transform's layer is on this thread, to be popped by the op's
    // DynamicLayerBackMode fallback before the op runs below it.
    static bool in_a_transform_layer() {
        auto local = c10::impl::tls_local_dispatch_key_set();
        return local.included_.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode) &&
               !local.excluded_.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
    }

    // An op called while `parent` ran: its kernel calls ops.
    static void called_by(const OpFrame& parent) {
        if (parent.plan != nullptr && !parent.plan->calls_ops.load(std::memory_order_relaxed)) {
            parent.plan->calls_ops.store(true, std::memory_order_relaxed);
        }
    }

    // Whether autograd's keys take part in this dispatch: on for an op called from Python or
    // from a composite op's decomposition; off inside a kernel (below autograd) and in
    // inference mode. A factory has no tensor to carry the keys: the thread's state decides.
    static bool autograd_on(c10::DispatchKeySet tensor_keys, bool any_tensor) {
        auto local = c10::impl::tls_local_dispatch_key_set();
        if (!(local.excluded_ & c10::autograd_dispatch_keyset).empty()) return false;
        if (!any_tensor) return true;
        return !((tensor_keys | local.included_) & c10::autograd_dispatch_keyset).empty();
    }

    // The innermost opaque op before frame `index`, if it is a composite, turned out to be
    // taken apart: its parts are recorded instead of it.
    static void decomposed(ThreadState& t, size_t index) {
        for (size_t i = index; i-- > 0;) {
            OpFrame& outer = t.frames[i];
            if (!outer.opaque) continue;
            if (outer.plan == nullptr || !outer.plan->decomposable) return;
            outer.opaque = false;
            --t.opaque_depth;
            if (outer.recorded) {
                outer.recorded = false;
                outer.reads.clear();
                outer.index.clear();
                outer.written.clear();
                t.op_stack = -1;
            }
            return;
        }
    }

    // An eager view op whose results view graph memory: a view record per such result, naming
    // it and the tensor it views (PythonHooks._view).
    void view(const at::RecordFunction& fn, const OpFrame& frame) {
        GraphMemory& memory = log_.graph_memory();
        std::vector<std::pair<int64_t, ByteRange>> made;
        ByteRange range;
        for (const c10::IValue& value : own_outputs(fn, *frame.plan)) {
            each_tensor(value, [&](const at::Tensor& tensor) {
                if (!tensor.defined() || tensor.device().type() != device_type_ || !memory.holds(tensor)) return;
                if (tensor_range(tensor, range = ByteRange())) made.emplace_back(identity(tensor), range);
            });
        }
        if (made.empty()) return;
        int64_t stream = streams_.current_stream(frame.device);
        log_.see_stream(stream, frame.device);
        Locked held = log_.lock();
        if (captures_.graph_of(held, stream) != 0) return;  // made in a capture: the static output itself
        for (const auto& [id, view_range] : made) {
            Record r;
            r.kind = Kind::View;
            r.value = id;
            r.base = frame.view_base;
            r.text = op_text(held, *frame.plan);
            r.stream = stream;
            r.device = frame.device;
            r.stack = frame.stack;
            log_.add_ranges(held, r, {view_range}, {}, {});
            log_.append(held, r);
        }
    }

    // ``t.record_stream(s)`` launches nothing; it tells the allocator about a block's users.
    void record_stream(OpFrame& frame) {
        if (frame.written.empty() || !frame.recorded_on.has_value()) return;
        at::Tensor tensor = std::move(frame.written.front());
        frame.written.clear();
        if (tensor.device().type() != device_type_ || !tensor.has_storage()) return;
        int64_t addr = reinterpret_cast<int64_t>(tensor.storage().data());
        int32_t device = index_of(tensor.device());
        tensor.reset();
        int64_t stream = streams_.raw_handle(*frame.recorded_on);
        log_.see_stream(stream, device);
        Locked held = log_.lock();
        log_.append(held, simple(Kind::RecordStream, addr, stream, device, frame.stack));
    }

    const bool eager_ops_;
    // No other RecordFunction callback was there when recording began: a sampled observer's
    // presence cannot be asked without drawing its samples, so any at the start keeps every
    // call for the whole recording (set before the hooks are installed).
    bool may_silence_ = false;
    const c10::DeviceType device_type_;
    EventLog& log_;
    CaptureTracker& captures_;
    StreamSource& streams_;
    HookStacks& stacks_;
    UnseenLaunches& unseen_;
    HostMemory& host_;
};

}  // namespace streamrace
