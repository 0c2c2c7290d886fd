// Items keyed by the byte span of a block, found by the spans that meet a range: the unsafe
// frees waiting to be folded (engine.h), so that an access visits only those of the blocks it
// touches instead of every one pending in its domain. Blocks may overlap (a block freed, handed
// out again and freed again). A lookup starts at the widest block's length before the range,
// so it visits the blocks that start in [lo - widest, hi): the pending blocks are a handful of
// allocation sizes, and this is a few entries more than those that meet the range.
#pragma once

#include <map>
#include <utility>

#include "ranges.h"

namespace streamrace {

template <class T>
class BlockIndex {
   public:
    bool empty() const { return items_.empty(); }

    void add(i64 addr, i64 end, T* item) {
        items_.emplace_hint(items_.upper_bound(addr), addr, Entry{end, item});  // ties in order of addition
        widest_ = std::max(widest_, end - addr);
    }

    // visit(item) for every item whose block shares a byte with [lo, hi), by address (ties in
    // order of addition); an item for which visit returns true is removed.
    template <class Visit>
    void meeting(i64 lo, i64 hi, Visit&& visit) {
        for (auto it = items_.lower_bound(lo - widest_); it != items_.end() && it->first < hi;) {
            if (it->second.end > lo && visit(it->second.item))
                it = items_.erase(it);
            else
                ++it;
        }
        if (items_.empty()) widest_ = 0;
    }

   private:
    struct Entry {
        i64 end;
        T* item;
    };
    std::multimap<i64, Entry> items_;  // block start ->
    i64 widest_ = 0;                   // the longest block added since the index was last empty
};

}  // namespace streamrace
