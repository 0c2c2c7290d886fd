// streamrace._core: the C++ analysis core (pybind11; no torch or CUDA headers).
//
// Python hands it the trace's events, plain dicts in seq order, and gets back the detections
// as they are: the records of engine.h bound as Python classes under the names and fields of
// the Python engine's records (streamrace/analysis/engine.py), which the detectors read alike
// (streamrace/analysis/detectors/; tests/test_core_records.py keeps the two in step). Events
// are taken apart here with the CPython API directly (interned keys, borrowed references):
// reading the dicts is most of the work, and pybind11's generic object wrappers would double
// it. Every call holds the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <string>
#include <string_view>

#include "engine.h"
#include "graph_truth.h"
#include "reader.h"
#include "trace_fields.h"
#include "trace_json_write.h"

namespace py = pybind11;
using namespace streamrace;

// Records and lifetimes are reference counted by hand (records.h); their Python objects hold a Ref.
PYBIND11_DECLARE_HOLDER_TYPE(T, Ref<T>, true)

namespace {

// Every field name of the trace, interned once: the declaration's (trace_fields.h).
struct Keys {
#define STREAMRACE_KEY(field) PyObject* field = nullptr;
    STREAMRACE_TRACE_FIELDS(STREAMRACE_KEY)
#undef STREAMRACE_KEY
} K;

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

[[noreturn]] void fail() { throw py::error_already_set(); }

// What a Mapping that is not a dict handed back from a lookup: it need not hold the value
// (it may make it afresh), so the value is kept here until the event is done with
// (SlowValuesKept, at each entry point that reads events).
std::vector<PyObject*>& slow_values() {
    static auto* values = new std::vector<PyObject*>();  // never destroyed: it may outlive the interpreter's end
    return *values;
}

struct SlowValuesKept {
    const size_t mark = slow_values().size();
    ~SlowValuesKept() {
        auto& values = slow_values();
        while (values.size() > mark) {
            Py_DECREF(values.back());
            values.pop_back();
        }
    }
};

// The value of key, borrowed; null when absent or None (an optional field may be null).
PyObject* get(PyObject* obj, PyObject* key) {
    PyObject* value;
    if (PyDict_Check(obj)) {
        value = PyDict_GetItemWithError(obj, key);
        if (value == nullptr && PyErr_Occurred()) fail();
    } else {  // any other Mapping: the slow path, same answers
        value = PyObject_GetItem(obj, key);
        if (value == nullptr) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) fail();
            PyErr_Clear();
            return nullptr;
        }
        slow_values().push_back(value);  // owned there, for as long as the event is read
    }
    return value == Py_None ? nullptr : value;
}

PyObject* need(PyObject* obj, PyObject* key) {
    PyObject* value = get(obj, key);
    if (value == nullptr) {
        PyErr_SetObject(PyExc_KeyError, key);
        fail();
    }
    return value;
}

i64 as_int(PyObject* value) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) throw std::overflow_error("an integer of the trace does not fit 64 bits");
    if (v == -1 && PyErr_Occurred()) fail();
    return v;
}

// The event's seq, for the execution view's order of issue (the reader checked it is an int
// below 2^63; an event handed over in memory without one counts as seq 0).
i64 seq_of(PyObject* ev) {
    PyObject* value = get(ev, K.seq);
    if (value == nullptr || !PyLong_Check(value)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return overflow > 0 ? LLONG_MAX : LLONG_MIN;
    if (v == -1 && PyErr_Occurred()) fail();
    return v;
}

// Is the field there and true, as Python's `if ev.get(key)` has it?
bool truthy(PyObject* ev, PyObject* key) {
    PyObject* value = get(ev, key);
    if (value == nullptr) return false;
    int yes = PyObject_IsTrue(value);
    if (yes < 0) fail();
    return yes != 0;
}

// A number of a byte range or a block: one beyond 64 bits makes a range outside [0, 2^62).
i64 as_range_int(PyObject* value) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) too_large();
    if (v == -1 && PyErr_Occurred()) fail();
    return v;
}

ByteRange normalize(PyObject* raw) {
    i64 addr = as_range_int(need(raw, K.addr));
    if (PyObject* nbytes = get(raw, K.nbytes)) return interval(addr, as_range_int(nbytes));
    PyObject* shape = need(raw, K.shape);
    PyObject* stride = need(raw, K.stride);
    i64 itemsize = as_range_int(need(raw, K.itemsize));
    Py_ssize_t n = PyObject_Length(shape), m = PyObject_Length(stride);
    if (n < 0 || m < 0) fail();
    if (n != m) throw py::value_error("range 'shape' and 'stride' differ in length");
    std::vector<i64> dims(n), steps(n);
    for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* a = PySequence_GetItem(shape, k);
        PyObject* b = PySequence_GetItem(stride, k);
        if (a == nullptr || b == nullptr) fail();
        int overflow_a = 0, overflow_b = 0;
        dims[k] = PyLong_AsLongLongAndOverflow(a, &overflow_a);
        steps[k] = PyLong_AsLongLongAndOverflow(b, &overflow_b);
        Py_DECREF(a);
        Py_DECREF(b);
        if (overflow_a || overflow_b) too_large();
        if ((dims[k] == -1 || steps[k] == -1) && PyErr_Occurred()) fail();
    }
    return normalize_strided(addr, dims, steps, itemsize);
}

// The graph check's side of a run (defined below Core): a GraphCollector.observe iterator
// handed to Core::run is unwrapped, so that each launch's ranges are read once, by the engine,
// and handed to the capture the collector keeps them for.
struct Capture;
class GraphCollector;
Capture* collect(PyObject* events, PyObject* ev);  // the capture ev's ranges go to, if any
PyObject* observed_source(PyObject* events);       // an observer's events, else null
void capture_range(Capture* capture, const ByteRange& range, bool write);
// The capture a launch the direct reader took goes to (GraphCollector::feed_launch), if any.
Capture* collect_launch(PyObject* events, bool kernel, const trace_tree::Node* graph, i64 seq, i64 stream,
                        const HeldEvent& event);

// The cyclic garbage collector waits while a run feeds the engine: the events are JSON trees,
// the run makes no cycle, and each collection would walk again every event the engine still
// holds (a tenth of an analysis streamed from a file). Reference counting frees as before.
struct CollectorPaused {
    const int was = PyGC_Disable();
    CollectorPaused() = default;
    CollectorPaused(const CollectorPaused&) = delete;
    CollectorPaused& operator=(const CollectorPaused&) = delete;
    ~CollectorPaused() {
        if (was) PyGC_Enable();
    }
};

class Core {
   public:
    Core(py::dict stacks, bool copy_events) : stacks_(std::move(stacks)) { engine_.copy_events(copy_events); }

    // One event; a range or block outside [0, 2^62) is refused naming the event's seq, in the
    // words of the Python engine (RangeLimit is streamrace.errors.TraceLimitError there).
    void feed(py::handle ev_handle) {
        SlowValuesKept kept;
        try {
            feed_event(ev_handle.ptr());
        } catch (const RangeLimit& e) {
            PyObject* seq = get(ev_handle.ptr(), K.seq);
            py::str shown = seq != nullptr ? py::str(seq) : py::str("None");
            throw RangeLimit("event seq " + std::string(shown) + ": " + e.what());
        }
    }

