// Catching up: when a capturing stream's frontier moved with no recorded launch, something the
// dispatcher never saw launched there, and each new node that reads or writes memory gets a
// kernel event, then, in program order, on the stream whose frontier holds it. The C++ twin
// of PythonHooks' _moved, _check and _check_before_launch, and of the Recorder's catch_up
// for the Python hooks (streamrace/record/unseen_launches.py).
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
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

// The nodes a wait brought into its stream's frontier, while stand_in's catch-up runs on this
// thread: they are no launch of that stream's.
struct BroughtByWait {
    int64_t stream;
    const Frontier& nodes;
};
inline thread_local const BroughtByWait* brought_by_wait = nullptr;

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

    // Catch up when the stream's frontier moved from `known` (as last seen) and no recorded
    // launch moved it. Returns the frontier, accounted for.
    Frontier checked(int64_t stream, const Frontier& known) {
        Frontier now = frontier(stream);
        if (now == known) return now;
        catch_up();
        return frontier(stream);
    }

    // The stream's frontier, accounted for; nothing when its capture cannot be read.
    std::optional<Frontier> check(int64_t stream) {
        LaunchView view = captures_.launch_view(stream);
        if (view.graph == 0) return std::nullopt;
        return checked(stream, view.known);
    }

    // Before a launch claims "every node since the previous claim", the streams that may have
    // launched unseen must be accounted for: its own, and, after a change of stream or an
    // event hook (where programs move between streams), every stream of its capture. `view`:
    // the stream's (CaptureTracker::launch_view), its graph readable.
    Frontier checked_before_launch(int64_t stream, const LaunchView& view) {
        Frontier now = checked_since_last_launch(stream, view);
        tls.last_stream = stream;
        return now;
    }

    // Before a free outside an op: a launch no hook saw, on any stream of the capture, may
    // still use the block, and its kernel event must come before the free (after it, its
    // pointer resolves to nothing, or to the block's next allocation, and the unsafe free is
    // missed). The same streams as before a launch, but it is no launch: the next launch
    // still checks every stream if the thread's last launch was on another (a free that
    // counted as that check let a launch no hook saw, made between it and the launch, go).
    void check_before_free(int64_t stream) {
        LaunchView view = captures_.launch_view(stream);
        if (view.graph != 0) checked_since_last_launch(stream, view);
    }

    // What a wait's check saw: the stream's capture, its frontier as last seen before the wait
    // and after it, and whether it had launched something unseen since (then caught up).
    struct WaitCheck {
        int32_t graph = 0;
        Frontier known;
        Frontier now;
        bool launched = false;
    };

    // A wait adds the event's nodes to the stream's frontier; a launch would have replaced it.
    // The frontier after the wait, accounted for; nothing when the stream's capture cannot be
    // read (or it captures in none yet).
    std::optional<WaitCheck> checked_wait(int64_t stream) {
        LaunchView view = captures_.launch_view(stream);
        if (view.graph == 0) return std::nullopt;
        WaitCheck check{view.graph, view.known, frontier(stream), false};
        if (subset(check.known, check.now)) return check;
        catch_up();
        check.now = frontier(stream);
        check.launched = true;
        return check;
    }

    // The stream a record of `event` is stood in for on, just before a wait on it (outside an
    // op, its stream having launched nothing unseen since last seen), or nothing. The event's
    // latest record the hooks know of (heard, or stood in for) is what the analysis orders
    // the wait by.
    // * Where the wait brought in nodes that record does not hold, and the record orders
    //   nothing the waiting stream holds now (none, or no nodes, or not all of them there), a
    //   library recorded the event itself, unheard: the one other stream of the capture whose
    //   whole frontier the waiting stream now holds, had not held and that record does not
    //   (unheard_record) stands in. Its record orders exactly what the real one did, since
    //   anything it did after that would be in its frontier and not in the waiting stream's.
    //   A record that still holds keeps the wait (what else is new may be the waiting
    //   stream's own launch, before it waited, which its last-seen frontier cannot tell).
    // * Else, where the record's nodes are not all in the waiting stream's frontier, it is not
    //   the record waited on, and one on the waiting stream itself stands in: the wait then
    //   orders nothing (the real record is unknown), where the stale one would have ordered
    //   what the graph does not.
    // The Python hooks' _stand_in.
    std::optional<int64_t> stand_in(int64_t event, int64_t waiting, const WaitCheck& wait) {
        if (captures_.record_explains(event, wait.known, wait.now)) return std::nullopt;
        const std::optional<Frontier> recorded = captures_.record_frontier(event);
        const Frontier none;
        const Frontier& held = recorded ? *recorded : none;
        Frontier brought;  // what is new in the waiting stream's frontier and not in the known record
        for (int64_t node : wait.now) {
            if (!contains(wait.known, node) && !contains(held, node)) brought.push_back(node);
        }
        std::optional<std::pair<int64_t, Frontier>> joined;
        if (!brought.empty()) {
            const std::vector<int64_t> streams = captures_.capture_streams(wait.graph);
            std::vector<Frontier> now = frontiers(streams);
            // A node no other stream's frontier holds may be the waiting stream's own launch,
            // unseen, which its last-seen frontier cannot tell (a wait may bring those nodes
            // back), or that of a stream that went on since: which, no frontier says, and
            // nothing is stood in for (nor caught up here, where it would go on the waiting
            // stream: the next check places it by the chain it ends).
            for (int64_t node : brought) {
                bool elsewhere = false;
                for (size_t i = 0; i < streams.size() && !elsewhere; ++i) {
                    elsewhere = streams[i] != waiting && contains(now[i], node);
                }
                if (!elsewhere) return std::nullopt;
            }
            // A known record that still holds keeps the wait.
            if (!held.empty() && subset(held, wait.now)) return std::nullopt;
            joined = unheard_record(waiting, wait, held, streams, now, brought);
        }
        if (!joined && recorded && !subset(*recorded, wait.now)) joined.emplace(waiting, wait.now);
        if (!joined) return std::nullopt;
        captures_.record_stood_in(event, wait.graph, joined->second);
        return joined->first;
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
    // For stand_in: (the stream, its frontier) of the one other stream of the capture whose
    // whole frontier the waiting stream now holds, had not held (`wait.known`) and the
    // event's known record (`recorded`) does not; `now`: the streams' frontiers. What the
    // streams launched unseen is caught up first, so that the record comes after their
    // kernels. Nothing for none or several: no record is made up (a race may then be reported
    // that the graph orders, never one hidden).
    std::optional<std::pair<int64_t, Frontier>> unheard_record(int64_t waiting, const WaitCheck& wait,
                                                               const Frontier& recorded,
                                                               const std::vector<int64_t>& streams,
                                                               std::vector<Frontier> now, const Frontier& brought) {
        bool moved = false;
        {
            Locked held(mutex_);
            for (size_t i = 0; i < streams.size() && !moved; ++i) {  // the waiting stream's moved by the wait
                moved = streams[i] != waiting && captures_.known_of(held, streams[i]) != now[i];
            }
        }
        if (moved) {
            // What the wait brought in is no launch of the waiting stream's.
            const BroughtByWait by_wait{waiting, brought};
            struct Reset {
                ~Reset() { brought_by_wait = nullptr; }
            } reset;
            brought_by_wait = &by_wait;
            catch_up();
            now = frontiers(streams);
        }
        Frontier after;
        for (size_t i = 0; i < streams.size(); ++i) {
            if (streams[i] == waiting) after = now[i];
        }
        std::optional<size_t> joined;
        for (size_t i = 0; i < streams.size(); ++i) {
            const Frontier& f = now[i];
            if (streams[i] == waiting || f.empty() || !subset(f, after) || subset(f, wait.known) || subset(f, recorded)) {
                continue;
            }
            if (joined) return std::nullopt;  // more than one
            joined = i;
        }
        if (!joined) return std::nullopt;
        return std::make_pair(streams[*joined], now[*joined]);
    }

    // Its own stream if the thread's last launch was on it with no event hook since, else
    // every stream of its capture.
    Frontier checked_since_last_launch(int64_t stream, const LaunchView& view) {
        return tls.last_stream == stream ? checked(stream, view.known) : checked_all(view.graph, stream);
    }

    // Stops at the first stream that moved: catching up reads every stream's frontier anyway.
    Frontier checked_all(int32_t graph, int64_t stream) {
        STREAMRACE_TIMED(CheckAll);
        KnownFrontiers known;
        {
            Locked held(mutex_);
            captures_.known_frontiers(held, graph, known);
        }
        Frontier mine;
        for (const auto& [s, seen] : known) {
            Frontier now = frontier(s);
            if (now != seen) {
                catch_up();
                return frontier(stream);
            }
            if (s == stream) mine = std::move(now);
        }
        return mine;
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

    // A new node: its handle, its index where the walk found it (-1 where traced), its type.
    struct NewNode {
        int64_t handle;
        int64_t index;
        std::string type;
    };

    // The new nodes, where they are chains: each frontier node (of every stream of the
    // capture) the hooks did not account for, and the nodes it follows back to them or to
    // another chain, each with one dependency neither accounted for nor found. Nearly every
    // catch-up is one chain: a library's kernel, or a few, on one stream; a node launched
    // unseen on another stream is a second. Nothing where a node has two such dependencies
    // (a branch), where there are too many, or where the driver cannot tell: the graph is
    // walked then. A chain costs one dependency query per node; the walk reads every node of
    // a graph that keeps growing. Chains come root by root, in the order of the streams: the
    // order they were made in across streams is unknown, and no stream's order depends on it.
    std::optional<std::vector<NewNode>> traced(int32_t graph, const std::vector<Frontier>& now) {
        if (driver_.node_dependencies == nullptr) return std::nullopt;
        constexpr size_t kMostRoots = 8, kLongest = 256;  // more: the walk, which reads each node once
        c10::SmallVector<int64_t, kMostRoots> roots;
        {
            Locked held(mutex_);
            for (const Frontier& f : now) {
                for (int64_t node : f) {
                    if (captures_.accounted(held, graph, node)) continue;
                    if (std::find(roots.begin(), roots.end(), node) != roots.end()) continue;
                    if (roots.size() == kMostRoots) return std::nullopt;
                    roots.push_back(node);
                }
            }
        }
        std::vector<NewNode> found;
        std::unordered_set<int64_t> seen;
        c10::SmallVector<int64_t, 8> deps;
        for (int64_t root : roots) {
            if (seen.count(root) != 0) continue;  // another chain passed through it
            std::vector<NewNode> chain;
            for (int64_t node = root; node != 0;) {
                if (found.size() + chain.size() == kLongest || !node_dependencies(driver_, node, deps)) {
                    return std::nullopt;
                }
                chain.push_back(NewNode{node, -1, node_type_name(node_type(driver_, node))});
                seen.insert(node);
                int64_t next = 0;
                Locked held(mutex_);
                for (int64_t dep : deps) {
                    if (seen.count(dep) != 0 || captures_.accounted(held, graph, dep)) continue;
                    if (next != 0) return std::nullopt;  // a branch
                    next = dep;
                }
                node = next;
            }
            found.insert(found.end(), std::make_move_iterator(chain.rbegin()), std::make_move_iterator(chain.rend()));
        }
        return found;
    }

    // The new nodes, walked: those after the last claim, from the floor on, that no earlier
    // catch-up (traced) gave an event.
    std::vector<NewNode> walked(int32_t graph, const CatchUpState& state) {
        std::vector<NewNode> out;
        for (auto& [index, handle, type] : nodes_since(driver_, state.handle, state.last_claim, state.floor)) {
            out.push_back(NewNode{handle, index, std::move(type)});
        }
        Locked held(mutex_);
        out.erase(std::remove_if(out.begin(), out.end(),
                                 [&](const NewNode& n) { return captures_.accounted(held, graph, n.handle); }),
                  out.end());
        return out;
    }

    void catch_up(int32_t graph, const CatchUpState& state) {
        // The frontiers are read once, before the new nodes: each launch they hold is among
        // those, so they are what is accounted for after (a node launched on another thread in
        // between is found too, and its stream's next check finds nothing new).
        const std::vector<int64_t> streams = captures_.capture_streams(graph);
        const std::vector<Frontier> now = frontiers(streams);
        std::optional<std::vector<NewNode>> chain = traced(graph, now);
        const std::vector<NewNode> fresh = chain ? std::move(*chain) : walked(graph, state);
        if (!fresh.empty()) {
            // A launch's nodes end where its stream's frontier is now; earlier ones of the same
            // gap lead to it, so they take the stream of the next node that has one.
            // A node in several streams' frontiers goes on the later stream in order, except
            // that what a wait being checked brought in (stand_in) is no launch of its stream.
            std::unordered_map<int64_t, int64_t> launcher;
            for (size_t i = 0; i < streams.size(); ++i) {
                for (int64_t node : now[i]) {
                    if (brought_by_wait != nullptr && brought_by_wait->stream == streams[i] &&
                        contains(brought_by_wait->nodes, node)) {
                        continue;
                    }
                    launcher[node] = streams[i];
                }
            }
            std::vector<std::optional<int64_t>> stream_of(fresh.size());
            std::optional<int64_t> launching;
            for (size_t k = fresh.size(); k-- > 0;) {
                auto it = launcher.find(fresh[k].handle);
                if (it != launcher.end()) launching = it->second;
                stream_of[k] = launching;
            }
            const int32_t device = streams_.current_device();
            std::optional<int32_t> stack;
            for (size_t k = 0; k < fresh.size(); ++k) {
                const NewNode& node = fresh[k];
                if (!access_type(node.type)) continue;
                if (!stack) stack = stacks_.python_stack();
                Locked held = log_.lock();
                Record r;
                r.kind = Kind::Kernel;
                r.graph = graph;
                r.value = node.handle;  // its index once the capture ends (CaptureNodes.number)
                r.text = log_.text(held, node.type);
                r.stream = stream_of[k].value_or(state.stream);
                r.device = device;
                r.stack = *stack;
                log_.append(held, r);
                captures_.caught_up(held, graph, node.handle, node.index, r.seq);
            }
        }
        {
            Locked held(mutex_);
            for (const NewNode& node : fresh) captures_.account(held, graph, node.handle);
            for (const Frontier& f : now) captures_.account(held, graph, f);
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
