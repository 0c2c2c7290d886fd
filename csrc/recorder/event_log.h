// The hooks' events, in seq order, as compact records until Python drains them (after the
// capture), and the one mutex the hooks' shared bookkeeping is under: the sequence counter
// orders everything, so the lock that guards it guards the rest (capture_tracker.h) too.
// The C++ twin of what PythonHooks keeps in its _records.
//
// Methods that take a `const Locked&` need the mutex held (lock()); the others take it
// themselves. Python is never entered while it is held, since Python code (a garbage
// collection, say) can come back into a hook.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "allocator_facts.h"
#include "chunked.h"
#include "event_dict.h"
#include "hook_tables.h"
#include "tensor_range.h"
#include "user_stacks.h"

namespace streamrace {

namespace py = pybind11;
using tables::Kind;
using Locked = std::unique_lock<std::mutex>;  // the hooks' mutex, held

// A byte range as the log keeps it until the drain (24 bytes, where a ByteRange with its
// inline shape and stride is 160): an eager op's ranges are most of what recording one costs
// in memory, and growing the log touched fresh pages for every op. A strided range's shape
// and then its stride are `ndim` ints each in the log's dims, from `dims`.
struct StoredRange {
    int64_t addr = 0;
    int64_t size = 0;   // nbytes where contiguous, else itemsize
    uint32_t dims = 0;
    int32_t ndim = -1;  // -1: contiguous, {addr, nbytes}
    bool contiguous() const { return ndim < 0; }
    // A strided range's shape and stride, each ndim ints, in the dims it was stored into
    // (one run: Chunked::append_run).
    template <typename Dims>
    const int64_t* shape(const Dims& all) const {
        return &all[dims];
    }
    template <typename Dims>
    const int64_t* stride(const Dims& all) const {
        return shape(all) + ndim;
    }
};

struct Record {
    int64_t seq = 0;
    Kind kind = Kind::RecorderError;
    int64_t value = 0;  // addr (alloc, free, record_stream), event (event_*), id (stack), node (kernel)
    int64_t stream = -1;
    int32_t device = -1;
    int32_t stack = -1;
    int32_t graph = 0;  // the capture an alloc or a kernel happened in, the graph replayed; 0: none
    int32_t text = -1;  // op name, node type or error message, an index into texts_
    int32_t where = -1;
    uint32_t ranges = 0;  // reads, writes, then index, from ranges_[ranges]
    uint32_t reads = 0, writes = 0, index = 0;
    uint32_t host_reads = 0, host_writes = 0;  // pinned host bytes (1.5), after the index ranges
    bool host_blocking = false;                // the host waited for the op
    bool inferred = false;                     // an event record no hook heard, stood in for (1.7)
    int32_t fact = -1;  // an alloc's exact facts (the allocator's tracker), from facts_[fact]
    int64_t base = 0;   // a view's: the identity of the tensor it views (0: unknown)
    uint32_t tensors = 0, tensor_count = 0;  // an op's read identities, from tensor_ids_[tensors]
};

// The storages captured ops wrote, by base address, while they live: the memory whose eager
// reads and views are named by tensor (format 1.5), for the static-output check. A set lookup
// per eager tensor read, none while no capture wrote anything. The C++ twin of
// streamrace/record/graph_memory.py.
class GraphMemory {
   public:
    bool any() const { return count_.load(std::memory_order_relaxed) > 0; }
    void add(int64_t base) {
        if (base == 0) return;
        std::lock_guard<std::mutex> held(mutex_);
        if (bases_.insert(base).second) count_.store(bases_.size(), std::memory_order_relaxed);
    }
    void freed(int64_t ptr) {
        if (!any()) return;
        std::lock_guard<std::mutex> held(mutex_);
        if (bases_.erase(ptr) > 0) count_.store(bases_.size(), std::memory_order_relaxed);
    }
    bool holds(const at::Tensor& t) {
        if (!any() || !t.defined() || !t.has_storage()) return false;
        auto base = reinterpret_cast<int64_t>(t.storage().data());
        std::lock_guard<std::mutex> held(mutex_);
        return bases_.count(base) > 0;
    }

