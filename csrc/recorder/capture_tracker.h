// Which streams capture into which graph, which capture each CUDA event's latest record is
// in, each capturing stream's frontier as last seen, and the graph nodes the recorded
// launches claimed (capture_nodes.py says what a claim is), and which nodes the hooks have
// accounted for. The C++ twin of PythonHooks' _captures, _capturing, _event_capture and _known.
//
// Guarded by the event log's mutex: methods that take a `const Locked&` need it held, the
// others take it themselves.
#pragma once

#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "event_log.h"
#include "graph_reads.h"

namespace streamrace {

struct Claim {
    int64_t seq;
    int64_t node;  // the launch's stream frontier when it ended: its last node
    bool trusted;
};

struct Capture {
    int64_t handle = 0;  // the capture graph (cudaGraph_t), 0 where it cannot be read
    int64_t stream = 0;  // the stream it began on
    bool open = true;
    int64_t base = 0;   // the nodes the graph had when the capture began
    int64_t floor = 0;  // no node before this index is new: its first, or after the last caught up
    std::vector<Claim> claims;  // the recorded launches' nodes, in seq order
    std::vector<std::pair<int64_t, int64_t>> caught;  // (node handle, seq) of each caught-up kernel event
    // Nodes the hooks accounted for: the capture's first frontier, each claim's node, every
    // node a catch-up looked at, and the frontiers found after one. A catch-up follows new
    // nodes back through their dependencies until it meets these (unseen_launches.h). A
    // frontier only seen (after a hooked wait, which may bring an unseen node of another
    // stream) is not accounted for. Open addressing: a claim inserts one at every launch.
    ska::flat_hash_set<int64_t> accounted;
};

// What a launch on a stream needs before it is made: the capture it goes to, if its graph can
// be read (0 otherwise), and the stream's frontier as last seen.
struct LaunchView {
    int32_t graph = 0;
    Frontier known;
};

// Counts every change of what launch_view reads (which streams capture into which graph, a
// stream's known frontier), in every tracker of the process: a thread's cached view (below)
// is current while the count is what it was when cached.
inline std::atomic<uint64_t>& view_version() {
    static std::atomic<uint64_t> version{1};
    return version;
}

// The view this thread last read or set (launch_view, set_known_cached): a launch or free on
// the stream of the thread's previous op reads it without the lock while nothing changed.
struct CachedView {
    uint64_t version = 0;
    int64_t stream = 0;
    LaunchView view;
};
inline thread_local CachedView cached_view;

// The streams of one capture with their frontiers as last seen (checked_all), without a heap
// allocation for the usual handful.
using KnownFrontiers = c10::SmallVector<std::pair<int64_t, Frontier>, 8>;

// What a catch-up needs of a capture (catch_up_state).
struct CatchUpState {
    int64_t handle = 0;
    int64_t stream = 0;
    int64_t floor = 0;
    int64_t last_claim = 0;  // the node the latest claim ends at, 0 for none
};

class CaptureTracker {
   public:
    explicit CaptureTracker(std::mutex& guard) : mutex_(guard) {}

    // Whether any capture is open, read without the lock by the hooks' cheapest checks.
    bool any_open() const { return any_open_.load(std::memory_order_acquire); }
    void set_any_open(bool open) { any_open_.store(open, std::memory_order_release); }

    // `base`: the nodes the graph already has (its first new one's index).
    void begin(int32_t graph, int64_t stream, int64_t handle, const Frontier& now, int64_t base) {
        Locked held(mutex_);
        Capture& capture = captures_[graph] = Capture{handle, stream, true, base, base, {}, {}, {}};
        capture.accounted.insert(now.begin(), now.end());
        capturing_[stream] = graph;
        if (handle != 0) known_[stream] = now;
        changed();
    }

