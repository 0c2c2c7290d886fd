// streamrace's native hooks: the recorder's hot path in C++ (docs/recording.md, "The hooks").
//
// Built on first use against the torch the program runs (streamrace/record/native.py); the
// Python hooks in streamrace/record/hooks.py are the reference and the fallback, and the two
// record the same events. What is here:
//
// * a global RecordFunction callback for every operator: the op's read and write byte ranges
//   from its schema, its stream and the user's stack, recorded where a TorchDispatchMode would
//   see the op (composite ops are looked through while autograd is on, as the dispatcher
//   decomposes them above the Python key; ops inside another op's kernel are its own);
// * torch.cuda._gpu_trace callbacks (allocations, frees, CUDA events, synchronizations);
// * the bookkeeping they share with the Python side: one sequence counter, the streams seen,
//   which streams capture into which graph, the user stacks, the graph nodes seen so far.
//
// Events are kept as compact records and become trace dicts only when Python drains them,
// after the capture. Nothing here holds a tensor past the op that passed it in, allocates CUDA
// memory, launches work or synchronizes; a failure becomes a recorder_error record, never an
// exception in the user's program. Python is only entered with the GIL and never while
// mutex_ is held, since Python code (a garbage collection, say) can come back into a hook.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph_nodes.h"
#include "schema_plan.h"
#include "tensor_range.h"
#include "user_stacks.h"

namespace py = pybind11;

namespace streamrace {
namespace {

constexpr int kMaxErrors = 100;  // as Recorder.fail keeps

enum class Kind : uint8_t {
    Stream,
    Stack,
    Alloc,
    Free,
    Op,
    RecordStream,
    EventCreate,
    EventDelete,
    EventRecord,
    EventWait,
    StreamSync,
    EventSync,
    DeviceSync,
    Error,
};

struct Record {
    int64_t seq = 0;
    Kind kind = Kind::Error;
    int64_t value = 0;  // addr (alloc, free, record_stream), event (event_*), id (stack)
    int64_t stream = -1;
    int32_t device = -1;
    int32_t stack = -1;
    int32_t graph = 0;  // the capture an alloc happened in; 0: none
    int32_t text = -1;  // op name or error message, an index into texts_
    int32_t where = -1;
    uint32_t ranges = 0;                     // reads then writes, from ranges_[ranges]
    uint32_t reads = 0, writes = 0;
};

struct Claim {
    int64_t seq;
    int64_t node;  // the launch's stream frontier when it ended: its last node
    bool trusted;
};

struct Capture {
    int64_t handle = 0;  // the capture graph (cudaGraph_t), 0 where it cannot be read
    bool open = true;
    std::vector<Claim> claims;  // the recorded launches' nodes, in seq order
};

struct StreamKey {
    int64_t id;
    int32_t device;
    int32_t type;
    bool operator==(const StreamKey& o) const { return id == o.id && device == o.device && type == o.type; }
};
struct StreamKeyHash {
    size_t operator()(const StreamKey& k) const {
        return std::hash<int64_t>()(k.id) ^ (static_cast<size_t>(k.device) << 48) ^ static_cast<size_t>(k.type);
    }
};

// A capturing stream's frontier: the nodes its next launch will depend on. A launch on the
// stream makes its node the whole frontier, so comparing frontiers tells whether something
// launched, in constant time (counting the graph's nodes walks the whole graph).
// cuStreamGetCaptureInfo_v2 is the CUDA 12 signature, which CUDA 13 drivers still export.
using GetCaptureInfo = int (*)(void* stream, int* status, uint64_t* id, void** graph, void* const** deps,
                               size_t* count);
using Frontier = c10::SmallVector<int64_t, 4>;

GetCaptureInfo driver_capture_info() {
    static GetCaptureInfo fn = [] {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        return lib != nullptr ? reinterpret_cast<GetCaptureInfo>(dlsym(lib, "cuStreamGetCaptureInfo_v2")) : nullptr;
    }();
    return fn;
}

Frontier frontier(int64_t stream) {
    Frontier nodes;
    GetCaptureInfo fn = driver_capture_info();
    if (fn == nullptr) return nodes;
    int status = 0;
    uint64_t id = 0;
    void* graph = nullptr;
    void* const* deps = nullptr;
    size_t count = 0;
    if (fn(reinterpret_cast<void*>(stream), &status, &id, &graph, &deps, &count) != 0 || status != 1) return nodes;
    for (size_t i = 0; i < count; ++i) nodes.push_back(reinterpret_cast<int64_t>(deps[i]));
    return nodes;
}

bool subset(const Frontier& a, const Frontier& b) {
    return std::all_of(a.begin(), a.end(), [&](int64_t n) { return std::find(b.begin(), b.end(), n) != b.end(); });
}

// One op in flight on this thread, from its RecordFunction's start to its end.
struct OpFrame {
    bool opaque = false;    // its kernels' own ops are part of it
    bool recorded = false;  // the outermost op, while something is being recorded
    const SchemaPlan* plan = nullptr;
    int32_t device = 0;
    int32_t stack = -1;
    int32_t graph = 0;  // the capture of its stream when it began (0: none, or not readable)
    int64_t stream = 0;
    Frontier before;  // the stream's frontier when it began
    // What it reads is described when it begins; what it writes, when it ends (an out= tensor
    // may be resized by the op), so written tensors are held while it runs, as its caller
    // holds them anyway.
    std::vector<ByteRange> reads;
    c10::SmallVector<at::Tensor, 4> written;
    std::optional<c10::Stream> recorded_on;  // record_stream's stream argument
};

struct ThreadState {
    std::vector<OpFrame> frames;
    int opaque_depth = 0;
    int launches = 0;         // Python-side launches in flight (Triton)
    int32_t op_stack = -1;    // the stack of the op or launch in flight, shared by its allocations
    int64_t last_stream = 0;  // the stream of the previous launch, while no event hook came between
};

thread_local ThreadState tls;

PlanCache& plans() {
    static PlanCache cache;
    return cache;
}

std::string python_error_text(py::error_already_set& e) {
    std::string type = "Error";
    try {
        type = py::str(e.type().attr("__name__"));
    } catch (...) {
    }
    std::string message;
    try {
        message = py::str(e.value());
    } catch (...) {
    }
    return type + ": " + message;
}

class State {
   public:
    State(bool eager_ops, int device_type, int stack_depth, int max_walk, py::object shown_path, py::object raw_stream,
          py::object catch_up)
        : eager_ops_(eager_ops),
          device_type_(static_cast<c10::DeviceType>(device_type)),
          stacks_(stack_depth, max_walk, shown_path.ptr()),
          raw_stream_(std::move(raw_stream)),
          catch_up_(std::move(catch_up)) {}

