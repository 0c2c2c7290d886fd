// streamrace's native hooks: the recorder's hot path in C++ (docs/recording.md, "The hooks").
//
// Built on first use against the torch the program runs (streamrace/record/native.py); the
// Python hooks in streamrace/record/hooks.py are the reference and the fallback, and the two
// record the same events. In parts, one job each, as the Python side is:
//
// * event_log.h: the records in seq order, the one mutex, stacks and streams defined;
// * event_dict.h: a drained record as its trace dict, keys interned once;
// * capture_tracker.h: which streams capture into which graph, frontiers, claims;
// * op_hooks.h: the RecordFunction callback for every operator, and Triton's bracket;
// * gpu_trace_hooks.h: torch's GPU-trace calls (allocations, frees, CUDA events,
//   synchronizations);
// * trace_interposer.h, trace_forwarding.h (generated from torch's own header by
//   streamrace/record/trace_forwarding.py): those calls straight from torch's C++ to the
//   hooks, instead of through torch.cuda._gpu_trace;
// * allocator_facts.h: each allocation's exact size, stream and pool, from the caching
//   allocator's trace tracker (where CUDA headers were found at build time);
// * unseen_launches.h: noticing launches the dispatcher never saw (the recorder catches up);
// * streams.h, hook_stacks.h, thread_state.h: the current stream, the user's stack, what
//   each thread has in flight;
// * driver.h, graph_reads.h: what is asked of the CUDA driver, through one seam;
// * hook_tables.h (generated from streamrace/record/hook_tables.py): the tables both sets
//   of hooks keep.
//
// Here: State, which puts the parts together for one recording, the fail-safe wrapper every
// hook runs in, and the Python module. Nothing here holds a tensor past the op that passed it
// in, allocates CUDA memory, launches work or synchronizes; a failure becomes a
// recorder_error record, never an exception in the user's program.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/record_function.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/PyInterpreter.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator_facts.h"
#include "capture_tracker.h"
#include "driver.h"
#include "event_log.h"
#include "gpu_trace_hooks.h"
#include "graph_reads.h"
#include "hook_stacks.h"
#include "hook_tables.h"
#include "hook_timers.h"
#include "op_hooks.h"
#include "streams.h"
#include "thread_state.h"
#include "trace_forwarding.h"
#include "trace_interposer.h"
#include "unseen_launches.h"

namespace py = pybind11;

namespace streamrace {
namespace {

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

// int64s as their native bytes, for an array('q') in Python (GIL held).
py::bytes int64_bytes(const std::vector<int64_t>& values) {
    return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
}

Driver driver_from(const py::object& addresses) {
    if (addresses.is_none()) return Driver::libcuda();
    return Driver::at(addresses.cast<std::unordered_map<std::string, int64_t>>());
}

// One recording: the parts, and what Python asks of them.
class State {
   public:
    State(bool eager_ops, int device_type, int stack_depth, int max_walk, const py::object& shown_path,
          py::object raw_stream, const py::object& driver, py::object current_stream, py::object stream_cell)
        : driver_(driver_from(driver)),
          captures_(log_.mutex()),
          streams_(static_cast<c10::DeviceType>(device_type), std::move(raw_stream), std::move(current_stream),
                   std::move(stream_cell)),
          stacks_(log_, stack_depth, max_walk, shown_path.ptr()),
          unseen_(driver_, captures_, log_, streams_, stacks_),
          host(static_cast<c10::DeviceType>(device_type)),
          ops(eager_ops, log_, captures_, streams_, stacks_, unseen_, host),
          gpu_trace(log_, captures_, streams_, stacks_, unseen_) {}

    // -- shared bookkeeping ------------------------------------------------------------------
    int64_t next_seq() { return log_.next_seq(); }
    int64_t peek_seq() { return log_.peek_seq(); }
    int32_t stack() { return stacks_.stack(); }
    std::pair<int64_t, int64_t> op_walks() const { return stacks_.op_walks(); }
    void see_stream(int64_t stream, int32_t device) { log_.see_stream(stream, device); }
    void fail(const char* where, const std::string& message) { log_.fail(where, message); }

