// The graph-truth check's work, without Python: reachability over one captured graph by chain
// clocks, and the covering sweep that finds every pair of launches touching a common byte, at
// least one writing it, that the graph leaves unordered. The reference is
// streamrace/analysis/graph_reach.py and graph_truth.py (docs/analysis.md §9). The answer, a
// set of pairs, is exact, so it does not depend on how chains or segments are drawn: this side
// cuts memory into segments at every span boundary, the Python side groups ranges by identity,
// and tests/test_graph_truth_property.py holds both to the same sets.
#pragma once

#include <algorithm>
#include <array>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ranges.h"

namespace streamrace {
namespace graph_truth {

// chain -> the last position on it that reaches the node(s), sorted by chain; few entries
// (about one per stream), so a sorted vector beats a hash map.
using Clock = std::vector<std::pair<int, int>>;

inline int clock_get(const Clock& clock, int chain) {
    for (const auto& [c, position] : clock) {
        if (c == chain) return position;
        if (c > chain) break;
    }
    return -1;
}

inline void clock_raise(Clock& clock, int chain, int position) {
    auto it = std::lower_bound(clock.begin(), clock.end(), std::make_pair(chain, -1));
    if (it != clock.end() && it->first == chain) {
        it->second = std::max(it->second, position);
    } else {
        clock.insert(it, {chain, position});
    }
}

// Chain clocks over nodes numbered in creation order (graph_reach.py's GraphReach). The
// ordering edges into node v are preds[pred_start[v] .. pred_start[v + 1]); `stream` is each
// node's launch's stream where `has_stream`.
class GraphReach {
   public:
    GraphReach(const std::vector<int>& pred_start, const std::vector<int>& preds, const std::vector<i64>& stream,
               const std::vector<char>& has_stream)
        : start_(pred_start), preds_(preds), n_(int(pred_start.size()) - 1), chain_(n_), position_(n_), clock_(n_) {
        acyclic_ = order();
        if (acyclic_) build(stream, has_stream);
    }

    bool acyclic() const { return acyclic_; }
    int chain(int node) const { return chain_[node]; }
    int position(int node) const { return position_[node]; }
    const Clock& clock(int node) const { return clock_[node]; }

   private:
    // Creation order when every edge goes forward in it (as capture makes them), else Kahn's.
    bool order() {
        bool forward = true;
        for (int target = 0; target < n_ && forward; ++target)
            for (int k = start_[target]; k < start_[target + 1]; ++k) forward = forward && preds_[k] < target;
        if (forward) {
            for (int i = 0; i < n_; ++i) order_.push_back(i);
            return true;
        }
        std::vector<std::vector<int>> succs(n_);
        std::vector<int> waiting(n_);
        for (int target = 0; target < n_; ++target) {
            waiting[target] = start_[target + 1] - start_[target];
            for (int k = start_[target]; k < start_[target + 1]; ++k) succs[preds_[k]].push_back(target);
        }
        for (int i = 0; i < n_; ++i)
            if (waiting[i] == 0) order_.push_back(i);
        for (size_t k = 0; k < order_.size(); ++k)
            for (int succ : succs[order_[k]])
                if (--waiting[succ] == 0) order_.push_back(succ);
        return int(order_.size()) == n_;
    }

    void build(const std::vector<i64>& stream, const std::vector<char>& has_stream) {
        std::vector<int> tail, tail_position;  // per chain: its last node, and that node's position
        std::unordered_map<i64, int> stream_chain;
        for (int node : order_) {
            const int first = start_[node], last = start_[node + 1];
            Clock clock = first < last ? clock_[preds_[first]] : Clock();
            for (int k = first + 1; k < last; ++k)
                for (const auto& [chain, position] : clock_[preds_[k]]) clock_raise(clock, chain, position);
            // A chain whose last node reaches this one: its stream's, a predecessor's, any.
            int chain = -1;
            if (has_stream[node]) {
                auto it = stream_chain.find(stream[node]);
                if (it != stream_chain.end() && clock_get(clock, it->second) == tail_position[it->second])
                    chain = it->second;
            }
            for (int k = first; chain < 0 && k < last; ++k)
                if (tail[chain_[preds_[k]]] == preds_[k]) chain = chain_[preds_[k]];
            for (size_t i = 0; chain < 0 && i < clock.size(); ++i)
                if (clock[i].second == tail_position[clock[i].first]) chain = clock[i].first;
            if (chain < 0) {
                chain = int(tail.size());
                tail.push_back(node);
                tail_position.push_back(-1);
            }
            const int position = ++tail_position[chain];
            tail[chain] = node;
            clock_raise(clock, chain, position);
            chain_[node] = chain;
            position_[node] = position;
            clock_[node] = std::move(clock);
            if (has_stream[node]) stream_chain[stream[node]] = chain;
        }
    }