    // -- shared bookkeeping ------------------------------------------------------------------
    int64_t next_seq() {
        std::lock_guard<std::mutex> lock(mutex_);
        return seq_++;
    }
    int64_t peek_seq() {
        std::lock_guard<std::mutex> lock(mutex_);
        return seq_;
    }

    void see_stream(int64_t stream, int32_t device) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (streams_.insert(stream).second) append(simple(Kind::Stream, 0, stream, device));
    }

    // The user stack here (GIL held), its definition recorded first if it is new.
    int32_t stack() {
        NewStack fresh;
        int id = stacks_.capture(fresh);
        if (fresh.id >= 0) {
            std::lock_guard<std::mutex> lock(mutex_);
            Record r;
            r.kind = Kind::Stack;
            r.value = fresh.id;
            append(r);
            stack_frames_.emplace(fresh.id, std::move(fresh.frames));
        }
        return id;
    }

    void begin_capture(int32_t graph, int64_t stream, int64_t handle) {
        Frontier now = handle != 0 ? frontier(stream) : Frontier();
        std::lock_guard<std::mutex> lock(mutex_);
        captures_[graph] = Capture{handle, true, {}};
        capturing_[stream] = graph;
        if (handle != 0) known_[stream] = now;
    }

    void end_capture(int32_t graph) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = captures_.find(graph);
        if (it != captures_.end()) it->second.open = false;
        for (auto s = capturing_.begin(); s != capturing_.end();) {
            if (s->second == graph) {
                known_.erase(s->first);
                s = capturing_.erase(s);
            } else {
                ++s;
            }
        }
    }

    std::vector<int64_t> capture_streams(int32_t graph) {
        std::lock_guard<std::mutex> lock(mutex_);
        return streams_of(graph);
    }

    std::vector<int32_t> open_graphs() {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<int32_t> graphs;
        for (auto& [graph, capture] : captures_) {
            if (capture.open) graphs.push_back(graph);
        }
        std::sort(graphs.begin(), graphs.end());
        return graphs;
    }

    std::vector<std::tuple<int64_t, int64_t, bool>> claims(int32_t graph) {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<std::tuple<int64_t, int64_t, bool>> out;
        auto it = captures_.find(graph);
        if (it != captures_.end()) {
            for (const Claim& c : it->second.claims) out.emplace_back(c.seq, c.node, c.trusted);
        }
        return out;
    }

