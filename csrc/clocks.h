// Happens-before between stream work: vector clocks per domain (docs/analysis.md §1–2).
// The port of streamrace/analysis/clocks.py. Streams are numbered densely in order of first
// appearance. A clock holds the streams its stream was ordered after: the first DENSE_STREAMS
// streams of the trace by number (a serving engine's tens), indexed directly as the hot check
// wants, and any later one as a (stream, tick) pair, sorted. So a clock is at most a few
// hundred bytes plus what it holds, and memory grows with the orderings, not with the square
// of the stream count.
//
// The host clock is kept apart, not joined into every eager clock at its next op (a
// synchronization of many streams would copy all of them into every later clock);
// ordered_before, the one happens-before test of the engine, looks at both.
#pragma once

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ranges.h"

namespace streamrace {

constexpr i64 EAGER = -1;  // the eager domain; graph ids are >= 0

class VectorClock {
   public:
    static constexpr unsigned DENSE_STREAMS = 64;

    // The tick of stream (0: nothing of it is ordered before).
    i64 tick(unsigned stream) const {
        if (stream < DENSE_STREAMS) return stream < dense_.size() ? dense_[stream] : 0;
        auto it = find(stream);
        return it != sparse_.end() && it->first == stream ? it->second : 0;
    }

    // One more op on stream: its new tick.
    i64 advance(unsigned stream) {
        if (stream < DENSE_STREAMS) {
            if (dense_.size() <= stream) dense_.resize(stream + 1, 0);
            return ++dense_[stream];
        }
        auto it = find(stream);
        if (it == sparse_.end() || it->first != stream) it = sparse_.insert(it, {stream, 0});
        return ++it->second;
    }

    // this = max(this, other) element-wise.
    void join(const VectorClock& other) {
        if (other.dense_.size() > dense_.size()) dense_.resize(other.dense_.size(), 0);
        for (size_t i = 0; i < other.dense_.size(); ++i) dense_[i] = std::max(dense_[i], other.dense_[i]);
        auto mine = sparse_.begin();
        auto theirs = other.sparse_.begin();
        // The common case adds no stream: update in place, and merge only if one is new.
        for (; theirs != other.sparse_.end(); ++theirs) {
            while (mine != sparse_.end() && mine->first < theirs->first) ++mine;
            if (mine == sparse_.end() || mine->first != theirs->first) break;
            mine->second = std::max(mine->second, theirs->second);
        }
        if (theirs == other.sparse_.end()) return;
        std::vector<Entry> merged;
        merged.reserve(sparse_.size() + size_t(other.sparse_.end() - theirs));
        auto a = sparse_.begin();
        for (auto b = other.sparse_.begin(); a != sparse_.end() || b != other.sparse_.end();) {
            if (b == other.sparse_.end() || (a != sparse_.end() && a->first < b->first)) {
                merged.push_back(*a++);
            } else if (a == sparse_.end() || b->first < a->first) {
                merged.push_back(*b++);
            } else {
                merged.push_back({a->first, std::max(a->second, b->second)});
                ++a, ++b;
            }
        }
        sparse_.swap(merged);
    }

    bool empty() const { return dense_.empty() && sparse_.empty(); }
    void clear() {
        dense_.clear();
        sparse_.clear();
    }

   private:
    using Entry = std::pair<unsigned, i64>;
    std::vector<Entry>::const_iterator find(unsigned stream) const {
        return std::lower_bound(sparse_.begin(), sparse_.end(), stream,
                                [](const Entry& e, unsigned s) { return e.first < s; });
    }
    std::vector<Entry>::iterator find(unsigned stream) {
        return std::lower_bound(sparse_.begin(), sparse_.end(), stream,
                                [](const Entry& e, unsigned s) { return e.first < s; });
    }

    std::vector<i64> dense_;     // streams below DENSE_STREAMS, up to the highest this clock holds
    std::vector<Entry> sparse_;  // the others, sorted by stream
};

// The host clock of work in a capture: host synchronizations order no captured work.
inline const VectorClock NO_HOST{};

// Is the epoch (stream, tick) ordered before work issued at `clock` (its stream's clock in its
// domain), with `host` the host clock of that domain (HappensBefore::host_clock)?
inline bool ordered_before(unsigned stream, i64 tick, const VectorClock& clock, const VectorClock& host = NO_HOST) {
    return tick <= clock.tick(stream) || tick <= host.tick(stream);
}

class HappensBefore {
   public:
    i64 domain(unsigned stream) const { return stream < graph_of_.size() ? graph_of_[stream] : EAGER; }

    void capture_begin(i64 graph, unsigned stream) {
        graph_events_.erase(graph);  // a graph id captured again is a new graph
        clocks_[graph].clear();
        members_[graph].clear();
        enter(graph, stream);
    }

    // Members leave; the graph's clocks and snapshots are gone (they order nothing now).
    void capture_end(i64 graph) {
        auto m = members_.find(graph);
        if (m != members_.end()) {
            for (unsigned stream : m->second) graph_of_[stream] = EAGER;
            members_.erase(m);
        }
        clocks_.erase(graph);
        for (auto it = snapshots_.begin(); it != snapshots_.end();) {
            if (it->second.first == graph)
                it = snapshots_.erase(it);
            else
                ++it;
        }
    }