    const std::vector<int>&start_, &preds_;
    int n_;
    std::vector<int> chain_, position_, order_;
    std::vector<Clock> clock_;
    bool acyclic_ = true;
};

// The launches the sweep compares, by number: where their nodes sit, and what reaches them.
class Launches {
   public:
    explicit Launches(const GraphReach& graph) : graph_(graph) { mark_start_.push_back(0); }

    void add(const std::vector<int>& nodes) {
        for (int node : nodes) marks_.push_back({graph_.chain(node), graph_.position(node)});
        mark_start_.push_back(int(marks_.size()));
        if (nodes.size() == 1) {
            join_.push_back(&graph_.clock(nodes[0]));
            meet_.push_back(join_.back());
            return;
        }
        Clock join = graph_.clock(nodes[0]), meet = join;
        for (size_t i = 1; i < nodes.size(); ++i) {
            const Clock& clock = graph_.clock(nodes[i]);
            for (const auto& [chain, position] : clock) clock_raise(join, chain, position);
            for (auto& [chain, position] : meet) position = std::min(position, clock_get(clock, chain));
        }
        own_.push_back(std::move(join));
        join_.push_back(&own_.back());
        own_.push_back(std::move(meet));
        meet_.push_back(&own_.back());
    }

    // Some node of a reaches some node of b.
    bool reaches(int a, int b) const { return marked(a, *join_[b]); }
    // Some node of a reaches every node of b.
    bool reaches_all(int a, int b) const { return marked(a, *meet_[b]); }

   private:
    bool marked(int a, const Clock& clock) const {
        for (int k = mark_start_[a]; k < mark_start_[a + 1]; ++k)
            if (clock_get(clock, marks_[k].first) >= marks_[k].second) return true;
        return false;
    }

    const GraphReach& graph_;
    std::vector<std::pair<int, int>> marks_;  // (chain, position) of each node, launch after launch
    std::vector<int> mark_start_;
    std::vector<const Clock*> join_, meet_;
    std::deque<Clock> own_;  // join and meet of the launches with several nodes
};

// Most accesses repeat a span met shortly before (one tensor, op after op): a small
// direct-mapped table of recent spans keeps the repeats out of the sweep's sorts.
class RecentSpans {
   public:
    RecentSpans() { table_.fill({1, 0}); }  // an empty span: never asked about
    // Was [lo, hi) met recently? Remembers it either way.
    bool seen(i64 lo, i64 hi) {
        const unsigned long long mixed = (static_cast<unsigned long long>(lo) * 0x9E3779B97F4A7C15ull) ^
                                         (static_cast<unsigned long long>(hi) * 0xC2B2AE3D27D4EB4Full);
        std::pair<i64, i64>& entry = table_[(mixed >> 32) % table_.size()];
        if (entry.first == lo && entry.second == hi) return true;
        entry = {lo, hi};
        return false;
    }

   private:
    std::array<std::pair<i64, i64>, 1024> table_;
};

// One range of one launch: its span, and its lattice in `strided` when it is not dense.
struct Access {
    i64 lo, hi;
    int launch;
    int strided;  // index into the sweep's strided ranges; -1: dense, the span is the range
    bool write;
};

// Every pair (earlier, later) of launches, by number, with accesses that share a byte, at least
// one writing it, where no node of the earlier reaches a node of the later; `accesses` in
// program order, each launch's reads before its writes (graph_truth.py's _CoveringSweep, whose
// docstring has the rule). Memory is cut at every boundary of a span that can meet a write;
// each access is stepped on each segment its span holds.
class CoveringSweep {
   public:
    CoveringSweep(const Launches& launches, const std::vector<Access>& accesses, const std::vector<ByteRange>& strided)
        : launches_(launches), accesses_(accesses), strided_(strided) {
        std::vector<int> relevant = cut();
        segments_.resize(cuts_.empty() ? 0 : cuts_.size() - 1);
        for (int i : relevant) {
            const int first = segment_at(accesses_[i].lo), last = segment_at(accesses_[i].hi);
            for (int s = first; s < last; ++s) step(segments_[s], i);
        }
        std::sort(found_.begin(), found_.end());
        found_.erase(std::unique(found_.begin(), found_.end()), found_.end());
    }

    const std::vector<std::pair<int, int>>& found() const { return found_; }

   private:
    // The accesses stepped on one segment: its writes and its reads, each in program order,
    // and where each slice starts in them. A slice's writes are writes[slice.writes ..
    // next slice's), likewise its reads.
    struct Slice {
        int cover;  // the covering write (an access) that starts it; -1 for the first slice
        int writes, reads;
    };
    struct Segment {
        std::vector<int> writes, reads;
        std::vector<Slice> slices;  // the latest last; empty until the segment is first touched
    };

