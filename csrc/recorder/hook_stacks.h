// Which user stack a hook's record gets: its own, walked here, or that of the op or launch
// in flight, which what it allocates and frees shares. New stacks are defined in the event
// log before their first use.
#pragma once

#include <Python.h>

#include <cstdint>
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
        NewStack fresh;
        int id = table_.capture(fresh);
        if (fresh.id >= 0) log_.define_stack(std::move(fresh));
        return id;
    }

    // The user stack of an op: torch's Python bindings let go of the GIL while an op runs,
    // so it is taken back for the walk (a thread that never ran Python has no frames).
    int32_t python_stack() {
        STREAMRACE_TIMED(Stack);
        if (PyGILState_Check()) return stack();
        if (PyGILState_GetThisThreadState() == nullptr) return -1;
        py::gil_scoped_acquire gil;
        return stack();
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
    UserStacks table_;  // GIL-guarded
};

}  // namespace streamrace
