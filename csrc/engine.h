// The analysis engine: one pass over the events in seq order, detections out.
// The port of streamrace/analysis/engine.py; events arrive already taken apart by core.cpp,
// which also hands the detections to Python as they are, so findings are built by one piece
// of code (streamrace/analysis/detectors/).
#pragma once

#include <Python.h>

#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "clocks.h"
#include "lifetimes.h"
#include "records.h"
#include "shadow.h"

namespace streamrace {

// The detections, field for field the Python engine's records (streamrace/analysis/engine.py);
// core.cpp binds them to Python under the same names, so one Describer reads both engines'.
struct Race {
    Ref<Rec> earlier, later;  // later races with earlier, the most recent earlier access it races with
    Overlap how = NONE;
    Ref<Lifetime> lifetime;  // the block of the colliding bytes, as the earlier access saw it
    Ref<Lifetime> reused;    // set when aliasing: the later lifetime of those bytes
};

struct UnsafeFree {
    Ref<Rec> use;  // the last range of the unordered stream's last op on the block
    Ref<Lifetime> lifetime;
    i64 domain = EAGER;
    Ref<Rec> racer;  // set when folded: the new lifetime's racing access
    Overlap how = NONE;
    Ref<Lifetime> reused;
    std::vector<Ref<Rec>> pending;  // every range of the use's op that touched the block (use last)
};

struct RecordStreamNoop {
    PyRef event;  // the record_stream event
    Ref<Lifetime> lifetime;
    i64 domain = EAGER;
    std::vector<i64> users;  // other streams that used the block so far
};

using Detection = std::variant<std::shared_ptr<Race>, std::shared_ptr<UnsafeFree>, std::shared_ptr<RecordStreamNoop>>;

class Engine {
   public:
    i64 graphs = 0, ops = 0, accesses = 0;
    std::vector<Detection> detections;

    ~Engine() {
        // Detections and shadows hold accesses that hold lifetimes: drop them before the
        // lifetimes break their cycles.
        detections.clear();
        shadows_.clear();
    }

    // The stream's number in order of first appearance (docs: `stream#K` labels).
    unsigned appear(i64 stream) {
        auto [it, added] = index_.try_emplace(stream, unsigned(handles_.size()));
        if (added) handles_.push_back(stream);
        return it->second;
    }
    const std::vector<i64>& handles() const { return handles_; }

    i64 device_of(i64 stream) const {
        auto it = devices_.find(stream);
        return it == devices_.end() ? 0 : it->second;
    }
    void set_device(i64 stream, i64 device, bool only_if_unknown) {
        if (only_if_unknown)
            devices_.try_emplace(stream, device);
        else
            devices_[stream] = device;
    }

    HappensBefore hb;

    void capture_begin(i64 graph, i64 stream) {
        ++graphs;
        hb.capture_begin(graph, appear(stream));
    }

    void capture_end(i64 graph) {
        hb.capture_end(graph);
        // Nothing later is in this domain: its accesses can never race again.
        for (auto it = shadows_.begin(); it != shadows_.end();) {
            if (it->first.first == graph)
                it = shadows_.erase(it);
            else
                ++it;
        }
        for (auto it = unfolded_.begin(); it != unfolded_.end();) {
            if (it->first.first == graph)
                it = unfolded_.erase(it);
            else
                ++it;
        }
        lifetimes_.end_domain(graph);
    }

    void alloc(PyObject* event, i64 addr, i64 size, i64 owner, i64 device) {
        Lifetimes::check_block(addr, size);  // before anything changes, as the Python engine
        i64 domain;
        const VectorClock& clock = hb.current(appear(owner), domain);
        for (auto& [lifetime, uses] : lifetimes_.settle(owner, domain, clock, hb.host_clock(domain))) {
            Ref<Lifetime> block = Ref<Lifetime>::adopt(lifetime);  // takes the reference settle gave
            for (auto& recs : uses) {
                auto d = std::make_shared<UnsafeFree>();
                d->use = Ref<Rec>(recs.back());
                for (Rec* r : recs) d->pending.push_back(Ref<Rec>::adopt(r));  // and these
                d->lifetime = block;
                d->domain = domain;
                unfolded_[{domain, lifetime->device}].push_back(d.get());
                detections.emplace_back(std::move(d));
            }
        }
        lifetimes_.alloc(addr, size, owner, device, event);
    }

