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
#include <unordered_set>
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
        STREAMRACE_TIMED(CheckAll);
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

    // A node no recorded launch made, with the stream whose frontier leads to it.
    struct Fresh {
        int64_t node;
        std::optional<int64_t> stream;
        std::string type;
    };

    // What a catch-up knows it accounted for in an open capture: the nodes a trace stops at.
    struct Accounted {
        std::unordered_set<int64_t> nodes;
        size_t taken = 0;  // of the capture's seen nodes (CaptureTracker::seen_since)
    };

    // A chain of new nodes longer than this is walked instead (the walk's cost, once).
    static constexpr size_t kMaxTraced = 4096;

    void catch_up(int32_t graph, const CatchUpState& state) {
        // The frontiers are read once, before the nodes are looked for: each launch they hold
        // is among the nodes found, so they are what is accounted for after (a node launched
        // on another thread in between is found too, and its stream's next check finds
        // nothing new).
        const std::vector<int64_t> streams = captures_.capture_streams(graph);
        const std::vector<Frontier> now = frontiers(streams);
        Accounted& accounted = accounted_for(graph);
        std::vector<Fresh> fresh;
        if (driver_.node_dependencies == nullptr || !traced(streams, now, accounted.nodes, fresh)) {
            fresh = walked(state, streams, now, accounted.nodes);
        }
        const int32_t device = streams_.current_device();
        std::optional<int32_t> stack;
        for (const Fresh& found : fresh) {
            accounted.nodes.insert(found.node);
            if (!access_type(found.type)) continue;
            if (!stack) stack = stacks_.python_stack();
            Locked held = log_.lock();
            Record r;
            r.kind = Kind::Kernel;
            r.graph = graph;
            r.value = found.node;  // a handle: the capture's end gives it its index (read_capture)
            r.text = log_.text(held, found.type);
            r.stream = found.stream.value_or(state.stream);
            r.device = device;
            r.stack = *stack;
            log_.append(held, r);
            captures_.caught_up(held, graph, found.node, r.seq);
        }
        refresh(streams, now);
    }

    // This catch-up's record of what `graph` accounted for, brought up to date; the records
    // of captures no longer open go (graph ids are never reused).
    Accounted& accounted_for(int32_t graph) {
        for (auto it = accounted_.begin(); it != accounted_.end();) {
            it = it->first != graph && !captures_.is_open(it->first) ? accounted_.erase(it) : std::next(it);
        }
        Accounted& accounted = accounted_[graph];
        std::vector<int64_t> more;
        accounted.taken = captures_.seen_since(graph, accounted.taken, more);
        accounted.nodes.insert(more.begin(), more.end());
        return accounted;
    }

    // The nodes new since everything accounted for, where they are one chain (what one
    // library call on one stream leaves, the case a catch-up meets nearly always): found from
    // the streams' frontiers through their dependencies, stopping at nodes accounted for,
    // first to last. False where new nodes end on more than one stream or branch (nodes of
    // several streams between two hooks, or a fork the hooks never saw): then the walk finds
    // them, in the order they were made, which no dependency tells.
    bool traced(const std::vector<int64_t>& streams, const std::vector<Frontier>& now,
                const std::unordered_set<int64_t>& accounted, std::vector<Fresh>& out) const {
        STREAMRACE_TIMED(CatchUpWalk);
        std::optional<std::pair<int64_t, int64_t>> last;  // (node, stream): the chain's newest
        for (size_t i = 0; i < streams.size(); ++i) {
            for (int64_t node : now[i]) {
                if (accounted.count(node) != 0) continue;
                if (last && last->first != node) return false;  // new nodes end on two streams
                last = {node, streams[i]};
            }
        }
        if (!last) return true;  // nothing new
        std::vector<int64_t> chain{last->first};
        c10::SmallVector<int64_t, 8> deps;
        for (;;) {
            node_dependencies(driver_, chain.back(), deps);
            std::optional<int64_t> earlier;
            for (int64_t dep : deps) {
                if (accounted.count(dep) != 0) continue;
                if (earlier) return false;  // a branch
                earlier = dep;
            }
            if (!earlier) break;
            if (chain.size() >= kMaxTraced) return false;
            chain.push_back(*earlier);
        }
        for (size_t k = chain.size(); k-- > 0;) {
            STREAMRACE_TIMED(CatchUpNode);
            out.push_back({chain[k], last->second, node_type_name(node_type(driver_, chain[k]))});
        }
        return true;
    }

    // The same found by walking the graph: the nodes after the latest claim's (and the
    // capture's first), less those accounted for, in creation order. A launch's nodes end
    // where its stream's frontier is now; earlier ones of the same gap lead to it, so they
    // take the stream of the next node that has one.
    std::vector<Fresh> walked(const CatchUpState& state, const std::vector<int64_t>& streams,
                              const std::vector<Frontier>& now, const std::unordered_set<int64_t>& accounted) const {
        std::vector<Fresh> out;
        for (auto& [index, node, type] : nodes_since(driver_, state.handle, state.last_claim, state.floor)) {
            if (accounted.count(node) == 0) out.push_back({node, std::nullopt, std::move(type)});
        }
        std::unordered_map<int64_t, int64_t> launcher;
        for (size_t i = 0; i < streams.size(); ++i) {
            for (int64_t node : now[i]) launcher[node] = streams[i];
        }
        std::optional<int64_t> launching;
        for (size_t k = out.size(); k-- > 0;) {
            auto it = launcher.find(out[k].node);
            if (it != launcher.end()) launching = it->second;
            out[k].stream = launching;
        }
        return out;
    }

    const Driver& driver_;
    CaptureTracker& captures_;
    EventLog& log_;
    StreamSource& streams_;
    HookStacks& stacks_;
    std::mutex& mutex_;
    std::mutex turn_;  // one native catch-up at a time
    std::unordered_map<int32_t, Accounted> accounted_;  // by open capture; the turn's holder's
};

}  // namespace streamrace
