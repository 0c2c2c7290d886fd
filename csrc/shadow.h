// Shadow memory: the earlier accesses of one (domain, device), and the race check.
// Same decisions as streamrace/analysis/shadow.py: the racer is the most recent earlier
// access (highest order) on another stream that overlaps, is not ordered before the new one
// and makes a write pair; an earlier access the new one happens after and covers (a write,
// or both reads) is forgotten.
//
// The index differs from the Python one, and that is safe: both only need to find every
// earlier access whose span meets the new span (a racer overlaps it; a covered access lies
// inside it), and neither result depends on the order accesses are met in. Here an access
// sits in one bucket of the finest level whose granule is at least its span, keyed by its
// start granule, so a lookup meets a handful of accesses of its own size class instead of
// every access in a 2 MiB granule. Within a bucket, a lattice whose runs are shorter than its
// step (the gcd of its strides) sits in its step's lane by the residue of its base, so a lookup
// meets only the residues that may share a byte with it (shadow.py's _Bucket, and ranges.h's
// apart_modulo): interleaved strided writes, whose spans all overlap, were quadratic.
#pragma once

#include <algorithm>

#include <climits>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "clocks.h"
#include "records.h"

namespace streamrace {

class ShadowMemory {
   public:
    static constexpr int LEVEL0_BITS = 12;  // 4 KiB
    static constexpr int LEVEL_STEP = 4;    // each level 16x the granule of the one below
    static constexpr int LEVELS = 14;       // the last one holds any span below 2^63
    static constexpr int bits(int level) { return level + 1 < LEVELS ? LEVEL0_BITS + level * LEVEL_STEP : 62; }

    ~ShadowMemory() {
        for (auto& level : levels_)
            level.buckets.each([](Bucket& bucket) {
                for (Rec* r : bucket.plain) release(r);
                if (bucket.lanes)
                    for (auto& lane : *bucket.lanes)
                        for (auto& [residue, recs] : lane.at)
                            for (Rec* r : recs) release(r);
            });
    }

    size_t size() const { return size_; }

    // The most recent earlier access racing with `rec` (issued at `clock` after `host`, as
    // ordered_before takes them), or null; forgets the earlier accesses rec makes redundant.
    // `how` gets the racer's overlap.
    Rec* check(const Rec& rec, const VectorClock& clock, const VectorClock& host, Overlap& how) {
        Rec* racer = nullptr;
        how = NONE;
        for (unsigned used = used_; used != 0; used &= used - 1) {
            const int level = __builtin_ctz(used);
            Level& index = levels_[level];
            // An access of this level starts at most one granule before the one it meets.
            const i64 first = (rec.rng.lo >> bits(level)) - 1, last = (rec.rng.hi - 1) >> bits(level);
            if (last < *index.keys.begin() || *index.keys.rbegin() < first) continue;  // all elsewhere
            if (last - first < DIRECT_LOOKUPS) {
                for (i64 g = first; g <= last; ++g) {
                    Bucket* bucket = index.buckets.find(g);
                    if (bucket != nullptr && visit(*bucket, rec, clock, host, racer, how)) emptied_.push_back({level, g});
                }
            } else {  // a wide access: visit only the granules that exist in its span
                for (auto key = index.keys.lower_bound(first); key != index.keys.end() && *key <= last; ++key) {
                    if (visit(*index.buckets.find(*key), rec, clock, host, racer, how)) emptied_.push_back({level, *key});
                }
            }
        }
        return racer;
    }

    void insert(Rec* rec) {
        const i64 span = rec->rng.hi - rec->rng.lo;
        int level = 0;
        while (level + 1 < LEVELS && span > (i64(1) << bits(level))) ++level;
        retain(rec);
        const i64 key = rec->rng.lo >> bits(level);
        Level& index = levels_[level];
        auto [bucket, added] = index.buckets.try_emplace(key);
        if (added) index.keys.insert(key);
        bucket->add(rec);
        ++size_;
        used_ |= 1u << level;
        // The buckets the check before left empty go now, but for the one rec went to: in a
        // loop, rec has usually just forgotten its previous iteration, the bucket's only access.
        for (const auto& [at, g] : emptied_) {
            Level& emptied = levels_[at];
            Bucket* e = emptied.buckets.find(g);
            if (e != nullptr && e->empty()) {
                emptied.drop(g);
                if (emptied.buckets.empty()) used_ &= ~(1u << at);
            }
        }
        emptied_.clear();
    }

