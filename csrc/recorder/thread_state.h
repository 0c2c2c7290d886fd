// What each thread has in flight: the ops between their RecordFunction's start and end, the
// Python-side launches (Triton), the stack they share with what they allocate, and the stream
// of the previous launch. The C++ twin of PythonHooks' depth, op_stack and _last_stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "graph_reads.h"
#include "schema_plan.h"
#include "tensor_range.h"

namespace streamrace {

// One op in flight on this thread, from its RecordFunction's start to its end.
struct OpFrame {
    bool opaque = false;    // its kernels' own ops are part of it
    bool recorded = false;  // the outermost op, while something is being recorded
    bool silenced = false;  // RecordFunction is off on this thread while its kernel runs
    int uncaught = 0;       // std::uncaught_exceptions() when it began
    const SchemaPlan* plan = nullptr;
    int32_t device = 0;
    int32_t stack = -1;
    int32_t graph = 0;  // the capture of its stream when it began (0: none, or not readable)
    int64_t stream = 0;
    Frontier before;  // the stream's frontier when it began
    // What it reads is described when it begins; what it writes, when it ends (an out= tensor
    // may be resized by the op), so written tensors are held while it runs, as its caller
    // holds them anyway.
    std::vector<ByteRange> reads;
    std::vector<ByteRange> index;  // of its reads, those that pick where it writes (Role::Index)
    std::vector<int64_t> read_ids;  // an eager op's: the identity behind each read of graph memory, else 0
    int64_t view_base = 0;          // a view op's: the identity of the tensor it views
    c10::SmallVector<at::Tensor, 4> written;
    // [start, end) of its inputs' storages, where it returns a tensor it may write: a returned
    // tensor inside one is a view the schema does not declare (_unsafe_view, weak_ref_tensor).
    c10::SmallVector<std::pair<int64_t, int64_t>, 4> input_storages;
    std::optional<c10::Stream> recorded_on;  // record_stream's stream argument
    // Its host tensors (host_memory.h), read or written (true), in schema order; whether it
    // was asked not to block, or for pinned memory.
    c10::SmallVector<std::pair<at::Tensor, bool>, 2> host;
    bool non_blocking = false;
    bool pin_memory = false;
};

struct ThreadState {
    std::vector<OpFrame> frames;
    int opaque_depth = 0;
    int launches = 0;         // Python-side launches in flight (Triton)
    int32_t op_stack = -1;    // the stack of the op or launch in flight, shared by its allocations
    int64_t last_stream = 0;  // the stream of the previous launch, while no event hook came between
    int64_t op_calls = 0;     // RecordFunction start callbacks heard on this thread (tests, benchmarks)
    // Buffers of ranges an op lent back when it ended: the next op's, so that describing an
    // op allocates nothing once the thread has recorded a few.
    std::vector<ByteRange> spare_reads, spare_writes;
};

inline thread_local ThreadState tls;

// A vector of ranges whose buffer is a thread's spare while it lives, and goes back to it
// (emptied) when it ends, unless the spare got a larger one meanwhile (a nested op's).
class SpareRanges {
   public:
    SpareRanges(std::vector<ByteRange>& spare, std::vector<ByteRange>&& taken = {}) : spare_(spare), v(std::move(taken)) {
        if (v.capacity() == 0) v.swap(spare_);
    }
    ~SpareRanges() {
        v.clear();
        if (v.capacity() > spare_.capacity()) v.swap(spare_);
    }
    SpareRanges(const SpareRanges&) = delete;
    SpareRanges& operator=(const SpareRanges&) = delete;

   private:
    std::vector<ByteRange>& spare_;

   public:
    std::vector<ByteRange> v;
};

// Inside an op's kernel or a Python-side launch: what happens now is part of it.
inline bool in_op() { return tls.opaque_depth > 0 || tls.launches > 0; }

}  // namespace streamrace