    // A graph event's event record and wait nodes (those naming their event, format 1.6).
    void graph_read(PyObject* ev) {
        static PyObject* const type_key = intern("type");
        PyObject* nodes = need(ev, K.nodes);
        std::vector<i64> records, waits;
        py::object iterator = py::reinterpret_steal<py::object>(PyObject_GetIter(nodes));
        if (!iterator) fail();
        while (PyObject* raw = PyIter_Next(iterator.ptr())) {
            py::object node = py::reinterpret_steal<py::object>(raw);
            PyObject* event = get(node.ptr(), K.event);
            if (event == nullptr || event == Py_None) continue;
            PyObject* type = get(node.ptr(), type_key);
            if (type == nullptr || !PyUnicode_Check(type)) continue;
            if (PyUnicode_CompareWithASCIIString(type, "eventrecord") == 0) {
                records.push_back(as_int(event));
            } else if (PyUnicode_CompareWithASCIIString(type, "waitevent") == 0) {
                waits.push_back(as_int(event));
            }
        }
        if (PyErr_Occurred()) fail();
        engine_.hb.graph_read(as_int(need(ev, K.graph)), std::move(records), std::move(waits));
    }

    void feed_event(PyObject* ev) {
        ++events_;
        PyObject* stream_obj = get(ev, K.stream);
        i64 stream = 0;
        if (stream_obj != nullptr) {
            stream = as_int(stream_obj);
            engine_.appear(stream);
        }
        Py_ssize_t len;
        const char* text = PyUnicode_AsUTF8AndSize(need(ev, K.ev), &len);
        if (text == nullptr) fail();
        std::string_view kind(text, len);
        if (kind == "op" || kind == "kernel") {
            op(ev, kind == "op", stream_obj != nullptr, stream);
        } else if (kind == "alloc") {
            engine_.alloc(EventRef(ev), as_range_int(need(ev, K.addr)), as_range_int(need(ev, K.size)), need_stream(stream_obj, stream),
                          device(ev, stream_obj != nullptr, stream), seq_of(ev), truthy(ev, K.pool));
        } else if (kind == "free") {
            engine_.free(EventRef(ev), as_int(need(ev, K.addr)), device(ev, stream_obj != nullptr, stream), seq_of(ev));
        } else if (kind == "event_record") {
            engine_.hb.record(as_int(need(ev, K.event)), engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_wait") {
            engine_.hb.wait(as_int(need(ev, K.event)), engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_create" || kind == "event_delete") {
            engine_.hb.forget(as_int(need(ev, K.event)));
        } else if (kind == "record_stream") {
            i64 s = need_stream(stream_obj, stream);
            engine_.record_stream(EventRef(ev), as_int(need(ev, K.addr)), s, device(ev, stream_obj != nullptr, stream));
        } else if (kind == "stream") {
            i64 s = need_stream(stream_obj, stream);
            PyObject* name = get(ev, K.name);
            if (name != nullptr) {
                int truthy = PyObject_IsTrue(name);
                if (truthy < 0) fail();
                if (truthy) set(names_, stream_obj, name);
            }
            if (PyObject* dev = get(ev, K.device)) engine_.set_device(s, as_int(dev), false);
        } else if (kind == "stack") {
            set(stacks_, need(ev, K.id), need(ev, K.frames));
        } else if (kind == "capture_begin") {
            i64 s = need_stream(stream_obj, stream);
            if (PyObject* dev = get(ev, K.device)) engine_.set_device(s, as_int(dev), true);
            i64 graph = as_int(need(ev, K.graph));
            engine_.capture_begin(graph, s);
            py::int_ key(s);  // the graphs captured on each stream, for the fixes' words
            if (!captures_.contains(key)) captures_[key] = py::list();
            captures_[key].cast<py::list>().append(py::int_(graph));
        } else if (kind == "capture_end") {
            engine_.capture_end(as_int(need(ev, K.graph)), truthy(ev, K.aborted));
        } else if (kind == "replay") {
            i64 graph = as_int(need(ev, K.graph));
            engine_.replay(ev, graph, need_stream(stream_obj, stream), seq_of(ev));
        } else if (kind == "graph") {
            graph_read(ev);
        } else if (kind == "graph_reset" || kind == "graph_destroy") {
            engine_.graph_gone(as_int(need(ev, K.graph)));
        } else if (kind == "stream_sync") {
            engine_.hb.stream_sync(engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_sync") {
            engine_.hb.event_sync(as_int(need(ev, K.event)));
        } else if (kind == "device_sync") {
            engine_.hb.device_sync();
        } else if (kind == "library_call") {
            // Kept as it is for the library protocols, which judge findings once they are made.
            if (PyList_Append(library_calls_.ptr(), ev) < 0) fail();
        }
        // `graph` and `recorder_error` do not take part in v1
    }

    // Feed every event of an iterable; progress(events, ops, accesses, graphs) every `every`.
    void run(py::iterable events, py::object progress, i64 every) {
        CollectorPaused paused;
        watcher_ = observed_source(events.ptr()) != nullptr ? events.ptr() : nullptr;
        PyObject* it = PyObject_GetIter(watcher_ != nullptr ? observed_source(watcher_) : events.ptr());
        if (it == nullptr) fail();
        py::object iterator = py::reinterpret_steal<py::object>(it);
        while (PyObject* ev = PyIter_Next(it)) {
            py::object owned = py::reinterpret_steal<py::object>(ev);
            feed_watched(ev);
            fed(progress, every);
        }
        if (PyErr_Occurred()) fail();
    }

    // Feed the rest of a trace from its C++ line reader (the direct reader): a line it takes
    // (reader::accept_tree) is read from its tree, and kept, where the engine keeps it, as a
    // copy made from the tree; no Python object is made for it unless a finding names it.
    // Every other line goes as it would to run(): its Python event, or the reader's error.
    //
    // `reads` and `see`, where given: the events Python passes read, taken one at a time
    // (analysis/event_order.py's EventWatch, merged): kind -> None (every event of it) or the
    // fields one of which must be there and true; `see` is called with each such event, before
    // the engine reads it. Only those events of the lines read here are made into objects.
    void run_lines(py::handle lines, py::object progress, i64 every, py::object observer, py::object reads,
                   py::object see) {
        if (Py_TYPE(lines.ptr()) != reader::line_reader_type) throw py::type_error("run_lines takes a line_reader");
        if (!observer.is_none() && observed_source(observer.ptr()) == nullptr)
            throw py::type_error("run_lines' observer must be a GraphCollector's");
        watch(reads, see);
        auto* r = reinterpret_cast<reader::LineReader*>(lines.ptr());
        CollectorPaused paused;
        watcher_ = observer.is_none() ? nullptr : observer.ptr();
        const char *begin, *end;
        while (reader::next_line(r, begin, end)) {
            const bool cut = reader::cut(r, begin, end);
            const reader::KindCheck* taken = cut ? nullptr : reader::accept_tree(r, begin, end);
            if (taken != nullptr) {
                feed_tree(*r->tree, taken->id);
            } else {
                PyObject* ev = reader::read_event(r, begin, end, cut);
                if (ev == nullptr) fail();
                py::object owned = py::reinterpret_steal<py::object>(ev);
                if (ev == Py_None) continue;  // a line that holds no event
                see_event(ev);
                feed_watched(ev);
            }
            fed(progress, every);
        }
        if (PyErr_Occurred()) fail();
    }

    // After each event of run() and run_lines(): progress every `every`, and Ctrl-C heard
    // (iterating a list or reading lines runs no Python code, so it would wait for the end).
    void fed(py::object& progress, i64 every) {
        if (!progress.is_none() && events_ % every == 0) report(progress);
        if (events_ % 4096 == 0 && PyErr_CheckSignals() != 0) fail();
    }

    // The passes' wants (run_lines' `reads`), by kind.
    void watch(py::object reads, py::object see) {
        wants_.assign(size_t(reader::EventKind::NONE) + 1, Want{});
        see_ = see;
        reads_ = reads.is_none() ? py::dict() : py::dict(reads);
        for (auto [kind, fields] : reads_) {
            const reader::EventKind id = reader::event_kind(py::str(kind).cast<std::string>());
            if (id == reader::EventKind::NONE) continue;  // never a tree's: seen as a Python event
            Want& want = wants_[size_t(id)];
            want.any = true;
            if (fields.is_none()) {
                want.all = true;
                continue;
            }
            for (py::handle field : fields) want.fields.push_back(field.cast<std::string>());
        }
        for (Want& want : wants_)
            for (const std::string& name : want.fields) want.keys.emplace_back(name);
    }

    // A Python event to the passes, if they read its kind.
    void see_event(PyObject* ev) {
        if (see_.is_none()) return;
        PyObject* kind = get(ev, K.ev);
        if (kind == nullptr) return;
        const int wanted = PyDict_Contains(reads_.ptr(), kind);
        if (wanted < 0) fail();
        if (wanted) see_(py::handle(ev));
    }

    // A tree's event to the passes, made into its object, if they read it.
    void see_tree(const trace_tree::Tree& t, reader::EventKind kind, const EventRef& event) {
        if (see_.is_none()) return;
        const Want& want = wants_[size_t(kind)];
        if (!want.any) return;
        bool wanted = want.all;
        for (size_t i = 0; !wanted && i < want.keys.size(); ++i) wanted = tree_truthy(t.get(0, want.keys[i]));
        if (!wanted) return;
        PyObject* ev = event.object();
        if (ev == nullptr) fail();
        see_(py::handle(ev));
    }

    void report(py::object& progress) {
        progress(events_, engine_.ops, engine_.accesses, engine_.graphs, engine_.replays);
    }

    // The detections, in detection order (the classes bound below).
    py::list detections() {
        py::list out;
        for (const Detection& d : engine_.detections)
            std::visit([&](const auto& record) { out.append(py::cast(record)); }, d);
        return out;
    }

    py::dict appearance() const {
        py::dict out;
        const auto& handles = engine_.handles();
        for (size_t i = 0; i < handles.size(); ++i) out[py::int_(handles[i])] = py::int_(i);
        return out;
    }

    py::dict names() const { return names_; }
    py::dict captures() const { return captures_; }
    py::dict stacks() const { return stacks_; }
    py::list library_calls() const { return library_calls_; }
    i64 events() const { return events_; }
    i64 graphs() const { return engine_.graphs; }
    i64 ops() const { return engine_.ops; }
    i64 accesses() const { return engine_.accesses; }
    i64 replays() const { return engine_.replays; }
    i64 unknown_replays() const { return engine_.unknown_replays; }
    size_t remembered() const { return engine_.remembered(); }

   private:
    void op(PyObject* ev, bool is_op, bool has_stream, i64 stream) {
        if (is_op) ++engine_.ops;
        // Held at once: the next lookup may run Python code (a key's __eq__).
        py::object reads = py::reinterpret_borrow<py::object>(need(ev, K.reads));
        py::object writes = py::reinterpret_borrow<py::object>(need(ev, K.writes));
        PyObject* lists[2] = {reads.ptr(), writes.ptr()};
        PyObject* fast[2];
        for (int w = 0; w < 2; ++w) {
            fast[w] = PySequence_Fast(lists[w], "'reads' and 'writes' must be lists");
            if (fast[w] == nullptr) {
                if (w == 1) Py_DECREF(fast[0]);
                fail();
            }
        }
        py::object hold0 = py::reinterpret_steal<py::object>(fast[0]);
        py::object hold1 = py::reinterpret_steal<py::object>(fast[1]);
        engine_.accesses += PySequence_Fast_GET_SIZE(fast[0]) + PySequence_Fast_GET_SIZE(fast[1]);
        if (!has_stream) return;  // a kernel node nobody placed on a stream: nothing to order it by
        engine_.begin_op(stream, device(ev, true, stream), seq_of(ev), is_op);
        const EventRef event(ev);
        for (int w = 0; w < 2; ++w) {
            // A range's lookups may run Python code (a key's __eq__) that changes the list: its
            // size is read again each time, and the range is held while it is read.
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast[w]); ++i) {
                py::object item = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(fast[w], i));
                ByteRange rng = normalize(item.ptr());
                if (rng.empty()) continue;
                if (sink_ != nullptr) capture_range(sink_, rng, w == 1);
                engine_.access(event, item.ptr(), unsigned(i), std::move(rng), w == 1);
            }
        }
    }