    int64_t last_claim(int32_t graph) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = captures_.find(graph);
        return it == captures_.end() || it->second.claims.empty() ? 0 : it->second.claims.back().node;
    }

    void claim(int32_t graph, int64_t seq, int64_t node, bool trusted) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = captures_.find(graph);
        if (it != captures_.end()) it->second.claims.push_back(Claim{seq, node, trusted});
    }

    // After catching up: what every stream of the capture has launched is accounted for.
    void refresh_frontiers(int32_t graph) {
        std::vector<int64_t> streams = capture_streams(graph);
        std::vector<Frontier> now;
        for (int64_t stream : streams) now.push_back(frontier(stream));
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t i = 0; i < streams.size(); ++i) {
            if (capturing_.count(streams[i]) != 0) known_[streams[i]] = now[i];
        }
    }

    void fail(const char* where, const std::string& message) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (errors_ >= kMaxErrors) return;
        ++errors_;
        Record r;
        r.kind = Kind::Error;
        r.text = text(message);
        r.where = text(where);
        append(r);
    }

    // -- operators ---------------------------------------------------------------------------
    void op_start(const at::RecordFunction& fn) {
        ThreadState& t = tls;
        size_t index = t.frames.size();
        t.frames.emplace_back();
        const SchemaPlan* plan = plans().lookup(fn);
        if (plan == nullptr) return;  // a named range, not an operator
        auto inputs = fn.inputs();
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
        // An op dispatched with autograd on, inside a composite op, is part of its
        // decomposition (taken apart above the Python dispatch key), not of a kernel (which
        // runs below autograd): the parts are what is recorded, as a TorchDispatchMode would
        // see them.
        if (t.opaque_depth > 0 && autograd_on(keys, any_tensor)) decomposed(t, index);
        t.frames[index].opaque = true;
        t.frames[index].plan = plan;
        if (t.opaque_depth++ > 0) return;
        if (!eager_ops_ && !any_open_.load(std::memory_order_relaxed)) return;
        if (device < 0) device = current_device();
        int64_t stream = current_stream(device);
        int32_t stack = python_stack();
        t.op_stack = stack;
        int32_t graph = readable_graph(stream);
        Frontier before = graph != 0 ? checked_before_launch(graph, stream) : Frontier();
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
        ByteRange range;
        for (size_t i = 0; i < inputs.size() && i < plan->args.size(); ++i) {
            Role role = plan->args[i];
            if (role == Role::Skip) continue;
            each_tensor(inputs[i], [&](const at::Tensor& tensor) {
                if (!tensor.defined() || tensor.device().type() != device_type_) return;
                if (role == Role::Write) {
                    frame.written.push_back(tensor);
                } else if (tensor_range(tensor, range = ByteRange())) {
                    frame.reads.push_back(range);
                }
            });
        }
    }

    void op_end(const at::RecordFunction& fn) {
        ThreadState& t = tls;
        if (t.frames.empty()) return;  // began before recording did
        OpFrame frame = std::move(t.frames.back());
        t.frames.pop_back();
        if (frame.opaque) --t.opaque_depth;
        if (!frame.recorded) return;
        t.op_stack = -1;
        if (frame.plan->record_stream) {
            record_stream(frame);
            return;
        }
        if (!frame.plan->touches) return;
        std::vector<ByteRange> reads = std::move(frame.reads), writes;
        ByteRange range;
        for (const at::Tensor& tensor : frame.written) {
            if (tensor_range(tensor, range = ByteRange())) writes.push_back(range);
        }
        frame.written.clear();
        const auto& returns = frame.plan->returns;
        if (frame.plan->any_return_written) {
            const auto& outputs = fn.outputs();
            for (size_t i = 0; i < outputs.size() && !returns.empty(); ++i) {
                if (!returns[std::min(i, returns.size() - 1)]) continue;
                each_tensor(outputs[i], [&](const at::Tensor& tensor) {
                    if (!tensor.defined() || tensor.device().type() != device_type_) return;
                    if (tensor_range(tensor, range = ByteRange()) && std::find(writes.begin(), writes.end(), range) == writes.end()) {
                        writes.push_back(range);
                    }
                });
            }
        }
        if (!writes.empty() && !reads.empty()) {
            // An in-place op reads and writes self: the write covers it for race checking.
            reads.erase(std::remove_if(reads.begin(), reads.end(),
                                       [&](const ByteRange& r) {
                                           return std::find(writes.begin(), writes.end(), r) != writes.end();
                                       }),
                        reads.end());
        }
        if (reads.empty() && writes.empty()) return;
        int64_t stream = current_stream(frame.device);
        see_stream(stream, frame.device);
        Frontier after = frame.graph != 0 && stream == frame.stream ? frontier(stream) : Frontier();
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = capturing_.find(stream);
        int32_t graph = it != capturing_.end() ? it->second : 0;
        if (graph == 0 && !eager_ops_) return;
        Record r;
        r.kind = Kind::Op;
        r.text = text(frame.plan->name);
        r.stream = stream;
        r.device = frame.device;
        r.stack = frame.stack;
        r.ranges = static_cast<uint32_t>(ranges_.size());
        r.reads = static_cast<uint32_t>(reads.size());
        r.writes = static_cast<uint32_t>(writes.size());
        ranges_.insert(ranges_.end(), reads.begin(), reads.end());
        ranges_.insert(ranges_.end(), writes.begin(), writes.end());
        append(r);
        if (frame.graph != 0 && frame.graph == graph && stream == frame.stream) {
            if (!after.empty() && after != frame.before) {
                captures_[graph].claims.push_back(Claim{r.seq, after.back(), frame.plan->trusted});
            }
            known_[stream] = after;
        }
    }

    // -- launches Python sees (Triton): the same bracket as an op ---------------------------
    py::object begin_launch() {
        ThreadState& t = tls;
        int32_t stack = this->stack();
        t.op_stack = stack;
        ++t.launches;
        int64_t stream = current_stream(current_device());
        int32_t graph = readable_graph(stream);
        if (graph == 0) return py::make_tuple(stack, py::none(), 0);
        Frontier now = checked_before_launch(graph, stream);
        return py::make_tuple(stack, graph, now.empty() ? 0 : now.back());
    }

    void end_launch() {
        ThreadState& t = tls;
        if (t.launches > 0) --t.launches;
        t.op_stack = -1;
    }

    // -- torch.cuda._gpu_trace callbacks (GIL held) -------------------------------------------
    void on_alloc(int64_t ptr) {
        int32_t device = current_device();
        int64_t stream = current_stream(device);
        see_stream(stream, device);
        int32_t stack = op_stack();
        std::lock_guard<std::mutex> lock(mutex_);
        Record r = simple(Kind::Alloc, ptr, stream, device, stack);
        auto it = capturing_.find(stream);
        if (it != capturing_.end()) r.graph = it->second;
        append(r);
    }

    void on_free(int64_t ptr) {
        int32_t device = current_device();
        if (!in_op() && any_open_.load(std::memory_order_relaxed)) check(current_stream(device));
        int32_t stack = op_stack();
        std::lock_guard<std::mutex> lock(mutex_);
        append(simple(Kind::Free, ptr, -1, device, stack));
    }

    void on_event(Kind kind, int64_t event) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (kind == Kind::EventDelete) event_capture_.erase(event);
        append(simple(kind, event));
    }

    void on_event_record(int64_t event, int64_t stream) {
        tls.last_stream = 0;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = capturing_.find(stream);
            if (it == capturing_.end()) {
                event_capture_.erase(event);
            } else {
                event_capture_[event] = it->second;
            }
        }
        check(stream);
        see_stream(stream, current_device());
        int32_t stack = this->stack();
        std::lock_guard<std::mutex> lock(mutex_);
        append(simple(Kind::EventRecord, event, stream, -1, stack));
    }

    void on_event_wait(int64_t event, int64_t stream) {
        tls.last_stream = 0;
        see_stream(stream, current_device());
        if (readable_graph(stream) != 0) {
            // The wait added the event's nodes to the frontier; a launch would have replaced it.
            Frontier known;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                known = known_[stream];
            }
            if (!subset(known, frontier(stream))) catch_up();
        }
        int32_t stack = this->stack();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            append(simple(Kind::EventWait, event, stream, -1, stack));
            // Waiting on an event recorded in an open capture joins the capture, as in CUDA.
            auto source = event_capture_.find(event);
            if (source != event_capture_.end() && captures_[source->second].open && capturing_.count(stream) == 0) {
                capturing_[stream] = source->second;
            }
        }
        if (readable_graph(stream) != 0) {
            Frontier now = frontier(stream);
            std::lock_guard<std::mutex> lock(mutex_);
            known_[stream] = now;
        }
    }

    void on_stream_sync(int64_t stream) {
        see_stream(stream, current_device());
        std::lock_guard<std::mutex> lock(mutex_);
        append(simple(Kind::StreamSync, 0, stream));
    }

    void on_device_sync() {
        int32_t device = current_device();
        std::lock_guard<std::mutex> lock(mutex_);
        append(simple(Kind::DeviceSync, 0, -1, device));
    }

    // -- draining ----------------------------------------------------------------------------
    // The records so far as trace event dicts, in seq order (GIL held). Internal fields for
    // the recorder start with an underscore: "_graph", the capture an alloc happened in.
    py::list drain() {
        std::vector<Record> records;
        std::vector<ByteRange> ranges;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            records.swap(records_);
            ranges.swap(ranges_);
        }
        py::list out;
        for (const Record& r : records) out.append(to_dict(r, ranges));
        return out;
    }

    // Drops the Python objects this state holds (GIL held); records stay drainable.
    void release_python() {
        stacks_.clear();
        raw_stream_ = py::object();
        catch_up_ = py::object();
    }

    void set_any_open(bool open) { any_open_.store(open, std::memory_order_relaxed); }

   private:
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
                outer.written.clear();
                t.op_stack = -1;
            }
            return;
        }
    }

    static int32_t index_of(const c10::Device& device) { return device.index() < 0 ? 0 : device.index(); }

    int32_t current_device() const {
        return index_of(c10::impl::getDeviceGuardImpl(device_type_)->getDevice());
    }

    // The raw handle (cudaStream_t) of the device's current stream: torch's stream ids are
    // turned into handles by Python once per stream (the handle needs CUDA headers here).
    int64_t current_stream(int32_t device) {
        c10::Stream stream = c10::impl::getDeviceGuardImpl(device_type_)->getStream(c10::Device(device_type_, device));
        return raw_handle(stream);
    }

    int64_t raw_handle(const c10::Stream& stream) {
        StreamKey key{stream.id(), index_of(stream.device()), static_cast<int32_t>(stream.device_type())};
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = raw_streams_.find(key);
            if (it != raw_streams_.end()) return it->second;
        }
        py::gil_scoped_acquire gil;
        if (!raw_stream_) throw std::runtime_error("the recorder has stopped");
        int64_t raw = raw_stream_(key.type, key.device, key.id).cast<int64_t>();
        std::lock_guard<std::mutex> lock(mutex_);
        raw_streams_[key] = raw;
        return raw;
    }

    bool in_op() const { return tls.opaque_depth > 0 || tls.launches > 0; }

    // The user stack of an op: torch's Python bindings let go of the GIL while an op runs,
    // so it is taken back for the walk (a thread that never ran Python has no frames).
    int32_t python_stack() {
        if (PyGILState_Check()) return stack();
        if (PyGILState_GetThisThreadState() == nullptr) return -1;
        py::gil_scoped_acquire gil;
        return stack();
    }

    // An allocation or free inside an op shares the op's stack; elsewhere it has its own.
    int32_t op_stack() {
        if (in_op() && tls.op_stack >= 0) return tls.op_stack;
        return python_stack();
    }

    // The capture a stream's launches go to, if its graph can be read (0 otherwise).
    int32_t readable_graph(int64_t stream) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = capturing_.find(stream);
        if (it == capturing_.end() || captures_[it->second].handle == 0) return 0;
        return it->second;
    }

    // mutex_ held.
    std::vector<int64_t> streams_of(int32_t graph) const {
        std::vector<int64_t> streams;
        for (auto [stream, g] : capturing_) {
            if (g == graph) streams.push_back(stream);
        }
        std::sort(streams.begin(), streams.end());
        return streams;
    }

    // When the stream's frontier moved with no recorded launch, something the dispatcher
    // never saw launched there: Python gives each new node a kernel event, here, in
    // program order. Returns the frontier, accounted for.
    Frontier checked(int64_t stream) {
        Frontier known;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            known = known_[stream];
        }
        Frontier now = frontier(stream);
        if (now == known) return now;
        catch_up();
        return frontier(stream);
    }

    void check(int64_t stream) {
        if (readable_graph(stream) != 0) checked(stream);
    }

    // Before a launch claims "every node since the previous claim", the streams that may have
    // launched unseen must be accounted for: its own, and, after a change of stream or an
    // event hook (where programs move between streams), every stream of its capture.
    Frontier checked_before_launch(int32_t graph, int64_t stream) {
        bool same = tls.last_stream == stream;
        tls.last_stream = stream;
        return same ? checked(stream) : checked_all(graph, stream);
    }

    Frontier checked_all(int32_t graph, int64_t stream) {
        std::vector<int64_t> streams;
        std::vector<Frontier> known;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            streams = streams_of(graph);
            for (int64_t s : streams) known.push_back(known_[s]);
        }
        Frontier mine;
        bool moved = false;
        for (size_t i = 0; i < streams.size(); ++i) {
            Frontier now = frontier(streams[i]);
            moved |= now != known[i];
            if (streams[i] == stream) mine = std::move(now);
        }
        if (!moved) return mine;
        catch_up();
        return frontier(stream);
    }

    void catch_up() {
        py::gil_scoped_acquire gil;
        if (catch_up_) catch_up_();
    }

    void record_stream(OpFrame& frame) {
        if (frame.written.empty() || !frame.recorded_on.has_value()) return;
        at::Tensor tensor = std::move(frame.written.front());
        frame.written.clear();
        if (tensor.device().type() != device_type_ || !tensor.has_storage()) return;
        int64_t addr = reinterpret_cast<int64_t>(tensor.storage().data());
        int32_t device = index_of(tensor.device());
        tensor.reset();
        int64_t stream = raw_handle(*frame.recorded_on);
        see_stream(stream, device);
        std::lock_guard<std::mutex> lock(mutex_);
        append(simple(Kind::RecordStream, addr, stream, device, frame.stack));
    }

    static Record simple(Kind kind, int64_t value, int64_t stream = -1, int32_t device = -1, int32_t stack = -1) {
        Record r;
        r.kind = kind;
        r.value = value;
        r.stream = stream;
        r.device = device;
        r.stack = stack;
        return r;
    }

    // mutex_ held.
    void append(Record& r) {
        r.seq = seq_++;
        records_.push_back(r);
    }
    void append(Record&& r) { append(r); }

    // mutex_ held.
    int32_t text(const std::string& s) {
        auto it = text_ids_.find(s);
        if (it != text_ids_.end()) return it->second;
        int32_t id = static_cast<int32_t>(texts_.size());
        texts_.push_back(s);
        text_ids_.emplace(s, id);
        return id;
    }

    py::object text_object(int32_t id) {
        if (id >= static_cast<int32_t>(text_objects_.size())) text_objects_.resize(id + 1);
        py::object& cached = text_objects_[id];
        if (!cached) {
            std::lock_guard<std::mutex> lock(mutex_);
            cached = py::str(texts_[id]);
        }
        return cached;
    }

    static py::list range_list(const std::vector<ByteRange>& ranges, uint32_t begin, uint32_t n) {
        py::list out;
        for (uint32_t i = begin; i < begin + n; ++i) {
            const ByteRange& r = ranges[i];
            py::dict d;
            d["addr"] = r.addr;
            if (r.contiguous) {
                d["nbytes"] = r.nbytes;
            } else {
                py::list shape, stride;
                for (int64_t v : r.shape) shape.append(v);
                for (int64_t v : r.stride) stride.append(v);
                d["shape"] = shape;
                d["stride"] = stride;
                d["itemsize"] = r.itemsize;
            }
            out.append(d);
        }
        return out;
    }

    py::dict to_dict(const Record& r, const std::vector<ByteRange>& ranges) {
        static const char* names[] = {"stream",     "stack",        "alloc",        "free",       "op",
                                      "record_stream", "event_create", "event_delete", "event_record",
                                      "event_wait", "stream_sync",  "event_sync",   "device_sync", "recorder_error"};
        py::dict d;
        d["seq"] = r.seq;
        d["ev"] = names[static_cast<int>(r.kind)];
        auto stack = [&] {
            if (r.stack >= 0) d["stack"] = r.stack;
        };
        switch (r.kind) {
            case Kind::Stream:
                d["stream"] = r.stream;
                d["device"] = r.device;
                break;
            case Kind::Stack: {
                d["id"] = r.value;
                py::list frames;
                for (const UserFrame& f : stack_frames_.at(static_cast<int>(r.value))) {
                    py::list frame;
                    frame.append(py::reinterpret_borrow<py::object>(f.path));
                    frame.append(f.line);
                    frame.append(py::reinterpret_borrow<py::object>(f.function));
                    frames.append(frame);
                }
                d["frames"] = frames;
                break;
            }
            case Kind::Alloc:
                d["addr"] = r.value;
                d["size"] = 1;  // the allocator's history gives the size, after the capture
                d["stream"] = r.stream;
                d["device"] = r.device;
                stack();
                if (r.graph != 0) d["_graph"] = r.graph;
                break;
            case Kind::Free:
                d["addr"] = r.value;
                d["device"] = r.device;
                stack();
                break;
            case Kind::Op:
                d["op"] = text_object(r.text);
                d["stream"] = r.stream;
                d["device"] = r.device;
                d["reads"] = range_list(ranges, r.ranges, r.reads);
                d["writes"] = range_list(ranges, r.ranges + r.reads, r.writes);
                stack();
                break;
            case Kind::RecordStream:
                d["addr"] = r.value;
                d["stream"] = r.stream;
                d["device"] = r.device;
                stack();
                break;
            case Kind::EventCreate:
            case Kind::EventDelete:
            case Kind::EventSync:
                d["event"] = r.value;
                break;
            case Kind::EventRecord:
            case Kind::EventWait:
                d["event"] = r.value;
                d["stream"] = r.stream;
                stack();
                break;
            case Kind::StreamSync:
                d["stream"] = r.stream;
                break;
            case Kind::DeviceSync:
                d["device"] = r.device;
                break;
            case Kind::Error:
                d["message"] = text_object(r.text);
                d["where"] = text_object(r.where);
                break;
        }
        return d;
    }

    const bool eager_ops_;
    const c10::DeviceType device_type_;
    std::atomic<bool> any_open_{false};
    UserStacks stacks_;  // GIL-guarded
    py::object raw_stream_;
    py::object catch_up_;

    std::mutex mutex_;  // guards everything below
    int64_t seq_ = 0;
    int errors_ = 0;
    std::vector<Record> records_;
    std::vector<ByteRange> ranges_;
    std::unordered_map<int, std::vector<UserFrame>> stack_frames_;
    std::vector<std::string> texts_;
    std::unordered_map<std::string, int32_t> text_ids_;
    std::vector<py::object> text_objects_;  // GIL-guarded
    std::unordered_set<int64_t> streams_;
    std::unordered_map<StreamKey, int64_t, StreamKeyHash> raw_streams_;
    std::unordered_map<int32_t, Capture> captures_;
    std::unordered_map<int64_t, int32_t> capturing_;  // stream -> graph it captures into
    std::unordered_map<int64_t, int32_t> event_capture_;  // event -> capture of its latest record
    std::unordered_map<int64_t, Frontier> known_;  // capturing stream -> its frontier as last seen
};

