// The user's Python stack at a hook, interned: the C++ twin of StackTable in
// streamrace/record/stacks.py, which decides what counts as a user frame (``shown_path``:
// called once per code object, here as there).
//
// Walking frames costs tens of nanoseconds each; a stack is identified first by its frames'
// (code, instruction) pairs, and only a pair list never seen before is turned into
// (file, line, function) and interned by those, as the Python table does. A stack whose every
// code object and pair list were seen before is found without the GIL (``known``, where
// frame_walk.h reads frames without it): an op's hooks run with the GIL let go. What is new
// needs the GIL (``capture``), which also orders every change to the tables; the mutex keeps
// those changes from readers without the GIL.
#pragma once

#include <pybind11/pybind11.h>
#include "frame_walk.h"
#include "python_error.h"

#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

namespace streamrace {

struct UserFrame {
    PyObject* path;  // interned str, owned by the table
    int line;
    PyObject* function;  // interned str, owned by the table
    bool operator==(const UserFrame& o) const { return path == o.path && line == o.line && function == o.function; }
};

struct NewStack {
    int id = -1;
    std::vector<UserFrame> frames;
};

class UserStacks {
   public:
    UserStacks(int depth, int max_walk, PyObject* shown_path) : depth_(depth), max_walk_(max_walk) {
        Py_INCREF(shown_path);
        shown_path_ = shown_path;
    }
    UserStacks(const UserStacks&) = delete;
    UserStacks& operator=(const UserStacks&) = delete;

    // Drops every Python reference; needs the GIL. A capture in progress on another thread
    // (its shown_path let the GIL go) sees the table cleared and gives up (-1). The
    // references go after the mutex is let go: what their finalizers run may record an op.
    void clear() {
        ska::flat_hash_map<PyObject*, Seen> paths;
        std::vector<PyObject*> owned;
        PyObject* shown_path;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            paths.swap(paths_);
            owned.swap(owned_);
            by_code_.clear();
            shown_path = shown_path_;
            shown_path_ = nullptr;
        }
        by_frames_.clear();
        ++cleared_;
        for (auto& [code, seen] : paths) Py_DECREF(seen.ref);  // paths are in owned
        for (PyObject* s : owned) Py_DECREF(s);
        Py_XDECREF(shown_path);
    }

    // The id of `thread`'s user stack when its code objects and its (code, instruction)
    // pairs were all seen before, without the GIL and without allocating; nullopt when
    // something about it is new (ask capture, with the GIL) or frames need the GIL here.
    // `thread` is the calling thread's own state.
    std::optional<int> known(PyThreadState* thread) {
        if (!kFramesWithoutGil || thread == nullptr) return std::nullopt;
        std::lock_guard<std::mutex> lock(mutex_);
        if (shown_path_ == nullptr || depth_ <= 0) return -1;
        CodeKey key;
        bool seen = true;
        walk_frames(thread, max_walk_, [&](PyCodeObject* code, int instruction) {
            auto it = paths_.find(reinterpret_cast<PyObject*>(code));
            if (it == paths_.end() || referent(it->second.ref) != reinterpret_cast<PyObject*>(code)) {
                seen = false;
                return false;
            }
            if (it->second.path != nullptr) key.emplace_back(reinterpret_cast<PyObject*>(code), instruction);
            return static_cast<int>(key.size()) < depth_;
        });
        if (!seen) return std::nullopt;
        if (key.empty()) return -1;
        auto hit = by_code_.find(key);
        if (hit == by_code_.end()) return std::nullopt;
        return hit->second;
    }

    // The id of `thread`'s user stack (innermost first), -1 when no frame is the user's; the
    // GIL held, `thread` the one running. A stack seen for the first time is handed to
    // `define` (a NewStack) before known() can find it, so that no thread uses its id before
    // its definition is written. Throws pybind11::error_already_set when shown_path fails.
    template <typename Define>
    int capture(PyThreadState* thread, Define&& define) {
        if (shown_path_ == nullptr || depth_ <= 0) return -1;
        PythonErrorKept kept;
        // shown_path runs Python, which may let the GIL go: the recording may be stopped and
        // this table cleared meanwhile (then this stack is given up), and its function must
        // outlive the call.
        pybind11::object shown_path = pybind11::reinterpret_borrow<pybind11::object>(shown_path_);
        const uint64_t generation = cleared_;
        CodeKey key;
        walk_frames(thread, max_walk_, [&](PyCodeObject* code, int instruction) {
            PyObject* path = shown(reinterpret_cast<PyObject*>(code), shown_path.ptr());
            if (cleared_ != generation) return false;
            if (path != nullptr) key.emplace_back(reinterpret_cast<PyObject*>(code), instruction);
            return static_cast<int>(key.size()) < depth_;
        });
        if (cleared_ != generation) return -1;
        if (key.empty()) return -1;
        auto hit = by_code_.find(key);  // the common case: a stack seen before, no allocation
        if (hit != by_code_.end()) return hit->second;
        std::vector<UserFrame> frames;
        for (auto [code, instruction] : key) {
            frames.push_back({paths_.at(code).path, PyCode_Addr2Line(reinterpret_cast<PyCodeObject*>(code), instruction),
                              function_name(code)});
        }
        auto known = by_frames_.find(frames);
        int id;
        if (known != by_frames_.end()) {
            id = known->second;
        } else {
            id = static_cast<int>(by_frames_.size()) + 1;
            by_frames_.emplace(frames, id);
            define(NewStack{id, std::move(frames)});
        }
        std::lock_guard<std::mutex> lock(mutex_);
        by_code_.emplace(std::move(key), id);
        return id;
    }