    // A replay of ``graph`` on the current stream of the current device, numbered now, with
    // the user's stack (GIL held): the replays part's event, made here since a serving loop
    // makes one every step and the Python that made it cost more than the hooks of its ops.
    int64_t replay(int32_t graph) {
        int32_t device = streams_.current_device();
        int64_t stream = streams_.current_stream(device);
        log_.see_stream(stream, device);
        int32_t stack = stacks_.stack();
        Locked held = log_.lock();
        Record r = simple(Kind::Replay, 0, stream, device, stack);
        r.graph = graph;
        log_.append(held, r);
        return r.seq;
    }

    void begin_capture(int32_t graph, int64_t stream, int64_t handle) {
        Frontier now = handle != 0 ? unseen_.frontier(stream) : Frontier();
        int64_t base = handle != 0 ? streamrace::node_count(driver_, handle) : 0;
        captures_.set_any_open(true);  // first: an op that sees none open takes no lock
        captures_.begin(graph, stream, handle, now, base);
    }

    void end_capture(int32_t graph) {
        captures_.end(graph);
        captures_.set_any_open(!captures_.open_graphs().empty());
    }

    std::vector<int64_t> capture_streams(int32_t graph) { return captures_.capture_streams(graph); }
    std::vector<int32_t> open_graphs() { return captures_.open_graphs(); }
    std::vector<int64_t> claims(int32_t graph) { return captures_.claims(graph); }
    void claim(int32_t graph, int64_t seq, int64_t node, bool trusted) {
        captures_.claim(graph, seq, node, trusted);
    }
    void refresh_frontiers(int32_t graph) { unseen_.refresh(graph); }
    void catch_up() { unseen_.catch_up(); }

    // -- graph reads at a capture's end and at a catch-up (GraphReadback in Python) -----------
    // (node handles, node types, kernel names or None, edges by node id flattened as (from,
    // to, 1 if programmatic else 0), each node's event or 0): graph_readback.GraphColumns;
    // then (node index, seq) of the capture's caught-up kernel events, flattened. A
    // capture's end is on the program's clock, so the columns of ints are native int64 bytes
    // (an array('q') in Python: no int object per node or edge now) and the strs are shared;
    // the graph event's objects are made later. Node types are made once per recording,
    // kernel names once per function and graph (a module unloaded between two captures may
    // leave its function's address to another). `capture`: the recording's number of the
    // capture, whose kernel nodes a recorded launch made are not named (the launch's event
    // names them; reading each one's function was a fifth of the read-back); 0: every kernel
    // node is named (GIL held).
    py::tuple read_graph(int64_t graph, int32_t capture) {
        STREAMRACE_TIMED(GraphRead);
        kernel_names_.clear();
        layouts_.clear();
        // Before the nodes: each node a catch-up found is then among them.
        const std::vector<std::pair<int64_t, int64_t>> caught = capture == 0 ? decltype(caught)() : captures_.caught(capture);
        std::vector<int64_t> handles;
        ska::flat_hash_map<int64_t, int64_t> index;  // open addressing: one entry per node
        {
            STREAMRACE_TIMED(GraphNodes);
            handles = streamrace::node_handles_as_before(driver_, graph);
            index.reserve(handles.size());
            for (size_t i = 0; i < handles.size(); ++i) index.emplace(handles[i], static_cast<int64_t>(i));
        }
        const std::vector<char> claimed =
            capture == 0 ? std::vector<char>(handles.size(), 0)
                         : captures_.claimed_nodes(
                               capture,
                               [&](int64_t node) {
                                   auto it = index.find(node);
                                   return it == index.end() ? int64_t{-1} : it->second;
                               },
                               handles.size());
        const auto n = static_cast<Py_ssize_t>(handles.size());
        py::list types(n), names(n);
        std::vector<int64_t> events(handles.size(), 0);
        STREAMRACE_TIMED(GraphTypes);
        for (Py_ssize_t i = 0; i < n; ++i) {
            const auto k = static_cast<size_t>(i);
            const int64_t node = handles[k];
            int type = streamrace::node_type(driver_, node);
            types[i] = type_object(type);
            if (type == 0 && !claimed[k]) {  // CU_GRAPH_NODE_TYPE_KERNEL
                names[i] = kernel_name_object(streamrace::kernel_function(driver_, node));
            } else {
                names[i] = py::none();
            }
            events[k] = streamrace::node_event(driver_, node, type);
        }
        STREAMRACE_TIMED(GraphEdges);
        const std::vector<Edge> found = streamrace::graph_edges(driver_, graph);
        std::vector<int64_t> edges;
        edges.reserve(3 * found.size());
        for (const Edge& e : found) {
            edges.push_back(index.at(e.from));
            edges.push_back(index.at(e.to));
            edges.push_back(e.programmatic ? 1 : 0);
        }
        std::vector<int64_t> caught_at;  // (index, seq) of each, flattened: no handle -> index map in Python
        caught_at.reserve(2 * caught.size());
        for (auto [node, seq] : caught) {
            auto it = index.find(node);
            if (it == index.end()) continue;
            caught_at.push_back(it->second);
            caught_at.push_back(seq);
        }
        return py::make_tuple(int64_bytes(handles), types, names, int64_bytes(edges), int64_bytes(events),
                              int64_bytes(caught_at));
    }