    void free(PyObject* event, i64 addr, i64 device) {
        Lifetime* lifetime = lifetimes_.free(addr, device, event);
        if (lifetime != nullptr) lifetimes_.await_reuse(lifetime, hb.domain(appear(lifetime->owner)));
    }

    void record_stream(PyObject* event, i64 addr, i64 stream, i64 device) {
        Lifetime* lifetime = lifetimes_.containing(addr, device);
        if (lifetime == nullptr) return;
        if (stream != lifetime->owner) {
            auto& rec = lifetime->recorded;
            if (std::find(rec.begin(), rec.end(), stream) == rec.end()) rec.push_back(stream);
            return;
        }
        auto d = std::make_shared<RecordStreamNoop>();
        d->event = PyRef(event);
        d->lifetime = Ref<Lifetime>(lifetime);
        d->domain = hb.domain(appear(stream));
        auto& users = d->users;
        for (auto& use : lifetime->last_use)
            if (std::find(users.begin(), users.end(), use.first.second) == users.end())
                users.push_back(use.first.second);
        std::sort(users.begin(), users.end(), [this](i64 a, i64 b) { return index_.at(a) < index_.at(b); });
        detections.emplace_back(std::move(d));
    }

    // One op (or kernel) on stream: begin it, then hand over each of its non-empty ranges.
    void begin_op(i64 stream, i64 device) {
        op_stream_ = stream;
        op_index_ = appear(stream);
        op_device_ = device;
        op_clock_ = &hb.op(op_index_, op_domain_, op_tick_);
        op_host_ = &hb.host_clock(op_domain_);
        auto& shadow = shadows_[{op_domain_, device}];
        if (!shadow) shadow = std::make_unique<ShadowMemory>();
        op_shadow_ = shadow.get();
    }

    void access(PyObject* event, PyObject* raw, ByteRange&& rng, bool write) {
        Rec* rec = new Rec();
        retain(rec);
        rec->order = order_++;
        rec->stream = op_stream_;
        rec->stream_index = op_index_;
        rec->tick = op_tick_;
        rec->write = write;
        rec->rng = std::move(rng);
        rec->domain = op_domain_;
        rec->device = op_device_;
        Py_INCREF(event);
        rec->event = event;
        Py_INCREF(raw);
        rec->raw = raw;
        lifetimes_.touched(*rec);
        lifetimes_.note_use(rec);
        Overlap how;
        Rec* racer = op_shadow_->check(*rec, *op_clock_, *op_host_, how);
        std::vector<const UnsafeFree*> folded;
        auto unfolded = unfolded_.find({op_domain_, op_device_});
        if (unfolded != unfolded_.end()) fold(rec, unfolded, folded);
        // The race folded into an unsafe free is not reported twice; a later race with the
        // same use is reported as an aliasing race of its own.
        bool twice = false;
        for (const UnsafeFree* unsafe : folded) {
            const Rec* use = unsafe->use.get();
            twice = twice || (racer != nullptr && racer->stream == use->stream && racer->tick == use->tick);
        }
        if (racer != nullptr && !twice) race(racer, rec, how);
        op_shadow_->insert(rec);
        release(rec);
    }

    // Accesses remembered by the shadows (not yet forgotten); for the tests.
    size_t remembered() const {
        size_t n = 0;
        for (auto& [key, shadow] : shadows_) n += shadow->size();
        return n;
    }

   private:
    using Unfolded = std::map<std::pair<i64, i64>, std::vector<UnsafeFree*>>;