    // One event the direct reader took. The kinds whose fields the engine reads are read
    // from the tree; any other kind, or a field as the tree cannot tell it (a bool for an
    // int, a field missing that feed_event needs), goes to feed() as its Python event, made
    // from the copy: the same object the reader would have handed over.
    void feed_tree(const trace_tree::Tree& t, reader::EventKind kind) {
        using trace_tree::Kind;
        using trace_tree::Node;
        encoder_.clear();
        t.encode(encoder_);
        const EventRef event(HeldEvent::encoded(encoder_.data(), encoder_.size()));
        see_tree(t, kind, event);
        const reader::TreeValues a{t};
        i64 seq = 0;
        a.int64(t.get(0, reader::TreeKeys::get().seq), seq);  // the reader checked it
        try {
            if (feed_read(t, a, event, seq, kind)) return;
        } catch (const RangeLimit& e) {
            throw RangeLimit("event seq " + std::to_string(seq) + ": " + e.what());
        }
        PyObject* ev = event.object();
        if (ev == nullptr) fail();
        feed_watched(ev);
    }

    // feed(), the graph check's collector (run_lines' observer, if any) seeing the event first.
    void feed_watched(PyObject* ev) {
        sink_ = watcher_ != nullptr ? collect(watcher_, ev) : nullptr;
        feed(ev);
        sink_ = nullptr;
    }

