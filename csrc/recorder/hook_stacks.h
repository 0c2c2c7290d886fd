// Which user stack a hook's record gets: its own, walked here, or that of the op or launch
// in flight, which what it allocates and frees shares. New stacks are defined in the event
// log before their first use.
#pragma once

#include <Python.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

#include "event_log.h"
#include "hook_timers.h"
#include "thread_state.h"
#include "user_stacks.h"

namespace streamrace {

class HookStacks {
   public:
    HookStacks(EventLog& log, int depth, int max_walk, PyObject* shown_path)
        : log_(log), table_(depth, max_walk, shown_path) {}

    // The user stack here (GIL held), its definition recorded first if it is new.
    int32_t stack() {
        return table_.capture(PyThreadState_Get(), [&](NewStack&& fresh) { log_.define_stack(std::move(fresh)); });
    }

    // The user stack of an op: torch's Python bindings let go of the GIL while an op runs.
    // A stack seen before is found without it; a new one takes it back (a thread that never
    // ran Python has no frames).
    int32_t python_stack() {
        STREAMRACE_TIMED(Stack);
        PyThreadState* thread = PyGILState_GetThisThreadState();
        if (std::optional<int> id = table_.known(thread)) {
            found_without_gil_.fetch_add(1, std::memory_order_relaxed);
            return *id;
        }
        if (PyGILState_Check()) return stack();
        if (thread == nullptr) return -1;
        took_gil_.fetch_add(1, std::memory_order_relaxed);
        py::gil_scoped_acquire gil;
        return stack();
    }

    // Of the stacks python_stack looked for (an op's, an allocation's outside one): how many
    // were found without walking with the GIL, and how many took it back to be walked (each
    // a wait, in a program whose other threads run Python).
    std::pair<int64_t, int64_t> op_walks() const {
        return {found_without_gil_.load(std::memory_order_relaxed), took_gil_.load(std::memory_order_relaxed)};
    }

    // An allocation or free inside an op shares the op's stack; elsewhere it has its own.
    int32_t op_stack() {
        if (in_op() && tls.op_stack >= 0) return tls.op_stack;
        return python_stack();
    }

    // Drops every Python reference (GIL held).
    void release_python() { table_.clear(); }

   private:
    EventLog& log_;
    UserStacks table_;
    std::atomic<int64_t> found_without_gil_{0};
    std::atomic<int64_t> took_gil_{0};
};

}  // namespace streamrace
