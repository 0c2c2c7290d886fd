// The hooks' half of catching up (streamrace/record/unseen_launches.py is the recorder's):
// when a capturing stream's frontier moved with no recorded launch, something the dispatcher
// never saw launched there, and Python gives each new node a kernel event, then, in program
// order. The C++ twin of PythonHooks' _moved, _check and _check_before_launch.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "capture_tracker.h"
#include "driver.h"
#include "graph_reads.h"
#include "hook_timers.h"
#include "thread_state.h"

namespace streamrace {

class UnseenLaunches {
   public:
    UnseenLaunches(const Driver& driver, CaptureTracker& captures, std::mutex& guard, py::object catch_up)
        : driver_(driver), captures_(captures), mutex_(guard), catch_up_(std::move(catch_up)) {}

    Frontier frontier(int64_t stream) const { return streamrace::frontier(driver_, stream); }

    // Catch up when the stream's frontier moved and no recorded launch moved it. Returns the
    // frontier, accounted for.
    Frontier checked(int64_t stream) {
        Frontier known;
        {
            Locked held(mutex_);
            known = captures_.known(held, stream);
        }
        Frontier now = frontier(stream);
        if (now == known) return now;
        catch_up();
        return frontier(stream);
    }

    void check(int64_t stream) {
        if (captures_.readable_graph(stream) != 0) checked(stream);
    }

    // Before a launch claims "every node since the previous claim", the streams that may have
    // launched unseen must be accounted for: its own, and, after a change of stream or an
    // event hook (where programs move between streams), every stream of its capture.
    Frontier checked_before_launch(int32_t graph, int64_t stream) {
        bool same = tls.last_stream == stream;
        tls.last_stream = stream;
        return same ? checked(stream) : checked_all(graph, stream);
    }

    // A wait adds the event's nodes to the stream's frontier; a launch would have replaced it.
    void check_wait(int64_t stream) {
        if (captures_.readable_graph(stream) == 0) return;
        Frontier known;
        {
            Locked held(mutex_);
            known = captures_.known(held, stream);
        }
        if (!subset(known, frontier(stream))) catch_up();
    }

    // After catching up: what every stream of the capture has launched is accounted for.
    void refresh(int32_t graph) {
        std::vector<int64_t> streams = captures_.capture_streams(graph);
        std::vector<Frontier> now;
        for (int64_t stream : streams) now.push_back(frontier(stream));
        Locked held(mutex_);
        for (size_t i = 0; i < streams.size(); ++i) {
            if (captures_.capturing(held, streams[i])) captures_.set_known(held, streams[i], now[i]);
        }
    }

    // Drops the Python callback (GIL held).
    void release_python() { catch_up_ = py::object(); }

   private:
    Frontier checked_all(int32_t graph, int64_t stream) {
        std::vector<int64_t> streams;
        std::vector<Frontier> known;
        {
            Locked held(mutex_);
            streams = captures_.streams_of(held, graph);
            for (int64_t s : streams) known.push_back(captures_.known(held, s));
        }
        Frontier mine;
        bool moved = false;
        for (size_t i = 0; i < streams.size(); ++i) {
            Frontier now = frontier(streams[i]);
            moved |= now != known[i];
            if (streams[i] == stream) mine = std::move(now);
        }
        if (!moved) return mine;
        catch_up();
        return frontier(stream);
    }

    void catch_up() {
        STREAMRACE_TIMED(CatchUp);
        py::gil_scoped_acquire gil;
        if (catch_up_) catch_up_();
    }

    const Driver& driver_;
    CaptureTracker& captures_;
    std::mutex& mutex_;
    py::object catch_up_;
};

}  // namespace streamrace
