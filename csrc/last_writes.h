// The last write of every byte, in program order: what a later read of it gets.
// The port of streamrace/analysis/last_writes.py (docs/analysis.md §8): an interval map from
// disjoint byte spans to the value of their last write (the writer and the lifetime the write
// went through). A write assigns its span, splitting what it partly covers; a read visits the
// spans under it, by address. Memory is bounded by the distinct spans the program writes.
//
// A std::map, not a sorted vector: measured on benchmarks/replay_loop.py's serving loop the
// vector ran 2% fewer instructions a replay (nearly every write assigns a span exactly as the
// last write of those bytes did, a value swap in place either way), but a write below every
// span shifts the whole vector, and 100,000 blocks written at descending addresses took 13 s
// against the map's 0.24 s (docs/performance.md).
#pragma once

#include <algorithm>
#include <map>
#include <utility>

#include "records.h"

namespace streamrace {

struct LastWrite {
    Ref<Rec> writer;
    Ref<Lifetime> through;
};

class LastWrites {
   public:
    size_t size() const { return spans_.size(); }

    // [lo, hi) was last written with `value`; null forgets what wrote it.
    void assign(i64 lo, i64 hi, const LastWrite* value) {
        if (lo >= hi) return;
        auto it = first_after(lo);
        if (value != nullptr && it != spans_.end() && it->first == lo && it->second.end == hi) {
            it->second.value = *value;  // the same span as the last write of these bytes
            return;
        }
        if (it != spans_.end() && it->first < lo) {  // the part of the first span before lo stays
            Span& first = it->second;
            if (first.end > hi) spans_.emplace_hint(std::next(it), hi, Span{first.end, first.value});
            first.end = lo;
            ++it;
        }
        while (it != spans_.end() && it->first < hi) {
            if (it->second.end > hi) {  // and the part of the last one after hi
                Span rest{it->second.end, std::move(it->second.value)};
                it = spans_.erase(it);
                spans_.emplace_hint(it, hi, std::move(rest));
                break;
            }
            it = spans_.erase(it);
        }
        if (value != nullptr) spans_.emplace(lo, Span{hi, *value});
    }

    // visit(start, end, value) for each written span inside [lo, hi), clipped to it, by
    // address, until visit returns true.
    template <class Visit>
    void under(i64 lo, i64 hi, Visit&& visit) const {
        if (lo >= hi) return;
        for (auto it = first_after(lo); it != spans_.end() && it->first < hi; ++it)
            if (visit(std::max(it->first, lo), std::min(it->second.end, hi), it->second.value)) return;
    }

   private:
    struct Span {
        i64 end;
        LastWrite value;
    };
    using Spans = std::map<i64, Span>;  // disjoint, by start

    // The first span that ends after lo.
    Spans::iterator first_after(i64 lo) {
        auto it = spans_.upper_bound(lo);
        if (it != spans_.begin() && std::prev(it)->second.end > lo) --it;
        return it;
    }
    Spans::const_iterator first_after(i64 lo) const { return const_cast<LastWrites*>(this)->first_after(lo); }

    Spans spans_;
};

}  // namespace streamrace