// The state the hooks write to. States are never freed: a callback on another thread may
// still be reading one that was just stopped (they are small once drained).
std::atomic<State*> g_active{nullptr};
// Never destroyed: a State holds Python objects, which must not be released after the
// interpreter has finalized.
auto* g_states = new std::vector<std::shared_ptr<State>>();
at::CallbackHandle g_callback = 0;

// Runs a hook on a state; a failure becomes a recorder_error record, never an exception in
// the user's program.
template <typename F>
void failsafe(State& state, const char* where, F&& f) {
    try {
        f(state);
    } catch (py::error_already_set& e) {
        // The GIL may have been let go on the way out (a scoped acquire around the Python call).
        py::gil_scoped_acquire gil;
        state.fail(where, python_error_text(e));
    } catch (const c10::Error& e) {
        state.fail(where, e.what_without_backtrace());
    } catch (const std::exception& e) {
        state.fail(where, e.what());
    } catch (...) {
        state.fail(where, "unknown C++ exception");
    }
}

template <typename F>
void guarded(const char* where, F&& f) {
    State* state = g_active.load(std::memory_order_acquire);
    if (state != nullptr) failsafe(*state, where, std::forward<F>(f));
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
    State* state = g_active.load(std::memory_order_acquire);
    size_t depth = tls.frames.size();
    if (state != nullptr) failsafe(*state, "op", [&](State& s) { s.op_start(fn); });
    if (tls.frames.size() == depth) tls.frames.emplace_back();  // keep start and end paired
    return nullptr;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext*) {
    State* state = g_active.load(std::memory_order_acquire);
    if (state != nullptr) {
        failsafe(*state, "op", [&](State& s) { s.op_end(fn); });
    } else if (!tls.frames.empty()) {  // recording stopped while the op ran
        if (tls.frames.back().opaque) --tls.opaque_depth;
        tls.frames.pop_back();
    }
}