    // feed_event's work for the kinds it reads from a tree; false, having changed nothing,
    // for one it leaves to feed().
    bool feed_read(const trace_tree::Tree& t, const reader::TreeValues& a, const EventRef& event, i64 seq,
                   reader::EventKind kind) {
        using Kind = reader::EventKind;
        using trace_tree::Node;
        const reader::TreeKeys& keys = reader::TreeKeys::get();
        auto field = [&](const trace_tree::Key& key) { return t.get(0, key); };
        // An int field (absent or null: `fallback` unless optional), as feed_event reads it.
        bool ok = true;
        auto int_of = [&](const trace_tree::Key& key, bool optional, i64& out) {
            const Node* n = field(key);
            if (reader::TreeValues::absent(n)) {
                ok = ok && optional;
                return false;
            }
            ok = ok && a.int64(n, out);
            return true;
        };
        i64 stream = 0, device = 0, addr = 0, size = 0, id = 0;
        const bool has_stream = int_of(keys.stream, true, stream);
        const bool has_device = int_of(keys.device, true, device);
        if (!ok) return false;
        auto device_of = [&]() { return has_device ? device : (has_stream ? engine_.device_of(stream) : 0); };
        if (kind == Kind::op || kind == Kind::kernel) {
            const Node* reads = field(keys.reads);
            const Node* writes = field(keys.writes);
            if (reads == nullptr || writes == nullptr || reads->kind != trace_tree::Kind::LIST ||
                writes->kind != trace_tree::Kind::LIST)
                return false;
            begin(has_stream, stream);
            if (kind == Kind::op) ++engine_.ops;
            engine_.accesses += i64(reads->size) + i64(writes->size);
            if (!has_stream) return true;
            // The graph check's collector gets the launch, and below, its ranges.
            sink_ = watcher_ != nullptr ? collect_launch(watcher_, kind == Kind::kernel, field(keys.graph), seq, stream,
                                                         event.copied())
                                        : nullptr;
            engine_.begin_op(stream, device_of(), seq, kind == Kind::op);
            const Node* lists[2] = {reads, writes};
            for (int w = 0; w < 2; ++w) {
                unsigned index = 0;
                for (unsigned j = t.first(t.index(lists[w])); j < lists[w]->end; j = t.at(j).end, ++index) {
                    ByteRange rng = normalize_tree(t, a, t.at(j));
                    if (rng.empty()) continue;
                    if (sink_ != nullptr) capture_range(sink_, rng, w == 1);
                    engine_.access(event, nullptr, index, std::move(rng), w == 1);
                }
            }
            sink_ = nullptr;
        } else if (kind == Kind::alloc) {
            int_of(keys.addr, false, addr);
            int_of(keys.size, false, size);
            if (!ok || !has_stream) return false;
            begin(has_stream, stream);
            engine_.alloc(event, addr, size, stream, device_of(), seq, tree_truthy(field(keys.pool)));
        } else if (kind == Kind::free) {
            int_of(keys.addr, false, addr);
            if (!ok) return false;
            begin(has_stream, stream);
            engine_.free(event, addr, device_of(), seq);
        } else if (kind == Kind::event_record || kind == Kind::event_wait) {
            int_of(keys.event, false, id);
            if (!ok || !has_stream) return false;
            begin(has_stream, stream);
            const unsigned index = engine_.appear(stream);
            if (kind == Kind::event_record)
                engine_.hb.record(id, index);
            else
                engine_.hb.wait(id, index);
        } else if (kind == Kind::event_create || kind == Kind::event_delete || kind == Kind::event_sync) {
            int_of(keys.event, false, id);
            if (!ok) return false;
            begin(has_stream, stream);
            if (kind == Kind::event_sync)
                engine_.hb.event_sync(id);
            else
                engine_.hb.forget(id);
        } else if (kind == Kind::record_stream) {
            int_of(keys.addr, false, addr);
            if (!ok || !has_stream) return false;
            begin(has_stream, stream);
            engine_.record_stream(event, addr, stream, device_of());
        } else if (kind == Kind::stream_sync) {
            if (!has_stream) return false;
            begin(has_stream, stream);
            engine_.hb.stream_sync(engine_.appear(stream));
        } else if (kind == Kind::device_sync) {
            begin(has_stream, stream);
            engine_.hb.device_sync();
        } else {
            return false;
        }
        return true;
    }

    // What feed_event does first for every event.
    void begin(bool has_stream, i64 stream) {
        ++events_;
        if (has_stream) engine_.appear(stream);
    }

    // normalize() of a range the reader checked (an int addr, and an int nbytes or a shape,
    // stride and itemsize of ints).
    static ByteRange normalize_tree(const trace_tree::Tree& t, const reader::TreeValues& a, const trace_tree::Node& raw) {
        const reader::TreeKeys& keys = reader::TreeKeys::get();
        const unsigned at = t.index(&raw);
        i64 addr = 0, nbytes = 0, itemsize = 0;
        a.int64(t.get(at, keys.addr), addr);
        if (a.int64(t.get(at, keys.nbytes), nbytes)) return interval(addr, nbytes);
        const trace_tree::Node* shape = t.get(at, keys.shape);
        const trace_tree::Node* stride = t.get(at, keys.stride);
        a.int64(t.get(at, keys.itemsize), itemsize);
        std::vector<i64> dims, steps;
        for (unsigned j = t.first(t.index(shape)); j < shape->end; j = t.at(j).end) dims.push_back(t.at(j).value);
        for (unsigned j = t.first(t.index(stride)); j < stride->end; j = t.at(j).end) steps.push_back(t.at(j).value);
        return normalize_strided(addr, dims, steps, itemsize);
    }

    // Python's truth of the value (absent: false), as `if ev.get(key)` has it.
    static bool tree_truthy(const trace_tree::Node* n) {
        using trace_tree::Kind;
        if (n == nullptr) return false;
        switch (n->kind) {
            case Kind::NUL:
            case Kind::FALSE:
                return false;
            case Kind::TRUE:
                return true;
            case Kind::INT:
                return n->value != 0;
            default:
                return n->size != 0;
        }
    }

    static i64 need_stream(PyObject* stream_obj, i64 stream) {
        if (stream_obj == nullptr) {
            PyErr_SetObject(PyExc_KeyError, K.stream);
            fail();
        }
        return stream;
    }

    // The event's device, else its stream's, else 0.
    i64 device(PyObject* ev, bool has_stream, i64 stream) const {
        if (PyObject* dev = get(ev, K.device)) return as_int(dev);
        return has_stream ? engine_.device_of(stream) : 0;
    }

    static void set(py::dict& dict, PyObject* key, PyObject* value) {
        if (PyDict_SetItem(dict.ptr(), key, value) < 0) fail();
    }

    Engine engine_;
    py::dict stacks_;
    py::dict names_;
    py::list library_calls_;
    py::dict captures_;  // stream -> the graphs captured on it, in order
    i64 events_ = 0;
    Capture* sink_ = nullptr;  // where the current launch's ranges also go (the graph check's)
    held::Encoder encoder_;    // the direct reader's copies are written here first
    PyObject* watcher_ = nullptr;  // run_lines' observer (the graph check's collector), if any
    // What the Python passes read (run_lines' reads and see), by event kind.
    struct Want {
        bool any = false, all = false;
        std::vector<std::string> fields;
        std::vector<trace_tree::Key> keys;  // of fields
    };
    std::vector<Want> wants_;
    py::dict reads_;
    py::object see_ = py::none();
};

// The records as Python sees them: each class mirrors the Python engine's record of its name
// (its docstring says which), and shows each field as that record holds it.
py::object domain(i64 d) { return d == EAGER ? py::none() : py::object(py::int_(d)); }

py::object object(PyObject* p) { return p ? py::reinterpret_borrow<py::object>(p) : py::none(); }

// A held event as Python sees it (a copy is made again on first use); borrowed.
PyObject* made(const HeldEvent& event) {
    PyObject* ev = event.get();
    if (ev == nullptr && event) fail();
    return ev;
}

// The range of a record whose event is a copy: its op's index-th read or write, found again.
PyObject* raw_of(const Rec& r) {
    made(r.event);
    return r.event.item(r.write ? 1 : 0, r.index);
}

py::object overlap(Overlap how) {
    // The Python engine's enum, imported on first use and kept for the life of the process.
    static PyObject* const type =
        py::object(py::module_::import("streamrace.analysis.ranges").attr("Overlap")).release().ptr();
    return py::reinterpret_borrow<py::object>(type)(int(how));
}

