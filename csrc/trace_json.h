// The JSON of a trace line, parsed straight into Python objects for the C++ reader (reader.h).
//
// Only the plain JSON a recorder writes is taken: objects, arrays, strings without escapes,
// integers of at most 18 digits, true, false, null, nested at most MAX_DEPTH deep, and
// whitespace as JSON allows it. Anything else (an escape, a fraction or exponent, a longer
// integer, a repeated key, a syntax error, bytes that are not UTF-8) makes it give up on the
// line, which the Python path then reads as before: so what it gives is what the standard
// library (and orjson) give, and never an answer where they would give none.
//
// What it saves over a general parser is objects: keys are interned (the same objects the
// core looks fields up with, so a lookup is a pointer comparison), and the integers and
// short strings a trace repeats (addresses, sizes, op names, file names) are shared, being
// immutable: an op event is about half the objects it would be.
#pragma once

#include <Python.h>

#include <cstring>
#include <vector>

namespace streamrace::trace_json {

constexpr int MAX_DEPTH = 64;
constexpr int MAX_DIGITS = 18;             // below 2^63 whatever the digits
constexpr size_t MAX_SHARED_STRING = 64;   // longer strings are made afresh
constexpr size_t STRING_SLOTS = 1 << 12;   // the short strings recently made, by their text
constexpr size_t INT_SLOTS = 1 << 14;      // the integers recently made, by value (9 in 10 hit)

class Parser {
   public:
    Parser() = default;
    Parser(const Parser&) = delete;
    Parser& operator=(const Parser&) = delete;
    ~Parser() {
        for (StringSlot& slot : strings_) Py_XDECREF(slot.str);
        for (IntSlot& slot : ints_) Py_XDECREF(slot.n);
    }

    // The line's object (a new reference), or null: given up, with no Python error set.
    PyObject* parse(const char* begin, const char* end) {
        p_ = begin;
        end_ = end;
        skip_space();
        if (p_ == end_ || *p_ != '{') return nullptr;
        PyObject* value = parse_value(0);
        if (value == nullptr) return nullptr;
        skip_space();
        if (p_ != end_) {
            Py_DECREF(value);
            return nullptr;
        }
        return value;
    }

   private:
    // Any Python error (out of memory, say) is cleared: the Python path will meet it again.
    PyObject* give_up() {
        PyErr_Clear();
        return nullptr;
    }

    void skip_space() {
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }

    PyObject* parse_value(int depth) {
        if (p_ == end_) return nullptr;
        switch (*p_) {
            case '{':
                return depth < MAX_DEPTH ? parse_object(depth + 1) : nullptr;
            case '[':
                return depth < MAX_DEPTH ? parse_array(depth + 1) : nullptr;
            case '"':
                return parse_string();
            case 't':
                return word("true", 4, Py_True);
            case 'f':
                return word("false", 5, Py_False);
            case 'n':
                return word("null", 4, Py_None);
            default:
                return parse_int();
        }
    }

    PyObject* word(const char* text, size_t n, PyObject* value) {
        if (size_t(end_ - p_) < n || std::memcmp(p_, text, n) != 0) return nullptr;
        p_ += n;
        Py_INCREF(value);
        return value;
    }

    PyObject* parse_object(int depth) {
        ++p_;  // '{'
        PyObject* dict = PyDict_New();
        if (dict == nullptr) return give_up();
        skip_space();
        if (p_ != end_ && *p_ == '}') {
            ++p_;
            return dict;
        }
        for (;;) {
            skip_space();
            if (p_ == end_ || *p_ != '"') break;
            PyObject* key = parse_string();
            if (key == nullptr) break;
            skip_space();
            if (p_ == end_ || *p_ != ':') {
                Py_DECREF(key);
                break;
            }
            ++p_;
            skip_space();
            PyObject* value = parse_value(depth);
            if (value == nullptr) {
                Py_DECREF(key);
                break;
            }
            const Py_ssize_t before = PyDict_GET_SIZE(dict);
            const int stored = PyDict_SetItem(dict, key, value);
            Py_DECREF(key);
            Py_DECREF(value);
            if (stored < 0 || PyDict_GET_SIZE(dict) == before) break;  // a repeated key: the Python path's
            skip_space();
            if (p_ == end_) break;
            if (*p_ == ',') {
                ++p_;
                continue;
            }
            if (*p_ == '}') {
                ++p_;
                return dict;
            }
            break;
        }
        Py_DECREF(dict);
        return give_up();
    }