    // Issue one op: its domain, the stream's live clock after it, and its tick. The op is also
    // ordered after host_clock(domain).
    VectorClock& op(unsigned stream, i64& domain, i64& tick) {
        VectorClock& c = current(stream, domain);
        tick = c.advance(stream);
        if (domain == EAGER) unsynced_.insert(stream);
        return c;
    }

    // Order eager stream's next work after `after` (an implicit record and wait: the previous
    // launch of the graph it replays, since launches of one graph are serialized).
    void order_after(unsigned stream, const VectorClock& after) {
        clock(EAGER, stream).join(after);
        unsynced_.insert(stream);
    }

    // Is some stream capturing into graph now (the capture has begun and not ended)?
    bool capturing(i64 graph) const {
        auto m = members_.find(graph);
        return m != members_.end() && !m->second.empty();
    }

    // What host synchronizations ordered before all later work in domain (nothing, in a capture).
    const VectorClock& host_clock(i64 domain) const { return domain == EAGER ? host_ : NO_HOST; }

    // A host action on stream now (a free, an allocation): like an op, without a tick.
    VectorClock& current(unsigned stream, i64& domain) {
        domain = this->domain(stream);
        return clock(domain, stream);
    }

    // An eager snapshot leaves out the host clock: whoever reads it (an eager wait, an
    // event_sync) is ordered after the host clock already, which only grows.
    void record(i64 event, unsigned stream) {
        i64 domain;
        VectorClock& c = current(stream, domain);
        auto& snap = snapshots_[event];
        snap.first = domain;
        snap.second = c;
    }

    void wait(i64 event, unsigned stream) {
        auto it = snapshots_.find(event);
        if (it == snapshots_.end()) return;
        i64 domain = it->second.first;
        i64 current = this->domain(stream);
        if (domain != EAGER && current == EAGER) {
            enter(domain, stream);  // side.wait_stream(capturing) pulls side into the capture
        } else if (domain != current) {
            return;
        }
        clock(domain, stream).join(it->second.second);
        if (domain == EAGER) unsynced_.insert(stream);
    }

    void forget(i64 event) { snapshots_.erase(event); }

    // The graph event of `graph`: the events its event record and wait nodes name (format
    // 1.6), which each replay of it records and waits on (graph_read in clocks.py).
    void graph_read(i64 graph, std::vector<i64> records, std::vector<i64> waits) {
        if (records.empty() && waits.empty()) {
            graph_events_.erase(graph);
        } else {
            graph_events_[graph] = {std::move(records), std::move(waits)};
        }
    }

    // A replay of graph on eager stream, issued as one op (op's answer): it first waits on
    // each event its wait nodes name, as of its launch, then each event its record nodes name
    // stands for it (replay in clocks.py).
    VectorClock& replay(i64 graph, unsigned stream, i64& domain, i64& tick) {
        auto it = graph_events_.find(graph);
        if (it != graph_events_.end())
            for (i64 event : it->second.second) wait(event, stream);
        VectorClock& c = op(stream, domain, tick);
        if (it != graph_events_.end())
            for (i64 event : it->second.first) record(event, stream);
        return c;
    }

    void stream_sync(unsigned stream) {
        if (domain(stream) == EAGER) host_.join(clock(EAGER, stream));
    }

    void event_sync(i64 event) {
        auto it = snapshots_.find(event);
        if (it != snapshots_.end() && it->second.first == EAGER) host_.join(it->second.second);
    }

    // Only the eager clocks that grew since the last device_sync: the others are in the host
    // clock already.
    void device_sync() {
        auto& eager = clocks_[EAGER];
        for (unsigned stream : unsynced_) host_.join(eager[stream]);
        unsynced_.clear();
    }

   private:
    void enter(i64 graph, unsigned stream) {
        i64 old = domain(stream);
        if (old != EAGER) members_[old].erase(stream);  // only a malformed trace moves a capturing stream
        if (graph_of_.size() <= stream) graph_of_.resize(stream + 1, EAGER);
        graph_of_[stream] = graph;
        members_[graph].insert(stream);
        clock(graph, stream).clear();
    }

    VectorClock& clock(i64 domain, unsigned stream) { return clocks_[domain][stream]; }

    // domain -> clock per stream, for the streams that did something there
    std::unordered_map<i64, std::unordered_map<unsigned, VectorClock>> clocks_;
    VectorClock host_;
    std::unordered_set<unsigned> unsynced_;  // eager streams whose clock grew since the last device_sync
    std::vector<i64> graph_of_;              // stream -> the active capture it is a member of, or EAGER
    std::unordered_map<i64, std::unordered_set<unsigned>> members_;
    std::unordered_map<i64, std::pair<i64, VectorClock>> snapshots_;  // event -> (domain, clock)
    // graph -> (events its record nodes record, events its wait nodes wait on)
    std::unordered_map<i64, std::pair<std::vector<i64>, std::vector<i64>>> graph_events_;
};

}  // namespace streamrace