   private:
    std::mutex mutex_;
    std::unordered_set<int64_t> bases_;
    std::atomic<size_t> count_{0};
};

// A tensor's identity in the trace: the address of its TensorImpl.
inline int64_t identity(const at::Tensor& t) { return reinterpret_cast<int64_t>(t.unsafeGetTensorImpl()); }

inline Record simple(Kind kind, int64_t value, int64_t stream = -1, int32_t device = -1, int32_t stack = -1) {
    Record r;
    r.kind = kind;
    r.value = value;
    r.stream = stream;
    r.device = device;
    r.stack = stack;
    return r;
}

class EventLog {
   public:
    Locked lock() { return Locked(mutex_); }
    std::mutex& mutex() { return mutex_; }

    int64_t next_seq() {
        Locked held = lock();
        return seq_++;
    }
    int64_t peek_seq() {
        Locked held = lock();
        return seq_;
    }

    // A stream's definition, the first time it is seen.
    void see_stream(int64_t stream, int32_t device) {
        Locked held = lock();
        see_stream(held, stream, device);
    }
    void see_stream(const Locked& held, int64_t stream, int32_t device) {
        if (streams_.insert(stream).second) append(held, simple(Kind::Stream, 0, stream, device));
    }

    // Tells this log from every other of the process (a cache of one of its text ids says
    // whose it is).
    uint32_t serial() const { return serial_; }

    // A user stack interned for the first time: its definition, before its first use.
    void define_stack(NewStack&& fresh) {
        Locked held = lock();
        Record r;
        r.kind = Kind::Stack;
        r.value = fresh.id;
        append(held, r);
        stack_frames_.emplace(fresh.id, std::move(fresh.frames));
    }

    // A failure of the hooks, up to the error cap.
    void fail(const char* where, const std::string& message) {
        Locked held = lock();
        if (errors_ >= tables::kMaxErrors) return;
        ++errors_;
        Record r;
        r.kind = Kind::RecorderError;
        r.text = text(held, message);
        r.where = text(held, where);
        append(held, r);
    }

    void append(const Locked&, Record& r) {
        r.seq = seq_++;
        records_.push_back(r);
    }
    void append(const Locked& held, Record&& r) { append(held, r); }

    // An op's reads, writes and index operands, for the record that follows.
    void add_ranges(const Locked&, Record& r, const std::vector<ByteRange>& reads,
                    const std::vector<ByteRange>& writes, const std::vector<ByteRange>& index) {
        r.ranges = static_cast<uint32_t>(ranges_.size());
        r.reads = static_cast<uint32_t>(reads.size());
        r.writes = static_cast<uint32_t>(writes.size());
        r.index = static_cast<uint32_t>(index.size());
        store(reads);
        store(writes);
        store(index);
    }

    // An op's pinned host ranges, after add_ranges (host_op: its reads and writes).
    void add_host_ranges(const Locked&, Record& r, const std::vector<ByteRange>& reads,
                         const std::vector<ByteRange>& writes) {
        r.host_reads = static_cast<uint32_t>(reads.size());
        r.host_writes = static_cast<uint32_t>(writes.size());
        store(reads);
        store(writes);
    }

    // An eager op's read identities (one per read, 0 for a read of other memory), for the
    // record that follows.
    void add_tensors(const Locked&, Record& r, const std::vector<int64_t>& ids) {
        r.tensors = static_cast<uint32_t>(tensor_ids_.size());
        r.tensor_count = static_cast<uint32_t>(ids.size());
        tensor_ids_.insert(tensor_ids_.end(), ids.begin(), ids.end());
    }

    GraphMemory& graph_memory() { return graph_memory_; }

    // An alloc's exact facts, for the record that follows.
    void add_fact(const Locked&, Record& r, const AllocFact& fact) {
        r.fact = static_cast<int32_t>(facts_.size());
        facts_.push_back(fact);
    }

    int32_t text(const Locked&, const std::string& s) {
        auto it = text_ids_.find(s);
        if (it != text_ids_.end()) return it->second;
        int32_t id = static_cast<int32_t>(texts_.size());
        texts_.push_back(s);
        text_ids_.emplace(s, id);
        return id;
    }

