// A drained event as a Python dict, built with the C API (event_log.h's drain). Through
// pybind11's `d["addr"] = value` every key was a new str, hashed again at each insertion: most
// of a drain's time, about 1 us of an op event's 2.4 (CPU machine). Here each key is one
// interned str, made once (STREAMRACE_KEY), so an insertion is a pointer's hash; the order of
// the calls is the order of the keys, which the trace writes as it finds them.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "trace_fields.h"  // generated when the hooks are built (native.py)

namespace streamrace {

namespace py = pybind11;

// The interned str of a literal key, made at the first use of that line (GIL held), its
// reference kept for the process. Not made (no memory), the drain fails with Python's error
// and the next use tries again: a static whose initialiser throws is not initialised.
inline PyObject* interned_or_throw(const char* text) {
    PyObject* interned = PyUnicode_InternFromString(text);
    if (interned == nullptr) throw py::error_already_set();
    return interned;
}

// The declaration's names (trace_fields.h, generated from streamrace/trace/kinds.py when the
// hooks are built), as arrays the checks below search at compile time.
#define STREAMRACE_NAME(name) std::string_view(#name),
#define STREAMRACE_KIND_FIELD(kind, field) KindField{#kind, #field},
struct KindField {
    std::string_view kind, field;
};
inline constexpr std::string_view kDeclaredFields[] = {STREAMRACE_TRACE_FIELDS(STREAMRACE_NAME)};
inline constexpr std::string_view kDeclaredKinds[] = {STREAMRACE_EVENT_KINDS(STREAMRACE_NAME)};
inline constexpr std::string_view kCommonFields[] = {STREAMRACE_COMMON_FIELDS(STREAMRACE_NAME)};
inline constexpr KindField kKindFields[] = {STREAMRACE_KIND_FIELDS(STREAMRACE_KIND_FIELD)};
#undef STREAMRACE_NAME
#undef STREAMRACE_KIND_FIELD

template <size_t N>
constexpr bool listed(const std::string_view (&names)[N], std::string_view text) {
    for (std::string_view name : names)
        if (name == text) return true;
    return false;
}

// One of the recorder's own keys: they begin with '_' and are taken off before an event is written.
constexpr bool own_key(std::string_view text) { return !text.empty() && text[0] == '_'; }

// A key the trace format declares, or one of the recorder's own: a key typed here that the
// declaration lacks fails the build.
constexpr bool declared_key(std::string_view text) { return own_key(text) || listed(kDeclaredFields, text); }

// A key each of `kinds` (declared kinds, one at least) may carry: its own fields, those any
// event may carry (seq, ev, COMMON_FIELDS), or the recorder's own. What an emitter of those
// kinds may write.
constexpr bool kinds_declare(std::string_view text, std::initializer_list<std::string_view> kinds) {
    if (kinds.size() == 0) return false;
    for (std::string_view kind : kinds) {
        if (!listed(kDeclaredKinds, kind)) return false;
        bool declared = own_key(text) || listed(kCommonFields, text);
        for (const KindField& pair : kKindFields) declared = declared || (pair.kind == kind && pair.field == text);
        if (!declared) return false;
    }
    return true;
}

#define STREAMRACE_INTERNED(text)                                              \
    static PyObject* const interned = ::streamrace::interned_or_throw(text); \
    return interned;

// The interned key `text`, a field of the trace format (any kind's).
#define STREAMRACE_KEY(text)                                                                                 \
    ([]() -> PyObject* {                                                                                     \
        static_assert(::streamrace::declared_key(text), "not a field of the trace format (kinds.py): " text); \
        STREAMRACE_INTERNED(text)                                                                            \
    }())

// The interned key `text` of an event of the kinds named after it ("alloc", ...): a field the
// declaration does not give each of them fails the build.
#define STREAMRACE_FIELD(text, ...)                                                                              \
    ([]() -> PyObject* {                                                                                         \
        static_assert(::streamrace::kinds_declare(text, {__VA_ARGS__}), "not a field of these kinds (kinds.py): " text); \
        STREAMRACE_INTERNED(text)                                                                                \
    }())

inline py::object steal_or_throw(PyObject* object) {
    if (object == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(object);
}

inline py::object int_object(int64_t value) { return steal_or_throw(PyLong_FromLongLong(value)); }

// A list of n items made at its length, item(i) giving each (a py::object it owns): the one
// place a list's slots are filled, each with a reference of its own.
template <typename Item>
inline py::object make_list(size_t n, Item item) {
    py::object list = steal_or_throw(PyList_New(static_cast<Py_ssize_t>(n)));
    for (size_t i = 0; i < n; ++i) {
        py::object value = item(i);
        PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), value.release().ptr());
    }
    return list;
}

// A list of ints (a shape, a stride, an op's read identities).
inline py::object int_list(const int64_t* values, size_t n) {
    return make_list(n, [&](size_t i) { return int_object(values[i]); });
}

template <typename Ints>  // std::vector, c10::SmallVector
inline py::object int_list(const Ints& values) {
    return int_list(values.data(), values.size());
}

// A memory pool's id, (uint64, uint64) as torch gives it.
inline py::object pool_list(uint64_t first, uint64_t second) {
    const uint64_t words[2] = {first, second};
    return make_list(2, [&](size_t i) { return steal_or_throw(PyLong_FromUnsignedLongLong(words[i])); });
}

class EventDict {
   public:
    EventDict() : dict_(steal_or_throw(PyDict_New())) {}

    EventDict& set(PyObject* key, py::handle value) {
        if (key == nullptr || !value) throw std::runtime_error("an event's key or value was not made");
        if (PyDict_SetItem(dict_.ptr(), key, value.ptr()) != 0) throw py::error_already_set();
        return *this;
    }
    // A signed integer; not a bool (set_true) nor an unsigned word (a pool id: pool_list),
    // which an int64 would turn into another number without a warning.
    template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
    EventDict& set(PyObject* key, Int value) {
        static_assert(!std::is_same_v<Int, bool>, "a bool is set_true");
        static_assert(std::is_signed_v<Int> && sizeof(Int) <= sizeof(int64_t), "a signed integer of 64 bits at most");
        return set(key, int_object(static_cast<int64_t>(value)));
    }
    EventDict& set_true(PyObject* key) { return set(key, py::handle(Py_True)); }

    py::object take() { return std::move(dict_); }

   private:
    py::object dict_;
};

}  // namespace streamrace
