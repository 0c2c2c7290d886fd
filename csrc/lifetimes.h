// Allocation lifetimes: which block an access touched, and whether a free was safe.
// The port of streamrace/analysis/lifetimes.py (docs/analysis.md §5), including when a
// lifetime's last uses are dropped: at its free unless it awaits the owner's next
// allocation, and once that allocation (or the end of the capture) has judged it.
#pragma once

#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clocks.h"
#include "records.h"

namespace streamrace {

struct PendingKey {
    i64 domain, owner;
    bool operator==(const PendingKey& o) const { return domain == o.domain && owner == o.owner; }
};
struct PendingHash {
    size_t operator()(const PendingKey& k) const { return std::hash<i64>()(k.domain * 1000003 ^ k.owner); }
};

class Lifetimes {
   public:
    // Events of a capture's lifetimes held as copies (held_event.h); false: the caller keeps
    // every event alive anyway, and a copy would only cost.
    bool copy_events = true;

    ~Lifetimes() {
        for (auto& [device, live] : live_)
            for (auto& [addr, l] : live) {
                l->forget_uses();
                release(l);
            }
        for (auto& [key, pending] : pending_)
            for (Lifetime* l : pending) {
                l->forget_uses();
                release(l);
            }
        for (auto& [graph, used] : in_domain_)
            for (auto& [id, l] : used) release(l);
    }

    // Start a lifetime (the caller sets alloc and owner); a live block it overlaps (a
    // malformed trace) ends silently.
    // Refuses a block outside [0, LIMIT) (ranges.py's check_block), so that end() never overflows.
    static void check_block(i64 addr, i64 size) {
        if (addr < 0 || addr >= LIMIT || size >= LIMIT || addr + size >= LIMIT) too_large();
    }

    Lifetime* alloc(i64 addr, i64 size, i64 owner, i64 device, const EventRef& event, i64 domain = EAGER, i64 seq = 0,
                    bool pooled = false) {
        check_block(addr, size);
        auto& live = live_[device];
        auto lo = live.lower_bound(addr);
        while (lo != live.begin() && std::prev(lo)->second->end() > addr) --lo;
        // As bisect_left(starts, addr + size, lo): never before lo (a size <= 0 from a caller
        // that skipped the trace checks must not make an inverted range).
        auto hi = lo;
        while (hi != live.end() && hi->first < addr + size) ++hi;
        for (auto it = lo; it != hi; ++it) {
            it->second->forget_uses();
            it->second->ended = true;
            release(it->second);
        }
        live.erase(lo, hi);
        Lifetime* l = new Lifetime();
        l->id = count_++;
        l->addr = addr;
        l->size = size;
        l->owner = owner;
        l->device = device;
        l->domain = domain;
        l->alloc_seq = seq;
        l->pooled = pooled;
        l->alloc = held(event, domain);
        retain(l);
        live.emplace(addr, l);
        return l;
    }

    // End the lifetime of the block at addr (null if the trace never allocated it); the
    // caller owns the returned reference.
    Lifetime* free(i64 addr, i64 device, const EventRef& event, i64 seq) {
        auto& live = live_[device];
        auto it = live.find(addr);
        if (it == live.end()) return nullptr;
        Lifetime* l = it->second;
        live.erase(it);
        l->free = held(event, l->domain);
        l->free_seq = seq;
        return l;
    }

    // l was freed while its owner was in `domain`: judge it at the owner's next allocation
    // there (settle). Its other uses are never read again. Takes the reference.
    void await_reuse(Lifetime* l, i64 domain) {
        bool pending = false;
        for (auto& use : l->last_use) pending = pending || use.first.first == domain;
        if (!pending) {
            l->forget_uses();
            release(l);
            return;
        }
        auto& uses = l->last_use;
        for (size_t i = 0; i < uses.size();) {
            if (uses[i].first.first != domain) {
                for (Rec* r : uses[i].second) release(r);
                uses[i] = std::move(uses.back());
                uses.pop_back();
            } else {
                ++i;
            }
        }
        pending_[{domain, l->owner}].push_back(l);
    }

    // owner allocates in domain at clock after host (ordered_before): judge the blocks it freed
    // there. Returns the unsafe ones with their unordered uses, each the ranges of one op
    // (references owned by the caller).
    using Uses = std::vector<std::vector<Rec*>>;
    std::vector<std::pair<Lifetime*, Uses>> settle(i64 owner, i64 domain, const VectorClock& clock,
                                                   const VectorClock& host) {
        std::vector<std::pair<Lifetime*, Uses>> unsafe;
        auto it = pending_.find({domain, owner});
        if (it == pending_.end()) return unsafe;
        std::vector<Lifetime*> judged;
        judged.swap(it->second);
        pending_.erase(it);
        for (Lifetime* l : judged) {
            Uses uses = unordered_uses(*l, domain, clock, host);
            l->forget_uses();
            if (uses.empty())
                release(l);
            else
                unsafe.emplace_back(l, std::move(uses));
        }
        return unsafe;
    }

