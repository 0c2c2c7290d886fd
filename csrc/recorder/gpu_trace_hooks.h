// torch's GPU-trace calls: allocations, frees, CUDA event create, record, wait and delete,
// synchronizations; from torch's C++ directly (trace_interposer.h), the GIL held or not, or as
// torch.cuda._gpu_trace callbacks (GIL held). The C++ twin of PythonHooks' _on_* callbacks; an
// allocation takes its exact size, stream and pool from the allocator's tracker where it runs
// (allocator_facts.h), else the recorder settles them from the allocator's history.
#pragma once

#include <cstdint>
#include <optional>

#include "allocator_facts.h"
#include "capture_tracker.h"
#include "event_log.h"
#include "hook_stacks.h"
#include "hook_timers.h"
#include "streams.h"
#include "thread_state.h"
#include "unseen_launches.h"

namespace streamrace {

class GpuTraceHooks {
   public:
    GpuTraceHooks(EventLog& log, CaptureTracker& captures, StreamSource& streams, HookStacks& stacks,
                  UnseenLaunches& unseen)
        : log_(log), captures_(captures), streams_(streams), stacks_(stacks), unseen_(unseen) {}

    void on_alloc(int64_t ptr) {
        STREAMRACE_TIMED(Alloc);
        int32_t device = streams_.current_device();
        int64_t stream = streams_.current_stream(device);
        AllocFact fact;
        bool exact = allocator_facts().take(ptr, fact);
        log_.see_stream(stream, device);
        if (exact && fact.stream != stream) log_.see_stream(fact.stream, device);  // raw_alloc_with_stream
        int32_t stack = stacks_.op_stack();
        Locked held = log_.lock();
        Record r = simple(Kind::Alloc, ptr, stream, device, stack);
        r.graph = captures_.graph_of(held, stream);
        if (exact) log_.add_fact(held, r, fact);
        log_.append(held, r);
    }

    void on_free(int64_t ptr) {
        STREAMRACE_TIMED(Free);
        log_.graph_memory().freed(ptr);
        int32_t device = streams_.current_device();
        if (!in_op() && captures_.any_open()) unseen_.check_before_free(streams_.current_stream(device));
        int32_t stack = stacks_.op_stack();
        Locked held = log_.lock();
        log_.append(held, simple(Kind::Free, ptr, -1, device, stack));
    }

    void on_event(Kind kind, int64_t event) {
        STREAMRACE_TIMED(OtherTrace);
        Locked held = log_.lock();
        if (kind == Kind::EventDelete) captures_.event_deleted(held, event);
        log_.append(held, simple(kind, event));
    }

    void on_event_record(int64_t event, int64_t stream) {
        STREAMRACE_TIMED(EventRecord);
        tls.last_stream = 0;
        captures_.event_recorded(event, stream);
        captures_.event_heard(event, unseen_.check(stream));
        log_.see_stream(stream, streams_.current_device());
        int32_t stack = stacks_.python_stack();
        Locked held = log_.lock();
        log_.append(held, simple(Kind::EventRecord, event, stream, -1, stack));
    }

    void on_event_wait(int64_t event, int64_t stream) {
        STREAMRACE_TIMED(EventWait);
        tls.last_stream = 0;
        log_.see_stream(stream, streams_.current_device());
        std::optional<UnseenLaunches::WaitCheck> checked = unseen_.checked_wait(stream);
        // An op's own waits join what it launched, which its claim takes; a stream that
        // launched unseen since last seen holds nodes no wait brought in.
        std::optional<int64_t> stood_in;
        if (checked && !checked->launched && !in_op()) stood_in = unseen_.stand_in(event, stream, *checked);
        int32_t stack = stacks_.python_stack();
        {
            Locked held = log_.lock();
            if (stood_in) {
                Record record = simple(Kind::EventRecord, event, *stood_in, -1, stack);
                record.inferred = true;
                log_.append(held, record);
            }
            log_.append(held, simple(Kind::EventWait, event, stream, -1, stack));
            captures_.join_on_wait(held, event, stream);
        }
        // The wait is the last thing the stream did (torch reports it once it is made); a
        // stream it joins to a capture is read now.
        if (captures_.readable_graph(stream) != 0) {
            Frontier now = checked ? std::move(checked->now) : unseen_.frontier(stream);
            Locked held = log_.lock();
            captures_.set_known(held, stream, now);
        }
    }

    void on_stream_sync(int64_t stream) {
        log_.see_stream(stream, streams_.current_device());
        Locked held = log_.lock();
        log_.append(held, simple(Kind::StreamSync, 0, stream));
    }

    void on_device_sync() {
        int32_t device = streams_.current_device();
        Locked held = log_.lock();
        log_.append(held, simple(Kind::DeviceSync, 0, -1, device));
    }

   private:
    EventLog& log_;
    CaptureTracker& captures_;
    StreamSource& streams_;
    HookStacks& stacks_;
    UnseenLaunches& unseen_;
};

}  // namespace streamrace
