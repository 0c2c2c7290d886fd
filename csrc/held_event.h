// The events the analysis keeps: a Python object, or a compact copy of one.
//
// A captured op's event is kept for as long as its graph can be replayed (each replay's
// accesses name it), and a serving trace captures tens of thousands of ops. As Python holds
// it, an op event of a dozen ranges is about 2.7 KB of dicts, lists and integers; copied here
// it is a few hundred bytes, and the Python objects are made again only for the few events a
// finding names, on first use. The copy is exact: the same types, values and key order. An
// event it cannot copy so (a tuple, a subclass, a string that is not valid UTF-8, an integer
// beyond 64 bits) is kept as it is, so no input is changed, whatever a caller hands over.
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
#include <algorithm>

namespace streamrace {

namespace held {

enum Tag : unsigned char { TAG_NONE, TAG_FALSE, TAG_TRUE, TAG_INT, TAG_FLOAT, TAG_STR, TAG_LIST, TAG_DICT };
constexpr int MAX_DEPTH = 64;  // deeper than any event; beyond it the object is kept as it is

// The field names of events, a byte each in a copy: interned strings (the reader's keys, the
// core's), each held for the life of the process; a key not interned is written out in full.
class KeyTable {
   public:
    static constexpr int MAX_KEYS = 250;  // ids 0-249; INLINE_KEY marks a key written out
    static constexpr unsigned char INLINE_KEY = 255;

    static KeyTable& shared() {
        static KeyTable* table = new KeyTable();  // never destroyed: copies may outlive it
        return *table;
    }

    // The key's id, or -1 (not interned, or the table is full).
    int id(PyObject* key) {
        if (!PyUnicode_CHECK_INTERNED(key)) return -1;
        size_t h = (reinterpret_cast<uintptr_t>(key) >> 4) & (SLOTS - 1);
        for (; slots_[h].key != nullptr; h = (h + 1) & (SLOTS - 1))
            if (slots_[h].key == key) return slots_[h].id;
        if (keys_.size() >= size_t(MAX_KEYS)) return -1;
        Py_INCREF(key);
        slots_[h] = {key, int(keys_.size())};
        keys_.push_back(key);
        return slots_[h].id;
    }

    PyObject* key(int id) const { return keys_[size_t(id)]; }  // borrowed

    static constexpr int FAILED = -2;

    // The id of the key spelled `name` (its interned str made on first sight), or -1 (the
    // table is full), or FAILED with a Python error set.
    int id(std::string_view name) {
        auto found = by_text_.find(std::string(name));  // a key is short: no allocation
        if (found != by_text_.end()) return found->second;
        PyObject* key = PyUnicode_FromStringAndSize(name.data(), Py_ssize_t(name.size()));
        if (key == nullptr) return FAILED;
        PyUnicode_InternInPlace(&key);
        int id = this->id(key);
        Py_DECREF(key);  // the table holds it, if it took it
        if (id >= 0) by_text_.emplace(std::string(name), id);
        return id;
    }

   private:
    static constexpr size_t SLOTS = 512;  // at most half full
    struct Slot {
        PyObject* key = nullptr;
        int id = 0;
    };
    Slot slots_[SLOTS];
    std::vector<PyObject*> keys_;  // by id, owned
    std::unordered_map<std::string, int> by_text_;  // the ids of keys looked up by their text
};

// Appends an object's copy to a growing buffer (reused from copy to copy).
class Encoder {
   public:
    // Appends obj's copy; false (no Python error set) for anything not copied exactly. Runs
    // no Python code: only exact built-in types are walked.
    bool encode(PyObject* obj, int depth = 0) {
        if (obj == Py_None) {
            none();
        } else if (obj == Py_False || obj == Py_True) {
            boolean(obj == Py_True);
        } else if (PyLong_CheckExact(obj)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
            // Beyond 64 bits: kept as it is (as text it would be made again under whatever
            // digit limit, sys.set_int_max_str_digits, holds then).
            if (overflow) return false;
            integer(v);
        } else if (PyFloat_CheckExact(obj)) {
            double d = PyFloat_AS_DOUBLE(obj);
            room(1 + sizeof d);
            *p_++ = TAG_FLOAT;
            std::memcpy(p_, &d, sizeof d);  // every bit: -0.0 and NaNs too
            p_ += sizeof d;
        } else if (PyUnicode_CheckExact(obj)) {
            return text(obj, TAG_STR);
        } else if (depth >= MAX_DEPTH) {
            return false;
        } else if (PyList_CheckExact(obj)) {
            Py_ssize_t n = PyList_GET_SIZE(obj);
            list(uint64_t(n));
            for (Py_ssize_t i = 0; i < n; ++i)
                if (!encode(PyList_GET_ITEM(obj, i), depth + 1)) return false;
        } else if (PyDict_CheckExact(obj)) {
            dict(uint64_t(PyDict_GET_SIZE(obj)));
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            while (PyDict_Next(obj, &pos, &key, &value)) {
                if (!PyUnicode_CheckExact(key)) return false;
                int id = keys_.id(key);
                room(1);
                *p_++ = char(id >= 0 ? id : KeyTable::INLINE_KEY);
                if ((id < 0 && !text(key, -1)) || !encode(value, depth + 1)) return false;
            }
        } else {
            return false;
        }
        return true;
    }