    void end(int32_t graph) {
        Locked held(mutex_);
        auto it = captures_.find(graph);
        if (it != captures_.end()) it->second.open = false;
        for (auto& [event, g] : event_capture_) {
            if (g == graph) record_frontier_.erase(event);  // its nodes are the ended capture's
        }
        for (auto s = capturing_.begin(); s != capturing_.end();) {
            if (s->second == graph) {
                known_.erase(s->first);
                s = capturing_.erase(s);
            } else {
                ++s;
            }
        }
        changed();
    }

    std::vector<int64_t> capture_streams(int32_t graph) {
        Locked held(mutex_);
        return streams_of(held, graph);
    }

    std::vector<int32_t> open_graphs() {
        Locked held(mutex_);
        std::vector<int32_t> graphs;
        for (auto& [graph, capture] : captures_) {
            if (capture.open) graphs.push_back(graph);
        }
        std::sort(graphs.begin(), graphs.end());
        return graphs;
    }

    // (seq, frontier node, 1 for a trusted op else 0) of each claim, flattened: ints only,
    // since it is read in a capture's end.
    std::vector<int64_t> claims(int32_t graph) {
        Locked held(mutex_);
        std::vector<int64_t> out;
        auto it = captures_.find(graph);
        if (it != captures_.end()) {
            out.reserve(3 * it->second.claims.size());
            for (const Claim& c : it->second.claims) {
                out.push_back(c.seq);
                out.push_back(c.node);
                out.push_back(c.trusted ? 1 : 0);
            }
        }
        return out;
    }

    // The open captures whose graphs can be read, for a catch-up.
    std::vector<std::pair<int32_t, CatchUpState>> catch_up_states() {
        Locked held(mutex_);
        std::vector<std::pair<int32_t, CatchUpState>> out;
        for (auto& [graph, c] : captures_) {
            if (!c.open || c.handle == 0) continue;
            out.push_back({graph, CatchUpState{c.handle, c.stream, c.floor,
                                               c.claims.empty() ? 0 : c.claims.back().node}});
        }
        std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        return out;
    }

    // A catch-up gave the node `handle` its kernel event, numbered `seq`; where the walk found
    // it, at `index` (-1: traced, index unknown), no earlier node is new any more.
    void caught_up(const Locked&, int32_t graph, int64_t handle, int64_t index, int64_t seq) {
        auto it = captures_.find(graph);
        if (it == captures_.end()) return;
        if (index >= 0) it->second.floor = std::max(it->second.floor, index + 1);
        it->second.caught.emplace_back(handle, seq);
    }

    // The hooks have looked at these nodes: no catch-up gives them a kernel event again.
    template <typename Nodes>
    void account(const Locked&, int32_t graph, const Nodes& nodes) {
        auto it = captures_.find(graph);
        if (it != captures_.end()) it->second.accounted.insert(nodes.begin(), nodes.end());
    }
    void account(const Locked&, int32_t graph, int64_t node) {
        auto it = captures_.find(graph);
        if (it != captures_.end()) it->second.accounted.insert(node);
    }
    bool accounted(const Locked&, int32_t graph, int64_t node) const {
        auto it = captures_.find(graph);
        return it != captures_.end() && it->second.accounted.count(node) != 0;
    }

    // Per node of the graph (by its index, `index_of`: handle -> index), whether a recorded
    // launch made it: CaptureNodes._owners' walk, in C++. In seq order, a claim owns the
    // nodes since the cursor up to its own; a caught-up node is no launch's.
    template <typename IndexOf>
    std::vector<char> claimed_nodes(int32_t graph, IndexOf&& index_of, size_t nodes) {
        Locked held(mutex_);
        std::vector<char> claimed(nodes, 0);
        auto it = captures_.find(graph);
        if (it == captures_.end()) return claimed;
        const Capture& c = it->second;
        struct Owner {
            int64_t seq, index;
            bool caught;
        };
        std::vector<Owner> merged;
        merged.reserve(c.claims.size() + c.caught.size());
        for (const Claim& claim : c.claims) merged.push_back({claim.seq, index_of(claim.node), false});
        for (auto [handle, seq] : c.caught) merged.push_back({seq, index_of(handle), true});
        std::stable_sort(merged.begin(), merged.end(), [](const Owner& a, const Owner& b) { return a.seq < b.seq; });
        int64_t cursor = c.base;
        for (const Owner& o : merged) {
            if (o.index < 0 || o.index >= static_cast<int64_t>(nodes)) continue;
            if (o.caught) {
                claimed[static_cast<size_t>(o.index)] = 0;
                cursor = std::max(cursor, o.index + 1);
            } else if (o.index >= cursor) {
                for (int64_t i = cursor; i <= o.index; ++i) claimed[static_cast<size_t>(i)] = 1;
                cursor = o.index + 1;
            }
        }
        return claimed;
    }