    // Fold rec into every unsafe free whose pending use it races with through bytes a later
    // allocation reuses (docs/analysis.md §5); `folded` gets them.
    void fold(Rec* rec, Unfolded::iterator it, std::vector<const UnsafeFree*>& folded) {
        std::vector<UnsafeFree*> kept;
        for (UnsafeFree* unsafe : it->second) {
            const Rec* use = unsafe->use.get();
            const Lifetime* block = unsafe->lifetime.get();
            // A host synchronization ordered the use before everything later.
            if (!op_host_->empty() && ordered_before(use->stream_index, use->tick, *op_host_)) continue;
            // The cheap tests first: most pending uses are of other blocks.
            if (use->stream != rec->stream && block->addr < rec->rng.hi && rec->rng.lo < block->end() &&
                !ordered_before(use->stream_index, use->tick, *op_clock_, *op_host_)) {
                Lifetime* reused = nullptr;
                Overlap how = reuse_race(*unsafe, *rec, reused);
                if (how != NONE) {
                    unsafe->racer = Ref<Rec>(rec);
                    unsafe->how = how;
                    unsafe->reused = Ref<Lifetime>(reused);
                    folded.push_back(unsafe);
                    continue;
                }
            }
            kept.push_back(unsafe);
        }
        if (kept.empty())
            unfolded_.erase(it);
        else
            it->second.swap(kept);
    }

    // How rec races with a range of the unsafe free's pending use through a byte of the freed
    // block that a later lifetime of rec (`reused`) holds; NONE if it does not.
    static Overlap reuse_race(const UnsafeFree& unsafe, const Rec& rec, Lifetime*& reused) {
        const Lifetime* block = unsafe.lifetime.get();
        for (const Ref<Rec>& old : unsafe.pending) {
            if (!(old->write || rec.write)) continue;
            for (Lifetime* now : rec.lifetimes) {
                i64 lo = std::max(block->addr, now->addr), hi = std::min(block->end(), now->end());
                if (lo < hi && overlaps(old->rng, rec.rng, true, lo, hi) != NONE) {
                    reused = now;
                    return overlaps(old->rng, rec.rng);
                }
            }
        }
        return NONE;
    }

    void race(Rec* earlier, Rec* later, Overlap how) {
        std::vector<std::pair<Lifetime*, Lifetime*>> collisions;
        for (Lifetime* old : earlier->lifetimes)
            for (Lifetime* now : later->lifetimes) {
                if (old == now) continue;
                i64 lo = std::max(old->addr, now->addr), hi = std::min(old->end(), now->end());
                if (lo < hi && overlaps(earlier->rng, later->rng, true, lo, hi) != NONE)
                    collisions.emplace_back(old, now);
            }
        Lifetime* block = nullptr;
        Lifetime* reused = nullptr;
        if (!collisions.empty()) {
            block = collisions[0].first;
            reused = collisions[0].second;
        } else {
            block = block_of(*earlier, *later);
        }
        auto d = std::make_shared<Race>();
        d->earlier = Ref<Rec>(earlier);
        d->later = Ref<Rec>(later);
        d->how = how;
        d->lifetime = Ref<Lifetime>(block);
        d->reused = Ref<Lifetime>(reused);
        detections.emplace_back(std::move(d));
    }

    // The lifetime holding bytes both accesses touched (one lifetime: not aliasing).
    static Lifetime* block_of(const Rec& a, const Rec& b) {
        for (const Rec* r : {&a, &b})
            for (Lifetime* l : r->lifetimes)
                if (overlaps(a.rng, b.rng, true, l->addr, l->end()) != NONE) return l;
        return nullptr;
    }

    Lifetimes lifetimes_;
    std::map<std::pair<i64, i64>, std::unique_ptr<ShadowMemory>> shadows_;  // (domain, device)
    // (domain, device) -> unsafe frees (owned by `detections`) whose pending use no access of
    // a later lifetime has raced with yet, in detection order
    Unfolded unfolded_;
    std::unordered_map<i64, unsigned> index_;
    std::vector<i64> handles_;
    std::unordered_map<i64, i64> devices_;  // stream -> device
    i64 order_ = 0;
    // The op being fed.
    i64 op_stream_ = 0, op_device_ = 0, op_domain_ = EAGER, op_tick_ = 0;
    unsigned op_index_ = 0;
    VectorClock* op_clock_ = nullptr;
    const VectorClock* op_host_ = nullptr;
    ShadowMemory* op_shadow_ = nullptr;
};

}  // namespace streamrace