    // The pieces of a copy, for a writer of values that are not Python objects (the direct
    // reader's trees, trace_tree.h): each appends what encode() does for the like object.
    void none() {
        room(1);
        *p_++ = TAG_NONE;
    }
    void boolean(bool yes) {
        room(1);
        *p_++ = yes ? TAG_TRUE : TAG_FALSE;
    }
    void integer(long long v) {
        room(11);
        *p_++ = TAG_INT;
        varint((uint64_t(v) << 1) ^ uint64_t(v >> 63));  // zigzag: small negatives stay short
    }
    void ascii(const char* s, size_t n) {
        room(n + 11);
        *p_++ = TAG_STR;
        varint(uint64_t(n));
        std::memcpy(p_, s, n);
        p_ += n;
    }
    void list(uint64_t n) {
        room(11);
        *p_++ = TAG_LIST;
        varint(n);
    }
    void dict(uint64_t n) {
        room(11);
        *p_++ = TAG_DICT;
        varint(n);
    }
    // A dict's key (ASCII): its id in the table, else (-1) written out.
    void key(int id, std::string_view name) {
        room(name.size() + 11);
        *p_++ = char(id >= 0 ? id : KeyTable::INLINE_KEY);
        if (id < 0) {
            varint(name.size());
            std::memcpy(p_, name.data(), name.size());
            p_ += name.size();
        }
    }

    // Ready for the next copy (after each); a buffer grown for a large one goes.
    void clear() {
        if (buffer_.size() > KEPT) std::vector<char>(START).swap(buffer_);
        p_ = buffer_.data();
    }
    const char* data() const { return buffer_.data(); }
    size_t size() const { return size_t(p_ - buffer_.data()); }

   private:
    void room(size_t n) {
        size_t used = size();
        if (used + n > buffer_.size()) {
            buffer_.resize(std::max(2 * buffer_.size(), used + n));
            p_ = buffer_.data() + used;
        }
    }

    void varint(uint64_t v) {  // room for 10 bytes made by the caller
        while (v >= 0x80) {
            *p_++ = char(v | 0x80);
            v >>= 7;
        }
        *p_++ = char(v);
    }

    // A str's UTF-8 (a compact ASCII string's own bytes), after the tag (none: -1); false for
    // one with surrogates.
    bool text(PyObject* str, int tag) {
        Py_ssize_t n;
        const char* utf8;
        if (PyUnicode_IS_COMPACT_ASCII(str)) {  // nearly every string of a trace: its own bytes
            n = PyUnicode_GET_LENGTH(str);
            utf8 = static_cast<const char*>(PyUnicode_DATA(str));
        } else if ((utf8 = PyUnicode_AsUTF8AndSize(str, &n)) == nullptr) {
            PyErr_Clear();
            return false;
        }
        room(size_t(n) + 11);
        if (tag >= 0) *p_++ = char(tag);
        varint(uint64_t(n));
        std::memcpy(p_, utf8, size_t(n));
        p_ += n;
        return true;
    }