// torch.cuda._gpu_trace callbacks: they act on the recording in progress, if any.
void hook_alloc(int64_t ptr) { guarded("memory allocation", [&](State& s) { s.on_alloc(ptr); }); }
void hook_free(int64_t ptr) { guarded("memory deallocation", [&](State& s) { s.on_free(ptr); }); }
void hook_event_create(int64_t e) { guarded("event creation", [&](State& s) { s.on_event(Kind::EventCreate, e); }); }
void hook_event_delete(int64_t e) { guarded("event deletion", [&](State& s) { s.on_event(Kind::EventDelete, e); }); }
void hook_event_record(int64_t e, int64_t stream) {
    guarded("event record", [&](State& s) { s.on_event_record(e, stream); });
}
void hook_event_wait(int64_t e, int64_t stream) {
    guarded("event wait", [&](State& s) { s.on_event_wait(e, stream); });
}
void hook_stream_sync(int64_t stream) {
    guarded("stream synchronization", [&](State& s) { s.on_stream_sync(stream); });
}
void hook_event_sync(int64_t e) { guarded("event synchronization", [&](State& s) { s.on_event(Kind::EventSync, e); }); }
void hook_device_sync() { guarded("device synchronization", [&](State& s) { s.on_device_sync(); }); }

// The hooks of the busiest registries, called with the registry's arguments.
using DirectHook = void (*)(const py::args&);
const std::unordered_map<std::string, DirectHook>& direct_hooks() {
    static const std::unordered_map<std::string, DirectHook> hooks = {
        {"on_alloc", [](const py::args& a) { hook_alloc(a[0].cast<int64_t>()); }},
        {"on_free", [](const py::args& a) { hook_free(a[0].cast<int64_t>()); }},
        {"on_event_record", [](const py::args& a) { hook_event_record(a[0].cast<int64_t>(), a[1].cast<int64_t>()); }},
        {"on_event_wait", [](const py::args& a) { hook_event_wait(a[0].cast<int64_t>(), a[1].cast<int64_t>()); }},
    };
    return hooks;
}