   private:
    using CodeKey = c10::SmallVector<std::pair<PyObject*, int>, 8>;

    struct CodeKeyHash {
        size_t operator()(const CodeKey& k) const {
            size_t h = k.size();
            for (auto [code, instruction] : k) {
                h = h * 1000003u ^ std::hash<const void*>()(code) ^ (static_cast<size_t>(instruction) << 20);
            }
            return h;
        }
    };
    struct FramesHash {
        size_t operator()(const std::vector<UserFrame>& frames) const {
            size_t h = frames.size();
            for (const auto& f : frames) {
                h = h * 1000003u ^ std::hash<const void*>()(f.path) ^ std::hash<const void*>()(f.function) ^
                    static_cast<size_t>(f.line);
            }
            return h;
        }
    };

    // The path to show for a code object's frames, or null for library code (cached). The
    // cache holds each code object by a weak reference: a strong one kept every compiled
    // function's code alive, and with it what dynamo hangs on it (its cache entries, the
    // compiled graphs and their CUDA-graph pools' blocks) until recording stopped. A code
    // object that died and whose address a new one took is asked about afresh, and the stacks
    // keyed by its address (by_code_) are forgotten then: they name the dead one. (Library
    // code is in no key: a program that evals code every step keeps its stacks.)
    PyObject* shown(PyObject* code, PyObject* shown_path) {
        auto it = paths_.find(code);
        if (it != paths_.end()) {
            if (referent(it->second.ref) == code) return it->second.path;
            PyObject* dead = it->second.ref;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (it->second.path != nullptr) forget_stacks_of(code);
                paths_.erase(it);
            }
            Py_DECREF(dead);
        }
        const uint64_t generation = cleared_;
        PyObject* result = PyObject_CallOneArg(shown_path, code);
        if (result == nullptr) throw pybind11::error_already_set();
        if (cleared_ != generation) {  // the recording stopped while it ran
            Py_DECREF(result);
            return nullptr;
        }
        PyObject* path = nullptr;
        if (result != Py_None) {
            if (!PyUnicode_Check(result)) {
                Py_DECREF(result);
                throw std::runtime_error("shown_path must return a str or None");
            }
            path = intern(result);
        }
        Py_DECREF(result);
        // shown_path ran Python code, which may have come back here for the same code object.
        auto known = paths_.find(code);
        if (known != paths_.end()) return known->second.path;
        PyObject* ref = PyWeakref_NewRef(code, nullptr);
        if (ref == nullptr) throw pybind11::error_already_set();
        std::lock_guard<std::mutex> lock(mutex_);
        paths_.emplace(code, Seen{ref, path});
        return path;
    }

    // Drops the stacks whose frames include `code` (mutex held).
    void forget_stacks_of(PyObject* code) {
        for (auto it = by_code_.begin(); it != by_code_.end();) {
            bool names = std::any_of(it->first.begin(), it->first.end(), [&](const auto& pair) { return pair.first == code; });
            it = names ? by_code_.erase(it) : std::next(it);
        }
    }

    // The object a weak reference names (Py_None once it is gone), read from the reference
    // itself: without the GIL this is safe for a code object on the caller's own stack, which
    // is alive, so its reference is not being cleared; a dead one that held the same address
    // was cleared before that address was handed out again.
    static PyObject* referent(PyObject* ref) { return reinterpret_cast<PyWeakReference*>(ref)->wr_object; }

    PyObject* function_name(PyObject* code) {
        PyObject* name = PyObject_GetAttrString(code, "co_name");
        if (name == nullptr) throw pybind11::error_already_set();
        PyObject* interned = intern(name);
        Py_DECREF(name);
        return interned;
    }

    // An interned copy of a str, owned by the table (pointer equality is string equality).
    PyObject* intern(PyObject* s) {
        Py_INCREF(s);
        PyUnicode_InternInPlace(&s);
        owned_.push_back(s);
        return s;
    }

    int depth_;
    int max_walk_;
    PyObject* shown_path_ = nullptr;
    struct Seen {
        PyObject* ref;   // a weak reference to the code object (owned)
        PyObject* path;  // interned path, or null for library code
    };
    uint64_t cleared_ = 0;  // clear() calls (GIL-guarded)
    std::mutex mutex_;  // held to change paths_ and by_code_ (GIL held too), and by known() to read them
    // code (by address) -> what was decided for it; open addressing: every hook's walk looks
    // up each of its frames here.
    ska::flat_hash_map<PyObject*, Seen> paths_;
    std::vector<PyObject*> owned_;                    // every str the table holds, one reference each
    ska::flat_hash_map<CodeKey, int, CodeKeyHash> by_code_;  // open addressing: one lookup every walk
    std::unordered_map<std::vector<UserFrame>, int, FramesHash> by_frames_;
};

}  // namespace streamrace
