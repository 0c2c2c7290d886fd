// Where the hooks' time goes: steady-clock sums and counts per phase, for
// `benchmarks/capture_overhead.py --hook-times` (the device machines have no perf). Compiled in
// only with -DSTREAMRACE_HOOK_TIMES (STREAMRACE_HOOK_TIMES=1: a build of its own); otherwise
// STREAMRACE_TIMED is nothing. Phases nest (a stack walk inside an op's start): each is timed
// whole.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace streamrace::timing {

#define STREAMRACE_PHASES(X)                                                                            \
    X(OpStart, "op start") X(OpEnd, "op end") X(Stack, "stack walk") X(Frontier, "frontier query")     \
    X(CatchUp, "catch up") X(CatchUpWalk, "catch-up walk") X(Alloc, "alloc hook") X(Free, "free hook")           \
    X(EventRecord, "event record hook") X(EventWait, "event wait hook") X(OtherTrace, "other trace hook")       \
    X(GraphRead, "graph read-back") X(KernelAccess, "kernel params") X(LaunchCheck, "launch check")               \
    X(LaunchClaim, "launch claim") X(CatchUpTrace, "catch-up dependency query") X(CheckAll, "check all streams")        \
    X(GraphNodes, "read-back: nodes") X(GraphTypes, "read-back: types") X(GraphEdges, "read-back: edges")

enum Phase : int {
#define STREAMRACE_PHASE_ENUM(name, text) name,
    STREAMRACE_PHASES(STREAMRACE_PHASE_ENUM)
#undef STREAMRACE_PHASE_ENUM
        kPhases
};

inline constexpr const char* kPhaseNames[] = {
#define STREAMRACE_PHASE_NAME(name, text) text,
    STREAMRACE_PHASES(STREAMRACE_PHASE_NAME)
#undef STREAMRACE_PHASE_NAME
};

struct Totals {
    std::array<std::atomic<int64_t>, kPhases> ns{};
    std::array<std::atomic<int64_t>, kPhases> calls{};
};

inline Totals& totals() {
    static Totals t;
    return t;
}

#ifdef STREAMRACE_HOOK_TIMES
inline constexpr bool kEnabled = true;

class Scoped {
   public:
    explicit Scoped(Phase phase) : phase_(phase), start_(std::chrono::steady_clock::now()) {}
    ~Scoped() {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
        totals().ns[phase_].fetch_add(ns.count(), std::memory_order_relaxed);
        totals().calls[phase_].fetch_add(1, std::memory_order_relaxed);
    }
    Scoped(const Scoped&) = delete;
    Scoped& operator=(const Scoped&) = delete;

   private:
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
};

#define STREAMRACE_TIMER_NAME2(line) streamrace_timer_##line
#define STREAMRACE_TIMER_NAME(line) STREAMRACE_TIMER_NAME2(line)
#define STREAMRACE_TIMED(phase) ::streamrace::timing::Scoped STREAMRACE_TIMER_NAME(__LINE__)(::streamrace::timing::phase)
#else
inline constexpr bool kEnabled = false;
#define STREAMRACE_TIMED(phase) ((void)0)
#endif

}  // namespace streamrace::timing