    std::vector<std::pair<int64_t, int64_t>> caught(int32_t graph) {
        Locked held(mutex_);
        auto it = captures_.find(graph);
        return it == captures_.end() ? std::vector<std::pair<int64_t, int64_t>>() : it->second.caught;
    }

    void claim(int32_t graph, int64_t seq, int64_t node, bool trusted) {
        Locked held(mutex_);
        claim(held, graph, seq, node, trusted);
    }

    void claim(const Locked&, int32_t graph, int64_t seq, int64_t node, bool trusted) {
        auto it = captures_.find(graph);
        if (it == captures_.end()) return;
        it->second.claims.push_back(Claim{seq, node, trusted});
        it->second.accounted.insert(node);
    }

    // The capture a stream's launches go to, if its graph can be read (0 otherwise).
    int32_t readable_graph(int64_t stream) {
        if (!any_open()) return 0;  // eager work: no lock taken
        Locked held(mutex_);
        return readable_graph(held, stream);
    }
    int32_t readable_graph(const Locked&, int64_t stream) {
        auto it = capturing_.find(stream);
        if (it == capturing_.end() || captures_[it->second].handle == 0) return 0;
        return it->second;
    }

    // readable_graph and known under one lock, for a launch or a wait about to be made; the
    // thread's cached view where nothing changed since (no lock: a launch after a launch).
    LaunchView launch_view(int64_t stream) {
        if (!any_open()) return {};
        CachedView& cached = cached_view;
        if (cached.stream == stream && cached.version == view_version().load(std::memory_order_acquire)) {
            return cached.view;
        }
        Locked held(mutex_);
        return cache_view(held, stream);
    }

    // Each stream capturing into `graph`, with its frontier as last seen, in no order.
    void known_frontiers(const Locked&, int32_t graph, KnownFrontiers& out) const {
        for (auto [stream, g] : capturing_) {
            if (g != graph) continue;
            auto it = known_.find(stream);
            out.emplace_back(stream, it != known_.end() ? it->second : Frontier());
        }
    }

    // A capturing stream's frontier as last seen (empty: none).
    Frontier known_of(const Locked&, int64_t stream) const {
        auto it = known_.find(stream);
        return it != known_.end() ? it->second : Frontier();
    }

    // The capture a stream captures into (0: none).
    int32_t graph_of(const Locked&, int64_t stream) const {
        auto it = capturing_.find(stream);
        return it != capturing_.end() ? it->second : 0;
    }
    bool capturing(const Locked&, int64_t stream) const { return capturing_.count(stream) != 0; }

    std::vector<int64_t> streams_of(const Locked&, int32_t graph) const {
        std::vector<int64_t> streams;
        for (auto [stream, g] : capturing_) {
            if (g == graph) streams.push_back(stream);
        }
        std::sort(streams.begin(), streams.end());
        return streams;
    }

    // A capturing stream's frontier as the hooks saw it (launch_view reads it). Seen is not
    // accounted for (account).
    void set_known(const Locked&, int64_t stream, Frontier now) {
        known_[stream] = std::move(now);
        changed();
    }