   private:
    // The lattices of one step in one bucket, by the residue of their base modulo the step.
    struct Lane {
        i64 step = 0;
        i64 widest = 0;  // the longest run any access of the lane had: how far back a residue reaches
        std::map<i64, std::vector<Rec*>> at;
    };

    // The accesses of one granule of one level: the lattices whose runs are shorter than their
    // step in lanes, every other access in plain (met by every lookup of the granule).
    // A bucket is split into lanes only once plain holds LANES_FROM accesses: a short list is
    // cheaper to scan than to index.
    static constexpr size_t LANES_FROM = 32;
    struct Bucket {
        std::vector<Rec*> plain;
        // Once split: a handful of steps a bucket, so a vector; behind a pointer, so that an
        // unsplit bucket stays small in the open-addressing table.
        std::unique_ptr<std::vector<Lane>> lanes;

        bool empty() const { return plain.empty() && (!lanes || lanes->empty()); }
        void clear() {
            plain.clear();
            lanes.reset();
        }
        void swap(Bucket& o) {
            plain.swap(o.plain);
            lanes.swap(o.lanes);
        }
        void add(Rec* rec) {
            const ByteRange& rng = rec->rng;
            if (!lanes || rng.step == 0 || rng.run >= rng.step) {
                plain.push_back(rec);
                if (!lanes && plain.size() >= LANES_FROM) {
                    lanes = std::make_unique<std::vector<Lane>>();
                    std::vector<Rec*> all;
                    all.swap(plain);
                    for (Rec* r : all) add(r);
                }
                return;
            }
            auto lane = std::find_if(lanes->begin(), lanes->end(), [&](const Lane& l) { return l.step == rng.step; });
            if (lane == lanes->end()) lane = lanes->insert(lanes->end(), Lane{rng.step, 0, {}});
            lane->at[floormod(rng.base, rng.step)].push_back(rec);
            lane->widest = std::max(lane->widest, rng.run);
        }
    };

    // Checks one bucket (scan, below, for each of its lists that may share a byte with rec). True
    // when it is left empty.
    bool visit(Bucket& bucket, const Rec& rec, const VectorClock& clock, const VectorClock& host, Rec*& racer,
               Overlap& how) {
        if (!bucket.plain.empty()) scan(bucket.plain, rec, clock, host, racer, how);
        if (!bucket.lanes) return bucket.plain.empty();
        std::vector<Lane>& lanes = *bucket.lanes;
        const ByteRange& rng = rec.rng;
        for (size_t k = 0; k < lanes.size();) {
            Lane& lane = lanes[k];
            const i64 step = lane.step;
            const i64 reach = lane.widest + rng.run - 1;  // r meets rng's residues iff r is in (a - widest, a + run)
            auto sweep = [&](std::map<i64, std::vector<Rec*>>::iterator it, i64 end) {
                while (it != lane.at.end() && it->first < end) {
                    if (scan(it->second, rec, clock, host, racer, how))
                        it = lane.at.erase(it);
                    else
                        ++it;
                }
            };
            if (rng.step % step != 0 || rng.run >= step || reach >= step) {  // a dense range's step is 0
                sweep(lane.at.begin(), LLONG_MAX);
            } else {
                const i64 first = floormod(rng.base - lane.widest + 1, step), end = first + reach;
                sweep(lane.at.lower_bound(first), end);
                if (end > step) sweep(lane.at.begin(), end - step);
            }
            if (lane.at.empty())
                lanes.erase(lanes.begin() + k);
            else
                ++k;
        }
        return bucket.empty();
    }

    // The allocator ordered old before rec (shadow.py's allocator_waited): every block old
    // touched was freed after it, with its stream named by record_stream, and rec reaches
    // them only through later allocations. The caching allocator hands such a block out
    // again only once the events it recorded on those streams at the free have completed.
    static bool allocator_waited(const Rec& old, const Rec& rec) {
        if (old.lifetimes.size() == 0) return false;
        for (Lifetime* l : old.lifetimes) {
            if (l->free_seq < 0 || old.issued >= l->free_seq) return false;
            if (std::find(l->recorded.begin(), l->recorded.end(), old.stream) == l->recorded.end()) return false;
            for (Lifetime* n : rec.lifetimes)
                if (n == l) return false;
        }
        return true;
    }