    // (function name or None, [words per parameter]) of a kernel node, or None where the
    // driver gives no parameter layouts (Python reads them then).
    py::object kernel_access(int64_t node) {
        STREAMRACE_TIMED(KernelAccess);
        KernelParams read = streamrace::kernel_params(driver_, node, layouts_);
        if (!read.read) return py::none();
        py::object name = read.named ? decoded(read.name.data(), read.name.size()) : py::none();
        py::list params;
        for (const auto& words : read.params) {
            py::list out;
            for (uint64_t w : words) out.append(py::int_(w));
            params.append(out);
        }
        return py::make_tuple(name, params);
    }

    py::list drain() { return log_.drain(); }
    py::tuple drain_lines() { return log_.drain_lines(); }

    // Drops the Python objects this state holds (GIL held); records stay drainable.
    void release_python() {
        type_names_.clear();
        kernel_names_.clear();
        layouts_.clear();
        stacks_.release_python();
        streams_.release_python();
    }

   private:
    // A name the driver gives, as Python's decode(errors="replace") reads it.
    static py::object decoded(const char* bytes, size_t size) {
        PyObject* text = PyUnicode_DecodeUTF8(bytes, static_cast<Py_ssize_t>(size), "replace");
        if (text == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(text);
    }

    py::object type_object(int type) {
        auto it = type_names_.find(type);
        if (it == type_names_.end()) it = type_names_.emplace(type, py::str(node_type_name(type))).first;
        return it->second;
    }

    // A kernel function's name, cut to the table's length, or None.
    py::object kernel_name_object(const KernelFunction& f) {
        auto it = kernel_names_.find(f);
        if (it != kernel_names_.end()) return it->second;
        py::object name = py::none();
        if (const char* raw = function_name(driver_, f); raw != nullptr && raw[0] != '\0') {
            name = decoded(raw, std::strlen(raw))[py::slice(0, static_cast<Py_ssize_t>(tables::kMaxKernelName), 1)];
        }
        kernel_names_.emplace(f, name);
        return name;
    }

    std::unordered_map<int, py::object> type_names_;                         // GIL-guarded
    std::unordered_map<KernelFunction, py::object, KernelFunctionHash> kernel_names_;  // GIL-guarded
    FunctionLayouts layouts_;  // GIL-guarded, cleared with kernel_names_
    const Driver driver_;
    EventLog log_;
    CaptureTracker captures_;
    StreamSource streams_;
    HookStacks stacks_;
    UnseenLaunches unseen_;

   public:
    HostMemory host;
    OpHooks ops;
    GpuTraceHooks gpu_trace;
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
        if (e.matches(PyExc_KeyboardInterrupt)) {
            // The program's Ctrl-C, handled while the hook ran Python (a stack's shown path, a
            // pinned storage's part): not a failure of the recorder's. It reaches the program
            // at its next bytecode, as a signal that came a moment later would.
            PyErr_SetInterrupt();
            return;
        }
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
    ++tls.op_calls;
    size_t depth = tls.frames.size();
    if (state != nullptr) failsafe(*state, "op", [&](State& s) { s.ops.op_start(fn); });
    if (tls.frames.size() == depth) tls.frames.emplace_back();  // keep start and end paired
    return nullptr;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext*) {
    // Its kernel's calls were silenced (OpHooks::silence_kernel): heard again from here on,
    // whatever else happens to this end.
    if (!tls.frames.empty() && tls.frames.back().silenced) {
        tls.frames.back().silenced = false;
        at::enableRecordFunction(true);
    }
    State* state = g_active.load(std::memory_order_acquire);
    if (state != nullptr) {
        failsafe(*state, "op", [&](State& s) { s.ops.op_end(fn); });
    } else if (!tls.frames.empty()) {  // recording stopped while the op ran
        if (tls.frames.back().opaque) --tls.opaque_depth;
        tls.frames.pop_back();
    }
}

// torch.cuda._gpu_trace callbacks, one per hook of the table (hook_tables.GPU_TRACE_HOOKS,
// which names them and says where they fail): they act on the recording in progress, if any.
namespace hook {
namespace where {
#define STREAMRACE_WHERE(name, text, direct) constexpr const char* name = text;
STREAMRACE_GPU_TRACE_HOOKS(STREAMRACE_WHERE)
#undef STREAMRACE_WHERE
}  // namespace where

void on_alloc(int64_t ptr) {
    guarded(where::on_alloc, [&](State& s) { s.gpu_trace.on_alloc(ptr); });
}
void on_free(int64_t ptr) {
    guarded(where::on_free, [&](State& s) { s.gpu_trace.on_free(ptr); });
}
void on_event_create(int64_t e) {
    guarded(where::on_event_create, [&](State& s) { s.gpu_trace.on_event(Kind::EventCreate, e); });
}
void on_event_delete(int64_t e) {
    guarded(where::on_event_delete, [&](State& s) { s.gpu_trace.on_event(Kind::EventDelete, e); });
}
void on_event_record(int64_t e, int64_t stream) {
    guarded(where::on_event_record, [&](State& s) { s.gpu_trace.on_event_record(e, stream); });
}
void on_event_wait(int64_t e, int64_t stream) {
    guarded(where::on_event_wait, [&](State& s) { s.gpu_trace.on_event_wait(e, stream); });
}
void on_stream_sync(int64_t stream) {
    guarded(where::on_stream_sync, [&](State& s) { s.gpu_trace.on_stream_sync(stream); });
}
void on_event_sync(int64_t e) {
    guarded(where::on_event_sync, [&](State& s) { s.gpu_trace.on_event(Kind::EventSync, e); });
}
void on_device_sync() {
    guarded(where::on_device_sync, [&](State& s) { s.gpu_trace.on_device_sync(); });
}
}  // namespace hook

// torch's GPU-trace calls straight to the hooks (trace_interposer.h): the generated vtable
// asks the Sink, by hook name, to run the hook and whether torch's own interpreter is still
// needed for others' Python callbacks.
namespace interposing {
enum Registry : size_t {
#define STREAMRACE_INDEX(name, text, direct) k_##name,
    STREAMRACE_GPU_TRACE_HOOKS(STREAMRACE_INDEX)
#undef STREAMRACE_INDEX
};

TraceInterposer& interposer() {
    static auto* instance = new TraceInterposer();  // never destroyed: calls may come at exit
    return *instance;
}

#ifndef STREAMRACE_NO_INTERPOSER
struct Sink {
    static const c10::impl::PyInterpreter* inner() { return interposer().inner(); }
    // While Python finalizes, and for a device not recorded (torch finds another device's
    // registries by its type), the call is torch's alone, as without the interposer.
    static bool ours(c10::DeviceType type) {
#if PY_VERSION_HEX >= 0x030D0000
        const bool finalizing = Py_IsFinalizing();
#else
        const bool finalizing = _Py_IsFinalizing();
#endif
        return Py_IsInitialized() && !finalizing && interposer().records(type);
    }
#define STREAMRACE_SINK(name, text, direct)             \
    template <typename... A>                            \
    static bool name(c10::DeviceType type, A... args) { \
        if (!ours(type)) return true;                   \
        hook::name(args...);                            \
        return interposer().others(k_##name);           \
    }
    STREAMRACE_GPU_TRACE_HOOKS(STREAMRACE_SINK)
#undef STREAMRACE_SINK
};

const c10::impl::PyInterpreter* interpreter() {
    static const auto* interpreter =
        new c10::impl::PyInterpreter(new c10::impl::streamrace_generated::ForwardingVTable<Sink>());
    return interpreter;
}
#endif

// Puts the interposer in place for a recording of this device type: "" when it is, else why
// not (the recorder then attaches the hooks to the Python registries).
std::string install(int device_type, const py::list& callback_lists) {
#ifdef STREAMRACE_NO_INTERPOSER
    (void)device_type;
    (void)callback_lists;
    return STREAMRACE_NO_INTERPOSER;
#else
    std::vector<PyObject*> lists;
    for (py::handle list : callback_lists) lists.push_back(list.is_none() ? nullptr : list.ptr());
    return interposer().install(interpreter(), getPyInterpreter(), static_cast<c10::DeviceType>(device_type), lists);
#endif
}

void uninstall() {
#ifndef STREAMRACE_NO_INTERPOSER
    interposer().uninstall(interpreter());
#endif
}

// What torch's C++ does at its trace points, for tests on a machine where torch makes none.
void trace_as_torch(const std::string& hook, const std::vector<int64_t>& args, int device_type) {
    const c10::impl::PyInterpreter* trace = c10::impl::GPUTrace::get_trace();
    if (trace == nullptr) throw std::runtime_error("torch's GPU trace is not on");
    auto arg = [&](size_t i) {
        if (i >= args.size()) throw std::invalid_argument(hook + ": too few arguments");
        return static_cast<uintptr_t>(args[i]);
    };
    const auto device = static_cast<c10::DeviceType>(device_type);
    if (hook == "on_alloc") {
        (*trace)->trace_gpu_memory_allocation(device, arg(0));
    } else if (hook == "on_free") {
        (*trace)->trace_gpu_memory_deallocation(device, arg(0));
    } else if (hook == "on_event_create") {
        (*trace)->trace_gpu_event_creation(device, arg(0));
    } else if (hook == "on_event_delete") {
        (*trace)->trace_gpu_event_deletion(device, arg(0));
    } else if (hook == "on_event_record") {
        (*trace)->trace_gpu_event_record(device, arg(0), arg(1));
    } else if (hook == "on_event_wait") {
        (*trace)->trace_gpu_event_wait(device, arg(0), arg(1));
    } else if (hook == "on_stream_sync") {
        (*trace)->trace_gpu_stream_synchronization(device, arg(0));
    } else if (hook == "on_event_sync") {
        (*trace)->trace_gpu_event_synchronization(device, arg(0));
    } else if (hook == "on_device_sync") {
        (*trace)->trace_gpu_device_synchronization(device);
    } else {
        throw std::invalid_argument("no trace point for " + hook);
    }
}
}  // namespace interposing

// A hook called with a registry's arguments, as a direct fire function passes them on.
using DirectHook = void (*)(const py::args&);

template <typename... A, size_t... I>
void call_with(void (*f)(A...), const py::args& args, std::index_sequence<I...>) {
    f(args[I].cast<A>()...);
}

template <typename... A>
constexpr size_t arity(void (*)(A...)) {
    return sizeof...(A);
}

template <auto F>
void direct(const py::args& args) {
    call_with(F, args, std::make_index_sequence<arity(F)>());
}

// The hooks of the busiest registries (the table's direct ones).
const std::unordered_map<std::string, DirectHook>& direct_hooks() {
    static const std::unordered_map<std::string, DirectHook> hooks = [] {
        std::unordered_map<std::string, DirectHook> out;
#define STREAMRACE_DIRECT(name, text, is_direct) \
    if (is_direct) out.emplace(#name, &direct<&hook::name>);
        STREAMRACE_GPU_TRACE_HOOKS(STREAMRACE_DIRECT)
#undef STREAMRACE_DIRECT
        return out;
    }();
    return hooks;
}

// The Python face: one Hooks object per recording, which NativeHooks (streamrace/record/hooks.py)
// wraps; its bookkeeping methods are the recording's HookState, asked straight.
class Hooks {
   public:
    Hooks(bool eager_ops, int device_type, int stack_depth, int max_walk, const py::object& shown_path,
          py::object raw_stream, const py::object& driver, py::object current_stream, py::object stream_cell)
        : state_(std::make_shared<State>(eager_ops, device_type, stack_depth, max_walk, shown_path,
                                         std::move(raw_stream), driver, std::move(current_stream),
                                         std::move(stream_cell))) {
        g_states->push_back(state_);
    }

    void start() {
        State* expected = nullptr;
        if (!g_active.compare_exchange_strong(expected, state_.get())) {
            throw std::runtime_error("native hooks are already recording in this process");
        }
        state_->ops.set_may_silence(!at::hasCallbacks());  // before ours is one
        at::RecordFunctionCallback callback(&on_op_start, &on_op_end);
        callback.needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION});
        g_callback = at::addGlobalCallback(callback);
    }