    // The records so far as trace event dicts, in seq order (GIL held). Internal fields for
    // the recorder start with an underscore: "_graph", the capture an alloc happened in.
    py::list drain() {
        Taken taken = take();
        py::object out = make_list(taken.records.size(), [&](size_t i) { return as_dict(taken, taken.records[i]); });
        return py::reinterpret_steal<py::list>(out.release());
    }

    // The same records, but those of the kinds the recorder passes through untouched (ops,
    // views, events, syncs: passes_through) as their trace lines, never made into dicts; what
    // a flush to a trace file asks for (GIL held). Returns (the other records as dicts, the
    // lines, their seqs as native int64s, and of the lines: ops with index operands, views,
    // host ops). A drain with a collective gives every record as a dict, since the recorder
    // moves a collective and the events around it (collectives.py). A line is byte for byte
    // what the trace writer makes of the record's dict (trace/json_lines.py): fill() writes
    // both. No Python runs once the records are taken: an exception there (a Ctrl-C) would lose them.
    py::tuple drain_lines() {
        Taken taken = take();
        bool any_collective = false;
        for (size_t i = 0; i < taken.records.size(); ++i) {
            const Record& r = taken.records[i];
            if (r.kind == Kind::Op && is_collective(r.text)) {
                any_collective = true;
                break;
            }
        }
        std::string lines;
        std::vector<int64_t> seqs;
        int64_t index_ops = 0, views = 0, host_ops = 0;
        py::list dicts;
        if (!any_collective) lines.reserve(taken.records.size() * 160);
        for (size_t i = 0; i < taken.records.size(); ++i) {
            const Record& r = taken.records[i];
            if (!any_collective && passes_through(r.kind)) {
                size_t mark = lines.size();
                LineSink sink(*this, lines);
                fill(sink, r, taken);
                if (sink.finish()) {
                    seqs.push_back(r.seq);
                    index_ops += r.kind == Kind::Op && r.index > 0;
                    views += r.kind == Kind::View;
                    host_ops += r.kind == Kind::HostOp;
                    continue;
                }
                lines.resize(mark);  // a text a line cannot hold as the writer would: a dict
            }
            if (PyList_Append(dicts.ptr(), as_dict(taken, r).ptr()) != 0) throw py::error_already_set();
        }
        py::bytes line_bytes(lines.data(), lines.size());
        py::bytes seq_bytes(reinterpret_cast<const char*>(seqs.data()), seqs.size() * sizeof(int64_t));
        return py::make_tuple(dicts, line_bytes, seq_bytes, index_ops, views, host_ops);
    }

   private:
    using Records = Chunked<Record, 512>;
    using Ranges = Chunked<StoredRange, 2048>;
    using Dims = Chunked<int64_t, 8192>;
    // The records since the last drain, with the side tables they index into.
    struct Taken {
        Records records;
        Ranges ranges;
        Dims dims;  // the strided ranges' shapes and strides
        std::vector<AllocFact> facts;
        std::vector<int64_t> tensor_ids;
    };

    // Ranges into the log (mutex held), compact: see StoredRange.
    void store(const std::vector<ByteRange>& ranges) {
        for (const ByteRange& r : ranges) {
            StoredRange& stored = ranges_.emplace_back();
            stored.addr = r.addr;
            if (r.contiguous) {
                stored.size = r.nbytes;
                continue;
            }
            stored.size = r.itemsize;
            stored.ndim = static_cast<int32_t>(r.shape.size());
            size_t first = 0;
            int64_t* run = dims_.append_run(2 * r.shape.size(), first);
            stored.dims = static_cast<uint32_t>(first);
            std::copy(r.shape.begin(), r.shape.end(), run);
            std::copy(r.stride.begin(), r.stride.end(), run + r.shape.size());
        }
    }

    Taken take() {
        Taken taken;
        Locked held = lock();
        taken.records.swap(records_);
        taken.ranges.swap(ranges_);
        taken.dims.swap(dims_);
        taken.facts.swap(facts_);
        taken.tensor_ids.swap(tensor_ids_);
        return taken;
    }

