// The analysis engine: one pass over the events in seq order, detections out.
// The port of streamrace/analysis/engine.py; events arrive already taken apart by core.cpp,
// which also hands the detections to Python as they are, so findings are built by one piece
// of code (streamrace/analysis/detectors/).
#pragma once

#include <Python.h>

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "block_index.h"
#include "clocks.h"
#include "last_writes.h"
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
    HeldEvent event;  // the record_stream event
    Ref<Lifetime> lifetime;
    i64 domain = EAGER;
    std::vector<i64> users;  // other streams that used the block so far
};

// reader read bytes of read_lifetime whose last write, writer, went through another allocation
// of them, write_lifetime, made while read_lifetime held them (docs/analysis.md §8.4).
struct StaleRead {
    Ref<Rec> reader, writer;
    Ref<Lifetime> read_lifetime, write_lifetime;
    i64 count = 1;  // the same reader and writer, again (every replay of a loop)
};

// lifetime, allocated outside any capture, was freed while graph, whose program `use` touches
// it, could still be replayed (docs/analysis.md §8.5).
struct GraphInputFreed {
    i64 graph = 0;
    Ref<Rec> use;  // the first captured access of the graph through the block
    Ref<Lifetime> lifetime;
    PyRef replay;                          // the first replay after the free; null: latent
    std::shared_ptr<StaleRead> clobbered;  // the first read of another allocation's data it led to
    i64 count = 1;
    // The block's next owner: the first allocation after the free that took bytes of it while
    // the graph lived, and the first access that ran through it there (null: none yet).
    Ref<Lifetime> reused;
    Ref<Rec> reuser;
};

using Detection = std::variant<std::shared_ptr<Race>, std::shared_ptr<UnsafeFree>, std::shared_ptr<RecordStreamNoop>,
                               std::shared_ptr<StaleRead>, std::shared_ptr<GraphInputFreed>>;

class Engine {
   public:
    i64 graphs = 0, ops = 0, accesses = 0;
    i64 replays = 0;          // replays of recorded captures
    i64 unknown_replays = 0;  // replays of graphs the trace has no capture of
    std::vector<Detection> detections;

    ~Engine() {
        // Detections, shadows and the execution view hold accesses that hold lifetimes: drop
        // them before the lifetimes break their cycles.
        detections.clear();
        shadows_.clear();
        programs_.clear();
        last_writes_.clear();
        graph_users_.clear();
        ownerless_.clear();
        unused_owner_.clear();
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

    // Captured events held as copies (held_event.h); false where the caller keeps every event
    // alive anyway (a list analysed in memory), so that a copy would only cost.
    void copy_events(bool copy) {
        copy_events_ = copy;
        lifetimes_.copy_events = copy;
    }

    void capture_begin(i64 graph, i64 stream) {
        ++graphs;
        graph_gone(graph);  // a graph id captured again: the old program is gone
        programs_[graph].clear();
        hb.capture_begin(graph, appear(stream));
    }

    void capture_end(i64 graph, bool aborted) {
        if (aborted) graph_gone(graph);  // a failed capture has no graph to replay
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

    void alloc(const EventRef& event, i64 addr, i64 size, i64 owner, i64 device, i64 seq, bool pooled) {
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
                unfolded_[{domain, lifetime->device}].add(lifetime->addr, lifetime->end(), d.get());
                detections.emplace_back(std::move(d));
            }
        }
        Lifetime* lifetime = lifetimes_.alloc(addr, size, owner, device, event, domain, seq, pooled);
        auto waiting = ownerless_.find(lifetime->device);
        if (waiting != ownerless_.end()) take_freed_inputs(lifetime, waiting);
    }

    void free(const EventRef& event, i64 addr, i64 device, i64 seq) {
        Lifetime* lifetime = lifetimes_.free(addr, device, event, seq);
        if (lifetime == nullptr) return;
        Ref<Lifetime> block(lifetime);
        lifetimes_.await_reuse(lifetime, hb.domain(appear(lifetime->owner)));  // takes free's reference
        unused_owner_.erase(block->id);  // a next owner freed unused: nothing ran through it
        // Latent until the graph is replayed or outlives the trace; gone with the graph (§8.5).
        auto users = graph_users_.find(block->id);
        if (users == graph_users_.end()) return;
        std::vector<std::pair<i64, Ref<Rec>>> uses;
        uses.swap(users->second);
        graph_users_.erase(users);
        for (auto& [graph, use] : uses) {
            graph_inputs_[graph].erase(block->id);
            auto d = std::make_shared<GraphInputFreed>();
            d->graph = graph;
            d->use = std::move(use);
            d->lifetime = block;
            inputs_freed_[graph].push_back(d.get());
            input_freed_[{block->id, graph}] = d.get();
            ownerless_[block->device].push_back(d.get());
            detections.emplace_back(std::move(d));
        }
    }

