// The trace reader's fast path in C++ (streamrace/trace/io.py's iter_trace uses it when the
// core is built): lines split out of the decompressed stream, each parsed straight into
// Python objects (trace_json.h), held to its kind's fast check and to the whole-trace checks that
// sets can answer (seq order, a stack defined before its use, the stream limit). Any line it
// does not accept, whatever the reason, goes to the Python path (`on_line`), which decides
// and writes every message: so this path only ever makes reading faster.
//
// The checks are compiled from events.fast_table() (kind -> fields and block end), the same
// table the Python fast checks are built from; a kind the table given here lacks is always
// the Python path's, so a new kind is never dropped here. It says no to anything unusual,
// numbers beyond 64 bits included, and never yes to what the Python fast check refuses.
//
// The stream is read the way io.py's loop of `readline(line_read)` reads it: one read of the
// buffer's size each time no whole line is left, so a corrupt gzip stream fails at the same
// line; a pipe's lines are handed on as they come; and a line longer than the limit is handed
// on cut to line_read bytes (no newline), so the buffer stays bounded whatever the input.
#pragma once

#include <Python.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "trace_fields.h"
#include "trace_json.h"
#include "trace_tree.h"

namespace streamrace::reader {

using i64 = long long;

// The names a tree is read by, for the direct reader: every field of the declaration
// (trace_fields.h), made on first use (they need Python).
struct TreeKeys {
#define STREAMRACE_TREE_KEY(field) trace_tree::Key field{#field};
    STREAMRACE_TRACE_FIELDS(STREAMRACE_TREE_KEY)
#undef STREAMRACE_TREE_KEY
    static const TreeKeys& get() {
        static const TreeKeys* keys = new TreeKeys();  // never destroyed, as the key table
        return *keys;
    }
};

// The event kinds of the declaration, in its order, and NONE for a kind it does not have.
enum class EventKind {
#define STREAMRACE_EVENT_KIND(kind) kind,
    STREAMRACE_EVENT_KINDS(STREAMRACE_EVENT_KIND)
#undef STREAMRACE_EVENT_KIND
        NONE
};

inline EventKind event_kind(std::string_view name) {
    static const std::pair<std::string_view, EventKind> kinds[] = {
#define STREAMRACE_EVENT_KIND(kind) {#kind, EventKind::kind},
        STREAMRACE_EVENT_KINDS(STREAMRACE_EVENT_KIND)
#undef STREAMRACE_EVENT_KIND
    };
    for (const auto& [spelled, kind] : kinds)
        if (spelled == name) return kind;
    return EventKind::NONE;
}

enum class Type { INT, NONNEG, POS, STR, BOOL, POOL, INTS, RANGES, FRAMES, NODES, EDGES };

struct Field {
    PyObject* name;        // interned, owned by Keys::names
    trace_tree::Key key;   // the same, for a tree; its text lives with `name`
    Type type;
    bool required;  // else it may be absent or null
};

struct KindCheck {
    std::string kind;
    EventKind id = EventKind::NONE;
    std::vector<Field> fields;
    PyObject* block_addr = nullptr;  // the block end's fields (BLOCK_ENDS), or null
    PyObject* block_size = nullptr;
    trace_tree::Key block_addr_key{-1, {}}, block_size_key{-1, {}};
};

constexpr i64 ADDRESS_END = i64(1) << 62;
constexpr size_t MAX_TREE_LINE = size_t(4) << 20;  // the longest line the direct reader parses
constexpr Py_ssize_t READ_SIZE = 1 << 16;  // io.py's buffer size

struct Names {
    PyObject *ev, *seq, *stack, *stream, *addr, *nbytes, *shape, *stride, *itemsize, *last_seq, *id, *type, *op, *name,
        *event, *nodes, *edges;
};

// A Python int of 64 bits (bool excluded, as `type(v) is int` does), else false.
inline bool int64(PyObject* v, i64& out) {
    if (v == nullptr || !PyLong_CheckExact(v)) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow == 0;  // an exact int never fails otherwise
}

// The value of key, borrowed; null when absent. Never an error: the keys are str.
inline PyObject* item(PyObject* dict, PyObject* key) { return PyDict_GetItemWithError(dict, key); }

// How the checks read a Python event: absent is a missing key or None, as .get() has it.
struct PyValues {
    using V = PyObject*;
    V get(V dict, PyObject* name, const trace_tree::Key&) const { return item(dict, name); }
    static bool missing(V v) { return v == nullptr; }
    static bool absent(V v) { return v == nullptr || v == Py_None; }
    static bool int64(V v, i64& out) { return reader::int64(v, out); }
    static bool str(V v) { return PyUnicode_CheckExact(v); }
    static bool boolean(V v) { return PyBool_Check(v); }
    static bool list(V v) { return PyList_CheckExact(v); }
    static bool dict(V v) { return PyDict_CheckExact(v); }
    static size_t size(V list) { return size_t(PyList_GET_SIZE(list)); }
    static V at(V list, size_t i) { return PyList_GET_ITEM(list, Py_ssize_t(i)); }
};

// And a line's tree (trace_tree.h), alike: a node stands for the object trace_json.h makes.
struct TreeValues {
    using V = const trace_tree::Node*;
    using Kind = trace_tree::Kind;
    const trace_tree::Tree& tree;
    explicit TreeValues(const trace_tree::Tree& t) : tree(t) {}
    V get(V dict, PyObject*, const trace_tree::Key& key) const { return tree.get(tree.index(dict), key); }
    static bool missing(V v) { return v == nullptr; }
    static bool absent(V v) { return v == nullptr || v->kind == Kind::NUL; }
    static bool int64(V v, i64& out) {
        if (v == nullptr || v->kind != Kind::INT) return false;
        out = v->value;
        return true;
    }
    static bool str(V v) { return v->kind == Kind::STR; }
    static bool boolean(V v) { return v->kind == Kind::TRUE || v->kind == Kind::FALSE; }
    static bool list(V v) { return v->kind == Kind::LIST; }
    static bool dict(V v) { return v->kind == Kind::DICT; }
    static size_t size(V list) { return list->size; }
    // The i-th item: walked to, as a list's items are not indexed; from where the last walk of
    // that list stopped, where it can. The checks read each list in order, a few at once (a
    // range list, and a range's shape and stride in turn), so a few places are kept: each
    // list is walked once, however long (a place per list in flight, else a walk per item
    // would make a line of a million dims take the square of that).
    V at(V list, size_t i) const {
        Place* place = nullptr;
        Place* oldest = &places_[0];
        for (Place& p : places_) {
            if (p.list == list) place = &p;
            if (p.used < oldest->used) oldest = &p;
        }
        if (place == nullptr || i < place->i) {
            if (place == nullptr) place = oldest;  // the list used longest ago gives up its place
            *place = Place{list, 0, trace_tree::Tree::first(tree.index(list)), 0};
        }
        place->used = ++clock_;
        for (; place->i < i; ++place->i) place->j = tree.at(place->j).end;
        return &tree.at(place->j);
    }
    struct Place {
        V list = nullptr;
        size_t i = 0;    // the item it stands at
        unsigned j = 0;  // and its node
        size_t used = 0;
    };
    static constexpr size_t PLACES = 4;
    mutable Place places_[PLACES];
    mutable size_t clock_ = 0;
};

class Checks {
   public:
    Names k{};

