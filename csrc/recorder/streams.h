// The current device and stream, as the hooks see them: torch's (c10's device guard), with
// each stream's raw handle (cudaStream_t) asked of Python once, since the handle needs CUDA
// headers here; or, for a scripted capture (tests/fake_cuda.py), a Python function's, or the
// handle in a scripted cell (a ctypes int64 the script keeps current), read as c10's is,
// without the GIL.
#pragma once

#include "python_error.h"

#include <pybind11/pybind11.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace streamrace {

namespace py = pybind11;

inline int32_t index_of(const c10::Device& device) { return device.index() < 0 ? 0 : device.index(); }

class StreamSource {
   public:
    // raw_stream(device type, device index, stream id) -> handle; current_stream(device) ->
    // handle, or None; stream_cell: a ctypes.c_int64 holding the current handle, or None.
    // Neither: torch's current stream.
    StreamSource(c10::DeviceType device_type, py::object raw_stream, py::object current_stream,
                 py::object stream_cell = py::none())
        : device_type_(device_type),
          scripted_(!current_stream.is_none()),
          raw_stream_(std::move(raw_stream)),
          current_stream_(std::move(current_stream)),
          cell_owner_(std::move(stream_cell)) {
        if (!scripted_ && !cell_owner_.is_none()) {
            py::module_ ctypes = py::module_::import("ctypes");
            if (!py::isinstance(cell_owner_, ctypes.attr("c_int64"))) {
                throw std::invalid_argument("stream_cell must be a ctypes.c_int64");
            }
            auto address = ctypes.attr("addressof")(cell_owner_).cast<uintptr_t>();
            cell_ = reinterpret_cast<const int64_t*>(address);
        }
    }

    c10::DeviceType device_type() const { return device_type_; }

    int32_t current_device() const {
        return index_of(c10::impl::getDeviceGuardImpl(device_type_)->getDevice());
    }

    // The raw handle of the device's current stream.
    int64_t current_stream(int32_t device) {
        if (scripted_) {
            py::gil_scoped_acquire gil;
            PythonErrorKept kept;
            if (!current_stream_) throw std::runtime_error("the recorder has stopped");
            return current_stream_(device).cast<int64_t>();
        }
        if (cell_ != nullptr) return __atomic_load_n(cell_, __ATOMIC_RELAXED);
        c10::Stream stream = c10::impl::getDeviceGuardImpl(device_type_)->getStream(c10::Device(device_type_, device));
        return raw_handle(stream);
    }

    int64_t raw_handle(const c10::Stream& stream) {
        Key key{stream.id(), index_of(stream.device()), static_cast<int32_t>(stream.device_type())};
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = raw_.find(key);
            if (it != raw_.end()) return it->second;
        }
        py::gil_scoped_acquire gil;
        PythonErrorKept kept;
        if (!raw_stream_) throw std::runtime_error("the recorder has stopped");
        int64_t raw = raw_stream_(key.type, key.device, key.id).cast<int64_t>();
        std::lock_guard<std::mutex> lock(mutex_);
        raw_[key] = raw;
        return raw;
    }

    // Drops the Python objects (GIL held).
    void release_python() {
        raw_stream_ = py::object();
        current_stream_ = py::object();
        // The cell stays: a hook still running reads it, and it is freed with this source.
    }

   private:
    struct Key {
        int64_t id;
        int32_t device;
        int32_t type;
        bool operator==(const Key& o) const { return id == o.id && device == o.device && type == o.type; }
    };
    struct KeyHash {
        size_t operator()(const Key& k) const {
            return std::hash<int64_t>()(k.id) ^ (static_cast<size_t>(k.device) << 48) ^ static_cast<size_t>(k.type);
        }
    };

    const c10::DeviceType device_type_;
    const bool scripted_;
    py::object raw_stream_;
    py::object current_stream_;
    py::object cell_owner_;  // keeps the cell alive
    const int64_t* cell_ = nullptr;
    std::mutex mutex_;  // guards raw_
    std::unordered_map<Key, int64_t, KeyHash> raw_;
};

}  // namespace streamrace
