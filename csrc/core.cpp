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

#include <string>
#include <string_view>

#include "engine.h"

namespace py = pybind11;
using namespace streamrace;

// Records and lifetimes are reference counted by hand (records.h); their Python objects hold a Ref.
PYBIND11_DECLARE_HOLDER_TYPE(T, Ref<T>, true)

namespace {

struct Keys {
    PyObject *ev, *stream, *device, *name, *id, *frames, *graph, *addr, *size, *event, *reads, *writes, *nbytes,
        *shape, *stride, *itemsize;
} K;

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

[[noreturn]] void fail() { throw py::error_already_set(); }

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
        Py_DECREF(value);  // the mapping still holds it
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
    if (overflow) too_large();
    if (v == -1 && PyErr_Occurred()) fail();
    return v;
}

ByteRange normalize(PyObject* raw) {
    i64 addr = as_int(need(raw, K.addr));
    if (PyObject* nbytes = get(raw, K.nbytes)) return interval(addr, as_int(nbytes));
    PyObject* shape = need(raw, K.shape);
    PyObject* stride = need(raw, K.stride);
    i64 itemsize = as_int(need(raw, K.itemsize));
    Py_ssize_t n = PyObject_Length(shape), m = PyObject_Length(stride);
    if (n < 0 || m < 0) fail();
    if (n != m) throw py::value_error("range 'shape' and 'stride' differ in length");
    std::vector<i64> dims(n), steps(n);
    for (Py_ssize_t k = 0; k < n; ++k) {
        PyObject* a = PySequence_GetItem(shape, k);
        PyObject* b = PySequence_GetItem(stride, k);
        if (a == nullptr || b == nullptr) fail();
        dims[k] = as_int(a);
        steps[k] = as_int(b);
        Py_DECREF(a);
        Py_DECREF(b);
    }
    return normalize_strided(addr, dims, steps, itemsize);
}

class Core {
   public:
    explicit Core(py::dict stacks) : stacks_(std::move(stacks)) {}

