// Pinned host memory (trace format 1.5): which host storages are pinned ones the recording
// knows, and the seam to the Python part that owns them (streamrace/record/host_memory.py:
// their host_alloc when first seen, the finalizer that makes their host_free). The C++ twin
// of HostMemory's _live, _known and _pinned, for the native op hooks (op_hooks.h).
#pragma once

#include <pybind11/pybind11.h>

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/python_variable.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "python_error.h"
#include "tensor_range.h"

namespace streamrace {

namespace py = pybind11;

class HostMemory {
   public:
    explicit HostMemory(c10::DeviceType device_type) : device_type_(device_type) {}

    bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

    // The Python part's _pinned(tensor, known) -> bool, or None to stop (GIL held).
    void set_part(py::object part) {
        part_ = std::move(part);
        enabled_.store(!part_.is_none(), std::memory_order_relaxed);
        if (part_.is_none()) {
            std::lock_guard<std::mutex> lock(mutex_);
            known_.clear();
        }
    }

    void add(int64_t start) {
        std::lock_guard<std::mutex> lock(mutex_);
        known_.insert(start);
    }
    void remove(int64_t start) {
        std::lock_guard<std::mutex> lock(mutex_);
        known_.erase(start);
    }
    bool any_known() {
        std::lock_guard<std::mutex> lock(mutex_);
        return !known_.empty();
    }

    static int64_t storage_start(const at::Tensor& t) {
        return t.has_storage() ? reinterpret_cast<int64_t>(t.storage().data()) : 0;
    }

    bool known(const at::Tensor& t) {
        int64_t start = storage_start(t);
        if (start == 0) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        return known_.count(start) > 0;
    }

    // A tensor in host memory (CudaRuntime.is_host_tensor): a CPU tensor; where the CPU is the
    // device (the fake CUDA of the tests), the pinned storages known. A Python number wrapped
    // in a tensor is a number to a TorchDispatchMode, so it is none.
    bool is_host(const at::Tensor& t) {
        if (!t.defined() || is_wrapper(t) || t.unsafeGetTensorImpl()->is_wrapped_number()) return false;
        if (device_type_ != c10::DeviceType::CPU) return t.device().type() == c10::DeviceType::CPU;
        return known(t);
    }

    // Whether a host tensor is pinned memory: known, or (not while capturing, where CUDA is not
    // asked) pinned by CUDA's answer, when the Python part makes it known (its host_alloc).
    // `made_pinned`: a factory asked for pinned memory, so nothing is asked.
    bool pinned(const at::Tensor& t, bool capturing, bool made_pinned = false) {
        if (known(t)) return true;
        if (capturing || !t.has_storage()) return false;
        int64_t start = storage_start(t);
        if (start == 0) return false;
        if (!made_pinned && !at::globalContext().isPinnedPtr(t.storage().data())) return false;
        py::gil_scoped_acquire gil;
        PythonErrorKept kept;  // an op unwinding through Python may end here with its error set
        if (part_.is_none()) return false;
        py::object tensor = py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
        return part_(tensor, made_pinned).cast<bool>();
    }

   private:
    const c10::DeviceType device_type_;
    std::atomic<bool> enabled_{false};
    std::mutex mutex_;
    std::unordered_set<int64_t> known_;  // starts of the live pinned storages seen
    py::object part_ = py::none();       // GIL-guarded
};

}  // namespace streamrace