    Checks() = default;

    // table: kind -> (((name, field kind, required), ...), (addr field, size field) or None).
    // False with a Python error set when it is not one.
    bool load(PyObject* table) {
        const char* fixed[] = {"ev",     "seq",      "stack",    "stream", "addr", "nbytes", "shape", "stride", "itemsize",
                               "last_seq", "id",     "type",     "op",     "name", "event",  "nodes", "edges"};
        PyObject** slots[] = {&k.ev,       &k.seq,  &k.stack, &k.stream, &k.addr,  &k.nbytes,
                              &k.shape,    &k.stride, &k.itemsize, &k.last_seq, &k.id, &k.type,
                              &k.op,       &k.name, &k.event, &k.nodes,  &k.edges};
        for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed); ++i)
            if ((*slots[i] = name(PyUnicode_FromString(fixed[i]))) == nullptr) return false;
        if (!PyDict_Check(table) || (kinds_ = PyDict_New()) == nullptr) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the check table must be a dict");
            return false;
        }
        PyObject *kind, *spec;
        Py_ssize_t at = 0;
        while (PyDict_Next(table, &at, &kind, &spec)) {
            KindCheck check;
            PyObject *fields, *block, *field_name, *type_name, *addr, *size;
            int required;
            if (!PyArg_ParseTuple(spec, "OO", &fields, &block)) return false;
            PyObject* listed = PySequence_Fast(fields, "a kind's fields must be a sequence");
            if (listed == nullptr) return false;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(listed); ++i) {
                Type t;
                bool parsed = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(listed, i), "UUp", &field_name, &type_name, &required) &&
                              type(type_name, t);
                if (parsed) Py_INCREF(field_name);
                PyObject* interned = parsed ? name(field_name) : nullptr;
                if (interned == nullptr) {
                    Py_DECREF(listed);
                    return false;
                }
                const char* text = PyUnicode_AsUTF8(interned);
                if (text == nullptr) {
                    Py_DECREF(listed);
                    return false;
                }
                check.fields.push_back({interned, trace_tree::Key(text), t, required != 0});
            }
            Py_DECREF(listed);
            if (block != Py_None) {
                if (!PyArg_ParseTuple(block, "UU", &addr, &size)) return false;
                Py_INCREF(addr);
                Py_INCREF(size);
                if ((check.block_addr = name(addr)) == nullptr || (check.block_size = name(size)) == nullptr) return false;
                const char* addr_text = PyUnicode_AsUTF8(check.block_addr);
                const char* size_text = addr_text != nullptr ? PyUnicode_AsUTF8(check.block_size) : nullptr;
                if (size_text == nullptr) return false;
                check.block_addr_key = trace_tree::Key(addr_text);
                check.block_size_key = trace_tree::Key(size_text);
            }
            const char* kind_text = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : nullptr;
            if (kind_text == nullptr) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the check table's kinds must be str");
                return false;
            }
            check.kind = kind_text;
            check.id = event_kind(check.kind);
            PyObject* index = PyLong_FromSize_t(checks_.size());
            if (index == nullptr) return false;
            const int stored = PyDict_SetItem(kinds_, kind, index);
            Py_DECREF(index);
            if (stored < 0) return false;
            checks_.push_back(std::move(check));
        }
        return true;
    }

    ~Checks() {
        Py_XDECREF(kinds_);
        for (PyObject* n : names_) Py_DECREF(n);
    }

    Checks(const Checks&) = delete;
    Checks& operator=(const Checks&) = delete;

    // The kind's check, or null: a kind this path leaves to Python.
    const KindCheck* find(PyObject* kind) const {
        if (!PyUnicode_CheckExact(kind)) return nullptr;
        PyObject* index = PyDict_GetItemWithError(kinds_, kind);
        if (index == nullptr) {
            PyErr_Clear();  // only a hash failure could set one, and a str has a hash
            return nullptr;
        }
        return &checks_[PyLong_AsSsize_t(index)];
    }

    // Certainly valid (the Python fast check of its kind would say True); false: look closer.
    // `event` is a Python object (PyValues) or a tree's node (TreeValues): one check for both.
    template <class A>
    bool valid(const A& a, typename A::V event, const KindCheck& check) const {
        for (const Field& f : check.fields) {
            typename A::V v = a.get(event, f.name, f.key);
            if (a.absent(v)) {
                if (f.required) return false;
                continue;
            }
            if (!value(a, f.type, v)) return false;
        }
        if (check.block_addr != nullptr) {
            i64 addr, size, end;
            if (!a.int64(a.get(event, check.block_addr, check.block_addr_key), addr) ||
                !a.int64(a.get(event, check.block_size, check.block_size_key), size))
                return false;
            if (__builtin_add_overflow(addr, size, &end) || end >= ADDRESS_END) return false;
        }
        if (check.id == EventKind::graph && !whole_graph(a, event)) return false;
        return true;
    }

    // The kind's check by its name's text, or null (the direct reader's find).
    const KindCheck* find(std::string_view kind) const {
        for (const KindCheck& check : checks_)
            if (check.kind == kind) return &check;
        return nullptr;
    }

   private:
    // s interned and kept (the reference is taken over); null stays null.
    PyObject* name(PyObject* s) {
        if (s == nullptr) return nullptr;
        PyUnicode_InternInPlace(&s);
        names_.push_back(s);
        return s;
    }

    static bool type(PyObject* type_name, Type& out) {
        static const std::pair<const char*, Type> known[] = {
            {"int", Type::INT},   {"nonneg", Type::NONNEG}, {"pos", Type::POS},       {"str", Type::STR},
            {"bool", Type::BOOL}, {"pool", Type::POOL},     {"ints", Type::INTS},     {"ranges", Type::RANGES},
            {"frames", Type::FRAMES}, {"nodes", Type::NODES},   {"edges", Type::EDGES}};
        const char* text = PyUnicode_AsUTF8(type_name);
        if (text == nullptr) return false;
        for (const auto& [spelled, t] : known)
            if (std::strcmp(text, spelled) == 0) {
                out = t;
                return true;
            }
        PyErr_Format(PyExc_ValueError, "a field kind the C++ reader does not check: %s", text);
        return false;
    }

    template <class A>
    bool value(const A& a, Type type, typename A::V v) const {
        i64 n;
        switch (type) {
            case Type::INT:
                return a.int64(v, n);
            case Type::NONNEG:
                return a.int64(v, n) && n >= 0;
            case Type::POS:
                return a.int64(v, n) && n > 0;
            case Type::STR:
                return a.str(v);
            case Type::BOOL:
                return a.boolean(v);
            case Type::POOL:
                return a.list(v) && a.size(v) == 2 && ints(a, v);
            case Type::INTS:
                return ints(a, v);
            case Type::RANGES:
                return ranges(a, v);
            case Type::FRAMES:
                return frames(a, v);
            case Type::NODES:
                return nodes(a, v);
            case Type::EDGES:
                return edges(a, v);
        }
        return false;
    }

    // events.py's _check_nodes, for what it takes: {id, type} objects whose ids are 0..n-1,
    // each once, with an op and an event (if any, and not null) of 64 bits and >= 0 and a
    // name (if any, and not null) that is a string. Ids beyond 64 bits: the Python path's.
    template <class A>
    bool nodes(const A& a, typename A::V list) const {
        const TreeKeys& keys = TreeKeys::get();
        if (!a.list(list)) return false;
        const size_t n = a.size(list);
        std::vector<char> seen(n, 0);
        for (size_t i = 0; i < n; ++i) {
            typename A::V node = a.at(list, i);
            i64 id, v;
            if (!a.dict(node) || !a.int64(a.get(node, k.id, keys.id), id) || id < 0 || size_t(id) >= n || seen[size_t(id)])
                return false;
            seen[size_t(id)] = 1;
            typename A::V type = a.get(node, k.type, keys.type);
            if (a.missing(type) || !a.str(type)) return false;
            typename A::V op = a.get(node, k.op, keys.op);
            if (!a.absent(op) && (!a.int64(op, v) || v < 0)) return false;
            typename A::V name = a.get(node, k.name, keys.name);
            if (!a.absent(name) && !a.str(name)) return false;
            typename A::V event = a.get(node, k.event, keys.event);
            if (!a.absent(event) && (!a.int64(event, v) || v < 0)) return false;
        }
        return true;
    }

    // A list each of whose items `ok` takes.
    template <class A, class Ok>
    static bool every(const A& a, typename A::V list, Ok ok) {
        if (!a.list(list)) return false;
        for (size_t i = 0; i < a.size(list); ++i)
            if (!ok(a.at(list, i))) return false;
        return true;
    }

    // events.py's _check_edges: [from, to] or [from, to, type] of ints (64 bits here) and a string.
    template <class A>
    static bool edges(const A& a, typename A::V list) {
        return every(a, list, [&](typename A::V edge) {
            i64 v;
            return a.list(edge) && (a.size(edge) == 2 || a.size(edge) == 3) && a.int64(a.at(edge, 0), v) &&
                   a.int64(a.at(edge, 1), v) && (a.size(edge) == 2 || a.str(a.at(edge, 2)));
        });
    }

    // events.py's _check_graph, on nodes and edges the checks above took: every edge joins two
    // of the graph's nodes, no node to itself, and the edges make no cycle.
    template <class A>
    bool whole_graph(const A& a, typename A::V event) const {
        const TreeKeys& keys = TreeKeys::get();
        typename A::V node_list = a.get(event, k.nodes, keys.nodes);
        typename A::V edge_list = a.get(event, k.edges, keys.edges);
        const size_t n = a.size(node_list);
        std::vector<std::vector<size_t>> successors(n);
        std::vector<size_t> incoming(n, 0);
        for (size_t i = 0; i < a.size(edge_list); ++i) {
            typename A::V edge = a.at(edge_list, i);
            i64 src = 0, dst = 0;
            a.int64(a.at(edge, 0), src);
            a.int64(a.at(edge, 1), dst);
            if (src < 0 || dst < 0 || size_t(src) >= n || size_t(dst) >= n || src == dst) return false;
            successors[size_t(src)].push_back(size_t(dst));
            ++incoming[size_t(dst)];
        }
        std::vector<size_t> ready;
        for (size_t node = 0; node < n; ++node)
            if (incoming[node] == 0) ready.push_back(node);
        size_t done = 0;
        while (!ready.empty()) {  // Kahn's sort: nodes left over lie on a cycle
            const size_t node = ready.back();
            ready.pop_back();
            ++done;
            for (size_t next : successors[node])
                if (--incoming[next] == 0) ready.push_back(next);
        }
        return done == n;
    }

    template <class A>
    static bool ints(const A& a, typename A::V list) {
        return every(a, list, [&](typename A::V item) {
            i64 n;
            return a.int64(item, n);
        });
    }

    template <class A>
    bool ranges(const A& a, typename A::V list) const {
        const TreeKeys& keys = TreeKeys::get();
        return every(a, list, [&](typename A::V range) {
            i64 addr, nbytes, end;
            if (!a.dict(range) || !a.int64(a.get(range, k.addr, keys.addr), addr) || addr < 0) return false;
            typename A::V count = a.get(range, k.nbytes, keys.nbytes);
            if (a.missing(count)) return strided(a, addr, range);
            // contiguous; a null nbytes is the Python path's to word
            return a.int64(count, nbytes) && nbytes >= 0 && !__builtin_add_overflow(addr, nbytes, &end) &&
                   end < ADDRESS_END;
        });
    }

    template <class A>
    bool strided(const A& a, i64 addr, typename A::V range) const {
        const TreeKeys& keys = TreeKeys::get();
        typename A::V shape = a.get(range, k.shape, keys.shape);
        typename A::V stride = a.get(range, k.stride, keys.stride);
        i64 itemsize;
        if (a.missing(shape) || a.missing(stride) || !a.list(shape) || !a.list(stride)) return false;
        if (!a.int64(a.get(range, k.itemsize, keys.itemsize), itemsize) || itemsize <= 0) return false;
        const size_t dims = a.size(shape);
        if (a.size(stride) != dims) return false;
        i64 lo = addr, hi = addr;
        bool empty = false;
        for (size_t d = 0; d < dims; ++d) {
            i64 n, s, reach;
            if (!a.int64(a.at(shape, d), n) || n < 0 || !a.int64(a.at(stride, d), s)) return false;
            if (n == 0) {
                empty = true;
                continue;
            }
            if (__builtin_mul_overflow(n - 1, s, &reach) || __builtin_mul_overflow(reach, itemsize, &reach)) return false;
            if (__builtin_add_overflow(s > 0 ? hi : lo, reach, s > 0 ? &hi : &lo)) return false;
        }
        if (empty) return addr < ADDRESS_END;
        i64 end;
        return lo >= 0 && !__builtin_add_overflow(hi, itemsize, &end) && end < ADDRESS_END;
    }

    template <class A>
    static bool frames(const A& a, typename A::V list) {
        return every(a, list, [&](typename A::V frame) {
            i64 line;
            return a.list(frame) && a.size(frame) == 3 && a.str(a.at(frame, 0)) && a.str(a.at(frame, 2)) &&
                   a.int64(a.at(frame, 1), line);
        });
    }

    PyObject* kinds_ = nullptr;  // kind -> its index in checks_
    std::vector<KindCheck> checks_;
    std::vector<PyObject*> names_;  // owned
};