    // The kinds the recorder writes as the hooks made them (event_log.py's ingest only counts
    // some): the others are settled in Python (allocations, frees, kernels), named (streams),
    // kept (stack definitions) or reported (recorder errors).
    static bool passes_through(Kind kind) {
        switch (kind) {
            case Kind::Op:
            case Kind::View:
            case Kind::HostOp:
            case Kind::RecordStream:
            case Kind::EventCreate:
            case Kind::EventDelete:
            case Kind::EventSync:
            case Kind::EventRecord:
            case Kind::EventWait:
            case Kind::StreamSync:
            case Kind::DeviceSync:
            case Kind::Replay:
                return true;
            default:
                return false;
        }
    }

    // Whether an op name ("c10d::allreduce_.default") is a collective's (hook_tables.py's
    // COLLECTIVE_OUTPUTS, as collectives.py's collective_name decides). Cached (GIL held).
    bool is_collective(int32_t id) {
        if (id < 0) return false;
        if (id >= static_cast<int32_t>(collective_texts_.size())) collective_texts_.resize(id + 1, -1);
        if (collective_texts_[id] < 0) {
            std::string name;
            {
                Locked held = lock();
                name = texts_[id].substr(0, texts_[id].find('.'));
            }
            bool found = false;
            for (const char* collective : tables::kCollectives) found = found || name == collective;
            collective_texts_[id] = found ? 1 : 0;
        }
        return collective_texts_[id] == 1;
    }

    // A text as a trace line holds it: its JSON string, or null where the writer would escape
    // something in it (a quote, a backslash, a control or non-ASCII character), which the
    // record then leaves to the dict path. Op names never need it. Cached (GIL held).
    const std::string* line_text(int32_t id) {
        if (id < 0) return nullptr;
        if (id >= static_cast<int32_t>(line_texts_.size())) line_texts_.resize(id + 1);
        LineText& cached = line_texts_[id];
        if (!cached.known) {
            Locked held = lock();
            const std::string& text = texts_[id];
            cached.plain = std::all_of(text.begin(), text.end(),
                                       [](char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; });
            if (cached.plain) cached.json = '"' + text + '"';
            cached.known = true;
        }
        return cached.plain ? &cached.json : nullptr;
    }

    // A record as its dict.
    class DictSink {
       public:
        explicit DictSink(EventLog& log) : log_(log) {}
        template <typename Int>
        void set(PyObject* key, Int value) {
            d_.set(key, value);
        }
        void set_true(PyObject* key) { d_.set_true(key); }
        void kind(PyObject* key, Kind kind) { d_.set(key, py::handle(kind_name(kind))); }
        void text(PyObject* key, int32_t id) { d_.set(key, log_.text_object(id)); }
        void ranges(PyObject* key, const Taken& taken, uint32_t begin, uint32_t n) {
            d_.set(key, range_list(taken, begin, n));
        }
        void ints(PyObject* key, const int64_t* values, size_t n) { d_.set(key, int_list(values, n)); }
        void pool(PyObject* key, uint64_t first, uint64_t second) { d_.set(key, pool_list(first, second)); }
        void empty_list(PyObject* key) { d_.set(key, steal_or_throw(PyList_New(0))); }
        void frames(PyObject* key, const std::vector<UserFrame>& frames) {
            d_.set(key, make_list(frames.size(), [&](size_t i) {
                       const UserFrame& f = frames[i];
                       py::object frame[3] = {py::reinterpret_borrow<py::object>(f.path), int_object(f.line),
                                              py::reinterpret_borrow<py::object>(f.function)};
                       return make_list(3, [&](size_t k) { return std::move(frame[k]); });
                   }));
        }
        py::object take() { return d_.take(); }

       private:
        EventLog& log_;
        EventDict d_;
    };