    KeyTable& keys_ = KeyTable::shared();
    static constexpr size_t START = 1024, KEPT = 64 * 1024;
    std::vector<char> buffer_ = std::vector<char>(START);
    char* p_ = buffer_.data();
};

// Makes the objects of a copy again (new references; null with a Python error on failure).
class Decoder {
   public:
    Decoder(const char* begin, const char* end) : p_(begin), end_(end) {}

    PyObject* value() {
        switch (Tag(*p_++)) {
            case TAG_NONE:
                Py_RETURN_NONE;
            case TAG_FALSE:
                Py_RETURN_FALSE;
            case TAG_TRUE:
                Py_RETURN_TRUE;
            case TAG_INT: {
                uint64_t z = varint();
                return PyLong_FromLongLong((long long)(z >> 1) ^ -(long long)(z & 1));
            }
            case TAG_FLOAT: {
                double d;
                std::memcpy(&d, p_, sizeof d);
                p_ += sizeof d;
                return PyFloat_FromDouble(d);
            }
            case TAG_STR:
                return text(false);
            case TAG_LIST: {
                Py_ssize_t n = Py_ssize_t(varint());
                PyObject* list = PyList_New(n);
                if (list == nullptr) return nullptr;
                for (Py_ssize_t i = 0; i < n; ++i) {
                    PyObject* item = value();
                    if (item == nullptr) {
                        Py_DECREF(list);
                        return nullptr;
                    }
                    PyList_SET_ITEM(list, i, item);
                }
                return list;
            }
            case TAG_DICT: {
                uint64_t n = varint();
                PyObject* dict = PyDict_New();
                if (dict == nullptr) return nullptr;
                for (uint64_t i = 0; i < n; ++i) {
                    unsigned char id = static_cast<unsigned char>(*p_++);
                    PyObject* key = id == KeyTable::INLINE_KEY ? text(true) : KeyTable::shared().key(id);
                    if (id != KeyTable::INLINE_KEY) Py_INCREF(key);
                    PyObject* item = key != nullptr ? value() : nullptr;
                    int failed = item == nullptr || PyDict_SetItem(dict, key, item) < 0;
                    Py_XDECREF(key);
                    Py_XDECREF(item);
                    if (failed) {
                        Py_DECREF(dict);
                        return nullptr;
                    }
                }
                return dict;
            }
        }
        PyErr_SetString(PyExc_SystemError, "streamrace: a kept event's copy is damaged");
        return nullptr;
    }

   private:
    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; p_ < end_; shift += 7) {
            unsigned char byte = static_cast<unsigned char>(*p_++);
            v |= uint64_t(byte & 0x7f) << shift;
            if (byte < 0x80) break;
        }
        return v;
    }

    // Keys are interned, as the reader's are: the core looks fields up by them.
    PyObject* text(bool intern) {
        Py_ssize_t n = Py_ssize_t(varint());
        PyObject* str = PyUnicode_DecodeUTF8(p_, n, "strict");
        p_ += n;
        if (intern && str != nullptr) PyUnicode_InternInPlace(&str);
        return str;
    }

    const char* p_;
    const char* end_;
};

// The copy of one event, shared by what keeps it (every access of a captured op, and each of
// their replays'), reference counted by hand like the records.
struct Copy {
    int refs = 0;
    std::string bytes;
    PyObject* made = nullptr;  // the event made again, once asked for; owned
    // The items of its lists under LIST_KEYS as they were made (tuples, owned): a record's
    // range is found again there, whatever a caller does to the event since.
    PyObject* lists[2] = {nullptr, nullptr};
    ~Copy() {
        Py_XDECREF(made);
        Py_XDECREF(lists[0]);
        Py_XDECREF(lists[1]);
    }
};

// The keys of the two lists a copy's items are found again in (an op's "reads" and
// "writes"); set once, when the module is made.
inline PyObject* LIST_KEYS[2] = {nullptr, nullptr};

}  // namespace held

