// Happens-before between stream work: vector clocks per domain (docs/analysis.md §1–2).
// The port of streamrace/analysis/clocks.py. Streams are numbered densely in order of first
// appearance, so a clock is a vector indexed by that number (missing = 0) and a join is a
// loop over tens of integers.
#pragma once

#include <unordered_map>
#include <utility>
#include <vector>

#include "ranges.h"

namespace streamrace {

using VectorClock = std::vector<i64>;
constexpr i64 EAGER = -1;  // the eager domain; graph ids are >= 0

inline void join(VectorClock& into, const VectorClock& other) {
    if (other.size() > into.size()) into.resize(other.size(), 0);
    for (size_t i = 0; i < other.size(); ++i)
        if (other[i] > into[i]) into[i] = other[i];
}

inline i64 tick_of(const VectorClock& clock, unsigned stream) { return stream < clock.size() ? clock[stream] : 0; }

class HappensBefore {
   public:
    i64 domain(unsigned stream) const { return stream < graph_of_.size() ? graph_of_[stream] : EAGER; }

    void capture_begin(i64 graph, unsigned stream) {
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

    // Issue one op: its domain, the stream's live clock after it, and its tick.
    VectorClock& op(unsigned stream, i64& domain, i64& tick) {
        VectorClock& clock = host_ordered(stream, domain);
        if (clock.size() <= stream) clock.resize(stream + 1, 0);
        tick = ++clock[stream];
        return clock;
    }

    // The host clock: what host synchronizations ordered before all later eager work.
    const VectorClock& host() const { return host_; }

    // A host action on stream now (a free, an allocation): like an op, without a tick.
    VectorClock& current(unsigned stream, i64& domain) { return host_ordered(stream, domain); }

    void record(i64 event, unsigned stream) {
        i64 domain;
        VectorClock& clock = host_ordered(stream, domain);
        auto& snap = snapshots_[event];
        snap.first = domain;
        snap.second = clock;
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
        join(clock(domain, stream), it->second.second);
    }

    void forget(i64 event) { snapshots_.erase(event); }

    void stream_sync(unsigned stream) {
        if (domain(stream) == EAGER) join(host_, clock(EAGER, stream));
    }

    void event_sync(i64 event) {
        auto it = snapshots_.find(event);
        if (it != snapshots_.end() && it->second.first == EAGER) join(host_, it->second.second);
    }

    void device_sync() {
        for (const VectorClock& c : clocks_[EAGER]) join(host_, c);
    }

   private:
    void enter(i64 graph, unsigned stream) {
        i64 old = domain(stream);
        if (old != EAGER) {  // only a malformed trace moves a capturing stream
            auto& members = members_[old];
            members.erase(std::remove(members.begin(), members.end(), stream), members.end());
        }
        if (graph_of_.size() <= stream) graph_of_.resize(stream + 1, EAGER);
        graph_of_[stream] = graph;
        auto& members = members_[graph];
        if (std::find(members.begin(), members.end(), stream) == members.end()) members.push_back(stream);
        clock(graph, stream).clear();
    }

    VectorClock& clock(i64 domain, unsigned stream) {
        auto& clocks = clocks_[domain];
        if (clocks.size() <= stream) clocks.resize(stream + 1);
        return clocks[stream];
    }

    VectorClock& host_ordered(unsigned stream, i64& domain) {
        domain = this->domain(stream);
        VectorClock& c = clock(domain, stream);
        if (domain == EAGER && !host_.empty()) join(c, host_);
        return c;
    }

    std::unordered_map<i64, std::vector<VectorClock>> clocks_;  // domain -> clock per stream
    VectorClock host_;
    std::vector<i64> graph_of_;  // stream -> the active capture it is a member of, or EAGER
    std::unordered_map<i64, std::vector<unsigned>> members_;
    std::unordered_map<i64, std::pair<i64, VectorClock>> snapshots_;  // event -> (domain, clock)
};

}  // namespace streamrace
