// The native hooks in front of torch's GPU-trace interpreter while recording: torch reports
// every allocation, free and CUDA event to c10::impl::GPUTrace's interpreter, whose own
// (Python's) goes through torch.cuda._gpu_trace for each; ours (trace_forwarding.h, generated
// from torch's header by streamrace/record/trace_forwarding.py) calls the hooks in C++ and
// hands a call on to torch's only while someone else's Python callback waits for it.
//
// GPUTrace keeps the interpreter in a public atomic that torch sets once (the first
// _activate_gpu_trace); the recorder has torch set it first, puts ours there for the
// recording, and puts torch's back at its end, unless something else replaced ours meanwhile.
#pragma once

#include <Python.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/core/impl/PyInterpreter.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace streamrace {

class TraceInterposer {
   public:
    static constexpr size_t kMaxRegistries = 16;

    // Puts `ours` in front of torch's interpreter (GIL held). `callback_lists`: each
    // registry's Python callback list, in the hooks' table order (null: none to call). ""
    // when it is in place, else why not.
    // `torch`: torch's own interpreter; only it is stood in front of (another interposer in
    // place, a second build of these hooks say, is left alone: wrapping it could make a cycle).
    std::string install(const c10::impl::PyInterpreter* ours, const c10::impl::PyInterpreter* torch,
                        c10::DeviceType device, const std::vector<PyObject*>& callback_lists) {
        const c10::impl::PyInterpreter* current = c10::impl::GPUTrace::get_trace();
        if (current == nullptr) return "torch's GPU trace is not on";
        if (current != torch && current != ours) return "another GPU-trace interpreter is in place";
        if (callback_lists.size() > kMaxRegistries) return "more registries than the interposer holds";
        for (size_t i = 0; i < kMaxRegistries; ++i) {
            PyObject* list = i < callback_lists.size() ? callback_lists[i] : nullptr;
            if (list != nullptr && !PyList_Check(list)) list = nullptr;
            Py_XINCREF(list);
            // A call in flight may still read the list it had: the old one is dropped only
            // now, at the next recording's start, and the registries' lists live as long
            // as torch.cuda._gpu_trace anyway.
            Py_XDECREF(lists_[i].exchange(list));
        }
        device_.store(device, std::memory_order_relaxed);
        inner_.store(torch, std::memory_order_release);
        c10::impl::GPUTrace::gpuTraceState.store(ours, std::memory_order_release);
        return "";
    }

    // Puts torch's interpreter back, if ours is still the one in place (GIL held).
    void uninstall(const c10::impl::PyInterpreter* ours) {
        const c10::impl::PyInterpreter* expected = ours;
        c10::impl::GPUTrace::gpuTraceState.compare_exchange_strong(expected, inner_.load(std::memory_order_acquire));
    }

    bool installed(const c10::impl::PyInterpreter* ours) const { return c10::impl::GPUTrace::get_trace() == ours; }

    // The interpreter calls are handed on to: torch's (it lives as long as the process).
    const c10::impl::PyInterpreter* inner() const { return inner_.load(std::memory_order_acquire); }

    // Whether a call for this device is the recording's (HIP reports as itself; its tensors
    // are torch.cuda's).
    bool records(c10::DeviceType type) const {
        c10::DeviceType device = device_.load(std::memory_order_relaxed);
        return type == device || (device == c10::DeviceType::CUDA && type == c10::DeviceType::HIP);
    }

    // Whether the registry has Python callbacks (someone else's: the hooks add none), which
    // torch's interpreter must still run. Read without the GIL: a list's length is one word,
    // and a callback added while a call is in flight misses that call, as it would in torch.
    // (A tool that replaces a registry's fire_callbacks instead of adding a callback, or its
    // callback_list after recording began, is not seen.)
    bool others(size_t registry) const {
        PyObject* list = registry < kMaxRegistries ? lists_[registry].load(std::memory_order_acquire) : nullptr;
        return list != nullptr && PyList_GET_SIZE(list) > 0;
    }

   private:
    std::atomic<const c10::impl::PyInterpreter*> inner_{nullptr};
    std::atomic<c10::DeviceType> device_{c10::DeviceType::CUDA};
    std::array<std::atomic<PyObject*>, kMaxRegistries> lists_{};
};

}  // namespace streamrace
