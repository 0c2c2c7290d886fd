// The calling thread's Python frames, innermost first, as (code object, instruction offset)
// pairs: what PyEval_GetFrame and PyFrame_GetBack walk, read straight from the interpreter's
// frame stack (CPython 3.11-3.13, whose internal header describes it).
//
// Why: an op's hooks run while torch's bindings have let go of the GIL. Taking it back to
// walk frame objects cost a GIL hand-over per op (in a program with other Python threads, a
// wait for them), and each frame walked for the first time became a frame object. A thread's
// own frames do not change while it runs C++, and the code objects they hold are alive, so
// reading them needs no GIL; only what is new about a stack (its paths, lines and names) does.
//
// Elsewhere (another CPython, a free-threaded build) `kFramesWithoutGil` is false and the walk
// goes through the public API, which needs the GIL.
#pragma once

#include <Python.h>
#include <frameobject.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define STREAMRACE_FRAMES_WITHOUT_GIL 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#define STREAMRACE_DEFINED_PY_BUILD_CORE 1
#endif
#include <internal/pycore_frame.h>
#ifdef STREAMRACE_DEFINED_PY_BUILD_CORE
#undef Py_BUILD_CORE
#undef STREAMRACE_DEFINED_PY_BUILD_CORE
#endif
#else
#define STREAMRACE_FRAMES_WITHOUT_GIL 0
#endif

namespace streamrace {

inline constexpr bool kFramesWithoutGil = STREAMRACE_FRAMES_WITHOUT_GIL;

// The thread's frames, each visited as visit(code, instruction offset in bytes, or -1 before
// the first) until it returns false or `max_walk` were seen. Borrowed code objects, alive
// while their frames are. Without the GIL only where kFramesWithoutGil, and only for the
// calling thread's own state (`thread`: PyGILState_GetThisThreadState()).
template <typename Visit>
void walk_frames(PyThreadState* thread, int max_walk, Visit&& visit) {
    if (thread == nullptr) return;
#if STREAMRACE_FRAMES_WITHOUT_GIL
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame* frame = thread->current_frame;
#else
    _PyInterpreterFrame* frame = thread->cframe->current_frame;
#endif
    // Incomplete frames (not yet started, or the C stack's entry shims) have no frame object
    // and are skipped, as PyEval_GetFrame and PyFrame_GetBack skip them.
    for (int walked = 0; frame != nullptr && walked < max_walk; frame = frame->previous) {
        if (_PyFrame_IsIncomplete(frame)) continue;
#if PY_VERSION_HEX >= 0x030D0000
        PyCodeObject* code = _PyFrame_GetCode(frame);
#else
        PyCodeObject* code = frame->f_code;
#endif
        int lasti = _PyInterpreterFrame_LASTI(frame);
        ++walked;
        if (!visit(code, lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT)))) return;
    }
#else
    // The public walk (GIL held): frame objects, one reference at a time.
    (void)thread;
    PyFrameObject* frame = PyEval_GetFrame();  // borrowed
    Py_XINCREF(frame);
    for (int walked = 0; frame != nullptr && walked < max_walk; ++walked) {
        PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
#if PY_VERSION_HEX >= 0x030B0000
        int lasti = PyFrame_GetLasti(frame);
#else
        int lasti = frame->f_lasti * 2;  // 3.10 counts code units; Addr2Line takes bytes
#endif
        bool more = visit(code, lasti);
        Py_DECREF(code);  // alive while its frame is
        PyFrameObject* back = more ? PyFrame_GetBack(frame) : nullptr;
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);
#endif
}

}  // namespace streamrace