void bind_records(py::module_& m) {
    py::class_<Rec, Ref<Rec>>(m, "AccessRecord", "Mirrors streamrace.analysis.shadow.AccessRecord.")
        .def_readonly("order", &Rec::order)
        .def_readonly("stream", &Rec::stream)
        .def_readonly("tick", &Rec::tick)
        .def_readonly("write", &Rec::write)
        .def_property_readonly("domain", [](const Rec& r) { return domain(r.domain); })
        .def_readonly("device", &Rec::device)
        .def_property_readonly("event", [](const Rec& r) { return object(made(r.event)); })
        .def_property_readonly("raw", [](const Rec& r) { return object(r.raw != nullptr ? r.raw : raw_of(r)); })
        .def_property_readonly("replay", [](const Rec& r) { return object(r.replay); });
    py::class_<Lifetime, Ref<Lifetime>>(m, "Lifetime", "Mirrors streamrace.analysis.lifetimes.Lifetime.")
        .def_readonly("id", &Lifetime::id)
        .def_readonly("addr", &Lifetime::addr)
        .def_readonly("size", &Lifetime::size)
        .def_readonly("owner", &Lifetime::owner)
        .def_readonly("device", &Lifetime::device)
        .def_property_readonly("alloc", [](const Lifetime& l) { return object(made(l.alloc)); })
        .def_property_readonly("free", [](const Lifetime& l) { return object(made(l.free)); })
        .def_property_readonly("domain", [](const Lifetime& l) { return domain(l.domain); })
        .def_property_readonly("end", &Lifetime::end)
        .def_readonly("kept", &Lifetime::kept);
    py::class_<Race, std::shared_ptr<Race>>(m, "Race", "Mirrors streamrace.analysis.engine.Race.")
        .def_readonly("earlier", &Race::earlier)
        .def_readonly("later", &Race::later)
        .def_property_readonly("how", [](const Race& d) { return overlap(d.how); })
        .def_readonly("lifetime", &Race::lifetime)
        .def_readonly("reused", &Race::reused);
    py::class_<UnsafeFree, std::shared_ptr<UnsafeFree>>(m, "UnsafeFree", "Mirrors streamrace.analysis.engine.UnsafeFree.")
        .def_readonly("use", &UnsafeFree::use)
        .def_readonly("lifetime", &UnsafeFree::lifetime)
        .def_property_readonly("domain", [](const UnsafeFree& d) { return domain(d.domain); })
        .def_readonly("racer", &UnsafeFree::racer)
        .def_property_readonly("how", [](const UnsafeFree& d) { return overlap(d.how); })
        .def_readonly("reused", &UnsafeFree::reused)
        .def_readonly("pending", &UnsafeFree::pending);
    py::class_<RecordStreamNoop, std::shared_ptr<RecordStreamNoop>>(
        m, "RecordStreamNoop", "Mirrors streamrace.analysis.engine.RecordStreamNoop.")
        .def_property_readonly("event", [](const RecordStreamNoop& d) { return object(made(d.event)); })
        .def_readonly("lifetime", &RecordStreamNoop::lifetime)
        .def_property_readonly("domain", [](const RecordStreamNoop& d) { return domain(d.domain); })
        .def_readonly("users", &RecordStreamNoop::users);
    py::class_<StaleRead, std::shared_ptr<StaleRead>>(m, "StaleRead", "Mirrors streamrace.analysis.engine.StaleRead.")
        .def_readonly("reader", &StaleRead::reader)
        .def_readonly("writer", &StaleRead::writer)
        .def_readonly("read_lifetime", &StaleRead::read_lifetime)
        .def_readonly("write_lifetime", &StaleRead::write_lifetime)
        .def_readonly("count", &StaleRead::count);
    py::class_<GraphInputFreed, std::shared_ptr<GraphInputFreed>>(
        m, "GraphInputFreed", "Mirrors streamrace.analysis.engine.GraphInputFreed.")
        .def_readonly("graph", &GraphInputFreed::graph)
        .def_readonly("use", &GraphInputFreed::use)
        .def_readonly("lifetime", &GraphInputFreed::lifetime)
        .def_property_readonly("replay", [](const GraphInputFreed& d) { return object(d.replay.get()); })
        .def_readonly("clobbered", &GraphInputFreed::clobbered)
        .def_readonly("count", &GraphInputFreed::count)
        .def_readonly("reused", &GraphInputFreed::reused)
        .def_readonly("reuser", &GraphInputFreed::reuser);
}

// The graph check's node index: launch seq -> the ids of its nodes, in creation order (what
// graph_truth.py keeps as a dict), as (seq, id) pairs sorted by seq.
class NodeIndex {
   public:
    std::vector<std::pair<i64, i64>> ids;

    bool contains(py::handle seq) const { return !find(seq).empty(); }

    py::list at(py::handle seq) const {
        py::list out;
        for (const auto& [_, id] : find(seq)) out.append(id);
        if (out.empty()) throw py::key_error(py::repr(seq));
        return out;
    }

   private:
    struct Span {
        const std::pair<i64, i64>*first, *last;
        bool empty() const { return first == last; }
        const std::pair<i64, i64>* begin() const { return first; }
        const std::pair<i64, i64>* end() const { return last; }
    };
    Span find(py::handle seq) const {
        if (!PyLong_Check(seq.ptr())) return {nullptr, nullptr};
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(seq.ptr(), &overflow);
        if (v == -1 && PyErr_Occurred()) fail();
        if (overflow) return {nullptr, nullptr};
        auto key = [](const std::pair<i64, i64>& p, i64 s) { return p.first < s; };
        auto lo = std::lower_bound(ids.begin(), ids.end(), v, key);
        auto hi = lo;
        while (hi != ids.end() && hi->first == v) ++hi;
        return {ids.data() + (lo - ids.begin()), ids.data() + (hi - ids.begin())};
    }
};

// An exact int that fits 64 bits, into `out`; false for anything else (bool included).
bool exact_int(PyObject* value, i64& out) {
    if (value == nullptr || !PyLong_CheckExact(value)) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (out == -1 && PyErr_Occurred()) fail();
    return !overflow;
}

// One capture's launches as the graph check needs them, taken as each launch goes by: its dict
// is in the cache then (read again at the end, a capture of thousands of launches costs a
// cache miss per field), and when the engine runs alongside, its own reading of the ranges.
struct Capture {
    // The launches, in program order: each the event itself, or the direct reader's copy of it
    // (made into a Python object only where the check names it: Launches below).
    std::vector<HeldEvent> events;
    std::vector<i64> seqs, streams;
    std::vector<graph_truth::Access> accesses;  // `launch` = position in `events`
    std::vector<ByteRange> strided;
    bool unusual = false;  // a number beyond the C++ core's 64 (62) bits

    void add_launch(PyObject* ev) {
        i64 seq = 0, stream = 0;
        const bool usual = exact_int(need(ev, K.seq), seq) && exact_int(need(ev, K.stream), stream);
        add_launch(HeldEvent::live(ev), seq, stream, usual);
    }

    void add_launch(HeldEvent ev, i64 seq, i64 stream, bool usual = true) {
        events.push_back(std::move(ev));
        unusual = unusual || !usual;
        seqs.push_back(seq);
        streams.push_back(stream);
    }