// The iterator: events, in order, each either accepted here or whatever on_line made of its
// line (None, a line that holds no event, is not handed on).
struct LineReader {
    PyObject_HEAD PyObject* read;  // the stream's read1
    PyObject* on_line;  // line (bytes) -> the event, or None; raises what is wrong with it
    PyObject* checker;  // io._Checker: last_seq goes to it before on_line and comes back after
    PyObject* stacks;   // its set of stack ids defined so far
    PyObject* streams;  // and of streams seen
    Checks* checks;
    trace_json::Parser* parser;
    trace_tree::Tree* tree;                 // the direct reader's (Core::run_lines)
    std::unordered_set<i64>* known_stacks;  // ids found in `stacks`, and of streams in `streams`:
    std::unordered_set<i64>* known_streams;  // those sets only grow, so a hit stays true
    std::string* buffer;
    size_t start, scanned;  // the buffer's next line starts at `start`; no '\n' before `scanned`
    size_t line_read;       // the most of one line handed on (io.py's _LINE_READ)
    i64 lineno, last_seq, max_streams;
    bool eof;
};

inline PyTypeObject* line_reader_type = nullptr;

inline void line_reader_dealloc(PyObject* self) {
    auto* r = reinterpret_cast<LineReader*>(self);
    Py_XDECREF(r->read);
    Py_XDECREF(r->on_line);
    Py_XDECREF(r->checker);
    Py_XDECREF(r->stacks);
    Py_XDECREF(r->streams);
    delete r->checks;
    delete r->parser;
    delete r->tree;
    delete r->known_stacks;
    delete r->known_streams;
    delete r->buffer;
    PyTypeObject* type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

// The next line, '\n' included, as [begin, end) in the buffer (until the next call); false at
// the end (no error set) or on a read's error.
inline bool next_line(LineReader* r, const char*& begin, const char*& end) {
    std::string& buffer = *r->buffer;
    for (;;) {
        const char* base = buffer.data();
        const void* newline = std::memchr(base + r->scanned, '\n', buffer.size() - r->scanned);
        const bool too_long = buffer.size() - r->start >= r->line_read;
        if (newline != nullptr || (r->eof && r->start < buffer.size()) || too_long) {
            size_t stop = newline != nullptr ? static_cast<const char*>(newline) - base + 1 : buffer.size();
            // A line past the limit goes on cut to line_read bytes, as readline(line_read)
            // cuts it: the Python path refuses it, and the buffer never holds much more.
            if (stop - r->start > r->line_read) stop = r->start + r->line_read;
            begin = base + r->start;
            end = base + stop;
            r->start = r->scanned = stop;
            ++r->lineno;
            return true;
        }
        if (r->eof) return false;
        r->scanned = buffer.size();
        if (r->start > 0) {  // keep only the part line
            buffer.erase(0, r->start);
            r->scanned -= r->start;
            r->start = 0;
        }
        PyObject* chunk = PyObject_CallFunction(r->read, "n", READ_SIZE);
        if (chunk == nullptr) return false;
        if (!PyBytes_Check(chunk)) {
            Py_DECREF(chunk);
            PyErr_SetString(PyExc_TypeError, "the trace stream's read1 must return bytes");
            return false;
        }
        if (PyBytes_GET_SIZE(chunk) == 0) r->eof = true;
        buffer.append(PyBytes_AS_STRING(chunk), size_t(PyBytes_GET_SIZE(chunk)));
        Py_DECREF(chunk);
    }
}

// Is id in the Python set (added, when `add` and the set is below `limit`)? Errors are
// cleared: the Python path meets them again.
inline bool known(PyObject* set, std::unordered_set<i64>& found, i64 id, bool add, i64 limit) {
    if (found.count(id) != 0) return true;
    PyObject* n = PyLong_FromLongLong(id);
    int in = n != nullptr ? PySet_Contains(set, n) : -1;
    if (in == 0 && add && PySet_GET_SIZE(set) < limit) in = PySet_Add(set, n) == 0;
    Py_XDECREF(n);
    if (in != 1) {
        PyErr_Clear();
        return false;
    }
    found.insert(id);
    return true;
}

// Whether this path takes an event of the kind `check` names (null: none it checks), under
// the checks io._Checker.check makes, in its order: the kind's fields, seq order, a stack
// defined before its use, the stream limit (stateful kinds are not in the table). Taken:
// r->last_seq moves on. One for a Python object (accept) and a tree (accept_tree).
template <class A>
inline bool taken(LineReader* r, const A& a, typename A::V event, const KindCheck* check) {
    const Checks& c = *r->checks;
    const TreeKeys& keys = TreeKeys::get();
    i64 seq = 0, id = 0;
    if (check == nullptr || !c.valid(a, event, *check) || !a.int64(a.get(event, c.k.seq, keys.seq), seq) ||
        seq <= r->last_seq)
        return false;
    typename A::V stack = a.get(event, c.k.stack, keys.stack);
    if (!a.absent(stack) && (!a.int64(stack, id) || !known(r->stacks, *r->known_stacks, id, false, 0))) return false;
    typename A::V stream = a.get(event, c.k.stream, keys.stream);
    if (!a.absent(stream) && (!a.int64(stream, id) || !known(r->streams, *r->known_streams, id, true, r->max_streams)))
        return false;
    r->last_seq = seq;
    return true;
}

// The event if this path takes the line (a new reference), else null with no error set.
inline PyObject* accept(LineReader* r, const char* begin, const char* end) {
    PyObject* event = r->parser->parse(begin, end);
    if (event == nullptr) return nullptr;
    PyObject* kind = PyDict_CheckExact(event) ? item(event, r->checks->k.ev) : nullptr;
    if (!taken(r, PyValues{}, event, kind != nullptr ? r->checks->find(kind) : nullptr)) {
        Py_DECREF(event);
        return nullptr;
    }
    return event;
}

// The direct reader's accept(): the line parsed into r->tree, if this path takes it: its
// kind's check; else null, and the line goes the other ways.
inline const KindCheck* accept_tree(LineReader* r, const char* begin, const char* end) {
    const trace_tree::Tree& t = *r->tree;
    // A tree holds 32 bytes a value, where Python shares small ints and strings: a huge line
    // (a giant graph, a hostile list) goes as a Python object, whose memory is the lesser.
    if (size_t(end - begin) > MAX_TREE_LINE) return nullptr;
    if (!r->tree->parse(begin, end)) return nullptr;
    const TreeValues a{t};
    const trace_tree::Node* kind = t.get(0, TreeKeys::get().ev);
    const KindCheck* check = kind != nullptr && a.str(kind) ? r->checks->find(kind->str()) : nullptr;
    return taken(r, a, &t.root(), check) ? check : nullptr;
}

// The line through the Python path, with the checker's seq kept in step: the event, None, or
// null with its error.
inline PyObject* defer(LineReader* r, const char* begin, const char* end) {
    const Names& k = r->checks->k;
    PyObject* seq = PyLong_FromLongLong(r->last_seq);
    if (seq == nullptr || PyObject_SetAttr(r->checker, k.last_seq, seq) < 0) {
        Py_XDECREF(seq);
        return nullptr;
    }
    Py_DECREF(seq);
    PyObject* line = PyBytes_FromStringAndSize(begin, end - begin);
    PyObject* result = line != nullptr ? PyObject_CallOneArg(r->on_line, line) : nullptr;
    Py_XDECREF(line);
    if (result == nullptr) return nullptr;
    PyObject* back = PyObject_GetAttr(r->checker, k.last_seq);
    int overflow = 0;
    i64 value = back != nullptr ? PyLong_AsLongLongAndOverflow(back, &overflow) : -1;
    Py_XDECREF(back);
    if (back == nullptr || (value == -1 && PyErr_Occurred()) || overflow) {  // a seq is 64 bits by now
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "seq beyond 64 bits");
        Py_DECREF(result);
        return nullptr;
    }
    r->last_seq = value;
    return result;
}