    // A record as its trace line: json.dumps of its dict with separators (",", ":"), which
    // for the values here (ints, true, ASCII strings that need no escape, lists and dicts of
    // those) is their plain text. What it cannot write as the writer would (a stack's frames,
    // a text line_text refuses) makes finish() false.
    class LineSink {
       public:
        LineSink(EventLog& log, std::string& out) : log_(log), out_(out) {}
        template <typename Int>
        void set(PyObject* key, Int value) {
            static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>, "a bool is set_true");
            name(key);
            number(static_cast<int64_t>(value));
        }
        void set_true(PyObject* key) {
            name(key);
            out_ += "true";
        }
        void kind(PyObject* key, Kind kind) {
            name(key);
            out_ += '"';
            out_ += tables::kKindNames[static_cast<size_t>(kind)];
            out_ += '"';
        }
        void text(PyObject* key, int32_t id) {
            const std::string* json = log_.line_text(id);
            if (json == nullptr) {
                ok_ = false;
                return;
            }
            name(key);
            out_ += *json;
        }
        void ranges(PyObject* key, const Taken& taken, uint32_t begin, uint32_t n) {
            name(key);
            out_ += '[';
            for (uint32_t i = 0; i < n; ++i) {
                const StoredRange& r = taken.ranges[begin + i];
                if (i > 0) out_ += ',';
                out_ += "{\"addr\":";
                number(r.addr);
                if (r.contiguous()) {
                    out_ += ",\"nbytes\":";
                    number(r.size);
                } else {
                    out_ += ",\"shape\":";
                    numbers(r.shape(taken.dims), size_t(r.ndim));
                    out_ += ",\"stride\":";
                    numbers(r.stride(taken.dims), size_t(r.ndim));
                    out_ += ",\"itemsize\":";
                    number(r.size);
                }
                out_ += '}';
            }
            out_ += ']';
        }
        void ints(PyObject* key, const int64_t* values, size_t n) {
            name(key);
            numbers(values, n);
        }
        void pool(PyObject* key, uint64_t first, uint64_t second) {
            name(key);
            out_ += '[';
            out_ += std::to_string(first);
            out_ += ',';
            out_ += std::to_string(second);
            out_ += ']';
        }
        void empty_list(PyObject* key) {
            name(key);
            out_ += "[]";
        }
        void frames(PyObject*, const std::vector<UserFrame>&) { ok_ = false; }
        // Closes the line; false where a field could not be written (the caller drops it).
        bool finish() {
            out_ += "}\n";
            return ok_;
        }

       private:
        // A key: an interned str of a declared field, ASCII.
        void name(PyObject* key) {
            Py_ssize_t size = 0;
            const char* text = PyUnicode_AsUTF8AndSize(key, &size);
            if (text == nullptr) throw py::error_already_set();
            out_ += first_ ? "{\"" : ",\"";
            first_ = false;
            out_.append(text, static_cast<size_t>(size));
            out_ += "\":";
        }
        void number(int64_t value) {
            char buffer[24];
            auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
            out_.append(buffer, end);
        }
        void numbers(const int64_t* values, size_t n) {
            out_ += '[';
            for (size_t i = 0; i < n; ++i) {
                if (i > 0) out_ += ',';
                number(values[i]);
            }
            out_ += ']';
        }

        EventLog& log_;
        std::string& out_;
        bool first_ = true;
        bool ok_ = true;
    };

    py::object text_object(int32_t id) {
        if (id >= static_cast<int32_t>(text_objects_.size())) text_objects_.resize(id + 1);
        py::object& cached = text_objects_[id];
        if (!cached) {
            Locked held = lock();
            cached = py::str(texts_[id]);
        }
        return cached;
    }

    static py::object range_list(const Taken& taken, uint32_t begin, uint32_t n) {
        return make_list(n, [&](size_t i) {
            const StoredRange& r = taken.ranges[begin + i];
            EventDict d;
            d.set(STREAMRACE_KEY("addr"), r.addr);
            if (r.contiguous()) {
                d.set(STREAMRACE_KEY("nbytes"), r.size);
            } else {
                d.set(STREAMRACE_KEY("shape"), int_list(r.shape(taken.dims), size_t(r.ndim)));
                d.set(STREAMRACE_KEY("stride"), int_list(r.stride(taken.dims), size_t(r.ndim)));
                d.set(STREAMRACE_KEY("itemsize"), r.size);
            }
            return d.take();
        });
    }

    // The event kinds' names, interned once (the "ev" of every event); not made, the drain
    // fails and the next one tries again.
    static PyObject* kind_name(Kind kind) {
        static const std::vector<PyObject*> names = [] {
            std::vector<PyObject*> made;
            for (const char* name : tables::kKindNames) made.push_back(interned_or_throw(name));
            return made;
        }();
        return names.at(static_cast<size_t>(kind));
    }