    // A range of the launch added last; `range` not empty.
    void add_range(const ByteRange& range, bool write) {
        int lattice = -1;
        if (!range.dense()) {
            lattice = int(strided.size());
            strided.push_back(range);
        }
        accesses.push_back({range.lo, range.hi, int(seqs.size()) - 1, lattice, write});
    }

    // A launch and its ranges, read here.
    void add(PyObject* ev) {
        add_launch(ev);
        py::object reads = py::reinterpret_borrow<py::object>(need(ev, K.reads));  // held, as in Core::op
        py::object writes = py::reinterpret_borrow<py::object>(need(ev, K.writes));
        PyObject* lists[2] = {reads.ptr(), writes.ptr()};
        for (int w = 0; w < 2; ++w) {
            py::object fast =
                py::reinterpret_steal<py::object>(PySequence_Fast(lists[w], "'reads' and 'writes' must be lists"));
            if (!fast) fail();
            for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(fast.ptr()); ++r) {
                py::object item = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(fast.ptr(), r));
                try {
                    ByteRange range = normalize(item.ptr());
                    if (!range.empty()) add_range(range, w == 1);
                } catch (const std::overflow_error&) {
                    unusual = true;
                }
            }
        }
    }
};

// graph_truth.py's GraphReach + unordered_conflicts for one capture: (NodeIndex, [(i, j)]),
// i < j positions in the capture's launches of an unordered conflicting pair; None when the
// graph is one this fast path leaves to the Python reference (ids not 0..n-1 in creation
// order, anything the trace format forbids, numbers beyond 64 bits), which then either
// reports it (GraphInvalid) or checks it.
py::object check_capture(Capture& capture, PyObject* graph_ev) {
    PyObject* nodes = get(graph_ev, K.nodes);
    PyObject* edges = get(graph_ev, K.edges);
    if (capture.unusual || nodes == nullptr || edges == nullptr || !PyList_Check(nodes) || !PyList_Check(edges))
        return py::none();
    const int count = int(capture.seqs.size());
    std::vector<std::pair<i64, i64>> stream_of;  // (launch seq, stream), by seq
    stream_of.reserve(count);
    for (int i = 0; i < count; ++i) stream_of.push_back({capture.seqs[i], capture.streams[i]});
    auto by_seq = [](const auto& a, const auto& b) { return a.first < b.first; };
    if (!std::is_sorted(stream_of.begin(), stream_of.end(), by_seq)) std::stable_sort(stream_of.begin(), stream_of.end(), by_seq);
    const Py_ssize_t n = PyList_GET_SIZE(nodes);
    std::vector<i64> hint(n, 0);
    std::vector<char> has_hint(n, 0);
    std::vector<i64> id_of(n);
    bool numbered = true;  // ids 0, 1, 2, ... in creation order, as the recorder writes them
    NodeIndex index;
    index.ids.reserve(n);
    std::vector<std::pair<i64, int>> positions;  // (launch seq, node position)
    positions.reserve(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* node = PyList_GET_ITEM(nodes, i);
        i64 op;
        if (!PyDict_Check(node) || !exact_int(get(node, K.id), id_of[i])) return py::none();
        numbered = numbered && id_of[i] == i;
        PyObject* op_obj = get(node, K.op);
        if (op_obj == nullptr) continue;
        if (!exact_int(op_obj, op) || op < 0) return py::none();
        index.ids.push_back({op, id_of[i]});
        positions.push_back({op, int(i)});
        // The last launch with this seq, as a dict built from the launches would keep.
        auto stream = std::upper_bound(stream_of.begin(), stream_of.end(), std::make_pair(op, i64(0)), by_seq);
        if (stream != stream_of.begin() && (--stream)->first == op) {
            hint[i] = stream->second;
            has_hint[i] = 1;
        }
    }
    if (!numbered) return py::none();  // ids out of creation order: the Python reference takes it
    auto position = [&](PyObject* end) -> int {
        i64 id;
        return exact_int(end, id) && 0 <= id && id < n ? int(id) : -1;
    };
    std::vector<std::pair<int, int>> ordering;  // (target, source), in the edges' order
    const Py_ssize_t m = PyList_GET_SIZE(edges);
    ordering.reserve(m);
    for (Py_ssize_t e = 0; e < m; ++e) {
        PyObject* edge = PyList_GET_ITEM(edges, e);
        if (!PyList_Check(edge) && !PyTuple_Check(edge)) return py::none();
        const Py_ssize_t len = PySequence_Fast_GET_SIZE(edge);
        if (len != 2 && len != 3) return py::none();
        PyObject** ends = PySequence_Fast_ITEMS(edge);
        const int source = position(ends[0]), target = position(ends[1]);
        if (source < 0 || target < 0) return py::none();
        if (len == 3) continue;  // programmatic: orders no completion
        if (source == target) return py::none();
        ordering.push_back({target, source});
    }
    if (!std::is_sorted(ordering.begin(), ordering.end(), by_seq)) std::stable_sort(ordering.begin(), ordering.end(), by_seq);
    std::vector<int> pred_start(n + 1, 0), preds;
    preds.reserve(ordering.size());
    for (const auto& [target, source] : ordering) {
        ++pred_start[target + 1];
        preds.push_back(source);
    }
    for (Py_ssize_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
    graph_truth::GraphReach reach(pred_start, preds, hint, has_hint);
    if (!reach.acyclic()) return py::none();
    if (!std::is_sorted(index.ids.begin(), index.ids.end(), by_seq)) std::stable_sort(index.ids.begin(), index.ids.end(), by_seq);
    if (!std::is_sorted(positions.begin(), positions.end(), by_seq)) std::stable_sort(positions.begin(), positions.end(), by_seq);
    graph_truth::Launches launches(reach);
    std::vector<int> launch_of;              // checked launch -> its position in the capture
    std::vector<int> checked_of(count, -1);  // and back
    std::vector<int> own;
    for (int i = 0; i < count; ++i) {
        auto it = std::lower_bound(positions.begin(), positions.end(), std::make_pair(capture.seqs[i], -1));
        own.clear();
        for (; it != positions.end() && it->first == capture.seqs[i]; ++it) own.push_back(it->second);
        if (own.empty()) continue;
        checked_of[i] = int(launch_of.size());
        launches.add(own);
        launch_of.push_back(i);
    }
    std::vector<graph_truth::Access>& accesses = capture.accesses;  // renumbered in place: the capture is done
    size_t kept = 0;
    for (graph_truth::Access& a : accesses) {
        a.launch = checked_of[a.launch];
        if (a.launch >= 0) accesses[kept++] = a;
    }
    accesses.resize(kept);
    graph_truth::CoveringSweep sweep(launches, accesses, capture.strided);
    py::list pairs;
    for (const auto& [a, b] : sweep.found()) pairs.append(py::make_tuple(launch_of[a], launch_of[b]));
    return py::make_tuple(py::cast(std::move(index)), pairs);
}

// A capture's launches as the graph check's Python side reads them (a sequence: their number,
// each by its position, in order); each made into its Python object on first use.
struct Launches {
    std::vector<HeldEvent> events;

    size_t size() const { return events.size(); }
    py::object at(Py_ssize_t i) const {
        if (i < 0) i += Py_ssize_t(events.size());
        if (i < 0 || size_t(i) >= events.size()) throw py::index_error("launch index out of range");
        return object(made(events[size_t(i)]));
    }
};

// graph_truth.py's GraphTruth.feed, for the C++ core: each capture's launches kept until its
// graph arrives, then check_capture, then on_graph(graph, launches, graph_event, result).
class GraphCollector {
   public:
    // The capture a launch went to (null: none, or not a launch). `read_ranges` false: the
    // caller hands it the launch's ranges (Core::run, which reads them anyway).
    Capture* feed(PyObject* ev, PyObject* on_graph, bool read_ranges = true) {
        SlowValuesKept kept;
        PyObject* kind_obj = need(ev, K.ev);
        if (!PyUnicode_Check(kind_obj)) return nullptr;
        Py_ssize_t len;
        const char* text = PyUnicode_AsUTF8AndSize(kind_obj, &len);
        if (text == nullptr) fail();
        std::string_view kind(text, len);
        if (kind == "op" || kind == "kernel") {
            if (get(ev, K.stream) == nullptr) return nullptr;
            PyObject* graph = kind == "kernel" ? get(ev, K.graph) : nullptr;
            PyObject* slot = nullptr;
            if (graph == nullptr) {  // an op: its capture is the one open, if only one is
                if (PyDict_GET_SIZE(open_.ptr()) != 1) return nullptr;
                Py_ssize_t at = 0;
                PyObject* key;
                PyDict_Next(open_.ptr(), &at, &key, &slot);
            } else {
                slot = PyDict_GetItemWithError(open_.ptr(), graph);
                if (slot == nullptr) {
                    if (PyErr_Occurred()) fail();
                    return nullptr;
                }
            }
            Capture* capture = captures_.at(as_int(slot)).get();
            if (read_ranges) {
                capture->add(ev);
            } else {
                capture->add_launch(ev);
            }
            return capture;
        }
        if (kind == "capture_begin") {  // a graph captured again starts afresh
            PyObject* graph = need(ev, K.graph);
            PyObject* slot = PyDict_GetItemWithError(open_.ptr(), graph);
            if (slot == nullptr && PyErr_Occurred()) fail();
            const i64 key = slot != nullptr ? as_int(slot) : next_slot_++;
            if (slot == nullptr && PyDict_SetItem(open_.ptr(), graph, py::int_(key).ptr()) < 0) fail();
            captures_[key] = std::make_unique<Capture>();
        } else if (kind == "graph") {
            py::object graph = py::reinterpret_borrow<py::object>(need(ev, K.graph));
            PyObject* slot = PyDict_GetItemWithError(open_.ptr(), graph.ptr());
            if (slot == nullptr) {
                if (PyErr_Occurred()) fail();
                return nullptr;
            }
            const i64 key = as_int(slot);
            if (PyDict_DelItem(open_.ptr(), graph.ptr()) < 0) fail();
            std::unique_ptr<Capture> capture = std::move(captures_.at(key));
            captures_.erase(key);
            py::object result = check_capture(*capture, ev);
            py::object launches = py::cast(Launches{std::move(capture->events)});
            py::reinterpret_borrow<py::object>(on_graph)(graph, launches, py::handle(ev), result);
        }
        return nullptr;
    }

    // feed() of a launch the direct reader took: its kind (a kernel names its graph: `graph`,
    // null where it does not), seq and stream, and its copy.
    Capture* feed_launch(bool kernel, const trace_tree::Node* graph, i64 seq, i64 stream, const HeldEvent& event) {
        PyObject* slot = nullptr;
        if (!kernel || graph == nullptr || graph->kind == trace_tree::Kind::NUL) {  // its capture is the one open, if only one is
            if (PyDict_GET_SIZE(open_.ptr()) != 1) return nullptr;
            Py_ssize_t at = 0;
            PyObject* key;
            PyDict_Next(open_.ptr(), &at, &key, &slot);
        } else {
            if (graph->kind != trace_tree::Kind::INT) return nullptr;  // the reader took only an int
            py::int_ key(graph->value);
            slot = PyDict_GetItemWithError(open_.ptr(), key.ptr());
            if (slot == nullptr) {
                if (PyErr_Occurred()) fail();
                return nullptr;
            }
        }
        Capture* capture = captures_.at(as_int(slot)).get();
        capture->add_launch(event, seq, stream);
        return capture;
    }

   private:
    py::dict open_;  // graph -> its slot in captures_
    std::unordered_map<i64, std::unique_ptr<Capture>> captures_;
    i64 next_slot_ = 0;
};

// check_capture on launches given at once (for tests).
py::object graph_unordered(py::list launches, py::handle graph_ev) {
    SlowValuesKept kept;
    Capture capture;
    for (py::handle ev : launches) capture.add(ev.ptr());
    return check_capture(capture, graph_ev.ptr());
}

// The iterator GraphCollector.observe returns: every event passed through, fed on the way. A
// plain CPython type, so that the engine pulling events through it pays no Python frame.
struct Observer {
    PyObject_HEAD PyObject* source;
    PyObject* collector;  // keeps `impl` alive
    PyObject* on_graph;
    GraphCollector* impl;
};

PyTypeObject* observer_type = nullptr;

void observer_dealloc(PyObject* self) {
    auto* o = reinterpret_cast<Observer*>(self);
    Py_XDECREF(o->source);
    Py_XDECREF(o->collector);
    Py_XDECREF(o->on_graph);
    PyTypeObject* type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

PyObject* observer_next(PyObject* self) {
    auto* o = reinterpret_cast<Observer*>(self);
    PyObject* ev = PyIter_Next(o->source);
    if (ev == nullptr) return nullptr;  // the end, or the source's error
    try {
        o->impl->feed(ev, o->on_graph);
        return ev;
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (py::builtin_exception& e) {
        e.set_error();
    } catch (const std::overflow_error& e) {
        PyErr_SetString(PyExc_OverflowError, e.what());
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    Py_DECREF(ev);
    return nullptr;
}

py::object observe(py::object collector, py::iterable events, py::object on_graph) {
    PyObject* source = PyObject_GetIter(events.ptr());
    if (source == nullptr) fail();
    auto* o = reinterpret_cast<Observer*>(PyType_GenericAlloc(observer_type, 0));
    if (o == nullptr) {
        Py_DECREF(source);
        fail();
    }
    o->source = source;
    o->impl = collector.cast<GraphCollector*>();
    o->collector = collector.release().ptr();
    o->on_graph = on_graph.release().ptr();
    return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(o));
}

PyObject* observed_source(PyObject* events) {
    if (observer_type == nullptr || Py_TYPE(events) != observer_type) return nullptr;
    return reinterpret_cast<Observer*>(events)->source;
}

Capture* collect(PyObject* events, PyObject* ev) {
    auto* o = reinterpret_cast<Observer*>(events);
    return o->impl->feed(ev, o->on_graph, false);
}

void capture_range(Capture* capture, const ByteRange& range, bool write) { capture->add_range(range, write); }

Capture* collect_launch(PyObject* events, bool kernel, const trace_tree::Node* graph, i64 seq, i64 stream,
                        const HeldEvent& event) {
    return reinterpret_cast<Observer*>(events)->impl->feed_launch(kernel, graph, seq, stream, event);
}

// The bytes of a line handed to the parsers' test entry points.
std::string_view bytes_text(const py::bytes& line) {
    char* data;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(line.ptr(), &data, &size) < 0) throw py::error_already_set();
    return {data, size_t(size)};
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "streamrace's C++ analysis core; use streamrace.analysis, not this module.";
    py::register_exception<RangeLimit>(m, "RangeLimit", PyExc_OverflowError);
#define STREAMRACE_INTERN(field) K.field = intern(#field);
    STREAMRACE_TRACE_FIELDS(STREAMRACE_INTERN)
#undef STREAMRACE_INTERN
    held::LIST_KEYS[0] = K.reads;  // a copied op's ranges are found again there (raw_of)
    held::LIST_KEYS[1] = K.writes;
    bind_records(m);
    py::class_<Core>(m, "Core")
        .def(py::init<py::dict, bool>(), py::arg("stacks"), py::arg("copy_events") = true)
        .def("feed", &Core::feed, py::arg("event"))
        .def("run", &Core::run, py::arg("events"), py::arg("progress"), py::arg("every"))
        .def("run_lines", &Core::run_lines, py::arg("lines"), py::arg("progress"), py::arg("every"),
             py::arg("observer") = py::none(), py::arg("reads") = py::none(), py::arg("see") = py::none())
        .def("report", &Core::report, py::arg("progress"))
        .def("detections", &Core::detections)
        .def("appearance", &Core::appearance)
        .def("names", &Core::names)
        .def("captures", &Core::captures)
        .def("stacks", &Core::stacks)
        .def("library_calls", &Core::library_calls)
        .def_property_readonly("events", &Core::events)
        .def_property_readonly("graphs", &Core::graphs)
        .def_property_readonly("ops", &Core::ops)
        .def_property_readonly("accesses", &Core::accesses)
        .def_property_readonly("replays", &Core::replays)
        .def_property_readonly("unknown_replays", &Core::unknown_replays)
        .def("remembered", &Core::remembered);
    py::class_<NodeIndex>(m, "NodeIndex")
        .def("__contains__", &NodeIndex::contains, py::arg("seq"))
        .def("__getitem__", &NodeIndex::at, py::arg("seq"));
    m.def(
        "graph_unordered", &graph_unordered, py::arg("launches"), py::arg("graph_event"),
        "GraphCollector's check of one capture, given its launches (for tests).");
    py::class_<Launches>(m, "Launches", "A capture's launches, each made into its event on first use.")
        .def("__len__", &Launches::size)
        .def("__getitem__", &Launches::at)
        .def("__iter__", [](const Launches& l) {
            py::list out;  // the reference check, which reads every launch (a malformed graph)
            for (size_t i = 0; i < l.size(); ++i) out.append(l.at(Py_ssize_t(i)));
            return py::iter(out);
        });
    m.def(
        "observed_source",
        [](py::handle events) -> py::object {
            PyObject* source = observed_source(events.ptr());
            return source != nullptr ? py::reinterpret_borrow<py::object>(source) : py::none();
        },
        py::arg("events"), "The events a GraphCollector's observe() iterator reads, else None.");
    py::class_<GraphCollector>(m, "GraphCollector")
        .def(py::init<>())
        .def(
            "feed", [](GraphCollector& c, py::handle ev, py::handle on_graph) { c.feed(ev.ptr(), on_graph.ptr()); },
            py::arg("event"), py::arg("on_graph"))
        .def("observe", &observe, py::arg("events"), py::arg("on_graph"));
    static PyType_Slot observer_slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(observer_dealloc)},
                                           {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
                                           {Py_tp_iternext, reinterpret_cast<void*>(observer_next)},
                                           {0, nullptr}};
    static PyType_Spec observer_spec = {"streamrace._core.GraphObserver", sizeof(Observer), 0, Py_TPFLAGS_DEFAULT,
                                        observer_slots};
    observer_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&observer_spec));
    if (observer_type == nullptr) throw py::error_already_set();
    m.def("live_records", [] { return Rec::alive; }, "Access records alive in every core (for memory tests).");
    m.def("live_steps", [] { return Step::alive; }, "Captured accesses kept for replays, in every core (for memory tests).");
    m.def(
        "held_copy",
        [](py::handle obj, bool make) {
            HeldEvent held = HeldEvent::copied(obj.ptr());
            return py::make_tuple(held.is_copy(), make ? object(made(held)) : py::none());
        },
        py::arg("obj"), py::arg("make") = true,
        "(copied, the object made again): how the core keeps a captured op's event (for tests).");
    if (!reader::init_line_reader_type()) throw py::error_already_set();
    m.def(
        "line_reader",
        [](py::handle stream, py::handle table, py::handle checker, py::handle on_line, i64 lineno, i64 max_streams,
           i64 line_read) {
            PyObject* r = reader::new_line_reader(stream.ptr(), table.ptr(), checker.ptr(), on_line.ptr(), lineno,
                                                  max_streams, line_read);
            if (r == nullptr) throw py::error_already_set();
            return py::reinterpret_steal<py::object>(r);
        },
        py::arg("stream"), py::arg("table"), py::arg("checker"), py::arg("on_line"), py::arg("lineno"),
        py::arg("max_streams"), py::arg("line_read"),
        "The trace reader's fast path over the rest of stream (csrc/reader.h); a line longer than line_read bytes is "
        "handed to on_line cut to that length.");
    m.def(
        "encode_lines",
        [](py::handle items, py::handle seqs, py::handle lines) -> py::object {
            trace_json::LineWriter writer;
            bool ok;
            if (seqs.is_none()) {
                ok = writer.write_lines(items.ptr());
            } else {
                py::buffer_info numbers = py::reinterpret_borrow<py::buffer>(seqs).request();
                const std::string_view text = bytes_text(py::reinterpret_borrow<py::bytes>(lines));
                if (numbers.itemsize != sizeof(int64_t) || numbers.ndim != 1) {
                    throw py::value_error("seqs must be a one-dimensional buffer of int64");
                }
                ok = writer.write_merged(items.ptr(), static_cast<const int64_t*>(numbers.ptr),
                                         static_cast<size_t>(numbers.size), text.data(), text.size());
            }
            if (!ok) {
                PyErr_Clear();  // json.dumps meets any real error again
                return py::none();
            }
            return py::bytes(writer.text());
        },
        py::arg("items"), py::arg("seqs") = py::none(), py::arg("lines") = py::none(),
        "Each item as a JSON line, byte for byte as json.dumps(separators=(',', ':'), allow_nan=False) writes it; "
        "with seqs and lines, merged by seq with those lines (one per seq, in order). None where it gives up "
        "(csrc/trace_json_write.h).");
    m.def(
        "parse_trace_line",
        [](py::bytes line) -> py::object {
            trace_json::Parser parser;
            const std::string_view text = bytes_text(line);
            PyObject* value = parser.parse(text.data(), text.data() + text.size());
            return value != nullptr ? py::reinterpret_steal<py::object>(value) : py::none();
        },
        py::arg("line"), "The C++ reader's JSON of one line, None where it gives up (for tests).");
    m.def(
        "parse_trace_tree",
        [](py::bytes line) -> py::object {
            trace_tree::Tree tree;
            const std::string_view text = bytes_text(line);
            if (!tree.parse(text.data(), text.data() + text.size())) return py::none();
            held::Encoder encoder;
            tree.encode(encoder);
            HeldEvent copy = HeldEvent::encoded(encoder.data(), encoder.size());
            PyObject* made = copy.get();
            if (made == nullptr) throw py::error_already_set();
            return py::reinterpret_borrow<py::object>(made);
        },
        py::arg("line"),
        "The direct reader's JSON of one line, as the copy it keeps makes it again; None where it gives up (for "
        "tests).");
}