// The Python face: one Hooks object per recording, with the interface of PythonHooks.
class Hooks {
   public:
    Hooks(bool eager_ops, int device_type, int stack_depth, int max_walk, py::object shown_path,
          py::object raw_stream, py::object catch_up)
        : state_(std::make_shared<State>(eager_ops, device_type, stack_depth, max_walk, std::move(shown_path),
                                         std::move(raw_stream), std::move(catch_up))) {
        g_states->push_back(state_);
    }

    void start() {
        State* expected = nullptr;
        if (!g_active.compare_exchange_strong(expected, state_.get())) {
            throw std::runtime_error("native hooks are already recording in this process");
        }
        at::RecordFunctionCallback callback(&on_op_start, &on_op_end);
        callback.needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION});
        g_callback = at::addGlobalCallback(callback);
    }

    void stop() {
        if (g_active.load() != state_.get()) return;
        at::removeCallback(g_callback);
        g_callback = 0;
        g_active.store(nullptr, std::memory_order_release);
    }

    State& state() { return *state_; }

   private:
    std::shared_ptr<State> state_;
};

}  // namespace
}  // namespace streamrace

using streamrace::Hooks;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "streamrace's native recorder hooks (built on first use against this torch)";
    py::class_<Hooks>(m, "Hooks")
        .def(py::init<bool, int, int, int, py::object, py::object, py::object>(), py::arg("eager_ops"),
             py::arg("device_type"), py::arg("stack_depth"), py::arg("max_walk"), py::arg("shown_path"),
             py::arg("raw_stream"), py::arg("catch_up"))
        .def("start", &Hooks::start)
        .def("stop", &Hooks::stop)
        .def("next_seq", [](Hooks& h) { return h.state().next_seq(); })
        .def("peek_seq", [](Hooks& h) { return h.state().peek_seq(); })
        .def("stack", [](Hooks& h) { return h.state().stack(); })
        .def("see_stream", [](Hooks& h, int64_t s, int32_t d) { h.state().see_stream(s, d); })
        .def("begin_capture",
             [](Hooks& h, int32_t graph, int64_t stream, int64_t handle) {
                 h.state().begin_capture(graph, stream, handle);
                 h.state().set_any_open(true);
             })
        .def("end_capture",
             [](Hooks& h, int32_t graph) {
                 h.state().end_capture(graph);
                 h.state().set_any_open(!h.state().open_graphs().empty());
             })
        .def("capture_streams", [](Hooks& h, int32_t graph) { return h.state().capture_streams(graph); })
        .def("open_graphs", [](Hooks& h) { return h.state().open_graphs(); })
        .def("claims", [](Hooks& h, int32_t graph) { return h.state().claims(graph); })
        .def("last_claim", [](Hooks& h, int32_t graph) { return h.state().last_claim(graph); })
        .def("claim", [](Hooks& h, int32_t graph, int64_t seq, int64_t node,
                         bool trusted) { h.state().claim(graph, seq, node, trusted); })
        .def("refresh_frontiers", [](Hooks& h, int32_t graph) { h.state().refresh_frontiers(graph); })
        .def("begin_launch", [](Hooks& h) { return h.state().begin_launch(); })
        .def("end_launch", [](Hooks& h) { h.state().end_launch(); })
        .def("drain", [](Hooks& h) { return h.state().drain(); })
        .def("release_python", [](Hooks& h) { h.state().release_python(); });

    // torch.cuda._gpu_trace callbacks: they act on the recording in progress, if any.
    // Graph reads at a capture's end and at a catch-up (graph_readback.py does the same in
    // Python): types and kernel names of nodes, and the nodes created since the last claim.
    m.def("describe_nodes", [](const std::vector<int64_t>& handles) {
        auto& driver = streamrace::GraphNodes::driver();
        py::list out;
        for (int64_t node : handles) {
            int type = driver.type(node);
            py::object name = py::none();
            if (type == 0) {
                std::string text = driver.kernel_name(node);
                if (!text.empty()) name = py::str(text);
            }
            out.append(py::make_tuple(streamrace::node_type_name(type), name));
        }
        return out;
    });
    m.def("node_handles", [](int64_t graph) { return streamrace::GraphNodes::driver().handles(graph); });
    m.def("nodes_since", [](int64_t graph, int64_t last_claim, int64_t floor) {
        auto& driver = streamrace::GraphNodes::driver();
        std::vector<int64_t> handles = driver.handles(graph);
        int64_t seen = floor;
        for (int64_t i = static_cast<int64_t>(handles.size()) - 1; i >= seen && last_claim != 0; --i) {
            if (handles[i] == last_claim) {
                seen = i + 1;
                break;
            }
        }
        py::list out;
        for (int64_t i = seen; i < static_cast<int64_t>(handles.size()); ++i) {
            out.append(py::make_tuple(i, handles[i], streamrace::node_type_name(driver.type(handles[i]))));
        }
        return out;
    });
    // A torch.cuda._gpu_trace registry's fire_callbacks, straight to a native hook: the
    // registry's Python loop costs more than the hook. Callbacks others add to it still run.
    // A torch.cuda._gpu_trace registry's fire_callbacks, straight to a native hook: the
    // registry's Python loop costs more than the hook. Callbacks others add to it still run.
    m.def("fire_function", [](const std::string& hook, py::list others) -> py::cpp_function {
        auto direct = streamrace::direct_hooks().find(hook);
        if (direct == streamrace::direct_hooks().end()) {
            throw std::invalid_argument("no direct fire function for " + hook);
        }
        return py::cpp_function([run = direct->second, others](py::args args) {
            run(args);
            for (py::handle cb : py::list(others)) {  // a copy: a callback may change the list
                try {
                    cb(*args);
                } catch (py::error_already_set& e) {
                    e.discard_as_unraisable("a torch.cuda._gpu_trace callback");
                }
            }
        });
    });
    m.def("on_alloc", &streamrace::hook_alloc);
    m.def("on_free", &streamrace::hook_free);
    m.def("on_event_create", &streamrace::hook_event_create);
    m.def("on_event_delete", &streamrace::hook_event_delete);
    m.def("on_event_record", &streamrace::hook_event_record);
    m.def("on_event_wait", &streamrace::hook_event_wait);
    m.def("on_stream_sync", &streamrace::hook_stream_sync);
    m.def("on_event_sync", &streamrace::hook_event_sync);
    m.def("on_device_sync", &streamrace::hook_device_sync);
}
