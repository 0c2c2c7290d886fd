// Each allocation's exact size, owning stream and pool, told by the caching allocator itself.
//
// c10's allocator trace tracker (CUDACachingAllocator::attachAllocatorTraceTracker) is called
// for every allocator action, inside the allocator, with its per-device lock held, whether or
// not the memory history is on: an allocation's entry comes just before the
// torch.cuda._gpu_trace allocation hook for the same block (and a free's just after its hook).
// So the tracker keeps each allocation's facts, by address, until the hook's alloc record takes
// them: exact, with no Python and no history to match later.
//
// The tracker only appends integers to a buffer under a mutex of its own, which nothing else
// is taken under (it runs under the allocator's lock, maybe without the GIL): no Python, no
// CUDA call, no CUDA memory. A tracker cannot be detached: it is attached once per process and
// does nothing while no recording wants its facts.
//
// The c10 side needs CUDA headers (cudaStream_t); it is built only with
// STREAMRACE_ALLOCATOR_TRACKER (streamrace/record/native.py defines it where the headers and a
// CUDA build of torch are found). Without it the buffer is still here, fed by a scripted
// allocator (tests/fake_cuda.py) through allocator_trace, and the recorder takes the facts
// from the allocator's history instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#ifdef STREAMRACE_ALLOCATOR_TRACKER
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace streamrace {

// One allocation as the allocator made it: the requested size, the stream it belongs to, and
// the private pool it came from ({0, 0}: the default pools).
struct AllocFact {
    int64_t addr = 0;
    int64_t size = 0;
    int64_t stream = 0;
    uint64_t pool_first = 0;
    uint64_t pool_second = 0;
};

class AllocatorFacts {
   public:
    // The allocator's actions the tracker passes on (TraceEntry's, by name).
    enum Action : int { kAlloc = 0, kFreeRequested = 1 };

    void set_active(bool on) {
        std::lock_guard<std::mutex> lock(mutex_);
        active_.store(on, std::memory_order_release);
        pending_.clear();
    }
    bool active() const { return active_.load(std::memory_order_acquire); }

    // From inside the allocator (its lock held).
    void allocated(const AllocFact& fact) {
        if (!active()) return;
        std::lock_guard<std::mutex> lock(mutex_);
        // Facts no hook took (an allocation the hooks never saw) must not pile up.
        if (pending_.size() >= kMaxPending) pending_.erase(pending_.begin(), pending_.begin() + kMaxPending / 2);
        pending_.push_back(fact);
    }

    // From inside the allocator: a block freed before a hook took its facts is not waited for.
    void freed(int64_t addr) {
        if (!active()) return;
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t i = pending_.size(); i-- > 0;) {
            if (pending_[i].addr == addr) pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }

    // The hook's allocation takes its block's facts: the latest at that address, which no free
    // can have come between (the block is not handed to the program before the hook runs).
    bool take(int64_t addr, AllocFact& out) {
        if (!active()) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        for (size_t i = pending_.size(); i-- > 0;) {
            if (pending_[i].addr == addr) {
                out = pending_[i];
                pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
                return true;
            }
        }
        return false;
    }

   private:
    static constexpr size_t kMaxPending = 4096;
    std::atomic<bool> active_{false};
    std::mutex mutex_;  // a leaf: nothing is called while it is held
    std::vector<AllocFact> pending_;
};

// One per process, as the tracker is; never destroyed (the allocator may call it at exit).
inline AllocatorFacts& allocator_facts() {
    static auto* facts = new AllocatorFacts();
    return *facts;
}

// What a tracker is told, by action (AllocatorFacts::Action; other actions are ignored).
inline void allocator_trace(int action, int64_t addr, int64_t size, int64_t stream, uint64_t pool_first,
                            uint64_t pool_second) {
    if (action == AllocatorFacts::kAlloc) {
        allocator_facts().allocated(AllocFact{addr, size, stream, pool_first, pool_second});
    } else if (action == AllocatorFacts::kFreeRequested) {
        allocator_facts().freed(addr);
    }
}

#ifdef STREAMRACE_ALLOCATOR_TRACKER
namespace c10_allocator = c10::cuda::CUDACachingAllocator;

inline void on_trace_entry(const c10_allocator::TraceEntry& entry) {
    int action = entry.action_ == c10_allocator::TraceEntry::ALLOC            ? AllocatorFacts::kAlloc
                 : entry.action_ == c10_allocator::TraceEntry::FREE_REQUESTED ? AllocatorFacts::kFreeRequested
                                                                               : -1;
    if (action < 0) return;
    // stream_ is a cudaStream_t or a void*, by torch version: a pointer either way.
    allocator_trace(action, static_cast<int64_t>(entry.addr_), static_cast<int64_t>(entry.size_),
                    reinterpret_cast<int64_t>(static_cast<const void*>(entry.stream_)),
                    static_cast<uint64_t>(entry.mempool_.first), static_cast<uint64_t>(entry.mempool_.second));
}
#endif

// Attaches the tracker to torch's caching allocator, once per process: "" when it is attached,
// else why it is not (the recorder then takes facts from the allocator's history). The
// allocator must be initialized: it attaches the tracker to each device's allocator it has.
inline std::string attach_allocator_tracker() {
#ifdef STREAMRACE_ALLOCATOR_TRACKER
    static std::mutex mutex;
    static bool attached = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (attached) return "";
    c10_allocator::CUDAAllocator* allocator = c10_allocator::get();
    if (allocator == nullptr || !allocator->initialized()) return "the CUDA caching allocator is not initialized";
    try {
        c10_allocator::attachAllocatorTraceTracker(&on_trace_entry);
    } catch (const c10::Error& e) {  // an allocator backend without trackers (cudaMallocAsync)
        return std::string("the CUDA allocator takes no trace tracker: ") + e.what_without_backtrace();
    }
    attached = true;
    return "";
#else
    return "built without CUDA headers";
#endif
}

}  // namespace streamrace
