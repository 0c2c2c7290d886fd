// A module for one interpreter, around csrc/recorder/frame_walk.h alone (no torch): walk()
// lets go of the GIL, as torch's bindings do around an op, walks the calling thread's frames
// and returns each as (function name, line), for tests/test_frame_walk.py to hold against the
// interpreter's own frames.
#include <Python.h>

#include <utility>
#include <vector>

#include "frame_walk.h"

static PyObject* walk(PyObject*, PyObject*) {
    std::vector<std::pair<PyCodeObject*, int>> frames;
    PyThreadState* thread = PyGILState_GetThisThreadState();
    auto collect = [&](PyCodeObject* code, int lasti) {
        frames.emplace_back(code, lasti);
        return true;
    };
    if (streamrace::kFramesWithoutGil) {
        Py_BEGIN_ALLOW_THREADS
        streamrace::walk_frames(thread, 128, collect);
        Py_END_ALLOW_THREADS
    } else {
        streamrace::walk_frames(thread, 128, collect);  // the public walk needs the GIL
    }
    PyObject* result = PyList_New(0);
    for (auto [code, lasti] : frames) {
        PyObject* item = Py_BuildValue("(Oi)", code->co_name, PyCode_Addr2Line(code, lasti));
        PyList_Append(result, item);
        Py_DECREF(item);
    }
    return result;
}

static PyMethodDef methods[] = {{"walk", walk, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "frame_walk_probe", nullptr, -1, methods};

PyMODINIT_FUNC PyInit_frame_walk_probe() {
    PyObject* m = PyModule_Create(&module);
    if (m != nullptr) PyModule_AddIntConstant(m, "without_gil", streamrace::kFramesWithoutGil ? 1 : 0);
    return m;
}
