// A Python error in flight while the recorder calls Python: an op that raised through Python
// code (a dispatch mode, a Python kernel) ends its RecordFunction while unwinding, with the
// error already set. Calling Python then fails ("returned a result with an exception set")
// and the program would see a SystemError instead of its own exception. So the error is put
// aside for the recorder's call and put back after it, whatever the call did.
#pragma once

#include <Python.h>

namespace streamrace {

class PythonErrorKept {
   public:
    PythonErrorKept() { PyErr_Fetch(&type_, &value_, &traceback_); }
    ~PythonErrorKept() {
        if (type_ != nullptr) PyErr_Restore(type_, value_, traceback_);  // steals the three
    }
    PythonErrorKept(const PythonErrorKept&) = delete;
    PythonErrorKept& operator=(const PythonErrorKept&) = delete;

   private:
    PyObject* type_ = nullptr;
    PyObject* value_ = nullptr;
    PyObject* traceback_ = nullptr;
};

}  // namespace streamrace