    // The accesses that can meet a write (every write, and the reads whose spans meet the
    // union of the written spans), in program order; fills cuts_ with their span boundaries.
    std::vector<int> cut() {
        std::vector<std::pair<i64, i64>> spans;
        RecentSpans written, relevant_spans;
        for (const Access& a : accesses_)
            if (a.write && a.lo < a.hi && !written.seen(a.lo, a.hi)) spans.push_back({a.lo, a.hi});
        std::sort(spans.begin(), spans.end());
        std::vector<i64> starts, ends;
        for (const auto& [lo, hi] : spans) {
            if (!ends.empty() && lo < ends.back()) {
                ends.back() = std::max(ends.back(), hi);
            } else {
                starts.push_back(lo);
                ends.push_back(hi);
            }
        }
        std::vector<int> relevant;
        for (int i = 0; i < int(accesses_.size()); ++i) {
            const Access& a = accesses_[i];
            if (a.lo >= a.hi) continue;
            if (!a.write) {
                const size_t k = std::upper_bound(starts.begin(), starts.end(), a.lo) - starts.begin();
                if (!((k > 0 && ends[k - 1] > a.lo) || (k < starts.size() && starts[k] < a.hi))) continue;
            }
            relevant.push_back(i);
            if (relevant_spans.seen(a.lo, a.hi)) continue;
            cuts_.push_back(a.lo);
            cuts_.push_back(a.hi);
        }
        std::sort(cuts_.begin(), cuts_.end());
        cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
        return relevant;
    }

    int segment_at(i64 boundary) const {
        return int(std::lower_bound(cuts_.begin(), cuts_.end(), boundary) - cuts_.begin());
    }

    ByteRange range(const Access& a) const { return a.strided < 0 ? interval(a.lo, a.hi - a.lo) : strided_[a.strided]; }

    // Do the bytes of two accesses that share a segment meet (not just their spans)?
    bool meets(int x, int y) const {
        const Access &a = accesses_[x], &b = accesses_[y];
        return (a.strided < 0 && b.strided < 0) || overlaps(range(a), range(b)) != NONE;
    }

    void step(Segment& segment, int i) {
        if (segment.slices.empty()) segment.slices.push_back({-1, 0, 0});
        const Access& access = accesses_[i];
        const int b = access.launch;
        const Slice latest = segment.slices.back();
        bool covering = access.write;
        auto scan = [&](const std::vector<int>& partners, int from) {
            for (size_t k = from; k < partners.size(); ++k) {
                const int a = accesses_[partners[k]].launch;
                if (a == b || launches_.reaches_all(a, b)) continue;
                covering = false;
                if (!launches_.reaches(a, b) && meets(partners[k], i)) found_.push_back({a, b});
            }
        };
        scan(segment.writes, latest.writes);
        if (access.write) scan(segment.reads, latest.reads);
        if (latest.cover >= 0) {
            const int a = accesses_[latest.cover].launch;
            if (a != b && !launches_.reaches_all(a, b)) {
                covering = false;
                if (!launches_.reaches(a, b)) walk_back(segment, i);
            }
        }
        if (covering) {
            segment.slices.push_back({i, int(segment.writes.size()), int(segment.reads.size())});
        } else {
            (access.write ? segment.writes : segment.reads).push_back(i);
        }
    }

    // The latest covering write does not reach access i: back through the earlier slices.
    void walk_back(const Segment& segment, int i) {
        const Access& access = accesses_[i];
        const int b = access.launch;
        auto scan = [&](const std::vector<int>& partners, int from, int to) {
            for (int k = from; k < to; ++k) {
                const int a = accesses_[partners[k]].launch;
                if (a != b && !launches_.reaches(a, b) && meets(partners[k], i)) found_.push_back({a, b});
            }
        };
        for (size_t s = segment.slices.size() - 1; s-- > 0;) {
            const Slice &slice = segment.slices[s], &later = segment.slices[s + 1];
            if (meets(later.cover, i)) found_.push_back({accesses_[later.cover].launch, b});
            scan(segment.writes, slice.writes, later.writes);
            if (access.write) scan(segment.reads, slice.reads, later.reads);
            if (slice.cover < 0) return;
            const int a = accesses_[slice.cover].launch;
            if (a == b || launches_.reaches(a, b)) return;
        }
    }

    const Launches& launches_;
    const std::vector<Access>& accesses_;
    const std::vector<ByteRange>& strided_;
    std::vector<i64> cuts_;
    std::vector<Segment> segments_;
    std::vector<std::pair<int, int>> found_;
};

}  // namespace graph_truth
}  // namespace streamrace