    void stop() {
        if (g_active.load() != state_.get()) return;
        at::removeCallback(g_callback);
        g_callback = 0;
        allocator_facts().set_active(false);
        g_active.store(nullptr, std::memory_order_release);
    }

    // Allocations take their facts from the allocator's trace tracker from now on: "" when
    // they do, else why not. ``scripted``: a scripted allocator feeds allocator_trace itself.
    std::string use_allocator_facts(bool scripted) {
        if (g_active.load() != state_.get()) return "the hooks are not recording";
        std::string why = scripted ? "" : attach_allocator_tracker();
        if (why.empty()) allocator_facts().set_active(true);
        return why;
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
    // Whether an op's stack, once seen, is found without the GIL (frame_walk.h: this CPython).
    m.attr("frames_without_gil") = streamrace::kFramesWithoutGil;
    py::class_<Hooks>(m, "Hooks")
        .def(py::init<bool, int, int, int, const py::object&, py::object, const py::object&, py::object,
                      py::object>(),
             py::arg("eager_ops"), py::arg("device_type"), py::arg("stack_depth"), py::arg("max_walk"),
             py::arg("shown_path"), py::arg("raw_stream"), py::arg("driver") = py::none(),
             py::arg("current_stream") = py::none(), py::arg("stream_cell") = py::none())
        .def("start", &Hooks::start)
        .def("stop", &Hooks::stop)
        .def("next_seq", [](Hooks& h) { return h.state().next_seq(); })
        .def("peek_seq", [](Hooks& h) { return h.state().peek_seq(); })
        .def("stack", [](Hooks& h) { return h.state().stack(); })
        .def("see_stream", [](Hooks& h, int64_t s, int32_t d) { h.state().see_stream(s, d); })
        .def("replay", [](Hooks& h, int32_t graph) { return h.state().replay(graph); })
        .def("begin_capture", [](Hooks& h, int32_t graph, int64_t stream,
                                 int64_t handle) { h.state().begin_capture(graph, stream, handle); })
        .def("end_capture", [](Hooks& h, int32_t graph) { h.state().end_capture(graph); })
        .def("capture_streams", [](Hooks& h, int32_t graph) { return h.state().capture_streams(graph); })
        .def("open_graphs", [](Hooks& h) { return h.state().open_graphs(); })
        .def("claims", [](Hooks& h, int32_t graph) { return streamrace::int64_bytes(h.state().claims(graph)); })
        .def("claim", [](Hooks& h, int32_t graph, int64_t seq, int64_t node,
                         bool trusted) { h.state().claim(graph, seq, node, trusted); })
        .def("refresh_frontiers", [](Hooks& h, int32_t graph) { h.state().refresh_frontiers(graph); })
        .def("catch_up", [](Hooks& h) { h.state().catch_up(); })
        .def("begin_launch", [](Hooks& h) { return h.state().ops.begin_launch(); })
        .def("end_launch", [](Hooks& h) { h.state().ops.end_launch(); })
        .def("drain", [](Hooks& h) { return h.state().drain(); })
        .def("drain_lines", [](Hooks& h) { return h.state().drain_lines(); })
        .def("release_python", [](Hooks& h) { h.state().release_python(); })
        .def("op_stack_walks", [](Hooks& h) { return h.state().op_walks(); })
        .def("use_allocator_facts", &Hooks::use_allocator_facts, py::arg("scripted") = false)
        // Graph reads at a capture's end (GraphReadback does the same in Python): the whole
        // graph, and a kernel node's parameters.
        .def(
            "read_graph", [](Hooks& h, int64_t graph, int32_t capture) { return h.state().read_graph(graph, capture); },
            py::arg("graph"), py::arg("capture") = 0)
        .def("kernel_access", [](Hooks& h, int64_t node) { return h.state().kernel_access(node); })
        .def("set_host_part", [](Hooks& h, py::object part) { h.state().host.set_part(std::move(part)); })
        .def("host_known", [](Hooks& h, int64_t start, bool live) {
            if (live) {
                h.state().host.add(start);
            } else {
                h.state().host.remove(start);
            }
        });

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
    // How many ops this thread's hooks heard start (silenced kernels' calls are not heard).
    m.def("thread_op_calls", [] { return streamrace::tls.op_calls; });
    // torch's GPU-trace calls straight to the hooks while recording (trace_interposer.h).
    m.def("install_interposer", &streamrace::interposing::install, py::arg("device_type"), py::arg("callback_lists"));
    m.def("uninstall_interposer", &streamrace::interposing::uninstall);
    m.def("trace_as_torch", &streamrace::interposing::trace_as_torch, py::arg("hook"), py::arg("args"),
          py::arg("device_type") = 1);
#ifdef STREAMRACE_NO_INTERPOSER
    m.attr("interposed_hooks") = py::tuple();
    m.attr("interposer_unavailable") = STREAMRACE_NO_INTERPOSER;
#else
    {
        py::list names;
        for (int i = 0; i < c10::impl::streamrace_generated::kInterposedCount; ++i) {
            names.append(c10::impl::streamrace_generated::kInterposedHooks[i]);
        }
        m.attr("interposed_hooks") = py::tuple(names);
        m.attr("interposer_unavailable") = py::none();
    }
#endif
    // What an allocator trace tracker is told (allocator_facts.h), for a scripted allocator.
    m.def("allocator_trace", &streamrace::allocator_trace, py::arg("action"), py::arg("addr"), py::arg("size"),
          py::arg("stream"), py::arg("pool_first") = 0, py::arg("pool_second") = 0);
    // Hook timers (hook_timers.h): {phase: (calls, seconds)}, empty in a build without them.
    m.def("hook_times", [] {
        py::dict out;
        if (!streamrace::timing::kEnabled) return out;
        auto& totals = streamrace::timing::totals();
        for (int i = 0; i < streamrace::timing::kPhases; ++i) {
            out[streamrace::timing::kPhaseNames[i]] =
                py::make_tuple(totals.calls[i].load(), static_cast<double>(totals.ns[i].load()) * 1e-9);
        }
        return out;
    });
    m.def("reset_hook_times", [] {
        for (auto& v : streamrace::timing::totals().ns) v.store(0);
        for (auto& v : streamrace::timing::totals().calls) v.store(0);
    });
#ifdef STREAMRACE_ALLOCATOR_TRACKER
    m.attr("allocator_tracker_built") = true;
#else
    m.attr("allocator_tracker_built") = false;
#endif
#define STREAMRACE_DEF_HOOK(name, text, direct) m.def(#name, &streamrace::hook::name);
    STREAMRACE_GPU_TRACE_HOOKS(STREAMRACE_DEF_HOOK)
#undef STREAMRACE_DEF_HOOK
}