    // set_known, by the thread whose next launch is likely on this stream: its cached view
    // is what launch_view reads now.
    void set_known_cached(const Locked& held, int64_t stream, const Frontier& now) {
        set_known(held, stream, now);
        cache_view(held, stream);
    }

    // An event recorded on a stream: in that stream's capture, or in none.
    void event_recorded(int64_t event, int64_t stream) {
        Locked held(mutex_);
        auto it = capturing_.find(stream);
        if (it == capturing_.end()) {
            event_capture_.erase(event);
        } else {
            event_capture_[event] = it->second;
        }
    }

    void event_deleted(const Locked&, int64_t event) {
        event_capture_.erase(event);
        record_frontier_.erase(event);
    }

    // The recording stream's frontier at an event's latest record heard in a readable capture
    // (none: erased). What a wait on the event brings in is checked against it.
    void event_heard(int64_t event, const std::optional<Frontier>& frontier) {
        Locked held(mutex_);
        if (frontier) {
            record_frontier_[event] = *frontier;
        } else {
            record_frontier_.erase(event);
        }
    }

    // The frontier of an event's latest record the hooks know of: heard, or stood in for.
    std::optional<Frontier> record_frontier(int64_t event) {
        Locked held(mutex_);
        auto it = record_frontier_.find(event);
        if (it == record_frontier_.end()) return std::nullopt;
        return it->second;
    }

    // Whether the event's known record explains a wait outright: the waiting stream's frontier
    // (`now`) holds nothing new (not in `known`) that the record does not, and the record's
    // nodes are all in it. The usual case (torch's own record and wait), decided without a copy.
    bool record_explains(int64_t event, const Frontier& known, const Frontier& now) {
        Locked held(mutex_);
        auto it = record_frontier_.find(event);
        const Frontier* recorded = it != record_frontier_.end() ? &it->second : nullptr;
        for (int64_t node : now) {
            if (!contains(known, node) && (recorded == nullptr || !contains(*recorded, node))) return false;
        }
        return recorded == nullptr || subset(*recorded, now);
    }

    // A record no hook heard, stood in for (UnseenLaunches::stand_in): the event's latest now.
    void record_stood_in(int64_t event, int32_t graph, const Frontier& frontier) {
        Locked held(mutex_);
        event_capture_[event] = graph;
        record_frontier_[event] = frontier;
    }

    // Waiting on an event recorded in an open capture joins the capture, as in CUDA.
    void join_on_wait(const Locked&, int64_t event, int64_t stream) {
        auto source = event_capture_.find(event);
        if (source != event_capture_.end() && captures_[source->second].open && capturing_.count(stream) == 0) {
            capturing_[stream] = source->second;
            changed();
        }
    }

   private:
    // The stream's view now, as this thread's cached one (under the lock: no change between
    // the count it is cached at and what it reads).
    const LaunchView& cache_view(const Locked& held, int64_t stream) {
        LaunchView view;
        view.graph = readable_graph(held, stream);
        if (view.graph != 0) {
            auto it = known_.find(stream);
            if (it != known_.end()) view.known = it->second;
        }
        cached_view = CachedView{view_version().load(std::memory_order_relaxed), stream, std::move(view)};
        return cached_view.view;
    }

    // Under the lock, after the change: a thread that reads the old count uses a view from
    // before it, as if it had taken the lock first.
    static void changed() { view_version().fetch_add(1, std::memory_order_release); }

    std::mutex& mutex_;
    std::atomic<bool> any_open_{false};
    std::unordered_map<int32_t, Capture> captures_;
    std::unordered_map<int64_t, int32_t> capturing_;      // stream -> graph it captures into
    std::unordered_map<int64_t, int32_t> event_capture_;  // event -> capture of its latest record
    std::unordered_map<int64_t, Frontier> record_frontier_;  // event -> record_frontier()
    std::unordered_map<int64_t, Frontier> known_;         // capturing stream -> its frontier as last seen
};

}  // namespace streamrace