// An owned event (or none): the Python object itself, or its copy. One word: every access
// record and program step holds one, a million on a long trace.
class HeldEvent {
   public:
    HeldEvent() = default;
    // The object itself, for what is let go soon (an eager op's accesses).
    static HeldEvent live(PyObject* obj) {
        HeldEvent e;
        Py_XINCREF(obj);
        e.bits_ = reinterpret_cast<uintptr_t>(obj);
        return e;
    }
    // Its copy, where one can be made exactly; else the object itself.
    static HeldEvent copied(PyObject* obj) {
        static held::Encoder* encoder = new held::Encoder();  // reused; never destroyed
        bool copied = obj != nullptr && encoder->encode(obj);
        HeldEvent e = copied ? encoded(encoder->data(), encoder->size()) : live(obj);
        encoder->clear();
        return e;
    }

    // A copy already encoded (the direct reader's, from its tree).
    static HeldEvent encoded(const char* data, size_t size) {
        auto* copy = new held::Copy();
        copy->bytes.assign(data, size);
        ++copy->refs;
        HeldEvent e;
        e.bits_ = reinterpret_cast<uintptr_t>(copy) | COPY;
        return e;
    }

    HeldEvent(const HeldEvent& o) : bits_(o.bits_) {
        Py_XINCREF(live_object());
        if (held::Copy* c = copy()) ++c->refs;
    }
    HeldEvent(HeldEvent&& o) noexcept : bits_(std::exchange(o.bits_, 0)) {}
    HeldEvent& operator=(HeldEvent o) noexcept {
        std::swap(bits_, o.bits_);
        return *this;
    }
    ~HeldEvent() {
        Py_XDECREF(live_object());
        held::Copy* c = copy();
        if (c != nullptr && --c->refs == 0) delete c;
    }

    explicit operator bool() const { return bits_ != 0; }
    bool is_copy() const { return (bits_ & COPY) != 0; }

    // The event (borrowed; null for none, or with a Python error if it could not be made).
    PyObject* get() const {
        held::Copy* c = copy();
        if (c == nullptr) return live_object();
        if (c->made == nullptr) {
            const std::string& b = c->bytes;
            PyObject* made = held::Decoder(b.data(), b.data() + b.size()).value();
            if (made == nullptr) return nullptr;
            for (int i = 0; i < 2; ++i) {  // exact dicts and str keys: no Python code runs
                PyObject* list = PyDict_Check(made) && held::LIST_KEYS[i] != nullptr
                                     ? PyDict_GetItemWithError(made, held::LIST_KEYS[i])
                                     : nullptr;
                if (list != nullptr && PyList_CheckExact(list) && (c->lists[i] = PySequence_Tuple(list)) == nullptr) {
                    Py_DECREF(made);
                    return nullptr;
                }
            }
            c->made = made;
        }
        return c->made;
    }

    // The index-th item of the made event's list under LIST_KEYS[which], as it was made
    // (borrowed); null if there is none, or before get().
    PyObject* item(int which, size_t index) const {
        held::Copy* c = copy();
        PyObject* items = c != nullptr ? c->lists[which] : nullptr;
        if (items == nullptr || index >= size_t(PyTuple_GET_SIZE(items))) return nullptr;
        return PyTuple_GET_ITEM(items, Py_ssize_t(index));
    }

   private:
    // The object's address, or the copy's with its low bit set (both are aligned).
    static constexpr uintptr_t COPY = 1;
    PyObject* live_object() const { return is_copy() ? nullptr : reinterpret_cast<PyObject*>(bits_); }
    held::Copy* copy() const { return is_copy() ? reinterpret_cast<held::Copy*>(bits_ & ~COPY) : nullptr; }
    uintptr_t bits_ = 0;
};

// The event being fed to the engine: a Python object (held as it is, or copied, as the engine
// decides), or the copy the direct reader made of its line, which stands for it either way.
class EventRef {
   public:
    explicit EventRef(PyObject* obj) : obj_(obj) {}
    explicit EventRef(HeldEvent copy) : copy_(std::move(copy)) {}

    HeldEvent live() const { return obj_ != nullptr ? HeldEvent::live(obj_) : copy_; }
    HeldEvent copied() const { return obj_ != nullptr ? HeldEvent::copied(obj_) : copy_; }
    // The Python object (borrowed; made from the copy on first use: null with a Python error
    // if it could not be).
    PyObject* object() const { return obj_ != nullptr ? obj_ : copy_.get(); }

   private:
    PyObject* obj_ = nullptr;
    HeldEvent copy_;
};

}  // namespace streamrace