    void feed(py::handle ev_handle) {
        PyObject* ev = ev_handle.ptr();
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
            engine_.alloc(ev, as_int(need(ev, K.addr)), as_int(need(ev, K.size)), need_stream(stream_obj, stream),
                          device(ev, stream_obj != nullptr, stream));
        } else if (kind == "free") {
            engine_.free(ev, as_int(need(ev, K.addr)), device(ev, stream_obj != nullptr, stream));
        } else if (kind == "event_record") {
            engine_.hb.record(as_int(need(ev, K.event)), engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_wait") {
            engine_.hb.wait(as_int(need(ev, K.event)), engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_create" || kind == "event_delete") {
            engine_.hb.forget(as_int(need(ev, K.event)));
        } else if (kind == "record_stream") {
            i64 s = need_stream(stream_obj, stream);
            engine_.record_stream(ev, as_int(need(ev, K.addr)), s, device(ev, stream_obj != nullptr, stream));
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
            engine_.capture_begin(as_int(need(ev, K.graph)), s);
        } else if (kind == "capture_end") {
            engine_.capture_end(as_int(need(ev, K.graph)));
        } else if (kind == "stream_sync") {
            engine_.hb.stream_sync(engine_.appear(need_stream(stream_obj, stream)));
        } else if (kind == "event_sync") {
            engine_.hb.event_sync(as_int(need(ev, K.event)));
        } else if (kind == "device_sync") {
            engine_.hb.device_sync();
        }
        // `graph` and `recorder_error` do not take part in v1
    }

    // Feed every event of an iterable; progress(events, ops, accesses, graphs) every `every`.
    void run(py::iterable events, py::object progress, i64 every) {
        PyObject* it = PyObject_GetIter(events.ptr());
        if (it == nullptr) fail();
        py::object iterator = py::reinterpret_steal<py::object>(it);
        while (PyObject* ev = PyIter_Next(it)) {
            py::object owned = py::reinterpret_steal<py::object>(ev);
            feed(owned);
            if (!progress.is_none() && events_ % every == 0) report(progress);
            // Iterating a list runs no Python code, so Ctrl-C would wait for the end otherwise.
            if (events_ % 4096 == 0 && PyErr_CheckSignals() != 0) fail();
        }
        if (PyErr_Occurred()) fail();
    }

    void report(py::object& progress) { progress(events_, engine_.ops, engine_.accesses, engine_.graphs); }

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
    py::dict stacks() const { return stacks_; }
    i64 events() const { return events_; }
    i64 graphs() const { return engine_.graphs; }
    i64 ops() const { return engine_.ops; }
    i64 accesses() const { return engine_.accesses; }
    size_t remembered() const { return engine_.remembered(); }

   private:
    void op(PyObject* ev, bool is_op, bool has_stream, i64 stream) {
        if (is_op) ++engine_.ops;
        PyObject* lists[2] = {need(ev, K.reads), need(ev, K.writes)};
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
        engine_.begin_op(stream, device(ev, true, stream));
        for (int w = 0; w < 2; ++w) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(fast[w]);
            PyObject** items = PySequence_Fast_ITEMS(fast[w]);
            for (Py_ssize_t i = 0; i < n; ++i) {
                ByteRange rng = normalize(items[i]);
                if (rng.empty()) continue;
                engine_.access(ev, items[i], std::move(rng), w == 1);
            }
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
    i64 events_ = 0;
};

// The records as Python sees them: each class mirrors the Python engine's record of its name
// (its docstring says which), and shows each field as that record holds it.
py::object domain(i64 d) { return d == EAGER ? py::none() : py::object(py::int_(d)); }

py::object object(PyObject* p) { return p ? py::reinterpret_borrow<py::object>(p) : py::none(); }

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
        .def_property_readonly("event", [](const Rec& r) { return object(r.event); })
        .def_property_readonly("raw", [](const Rec& r) { return object(r.raw); });
    py::class_<Lifetime, Ref<Lifetime>>(m, "Lifetime", "Mirrors streamrace.analysis.lifetimes.Lifetime.")
        .def_readonly("id", &Lifetime::id)
        .def_readonly("addr", &Lifetime::addr)
        .def_readonly("size", &Lifetime::size)
        .def_readonly("owner", &Lifetime::owner)
        .def_readonly("device", &Lifetime::device)
        .def_property_readonly("alloc", [](const Lifetime& l) { return object(l.alloc); })
        .def_property_readonly("free", [](const Lifetime& l) { return object(l.free); })
        .def_property_readonly("end", &Lifetime::end);
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
        .def_property_readonly("event", [](const RecordStreamNoop& d) { return object(d.event.get()); })
        .def_readonly("lifetime", &RecordStreamNoop::lifetime)
        .def_property_readonly("domain", [](const RecordStreamNoop& d) { return domain(d.domain); })
        .def_readonly("users", &RecordStreamNoop::users);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "streamrace's C++ analysis core; use streamrace.analysis, not this module.";
    K = {intern("ev"),    intern("stream"), intern("device"), intern("name"),   intern("id"),
         intern("frames"), intern("graph"), intern("addr"),   intern("size"),   intern("event"),
         intern("reads"), intern("writes"), intern("nbytes"), intern("shape"),  intern("stride"),
         intern("itemsize")};
    bind_records(m);
    py::class_<Core>(m, "Core")
        .def(py::init<py::dict>(), py::arg("stacks"))
        .def("feed", &Core::feed, py::arg("event"))
        .def("run", &Core::run, py::arg("events"), py::arg("progress"), py::arg("every"))
        .def("report", &Core::report, py::arg("progress"))
        .def("detections", &Core::detections)
        .def("appearance", &Core::appearance)
        .def("names", &Core::names)
        .def("stacks", &Core::stacks)
        .def_property_readonly("events", &Core::events)
        .def_property_readonly("graphs", &Core::graphs)
        .def_property_readonly("ops", &Core::ops)
        .def_property_readonly("accesses", &Core::accesses)
        .def("remembered", &Core::remembered);
    m.def("live_records", [] { return Rec::alive; }, "Access records alive in every core (for memory tests).");
}