// A line cut at the limit: the Python path's to refuse, even where its start parses.
inline bool cut(const LineReader* r, const char* begin, const char* end) {
    return size_t(end - begin) >= r->line_read && end[-1] != '\n';
}

// The line's event, taken here or by the Python path: the event, None (a line that holds
// none), or null with its error.
inline PyObject* read_event(LineReader* r, const char* begin, const char* end, bool cut) {
    PyObject* event = cut ? nullptr : accept(r, begin, end);
    return event != nullptr ? event : defer(r, begin, end);
}

inline PyObject* line_reader_next(PyObject* self) {
    auto* r = reinterpret_cast<LineReader*>(self);
    const char *begin, *end;
    while (next_line(r, begin, end)) {
        PyObject* event = read_event(r, begin, end, cut(r, begin, end));
        if (event != Py_None) return event;  // an event, or null with the error
        Py_DECREF(event);
    }
    return nullptr;  // the end, or the read's error
}

inline PyObject* line_reader_lineno(PyObject* self, void*) {
    return PyLong_FromLongLong(reinterpret_cast<LineReader*>(self)->lineno);
}

// Creates the type once (at module import).
inline bool init_line_reader_type() {
    static PyGetSetDef getset[] = {
        {"lineno", line_reader_lineno, nullptr, "lines read so far", nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr}};
    static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(line_reader_dealloc)},
                                  {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
                                  {Py_tp_iternext, reinterpret_cast<void*>(line_reader_next)},
                                  {Py_tp_getset, getset},
                                  {0, nullptr}};
    static PyType_Spec spec = {"streamrace._core.LineReader", sizeof(LineReader), 0, Py_TPFLAGS_DEFAULT, slots};
    line_reader_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));
    return line_reader_type != nullptr;
}

