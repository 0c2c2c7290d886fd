// Trace lines written from Python objects, byte for byte as the standard library writes them
// (json.dumps with separators (",", ":"), allow_nan False, ensure_ascii on): the recorder
// writes its trace while the program runs, and json.dumps cost about 7 us an event there, in
// the program's own thread (docs/performance.md, "The serving step").
//
// Only what a trace holds is taken: dicts with str keys, lists, tuples, str, int, finite
// float, bool and None, of those exact types, nested at most MAX_WRITE_DEPTH deep. Anything
// else (a subclass, an int or float key, NaN) makes it give up on the whole batch, and the
// caller writes it with json.dumps, which writes or refuses it as before: so it never writes
// what the standard library would not, nor anything else than it would.
#pragma once

#include <Python.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace streamrace::trace_json {

constexpr int MAX_WRITE_DEPTH = 64;

class LineWriter {
   public:
    // Every item, each on its own line; false where it gave up (no Python error set, but
    // for a failure of Python itself, such as memory).
    bool write_lines(PyObject* items) {
        PyObject* seq = PySequence_Fast(items, "items must be a sequence");
        if (seq == nullptr) return false;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject** objects = PySequence_Fast_ITEMS(seq);
        out_.reserve(out_.size() + static_cast<size_t>(n) * 128);  // about an event's line
        bool ok = true;
        for (Py_ssize_t i = 0; ok && i < n; ++i) {
            ok = value(objects[i], 0);
            out_ += '\n';
        }
        Py_DECREF(seq);
        return ok;
    }

    // The same, merged by seq with `count` lines written already (`lines`, each ending in a
    // newline, `seqs` theirs, both in seq order): each item must be a dict with an int "seq".
    // What a recording's flush writes: its events and the native hooks' lines (event_log.h).
    bool write_merged(PyObject* items, const int64_t* seqs, size_t count, const char* lines, size_t size) {
        PyObject* seq = PySequence_Fast(items, "items must be a sequence");
        if (seq == nullptr) return false;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject** objects = PySequence_Fast_ITEMS(seq);
        out_.reserve(out_.size() + size + static_cast<size_t>(n) * 128);
        size_t line = 0, at = 0;
        auto lines_before = [&](long long bound, bool all) {
            size_t from = at;
            while (line < count && (all || seqs[line] < bound)) {
                const void* end = std::memchr(lines + at, '\n', size - at);
                if (end == nullptr) return false;  // fewer lines than seqs
                at = static_cast<size_t>(static_cast<const char*>(end) - lines) + 1;
                ++line;
            }
            out_.append(lines + from, at - from);
            return true;
        };
        bool ok = true;
        for (Py_ssize_t i = 0; ok && i < n; ++i) {
            PyObject* item = objects[i];
            PyObject* number = PyDict_CheckExact(item) ? PyDict_GetItemString(item, "seq") : nullptr;
            if (number == nullptr || !PyLong_CheckExact(number)) {
                ok = false;
                break;
            }
            const long long bound = PyLong_AsLongLong(number);
            if (bound == -1 && PyErr_Occurred()) {
                ok = false;
                break;
            }
            ok = lines_before(bound, false) && value(item, 0);
            out_ += '\n';
        }
        Py_DECREF(seq);
        return ok && lines_before(0, true) && line == count && at == size;
    }

    const std::string& text() const { return out_; }