    PyObject* parse_array(int depth) {
        ++p_;  // '['
        const size_t base = items_.size();
        skip_space();
        bool closed = p_ != end_ && *p_ == ']';
        if (closed) ++p_;
        while (!closed) {
            skip_space();
            PyObject* value = parse_value(depth);
            if (value == nullptr) break;
            items_.push_back(value);
            skip_space();
            if (p_ == end_) break;
            if (*p_ == ',') {
                ++p_;
            } else if (*p_ == ']') {
                ++p_;
                closed = true;
            } else {
                break;
            }
        }
        PyObject* list = closed ? PyList_New(Py_ssize_t(items_.size() - base)) : nullptr;
        for (size_t i = base; i < items_.size(); ++i) {
            if (list != nullptr) {
                PyList_SET_ITEM(list, Py_ssize_t(i - base), items_[i]);  // takes the reference
            } else {
                Py_DECREF(items_[i]);
            }
        }
        items_.resize(base);
        return list != nullptr ? list : give_up();
    }

    PyObject* parse_string() {
        const char* start = ++p_;  // after '"'
        bool ascii = true;
        while (p_ != end_ && *p_ != '"') {
            const unsigned char c = static_cast<unsigned char>(*p_);
            if (c == '\\' || c < 0x20) return nullptr;  // escapes and control characters: the Python path's
            ascii = ascii && c < 0x80;
            ++p_;
        }
        if (p_ == end_) return nullptr;
        const size_t size = size_t(p_ - start);
        ++p_;  // '"'
        if (size > MAX_SHARED_STRING) return make_string(start, size, ascii);
        const Words words = words_of(start, size);
        StringSlot& slot = strings_[words.slot()];
        // The first and last eight bytes are all of a string of up to 16; compare the rest.
        if (slot.str != nullptr && slot.words == words && (size <= 16 || std::memcmp(slot.text + 8, start + 8, size - 16) == 0)) {
            Py_INCREF(slot.str);
            return slot.str;
        }
        PyObject* s = make_string(start, size, ascii);
        if (s == nullptr) return nullptr;
        PyUnicode_InternInPlace(&s);
        const char* kept = PyUnicode_AsUTF8(s);  // the str's own bytes: they live with it
        if (kept == nullptr) {
            Py_DECREF(s);
            return give_up();
        }
        Py_XDECREF(slot.str);
        Py_INCREF(s);
        slot = {s, kept, words};
        return s;
    }

    PyObject* make_string(const char* text, size_t size, bool ascii) {
        PyObject* s = ascii ? PyUnicode_FromStringAndSize(text, Py_ssize_t(size))
                            : PyUnicode_DecodeUTF8(text, Py_ssize_t(size), "strict");
        return s != nullptr ? s : give_up();  // not UTF-8
    }

    // A short string's size and its first and last eight bytes (zeros where it has fewer).
    struct Words {
        unsigned long long head = 0, tail = 0, size = 0;
        bool operator==(const Words& o) const { return head == o.head && tail == o.tail && size == o.size; }
        size_t slot() const {
            const unsigned long long h = (head * 0x9E3779B97F4A7C15ull) ^ (tail * 0xC2B2AE3D27D4EB4Full) ^ size;
            return size_t(h ^ (h >> 29)) & (STRING_SLOTS - 1);
        }
    };

    static Words words_of(const char* text, size_t size) {
        Words w;
        w.size = size;
        if (size >= 8) {
            std::memcpy(&w.head, text, 8);
        } else {
            for (size_t i = 0; i < size; ++i) w.head |= static_cast<unsigned long long>(static_cast<unsigned char>(text[i])) << (8 * i);
        }
        if (size > 8) std::memcpy(&w.tail, text + size - 8, 8);
        return w;
    }

    PyObject* parse_int() {
        const bool negative = *p_ == '-';
        if (negative) ++p_;
        const char* digits = p_;
        while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
        const long count = p_ - digits;
        if (count == 0 || count > MAX_DIGITS || (*digits == '0' && count > 1)) return nullptr;
        if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return nullptr;  // a float
        long long value = 0;
        for (const char* d = digits; d != p_; ++d) value = value * 10 + (*d - '0');
        if (negative) value = -value;
        IntSlot& slot = ints_[size_t(value ^ (value >> 12) ^ (value >> 29)) & (INT_SLOTS - 1)];
        if (slot.n != nullptr && slot.value == value) {
            Py_INCREF(slot.n);
            return slot.n;
        }
        PyObject* n = PyLong_FromLongLong(value);
        if (n == nullptr) return give_up();
        Py_XDECREF(slot.n);
        Py_INCREF(n);
        slot = {value, n};
        return n;
    }

    const char* p_ = nullptr;
    const char* end_ = nullptr;
    std::vector<PyObject*> items_;                          // the open arrays' items, owned
    struct StringSlot {
        PyObject* str;     // owned, interned
        const char* text;  // its UTF-8 bytes
        Words words;
    };
    StringSlot strings_[STRING_SLOTS] = {};  // the short strings recently made, by their text
    struct IntSlot {
        long long value;
        PyObject* n;  // owned
    };
    IntSlot ints_[INT_SLOTS] = {};
};

}  // namespace streamrace::trace_json