    // Checks one bucket; drops the accesses rec makes redundant. True when it is left empty.
    bool scan(std::vector<Rec*>& bucket, const Rec& rec, const VectorClock& clock, const VectorClock& host, Rec*& racer,
              Overlap& how) {
        size_t kept = 0;
        const i64 lo = rec.rng.lo, hi = rec.rng.hi;
        const size_t n = bucket.size();
        for (size_t i = 0; i < n; ++i) {
            Rec* old = bucket[i];
            // Most of a bucket is elsewhere in its granules: an access rec shares no byte of
            // span with is neither covered by rec nor racing with it.
            if (old->rng.lo < hi && lo < old->rng.hi) {
                if (ordered_before(old->stream_index, old->tick, clock, host)) {
                    if ((rec.write || !old->write) && covers(rec.rng, old->rng)) {
                        release(old);
                        --size_;
                        continue;
                    }
                } else if ((rec.write || old->write) && old->stream != rec.stream &&
                           (racer == nullptr || old->order > racer->order)) {
                    Overlap hit = overlaps(old->rng, rec.rng);
                    if (hit != NONE && !allocator_waited(*old, rec)) {
                        racer = old;
                        how = hit;
                    }
                }
            }
            if (kept != i) bucket[kept] = old;
            ++kept;
        }
        bucket.resize(kept);
        return kept == 0;
    }

    // One level's buckets by granule: open addressing, linear probing, at most half full.
    // The check's hot loop is a lookup per granule per level; std::unordered_map's was a
    // division and a chase through a node for each.
    class Granules {
       public:
        static constexpr i64 NO_KEY = LLONG_MIN;  // granule keys are >= 0; a lookup's first may be -1

        bool empty() const { return size_ == 0; }

        Bucket* find(i64 key) {
            if (size_ == 0) return nullptr;
            for (size_t i = home(key);; i = (i + 1) & mask_) {
                if (slots_[i].key == key) return &slots_[i].bucket;
                if (slots_[i].key == NO_KEY) return nullptr;
            }
        }

        // The key's bucket, and whether it was added (empty).
        std::pair<Bucket*, bool> try_emplace(i64 key) {
            if (2 * (size_ + 1) > slots_.size()) grow();
            size_t i = home(key);
            for (; slots_[i].key != NO_KEY; i = (i + 1) & mask_)
                if (slots_[i].key == key) return {&slots_[i].bucket, false};
            slots_[i].key = key;
            ++size_;
            return {&slots_[i].bucket, true};
        }

        // Removes the key's bucket, if any; later slots of its run move back into the hole.
        void erase(i64 key) {
            if (size_ == 0) return;
            size_t hole = home(key);
            for (; slots_[hole].key != key; hole = (hole + 1) & mask_)
                if (slots_[hole].key == NO_KEY) return;
            for (size_t j = (hole + 1) & mask_; slots_[j].key != NO_KEY; j = (j + 1) & mask_) {
                const size_t want = home(slots_[j].key);
                // Slot j may fill the hole unless its home lies cyclically in (hole, j].
                if (hole <= j ? (want <= hole || want > j) : (want <= hole && want > j)) {
                    slots_[hole].key = slots_[j].key;
                    slots_[hole].bucket.swap(slots_[j].bucket);
                    hole = j;
                }
            }
            slots_[hole].key = NO_KEY;
            slots_[hole].bucket.clear();
            --size_;
        }

        template <class Visit>
        void each(Visit&& visit) {
            for (Slot& slot : slots_)
                if (slot.key != NO_KEY) visit(slot.bucket);
        }

       private:
        struct Slot {
            i64 key = NO_KEY;
            Bucket bucket;
        };
        size_t home(i64 key) const { return size_t((unsigned long long)key * 0x9E3779B97F4A7C15ull >> shift_); }
        void grow() {
            std::vector<Slot> old;
            old.swap(slots_);
            const size_t capacity = old.empty() ? 16 : 2 * old.size();
            slots_.resize(capacity);
            mask_ = capacity - 1;
            shift_ = 64 - __builtin_ctzll(capacity);
            size_ = 0;
            for (Slot& slot : old)
                if (slot.key != NO_KEY) try_emplace(slot.key).first->swap(slot.bucket);
        }
        std::vector<Slot> slots_;
        size_t size_ = 0, mask_ = 0;
        int shift_ = 64;
    };

    // One level: buckets by granule, and their keys in order for wide lookups.
    struct Level {
        Granules buckets;
        std::set<i64> keys;
        void drop(i64 key) {
            keys.erase(key);
            buckets.erase(key);
        }
    };
    // Above this many granules a lookup walks the ordered keys instead of probing each one.
    static constexpr i64 DIRECT_LOOKUPS = 8;

    Level levels_[LEVELS];
    unsigned used_ = 0;  // bit `level`: that level holds some access
    size_t size_ = 0;
    std::vector<std::pair<int, i64>> emptied_;  // (level, granule) of the buckets the last check emptied
};

}  // namespace streamrace