    void record_stream(const EventRef& event, i64 addr, i64 stream, i64 device) {
        Lifetime* lifetime = lifetimes_.containing(addr, device);
        if (lifetime == nullptr) return;
        if (stream != lifetime->owner) {
            auto& rec = lifetime->recorded;
            if (std::find(rec.begin(), rec.end(), stream) == rec.end()) rec.push_back(stream);
            return;
        }
        auto d = std::make_shared<RecordStreamNoop>();
        d->event = event.live();
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
    void begin_op(i64 stream, i64 device, i64 seq, bool is_op = true) {
        op_is_op_ = is_op;
        op_stream_ = stream;
        op_index_ = appear(stream);
        op_device_ = device;
        op_seq_ = seq;
        op_clock_ = &hb.op(op_index_, op_domain_, op_tick_);
        op_host_ = &hb.host_clock(op_domain_);
        op_shadow_ = &shadow(op_domain_, device);
        op_writes_ = op_domain_ == EAGER ? &last_writes_[device] : nullptr;
        auto program = op_domain_ == EAGER ? programs_.end() : programs_.find(op_domain_);
        op_program_ = program == programs_.end() ? nullptr : &program->second;
        op_event_ = HeldEvent();
    }

    // The op's `index`-th read or write, `raw` as the trace has it.
    void access(const EventRef& event, PyObject* raw, unsigned index, ByteRange&& rng, bool write) {
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
        rec->seq = rec->issued = op_seq_;
        rec->index = index;
        if (op_program_ != nullptr && copy_events_) {
            // Kept as long as its graph: one copy of the event for all the op's accesses.
            if (!op_event_) op_event_ = event.copied();
            rec->event = op_event_;
        } else {
            rec->event = event.live();
        }
        if (!rec->event.is_copy()) {
            Py_INCREF(raw);
            rec->raw = raw;
        }
        lifetimes_.touched(*rec);
        if (write && op_is_op_) keeps_state(*rec);
        if (op_domain_ == EAGER)
            execute(rec, *op_writes_);
        else if (op_program_ != nullptr)
            capture_into(*op_program_, rec);
        check(rec, *op_shadow_, *op_clock_, *op_host_);
        release(rec);
    }

    // -- the execution view (docs/analysis.md §8) --------------------------------------------
    // Run graph's program as one op on the replay's stream (§8.2); `event` is the replay.
    void replay(PyObject* event, i64 graph, i64 stream, i64 seq) {
        auto found = programs_.find(graph);
        const unsigned index = appear(stream);
        if (found == programs_.end() || hb.capturing(graph) || hb.domain(index) != EAGER) {
            unknown_replays += found == programs_.end();
            return;  // a graph captured before the trace began (or still capturing)
        }
        ++replays;
        auto previous = replayed_.find(graph);
        if (previous != replayed_.end()) hb.order_after(index, previous->second);  // launches of one graph are serialized
        i64 domain, tick;
        const VectorClock& clock = hb.replay(graph, index, domain, tick);
        const VectorClock& host = hb.host_clock(domain);
        replayed_[graph] = clock;
        auto freed = inputs_freed_.find(graph);
        if (freed != inputs_freed_.end())
            for (GraphInputFreed* d : freed->second)
                if (!d->replay.get()) d->replay = PyRef(event);
        // The program is not changed while it runs: no event comes in between.
        i64 device = 0;
        ShadowMemory* memory = nullptr;
        LastWrites* writes = nullptr;
        for (const Step& captured : found->second) {
            if (memory == nullptr || captured.device != device) {  // a program's accesses are of one device, mostly
                device = captured.device;
                memory = &shadow(EAGER, device);
                writes = &last_writes_[device];
            }
            Rec* rec = new Rec();
            retain(rec);
            rec->order = order_++;
            rec->stream = stream;
            rec->stream_index = index;
            rec->tick = tick;
            rec->write = captured.write;
            rec->rng = captured.range();
            rec->domain = EAGER;
            rec->device = captured.device;
            rec->seq = captured.seq;
            rec->issued = seq;
            rec->replay_graph = graph;
            rec->event = captured.event;
            rec->raw = captured.raw.get();
            Py_XINCREF(rec->raw);
            rec->index = captured.index;
            Py_INCREF(event);
            rec->replay = event;
            rec->lifetimes = captured.lifetimes;
            for (Lifetime* l : rec->lifetimes) retain(l);
            execute(rec, *writes);
            check(rec, *memory, clock, host);
            release(rec);
        }
    }

    // The graph was reset or destroyed (or its capture failed): it replays no more, so a free
    // of what it used, not yet followed by a replay, was harmless after all.
    void graph_gone(i64 graph) {
        programs_.erase(graph);
        replayed_.erase(graph);
        auto inputs = graph_inputs_.find(graph);
        if (inputs != graph_inputs_.end()) {
            for (i64 id : inputs->second) {
                auto users = graph_users_.find(id);
                if (users == graph_users_.end()) continue;
                auto& list = users->second;
                for (auto it = list.begin(); it != list.end(); ++it)
                    if (it->first == graph) {
                        list.erase(it);
                        break;
                    }
                if (list.empty()) graph_users_.erase(users);
            }
            graph_inputs_.erase(inputs);
        }
        auto freed = inputs_freed_.find(graph);
        if (freed == inputs_freed_.end()) return;
        std::vector<GraphInputFreed*> gone;
        gone.swap(freed->second);
        inputs_freed_.erase(freed);
        for (GraphInputFreed* d : gone) {
            input_freed_.erase({d->lifetime->id, graph});
            if (!d->reused) drop(ownerless_, d->lifetime->device, d);  // no allocation takes the block from the graph any more
            if (d->replay.get()) continue;
            if (d->reused && !d->reuser) drop(unused_owner_, d->reused->id, d);
            // Latent, and harmless now: no longer a detection. Recent ones are near the end.
            for (size_t i = detections.size(); i-- > 0;) {
                auto* held = std::get_if<std::shared_ptr<GraphInputFreed>>(&detections[i]);
                if (held != nullptr && held->get() == d) {
                    detections.erase(detections.begin() + long(i));
                    break;
                }
            }
        }
    }

    // Accesses remembered by the shadows (not yet forgotten); for the tests.
    size_t remembered() const {
        size_t n = 0;
        for (auto& [key, shadow] : shadows_) n += shadow->size();
        return n;
    }

   private:
    using Unfolded = std::map<std::pair<i64, i64>, BlockIndex<UnsafeFree>>;

    ShadowMemory& shadow(i64 domain, i64 device) {
        auto& shadow = shadows_[{domain, device}];
        if (!shadow) shadow = std::make_unique<ShadowMemory>();
        return *shadow;
    }

    // The happens-before checks of one access (issued at clock after host): races, unsafe
    // frees, then remember it.
    void check(Rec* rec, ShadowMemory& shadow, const VectorClock& clock, const VectorClock& host) {
        lifetimes_.note_use(rec);
        Overlap how;
        Rec* racer = shadow.check(*rec, clock, host, how);
        std::vector<const UnsafeFree*> folded;
        auto unfolded = unfolded_.find({rec->domain, rec->device});
        if (unfolded != unfolded_.end()) fold(rec, unfolded, clock, host, folded);
        // The race folded into an unsafe free is not reported twice; a later race with the
        // same use is reported as an aliasing race of its own.
        bool twice = false;
        for (const UnsafeFree* unsafe : folded) {
            const Rec* use = unsafe->use.get();
            twice = twice || (racer != nullptr && racer->stream == use->stream && racer->tick == use->tick);
        }
        if (racer != nullptr && !twice) race(racer, rec, how);
        shadow.insert(rec);
    }

    // lifetime is the next owner of every freed input of a live graph whose bytes it takes
    // (§8.5): the allocation the graph's replays now read or write through.
    void take_freed_inputs(Lifetime* lifetime, std::unordered_map<i64, std::vector<GraphInputFreed*>>::iterator it) {
        std::vector<GraphInputFreed*> kept;
        for (GraphInputFreed* d : it->second) {
            const Lifetime* block = d->lifetime.get();
            if (block->addr < lifetime->end() && lifetime->addr < block->end()) {
                d->reused = Ref<Lifetime>(lifetime);
                unused_owner_[lifetime->id].push_back(d);
            } else {
                kept.push_back(d);
            }
        }
        if (kept.empty())
            ownerless_.erase(it);
        else
            it->second.swap(kept);
    }

    // rec runs through the next owner of freed graph inputs: the first such access that
    // touches the bytes it took from one is what names that owner (§8.5).
    void name_next_owner(Rec* rec) {
        for (Lifetime* l : rec->lifetimes) {
            auto waiting = unused_owner_.find(l->id);
            if (waiting == unused_owner_.end()) continue;
            std::vector<GraphInputFreed*> kept;
            for (GraphInputFreed* d : waiting->second) {
                const Lifetime* block = d->lifetime.get();
                const i64 lo = std::max(block->addr, l->addr), hi = std::min(block->end(), l->end());
                if (overlaps(rec->rng, rec->rng, true, lo, hi) != NONE)
                    d->reuser = Ref<Rec>(rec);
                else
                    kept.push_back(d);
            }
            if (kept.empty())
                unused_owner_.erase(waiting);
            else
                waiting->second.swap(kept);
        }
    }

    // Take d out of waiting[key] if it is there, and the key with its last one.
    static void drop(std::unordered_map<i64, std::vector<GraphInputFreed*>>& waiting, i64 key, GraphInputFreed* d) {
        auto it = waiting.find(key);
        if (it == waiting.end()) return;
        auto& list = it->second;
        auto found = std::find(list.begin(), list.end(), d);
        if (found == list.end()) return;
        list.erase(found);
        if (list.empty()) waiting.erase(it);
    }

    // rec is part of its capture's program; note the blocks it uses that were allocated
    // outside any capture and not into a graph pool (their free is §8.5's).
    void capture_into(Program& program, Rec* rec) {
        program.emplace_back(*rec);
        for (Lifetime* l : rec->lifetimes) {
            if (l->domain != EAGER || l->pooled) continue;
            auto& users = graph_users_[l->id];
            bool known = false;
            for (const auto& user : users) known = known || user.first == rec->domain;
            if (!known) {
                users.emplace_back(rec->domain, Ref<Rec>(rec));
                graph_inputs_[rec->domain].insert(l->id);
            }
        }
    }

    // An access that runs (eager, or a replay's): a write becomes the last write of its bytes,
    // through the lifetimes it went through; a read is checked against them.
    void execute(Rec* rec, LastWrites& writes) {
        if (!unused_owner_.empty()) name_next_owner(rec);
        const i64 lo = rec->rng.lo, hi = rec->rng.hi;
        if (rec->write) {
            const auto& through = rec->lifetimes;
            if (through.size() == 1 && through[0]->addr <= lo && hi <= through[0]->end()) {
                const LastWrite value{Ref<Rec>(rec), Ref<Lifetime>(through[0])};
                writes.assign(lo, hi, &value);  // the common case, at once: the bytes of one block
                return;
            }
            writes.assign(lo, hi, nullptr);  // bytes of no known block: who wrote them says nothing
            for (Lifetime* l : through) {
                const LastWrite value{Ref<Rec>(rec), Ref<Lifetime>(l)};
                writes.assign(std::max(lo, l->addr), std::min(hi, l->end()), &value);
            }
            return;
        }
        for (Lifetime* l : rec->lifetimes) {
            const i64 born = l->alloc_seq;
            bool found = false;
            writes.under(std::max(lo, l->addr), std::min(hi, l->end()), [&](i64 start, i64 end, const LastWrite& last) {
                // Only a write made while the reader's allocation held the bytes clobbers them;
                // before it, they are just a fresh allocation's uninitialised bytes. A replay
                // reading what it wrote itself reads its graph's own data, as at capture.
                const Rec* writer = last.writer.get();
                if (last.through.get() != l && born < writer->issued &&
                    (rec->replay == nullptr || writer->replay != rec->replay) &&
                    overlaps(writer->rng, rec->rng, true, start, end) != NONE) {
                    stale_read(rec, last.writer.get(), l, last.through.get());
                    found = true;
                }
                return found;
            });
            if (found) return;
        }
    }

    void stale_read(Rec* reader, Rec* writer, Lifetime* read, Lifetime* wrote) {
        for (const Rec* r : {reader, writer}) {
            if (r->replay == nullptr) continue;
            for (const Lifetime* l : {read, wrote}) {
                auto freed = input_freed_.find({l->id, r->replay_graph});
                if (freed != input_freed_.end()) {  // the consequence of a freed graph input: reported there
                    if (!freed->second->clobbered) freed->second->clobbered = made_stale(reader, writer, read, wrote);
                    return;
                }
            }
        }
        auto [seen, added] = stale_.try_emplace({reader->seq, writer->seq}, nullptr);
        if (!added) {
            ++seen->second->count;
            return;
        }
        auto d = made_stale(reader, writer, read, wrote);
        seen->second = d.get();
        detections.emplace_back(std::move(d));
    }

    static std::shared_ptr<StaleRead> made_stale(Rec* reader, Rec* writer, Lifetime* read, Lifetime* wrote) {
        auto d = std::make_shared<StaleRead>();
        d->reader = Ref<Rec>(reader);
        d->writer = Ref<Rec>(writer);
        d->read_lifetime = Ref<Lifetime>(read);
        d->write_lifetime = Ref<Lifetime>(wrote);
        return d;
    }

    // Fold rec (issued at clock after host) into every unsafe free whose pending use it races
    // with through bytes a later allocation reuses (docs/analysis.md §5); `folded` gets them.
    // Only the frees of blocks rec touches can fold: the index hands over just those.
    void fold(Rec* rec, Unfolded::iterator it, const VectorClock& clock, const VectorClock& host,
              std::vector<const UnsafeFree*>& folded) {
        it->second.meeting(rec->rng.lo, rec->rng.hi, [&](UnsafeFree* unsafe) {
            const Rec* use = unsafe->use.get();
            // A host synchronization ordered the use before everything later (the host clock
            // only grows): no later access can fold it.
            if (!host.empty() && ordered_before(use->stream_index, use->tick, host)) return true;
            if (use->stream == rec->stream || ordered_before(use->stream_index, use->tick, clock, host)) return false;
            Lifetime* reused = nullptr;
            Overlap how = reuse_race(*unsafe, *rec, reused);
            if (how == NONE) return false;
            unsafe->racer = Ref<Rec>(rec);
            unsafe->how = how;
            unsafe->reused = Ref<Lifetime>(reused);
            folded.push_back(unsafe);
            return true;
        });
        if (it->second.empty()) unfolded_.erase(it);
    }

    // How rec races with a range of the unsafe free's pending use through a byte of the freed
    // block that a later lifetime of rec (`reused`) holds; NONE if it does not.
    static Overlap reuse_race(const UnsafeFree& unsafe, const Rec& rec, Lifetime*& reused) {
        const Lifetime* block = unsafe.lifetime.get();
        for (const Ref<Rec>& old : unsafe.pending) {
            if (!(old->write || rec.write)) continue;
            for (Lifetime* now : rec.lifetimes) {
                if (now->id <= block->id) continue;  // a replay's, through the freed allocation or an earlier one
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
    // a later lifetime has raced with yet, by the freed block's span
    Unfolded unfolded_;
    std::unordered_map<i64, unsigned> index_;
    std::vector<i64> handles_;
    std::unordered_map<i64, i64> devices_;  // stream -> device
    i64 order_ = 0;
    // The execution view (§8): each live graph's program, the clock of its last replay, every
    // device's last writes, and which graphs use each block allocated outside them.
    std::unordered_map<i64, Program> programs_;
    std::unordered_map<i64, VectorClock> replayed_;
    std::unordered_map<i64, LastWrites> last_writes_;  // device ->
    // lifetime id -> (graph, its first captured access through the block), in order of use
    std::unordered_map<i64, std::vector<std::pair<i64, Ref<Rec>>>> graph_users_;
    std::unordered_map<i64, std::unordered_set<i64>> graph_inputs_;  // graph -> ids of the lifetimes it uses
    // graph -> its freed inputs, and (lifetime id, graph) -> the one; owned by `detections`
    std::unordered_map<i64, std::vector<GraphInputFreed*>> inputs_freed_;
    std::map<std::pair<i64, i64>, GraphInputFreed*> input_freed_;
    // Freed inputs of live graphs whose block no allocation took yet, by device; and those
    // whose next owner is known, by its lifetime id, until an access runs through it.
    std::unordered_map<i64, std::vector<GraphInputFreed*>> ownerless_;
    std::unordered_map<i64, std::vector<GraphInputFreed*>> unused_owner_;
    std::map<std::pair<i64, i64>, StaleRead*> stale_;  // (reader seq, writer seq) -> the first; owned by `detections`
    // The op being fed.
    i64 op_stream_ = 0, op_device_ = 0, op_domain_ = EAGER, op_tick_ = 0, op_seq_ = 0;
    unsigned op_index_ = 0;
    VectorClock* op_clock_ = nullptr;
    const VectorClock* op_host_ = nullptr;
    ShadowMemory* op_shadow_ = nullptr;
    LastWrites* op_writes_ = nullptr;  // the device's last writes, for an eager op
    Program* op_program_ = nullptr;  // the program the op's capture is adding to, if any
    // An op's write through live blocks: each allocated in a capture and written by eager work
    // or another graph's op is one the program keeps its state in.
    void keeps_state(const Rec& rec) const {
        for (Lifetime* l : rec.lifetimes)
            if (l->domain != EAGER && (op_domain_ == EAGER || op_domain_ != l->domain)) l->kept = true;
    }

    bool op_is_op_ = true;  // the op begun is an `op` event (a `kernel` keeps no state: §8.10)
    bool copy_events_ = true;
    HeldEvent op_event_;                           // its copied event, once an access needs it
};

}  // namespace streamrace