    // One record's fields into a sink, in the order the trace writes them.
    template <typename Sink>
    void fill(Sink& d, const Record& r, const Taken& taken) {
        const std::vector<AllocFact>& facts = taken.facts;
        d.set(STREAMRACE_KEY("seq"), r.seq);
        d.kind(STREAMRACE_KEY("ev"), r.kind);
        auto stack = [&] {
            if (r.stack >= 0) d.set(STREAMRACE_KEY("stack"), r.stack);
        };
        switch (r.kind) {
            case Kind::Stream:
                d.set(STREAMRACE_FIELD("stream", "stream"), r.stream);
                d.set(STREAMRACE_FIELD("device", "stream"), r.device);
                break;
            case Kind::Stack: {
                d.set(STREAMRACE_FIELD("id", "stack"), r.value);
                const std::vector<UserFrame>& frames = stack_frames_.at(static_cast<int>(r.value));
                d.frames(STREAMRACE_FIELD("frames", "stack"), frames);
                break;
            }
            case Kind::Alloc: {
                // Keys in the order the Python hooks write them: the pool, a fact, after the stack.
                const AllocFact* f = r.fact >= 0 ? &facts[static_cast<size_t>(r.fact)] : nullptr;
                d.set(STREAMRACE_FIELD("addr", "alloc"), r.value);
                d.set(STREAMRACE_FIELD("size", "alloc"), f != nullptr ? f->size : 1);  // else the allocator's history gives it, later
                d.set(STREAMRACE_FIELD("stream", "alloc"), f != nullptr ? f->stream : r.stream);
                d.set(STREAMRACE_FIELD("device", "alloc"), r.device);
                stack();
                if (f != nullptr) {  // exact: the allocator's own facts ("_exact" for the recorder)
                    if (f->pool_first != 0 || f->pool_second != 0) {
                        d.pool(STREAMRACE_FIELD("pool", "alloc"), f->pool_first, f->pool_second);
                    }
                    d.set_true(STREAMRACE_FIELD("_exact", "alloc"));
                }
                if (r.graph != 0) d.set(STREAMRACE_FIELD("_graph", "alloc"), r.graph);
                break;
            }
            case Kind::Free:
                d.set(STREAMRACE_FIELD("addr", "free"), r.value);
                d.set(STREAMRACE_FIELD("device", "free"), r.device);
                stack();
                break;
            case Kind::Op:
                d.text(STREAMRACE_FIELD("op", "op"), r.text);
                d.set(STREAMRACE_FIELD("stream", "op"), r.stream);
                d.set(STREAMRACE_FIELD("device", "op"), r.device);
                d.ranges(STREAMRACE_FIELD("reads", "op"), taken, r.ranges, r.reads);
                d.ranges(STREAMRACE_FIELD("writes", "op"), taken, r.ranges + r.reads, r.writes);
                if (r.index > 0) {
                    d.ranges(STREAMRACE_FIELD("index", "op"), taken, r.ranges + r.reads + r.writes, r.index);
                }
                if (r.tensor_count > 0) {
                    d.ints(STREAMRACE_FIELD("tensors", "op"), taken.tensor_ids.data() + r.tensors, r.tensor_count);
                }
                stack();
                {
                    uint32_t host = r.ranges + r.reads + r.writes + r.index;
                    if (r.host_reads > 0) d.ranges(STREAMRACE_FIELD("host_reads", "op"), taken, host, r.host_reads);
                    if (r.host_writes > 0) {
                        d.ranges(STREAMRACE_FIELD("host_writes", "op"), taken, host + r.host_reads, r.host_writes);
                    }
                }
                if (r.host_blocking) d.set_true(STREAMRACE_FIELD("host_blocking", "op"));
                break;
            case Kind::View:
                d.set(STREAMRACE_FIELD("tensor", "view"), r.value);
                d.text(STREAMRACE_FIELD("op", "view"), r.text);
                d.ranges(STREAMRACE_FIELD("ranges", "view"), taken, r.ranges, r.reads);
                if (r.base != 0) d.set(STREAMRACE_FIELD("base", "view"), r.base);
                d.set(STREAMRACE_FIELD("stream", "view"), r.stream);
                d.set(STREAMRACE_FIELD("device", "view"), r.device);
                stack();
                break;
            case Kind::HostOp: {  // an op the host ran on pinned memory: no stream
                d.text(STREAMRACE_FIELD("op", "host_op"), r.text);
                uint32_t host = r.ranges + r.reads + r.writes + r.index;
                d.ranges(STREAMRACE_FIELD("reads", "host_op"), taken, host, r.host_reads);
                d.ranges(STREAMRACE_FIELD("writes", "host_op"), taken, host + r.host_reads, r.host_writes);
                stack();
                break;
            }
            case Kind::RecordStream:
                d.set(STREAMRACE_FIELD("addr", "record_stream"), r.value);
                d.set(STREAMRACE_FIELD("stream", "record_stream"), r.stream);
                d.set(STREAMRACE_FIELD("device", "record_stream"), r.device);
                stack();
                break;
            case Kind::EventCreate:
            case Kind::EventDelete:
            case Kind::EventSync:
                d.set(STREAMRACE_FIELD("event", "event_create", "event_delete", "event_sync"), r.value);
                break;
            case Kind::EventRecord:
            case Kind::EventWait:
                d.set(STREAMRACE_FIELD("event", "event_record", "event_wait"), r.value);
                d.set(STREAMRACE_FIELD("stream", "event_record", "event_wait"), r.stream);
                stack();
                if (r.inferred) d.set_true(STREAMRACE_FIELD("inferred", "event_record"));
                break;
            case Kind::StreamSync:
                d.set(STREAMRACE_FIELD("stream", "stream_sync"), r.stream);
                break;
            case Kind::DeviceSync:
                d.set(STREAMRACE_FIELD("device", "device_sync"), r.device);
                break;
            case Kind::RecorderError:
                d.text(STREAMRACE_FIELD("message", "recorder_error"), r.text);
                d.text(STREAMRACE_FIELD("where", "recorder_error"), r.where);
                break;
            case Kind::Replay:  // the keys in the order the replays part gave them in Python
                d.set(STREAMRACE_FIELD("graph", "replay"), r.graph);
                d.set(STREAMRACE_FIELD("stream", "replay"), r.stream);
                d.set(STREAMRACE_FIELD("device", "replay"), r.device);
                stack();
                break;
            case Kind::Kernel:  // a node no recorded launch made; its accesses come later
                d.set(STREAMRACE_FIELD("graph", "kernel"), r.graph);
                // Its node by handle: the graph's order is known only once the capture ends
                // (CaptureNodes.number gives it its index, "node").
                d.set(STREAMRACE_FIELD("_node_handle", "kernel"), r.value);
                d.text(STREAMRACE_FIELD("name", "kernel"), r.text);
                d.set(STREAMRACE_FIELD("stream", "kernel"), r.stream);
                d.set(STREAMRACE_FIELD("device", "kernel"), r.device);
                d.empty_list(STREAMRACE_FIELD("reads", "kernel"));
                d.empty_list(STREAMRACE_FIELD("writes", "kernel"));
                d.set_true(STREAMRACE_FIELD("inferred", "kernel"));
                stack();
                break;
        }
    }

    py::object as_dict(const Taken& taken, const Record& r) {
        DictSink sink(*this);
        fill(sink, r, taken);
        return sink.take();
    }

    std::mutex mutex_;  // guards everything here and the capture tracker's state
    int64_t seq_ = 0;
    const uint32_t serial_ = [] {
        static std::atomic<uint32_t> logs{0};
        return ++logs;
    }();
    int errors_ = 0;
    Records records_;
    Ranges ranges_;
    Dims dims_;  // the strided ranges' shapes and strides
    std::vector<AllocFact> facts_;
    std::vector<int64_t> tensor_ids_;
    GraphMemory graph_memory_;
    std::unordered_map<int, std::vector<UserFrame>> stack_frames_;
    std::vector<std::string> texts_;
    std::unordered_map<std::string, int32_t> text_ids_;
    std::vector<py::object> text_objects_;  // GIL-guarded
    struct LineText {
        bool known = false, plain = false;
        std::string json;
    };
    std::vector<LineText> line_texts_;      // GIL-guarded
    std::vector<int8_t> collective_texts_;  // GIL-guarded: -1 not asked yet, 0 no, 1 a collective
    std::unordered_set<int64_t> streams_;
};

}  // namespace streamrace
