// Catching up: when a capturing stream's frontier moved with no recorded launch, something the
// dispatcher never saw launched there, and each new node that reads or writes memory gets a
// kernel event, then, in program order, on the stream whose frontier holds it. The C++ twin
// of PythonHooks' _moved, _check and _check_before_launch, and of the Recorder's catch_up
// for the Python hooks (streamrace/record/unseen_launches.py).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture_tracker.h"
#include "driver.h"
#include "event_log.h"
#include "graph_reads.h"
#include "hook_stacks.h"
#include "hook_tables.h"
#include "hook_timers.h"
#include "streams.h"
#include "thread_state.h"

namespace streamrace {

class UnseenLaunches {
   public:
    UnseenLaunches(const Driver& driver, CaptureTracker& captures, EventLog& log, StreamSource& streams,
                   HookStacks& stacks)
        : driver_(driver),
          captures_(captures),
          log_(log),
          streams_(streams),
          stacks_(stacks),
          mutex_(log.mutex()) {}

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
    // The frontier after the wait, accounted for; nothing when the stream's capture cannot be
    // read (or it captures in none yet).
    std::optional<Frontier> checked_wait(int64_t stream) {
        if (captures_.readable_graph(stream) == 0) return std::nullopt;
        Frontier known;
        {
            Locked held(mutex_);
            known = captures_.known(held, stream);
        }
        Frontier now = frontier(stream);
        if (subset(known, now)) return now;
        catch_up();
        return frontier(stream);
    }

    // After catching up: what every stream of the capture has launched is accounted for.
    void refresh(int32_t graph) {
        std::vector<int64_t> streams = captures_.capture_streams(graph);
        refresh(streams, frontiers(streams));
    }

    // Give each node that appeared where no recorded launch was a kernel event, now. A failure
    // is the recorder's ("invisible launches"); the hook that asked goes on.
    void catch_up() {
        STREAMRACE_TIMED(CatchUp);
        // One catch-up at a time (hooks run on any thread, with or without the GIL): each
        // reads its captures' floors and last claims only once it has the turn. The turn is
        // never waited for with the GIL held, since a catch-up may take the GIL (the stack).
        std::unique_lock<std::mutex> turn(turn_, std::try_to_lock);
        if (!turn.owns_lock()) {  // another catch-up has it: wait without holding the GIL
            if (PyGILState_Check()) {
                py::gil_scoped_release released;
                turn.lock();
            } else {
                turn.lock();
            }
        }
        try {
            for (const auto& [graph, state] : captures_.catch_up_states()) catch_up(graph, state);
        } catch (const std::exception& e) {
            log_.fail("invisible launches", e.what());
        }
    }

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

    static bool access_type(const std::string& type) {
        for (const char* t : tables::kAccessNodeTypes) {
            if (type == t) return true;
        }
        return false;
    }

    std::vector<Frontier> frontiers(const std::vector<int64_t>& streams) const {
        std::vector<Frontier> now;
        now.reserve(streams.size());
        for (int64_t stream : streams) now.push_back(frontier(stream));
        return now;
    }

    void refresh(const std::vector<int64_t>& streams, const std::vector<Frontier>& now) {
        Locked held(mutex_);
        for (size_t i = 0; i < streams.size(); ++i) {
            if (captures_.capturing(held, streams[i])) captures_.set_known(held, streams[i], now[i]);
        }
    }

    void catch_up(int32_t graph, const CatchUpState& state) {
        // The frontiers are read once, before the walk: each launch they hold is among the
        // nodes walked, so they are what is accounted for after (a node launched on another
        // thread in between is walked too, and its stream's next check finds nothing new).
        const std::vector<int64_t> streams = captures_.capture_streams(graph);
        const std::vector<Frontier> now = frontiers(streams);
        const auto fresh = nodes_since(driver_, state.handle, state.last_claim, state.floor);
        if (!fresh.empty()) {
            // A launch's nodes end where its stream's frontier is now; earlier ones of the
            // same gap lead to it, so they take the stream of the next node that has one.
            std::unordered_map<int64_t, int64_t> launcher;
            for (size_t i = 0; i < streams.size(); ++i) {
                for (int64_t node : now[i]) launcher[node] = streams[i];
            }
            std::vector<std::optional<int64_t>> stream_of(fresh.size());
            std::optional<int64_t> launching;
            for (size_t k = fresh.size(); k-- > 0;) {
                auto it = launcher.find(std::get<1>(fresh[k]));
                if (it != launcher.end()) launching = it->second;
                stream_of[k] = launching;
            }
            const int32_t device = streams_.current_device();
            std::optional<int32_t> stack;
            for (size_t k = 0; k < fresh.size(); ++k) {
                const auto& [index, handle, type] = fresh[k];
                if (!access_type(type)) continue;
                if (!stack) stack = stacks_.python_stack();
                Locked held = log_.lock();
                Record r;
                r.kind = Kind::Kernel;
                r.graph = graph;
                r.value = index;
                r.text = log_.text(held, type);
                r.stream = stream_of[k].value_or(state.stream);
                r.device = device;
                r.stack = *stack;
                log_.append(held, r);
                captures_.caught_up(held, graph, index, r.seq);
            }
        }
        refresh(streams, now);
    }

    const Driver& driver_;
    CaptureTracker& captures_;
    EventLog& log_;
    StreamSource& streams_;
    HookStacks& stacks_;
    std::mutex& mutex_;
    std::mutex turn_;  // one native catch-up at a time
};

}  // namespace streamrace