// A reader of `stream`'s remaining lines; null with an error set when the table is not one.
inline PyObject* new_line_reader(PyObject* stream, PyObject* table, PyObject* checker, PyObject* on_line, i64 line,
                                 i64 max_streams, i64 line_read) {
    if (line_read < 1) {
        PyErr_SetString(PyExc_ValueError, "line_read must be at least 1");
        return nullptr;
    }
    auto checks = std::make_unique<Checks>();
    if (!checks->load(table)) return nullptr;
    PyObject* read = PyObject_GetAttrString(stream, "read1");
    PyObject* stacks = read != nullptr ? PyObject_GetAttrString(checker, "stacks") : nullptr;
    PyObject* streams = stacks != nullptr ? PyObject_GetAttrString(checker, "streams") : nullptr;
    PyObject* seq = streams != nullptr ? PyObject_GetAttr(checker, checks->k.last_seq) : nullptr;
    i64 last_seq = seq != nullptr ? PyLong_AsLongLong(seq) : -1;
    Py_XDECREF(seq);
    if (seq == nullptr || PyErr_Occurred() || !PySet_Check(stacks) || !PySet_Check(streams)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the checker's stacks and streams must be sets");
        Py_XDECREF(read);
        Py_XDECREF(stacks);
        Py_XDECREF(streams);
        return nullptr;
    }
    auto* r = reinterpret_cast<LineReader*>(PyType_GenericAlloc(line_reader_type, 0));
    if (r == nullptr) {
        Py_DECREF(read);
        Py_DECREF(stacks);
        Py_DECREF(streams);
        return nullptr;
    }
    r->read = read;
    r->stacks = stacks;
    r->streams = streams;
    Py_INCREF(on_line);
    r->on_line = on_line;
    Py_INCREF(checker);
    r->checker = checker;
    r->checks = checks.release();
    r->parser = new trace_json::Parser();
    r->tree = new trace_tree::Tree();
    r->known_stacks = new std::unordered_set<i64>();
    r->known_streams = new std::unordered_set<i64>();
    r->buffer = new std::string();
    r->start = r->scanned = 0;
    r->lineno = line;
    r->last_seq = last_seq;
    r->max_streams = max_streams;
    r->line_read = size_t(line_read);
    r->eof = false;
    return reinterpret_cast<PyObject*>(r);
}

}  // namespace streamrace::reader