   private:
    bool value(PyObject* obj, int depth) {
        if (depth > MAX_WRITE_DEPTH) return false;
        if (PyUnicode_CheckExact(obj)) return string(obj);
        if (PyLong_CheckExact(obj)) return integer(obj);
        if (PyDict_CheckExact(obj)) return object(obj, depth);
        if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) return array(obj, depth);
        if (obj == Py_None) {
            out_ += "null";
            return true;
        }
        if (obj == Py_True || obj == Py_False) {
            out_ += obj == Py_True ? "true" : "false";
            return true;
        }
        if (PyFloat_CheckExact(obj)) return floating(obj);
        return false;
    }

    bool object(PyObject* dict, int depth) {
        out_ += '{';
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        bool first = true;
        while (PyDict_Next(dict, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) return false;  // json.dumps turns int keys into text
            if (!first) out_ += ',';
            first = false;
            if (!string(key)) return false;
            out_ += ':';
            if (!value(item, depth + 1)) return false;
        }
        out_ += '}';
        return true;
    }

    bool array(PyObject* list, int depth) {
        out_ += '[';
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
        PyObject** items = PySequence_Fast_ITEMS(list);
        for (Py_ssize_t i = 0; i < n; ++i) {
            if (i > 0) out_ += ',';
            if (!value(items[i], depth + 1)) return false;
        }
        out_ += ']';
        return true;
    }

    bool integer(PyObject* obj) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow == 0) {
            if (v == -1 && PyErr_Occurred()) return false;
            char digits[24];
            const std::to_chars_result r = std::to_chars(digits, digits + sizeof digits, v);
            out_.append(digits, r.ptr);
            return true;
        }
        PyObject* text = PyObject_Str(obj);  // int.__repr__, as json.dumps writes it
        if (text == nullptr) return false;
        Py_ssize_t size;
        const char* data = PyUnicode_AsUTF8AndSize(text, &size);
        if (data != nullptr) out_.append(data, static_cast<size_t>(size));
        Py_DECREF(text);
        return data != nullptr;
    }

    bool floating(PyObject* obj) {
        const double v = PyFloat_AS_DOUBLE(obj);
        if (!std::isfinite(v)) return false;  // json.dumps refuses it (allow_nan False)
        char* text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);  // float.__repr__
        if (text == nullptr) return false;
        out_ += text;
        PyMem_Free(text);
        return true;
    }

    // ensure_ascii: what is not printable ASCII is escaped, as the standard library's
    // c_encode_basestring_ascii does (lower-case hex, surrogate pairs above the BMP).
    bool string(PyObject* str) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(str) < 0) return false;  // a no-op, and deprecated, from 3.12
#endif
        const Py_ssize_t n = PyUnicode_GET_LENGTH(str);
        const int kind = PyUnicode_KIND(str);
        const void* data = PyUnicode_DATA(str);
        out_ += '"';
        if (PyUnicode_IS_ASCII(str)) {  // nearly every trace string: copied in runs
            const char* text = static_cast<const char*>(data);
            Py_ssize_t run = 0;
            for (Py_ssize_t i = 0; i < n; ++i) {
                const unsigned char c = static_cast<unsigned char>(text[i]);
                if (c >= ' ' && c <= '~' && c != '"' && c != '\\') continue;
                out_.append(text + run, static_cast<size_t>(i - run));
                escape(c);
                run = i + 1;
            }
            out_.append(text + run, static_cast<size_t>(n - run));
            out_ += '"';
            return true;
        }
        for (Py_ssize_t i = 0; i < n; ++i) {
            const Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= ' ' && c <= '~' && c != '"' && c != '\\') {
                out_ += static_cast<char>(c);
                continue;
            }
            escape(c);
        }
        out_ += '"';
        return true;
    }

    void escape(Py_UCS4 c) {
        switch (c) {
            case '"': out_ += "\\\""; return;
            case '\\': out_ += "\\\\"; return;
            case '\n': out_ += "\\n"; return;
            case '\r': out_ += "\\r"; return;
            case '\t': out_ += "\\t"; return;
            case '\b': out_ += "\\b"; return;
            case '\f': out_ += "\\f"; return;
            default: break;
        }
        if (c >= 0x10000) {
            const Py_UCS4 v = c - 0x10000;
            unit(0xd800 | ((v >> 10) & 0x3ff));
            unit(0xdc00 | (v & 0x3ff));
        } else {
            unit(c);
        }
    }

    void unit(Py_UCS4 c) {
        static const char hex[] = "0123456789abcdef";
        out_ += "\\u";
        out_ += hex[(c >> 12) & 0xf];
        out_ += hex[(c >> 8) & 0xf];
        out_ += hex[(c >> 4) & 0xf];
        out_ += hex[c & 0xf];
    }

    std::string out_;
};

}  // namespace streamrace::trace_json
