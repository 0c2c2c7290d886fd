// The bytes one tensor view touches, keyed on storage bytes (docs/trace-format.md, "Byte
// ranges"): the same rules as tensor_range() in streamrace/record/op_accesses.py.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

namespace streamrace {

struct ByteRange {
    int64_t addr = 0;
    bool contiguous = false;  // {addr, nbytes}: a layout other than strided
    int64_t nbytes = 0;
    int64_t itemsize = 0;
    c10::SmallVector<int64_t, 6> shape, stride;

    bool operator==(const ByteRange& o) const {
        if (addr != o.addr || contiguous != o.contiguous) return false;
        if (contiguous) return nbytes == o.nbytes;
        return itemsize == o.itemsize && shape == o.shape && stride == o.stride;
    }
};

// Tensors whose bytes are not their own: a Python subclass, a functional wrapper or vmap's
// batched tensor stands in for tensors the recorder sees separately, when the ops on them
// are dispatched (by the subclass, functionalization, or vmap's batching rule).
inline bool is_wrapper(const at::Tensor& t) {
    static const c10::DispatchKeySet wrappers({c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                               c10::DispatchKey::FuncTorchBatched,
                                               c10::DispatchKey::BatchedNestedTensor});
    return !(t.key_set() & wrappers).empty();
}

// False when the tensor touches no bytes (empty, meta, no storage, no real data).
inline bool tensor_range(const at::Tensor& t, ByteRange& out) {
    // A Python number passed for a Tensor argument is wrapped in a CPU scalar tensor; to a
    // TorchDispatchMode it is the number again.
    if (!t.defined() || is_wrapper(t) || t.unsafeGetTensorImpl()->is_wrapped_number()) return false;
    if (t.is_meta() || !t.has_storage()) return false;
    if (t.numel() == 0) return false;
    const c10::Storage& storage = t.storage();
    auto base = reinterpret_cast<int64_t>(storage.data());
    if (t.layout() != c10::kStrided) {
        out.contiguous = true;
        out.addr = base;
        out.nbytes = static_cast<int64_t>(storage.nbytes());
        return true;
    }
    out.itemsize = static_cast<int64_t>(t.element_size());
    out.addr = base + t.storage_offset() * out.itemsize;
    auto sizes = t.sizes();
    auto strides = t.strides();
    out.shape.assign(sizes.begin(), sizes.end());
    out.stride.assign(strides.begin(), strides.end());
    return true;
}

}  // namespace streamrace
