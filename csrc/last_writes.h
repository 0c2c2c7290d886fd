// The last write of every byte, in program order: what a later read of it gets.
// The port of streamrace/analysis/last_writes.py (docs/analysis.md §8): an interval map from
// disjoint byte spans to the value of their last write (the writer and the lifetime the write
// went through). A write assigns its span, splitting what it partly covers; a read visits the
// spans under it, by address. Memory is bounded by the distinct spans the program writes.
//
// A sorted vector, not a std::map: in a serving loop nearly every write assigns a span exactly
// as the previous write of those bytes did, which is a binary search and a value swap in place
// here, and the visits of a read walk adjacent memory. benchmarks/replay_loop.py measured the
// two (docs/performance.md): the vector was the faster on the replay loop and on the suite.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

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
        size_t j = first_after(lo);
        size_t k = j;
        while (k < spans_.size() && spans_[k].start < hi) ++k;
        if (value != nullptr && k == j + 1 && spans_[j].start == lo && spans_[j].end == hi) {
            spans_[j].value = *value;  // the same span as the last write of these bytes
            return;
        }
        Span made[3];
        int m = 0;
        if (j < k && spans_[j].start < lo) made[m++] = {spans_[j].start, lo, spans_[j].value};  // before lo
        if (value != nullptr) made[m++] = {lo, hi, *value};
        if (j < k && spans_[k - 1].end > hi) made[m++] = {hi, spans_[k - 1].end, spans_[k - 1].value};  // after hi
        const size_t old = k - j;
        if (size_t(m) <= old) {
            for (int i = 0; i < m; ++i) spans_[j + i] = std::move(made[i]);
            spans_.erase(spans_.begin() + long(j) + m, spans_.begin() + long(k));
        } else {
            for (size_t i = 0; i < old; ++i) spans_[j + i] = std::move(made[i]);
            spans_.insert(spans_.begin() + long(k), std::make_move_iterator(made + old), std::make_move_iterator(made + m));
        }
    }

    // visit(start, end, value) for each written span inside [lo, hi), clipped to it, by
    // address, until visit returns true.
    template <class Visit>
    void under(i64 lo, i64 hi, Visit&& visit) const {
        if (lo >= hi) return;
        for (size_t i = first_after(lo); i < spans_.size() && spans_[i].start < hi; ++i)
            if (visit(std::max(spans_[i].start, lo), std::min(spans_[i].end, hi), spans_[i].value)) return;
    }

   private:
    struct Span {
        i64 start = 0, end = 0;
        LastWrite value;
    };

    // The first span that ends after lo.
    size_t first_after(i64 lo) const {
        auto it = std::upper_bound(spans_.begin(), spans_.end(), lo, [](i64 at, const Span& s) { return at < s.start; });
        if (it != spans_.begin() && std::prev(it)->end > lo) --it;
        return size_t(it - spans_.begin());
    }

    std::vector<Span> spans_;  // disjoint, by start
};

}  // namespace streamrace