    Lifetime* containing(i64 addr, i64 device) {
        auto& live = live_[device];
        auto it = live.upper_bound(addr);
        if (it == live.begin()) return nullptr;
        --it;
        return addr < it->second->end() ? it->second : nullptr;
    }

    // The live lifetimes that share a byte with rng, by address (references owned by rec).
    void touched(Rec& rec) {
        auto& live = live_[rec.device];
        const ByteRange& rng = rec.rng;
        auto it = live.lower_bound(rng.hi);
        size_t first = rec.lifetimes.size();
        while (it != live.begin()) {
            --it;
            Lifetime* block = it->second;
            if (block->end() <= rng.lo) break;
            bool inside = block->addr <= rng.lo && rng.hi <= block->end();
            if (inside || overlaps(rng, interval(block->addr, block->size)) != NONE) {
                retain(block);
                rec.lifetimes.push_back(block);
            }
        }
        std::reverse(rec.lifetimes.begin() + first, rec.lifetimes.end());
    }

    // Remember rec as its stream's last use of every live block it touched (a replay's access
    // may go through lifetimes freed since its capture). One ended by an overlapping
    // allocation is not live either: the Python engine still notes the use, which nothing
    // reads; here it would only keep a cycle of references alive.
    void note_use(Rec* rec) {
        for (Lifetime* l : rec->lifetimes) {
            if (rec->stream == l->owner || l->free || l->ended) continue;
            std::pair<i64, i64> key{rec->domain, rec->stream};
            bool found = false;
            for (auto& use : l->last_use) {
                if (use.first == key) {
                    retain(rec);
                    if (use.second.back()->tick != rec->tick) {  // else another range of the same op
                        for (Rec* r : use.second) release(r);
                        use.second.clear();
                    }
                    use.second.push_back(rec);
                    found = true;
                    break;
                }
            }
            if (!found) {
                retain(rec);
                l->last_use.emplace_back(key, std::vector<Rec*>{rec});
            }
            if (rec->domain != EAGER) {
                auto& used = in_domain_[rec->domain];
                if (used.emplace(l->id, l).second) retain(l);
            }
        }
    }

    // A capture ended: its uses can no longer make a free unsafe.
    void end_domain(i64 graph) {
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->first.domain == graph) {
                for (Lifetime* l : it->second) {
                    l->forget_uses();
                    release(l);
                }
                it = pending_.erase(it);
            } else {
                ++it;
            }
        }
        auto used = in_domain_.find(graph);
        if (used == in_domain_.end()) return;
        for (auto& [id, l] : used->second) {
            auto& uses = l->last_use;
            for (size_t i = 0; i < uses.size();) {
                if (uses[i].first.first == graph) {
                    for (Rec* r : uses[i].second) release(r);
                    uses.erase(uses.begin() + i);
                } else {
                    ++i;
                }
            }
            release(l);
        }
        in_domain_.erase(used);
    }

    // Uses of other streams in domain not ordered before clock (after host) nor covered by
    // record_stream: the ranges of each one's last op, by the order of its last range
    // (references owned by the caller).
    static Uses unordered_uses(const Lifetime& l, i64 domain, const VectorClock& clock, const VectorClock& host) {
        Uses uses;
        for (const auto& [key, recs] : l.last_use) {
            if (key.first != domain) continue;
            if (std::find(l.recorded.begin(), l.recorded.end(), key.second) != l.recorded.end()) continue;
            if (!ordered_before(recs.back()->stream_index, recs.back()->tick, clock, host)) {
                for (Rec* r : recs) retain(r);
                uses.push_back(recs);
            }
        }
        std::sort(uses.begin(), uses.end(), [](const auto& a, const auto& b) { return a.back()->order < b.back()->order; });
        return uses;
    }

    // A capture's lifetimes last as long as its program's records: their events are copied.
    HeldEvent held(const EventRef& event, i64 domain) const {
        return domain != EAGER && copy_events ? event.copied() : event.live();
    }

   private:
    std::unordered_map<i64, std::map<i64, Lifetime*>> live_;  // device -> addr -> block
    std::unordered_map<PendingKey, std::vector<Lifetime*>, PendingHash> pending_;
    std::unordered_map<i64, std::unordered_map<i64, Lifetime*>> in_domain_;  // capture -> lifetimes it used
    i64 count_ = 0;
};

}  // namespace streamrace
