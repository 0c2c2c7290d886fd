// The two records the analysis keeps: an access (one range of one op) and an allocation
// lifetime. They point at each other (an access at the blocks it touched, a block at the
// last use of each other stream), so both are reference counted by hand, and the lifetimes
// drop their last uses as soon as nothing can read them again (lifetimes.h): that breaks
// every cycle and is what keeps memory bounded on a long trace. Detections hold them by Ref,
// and so do their Python objects (core.cpp binds both under the Python engine's names).
#pragma once

#include <Python.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "held_event.h"
#include "ranges.h"

namespace streamrace {

struct Lifetime;

// An owned reference to a Python object (null allowed).
class PyRef {
   public:
    PyRef() = default;
    explicit PyRef(PyObject* p) : p_(p) { Py_XINCREF(p_); }
    PyRef(const PyRef& o) : PyRef(o.p_) {}
    PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    PyRef& operator=(PyRef o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~PyRef() { Py_XDECREF(p_); }
    PyObject* get() const { return p_; }

   private:
    PyObject* p_ = nullptr;
};

// The lifetimes an access touched: nearly always one, so up to two are held in place (no
// allocation per access: a replay makes one access per captured access).
class LifetimeList {
   public:
    LifetimeList() = default;
    LifetimeList(const LifetimeList& o) { *this = o; }
    LifetimeList& operator=(const LifetimeList& o) {
        if (this != &o) {
            size_ = 0;
            for (Lifetime* l : o) push_back(l);
        }
        return *this;
    }
    LifetimeList(LifetimeList&& o) noexcept : size_(o.size_), capacity_(o.capacity_) {  // leaves o empty
        if (o.capacity_ == INLINE)
            std::copy(o.inline_, o.inline_ + o.size_, inline_);
        else
            heap_ = o.heap_;
        o.size_ = 0;
        o.capacity_ = INLINE;
    }
    LifetimeList& operator=(LifetimeList&&) = delete;
    ~LifetimeList() {
        if (capacity_ != INLINE) delete[] heap_;
    }

    void push_back(Lifetime* l) {
        if (size_ == capacity_) {
            Lifetime** grown = new Lifetime*[2 * capacity_];
            std::copy(begin(), end(), grown);
            if (capacity_ != INLINE) delete[] heap_;
            heap_ = grown;
            capacity_ *= 2;
        }
        data()[size_++] = l;
    }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    Lifetime* operator[](size_t i) const { return data()[i]; }
    Lifetime** begin() { return data(); }
    Lifetime** end() { return data() + size_; }
    Lifetime* const* begin() const { return data(); }
    Lifetime* const* end() const { return data() + size_; }

   private:
    // Two inline, else on the heap: 24 bytes, kept by every record and program step.
    static constexpr unsigned INLINE = 2;
    Lifetime** data() { return capacity_ == INLINE ? inline_ : heap_; }
    Lifetime* const* data() const { return capacity_ == INLINE ? inline_ : heap_; }
    union {
        Lifetime* inline_[INLINE];
        Lifetime** heap_;
    };
    unsigned size_ = 0, capacity_ = INLINE;
};

struct Rec {
    int refs = 0;
    bool write = false;
    unsigned stream_index = 0;  // dense stream number (clocks)
    i64 order = 0;              // global position among all accesses
    i64 stream = 0, tick = 0, domain = 0, device = 0;
    i64 seq = 0;     // the op event's seq
    i64 issued = 0;  // the seq at which the program issued it: its replay's, else its op's
    i64 replay_graph = 0;  // a replay's access: the graph replayed
    ByteRange rng;
    // The op (or kernel) event; a replay's: the captured op's. A captured op's is its copy
    // (held_event.h), and its range is found again in it: the op's `index`-th read or write.
    HeldEvent event;
    PyObject* raw = nullptr;  // the range as written in the trace, owned; null with a copied event
    unsigned index = 0;
    PyObject* replay = nullptr;  // a replay's access: the replay event, owned; else null
    // The live lifetimes it touched, owned (a replay's: those its captured access touched).
    LifetimeList lifetimes;
    static inline i64 alive = 0;  // for the tests of bounded memory

    Rec() { ++alive; }
    ~Rec();

    // Records come and go by the million (a replay makes one per captured access): freed ones
    // are kept for the next, up to a bound.
    static void* operator new(size_t size) {
        if (size == sizeof(Rec) && !spare().empty()) {
            void* p = spare().back();
            spare().pop_back();
            return p;
        }
        return ::operator new(size);
    }
    static void operator delete(void* p, size_t size) {
        if (size == sizeof(Rec) && spare().size() < SPARE) {
            spare().push_back(p);
            return;
        }
        ::operator delete(p);
    }

   private:
    static constexpr size_t SPARE = 1 << 16;
    static std::vector<void*>& spare() {
        static std::vector<void*>* kept = new std::vector<void*>();  // never destroyed: records may outlive it
        return *kept;
    }
};

// A captured access as its graph's program keeps it, for every later replay of the graph: what
// a replay's access is made from (Engine::replay), in half a record's memory. A serving trace
// keeps one per captured range, for as long as the graph lives; the record the capture made
// goes back to the pool when nothing else holds it.
struct Step {
    i64 lo = 0, hi = 0;                  // the bytes of a dense range
    std::unique_ptr<ByteRange> strided;  // a strided range (null: dense)
    i64 seq = 0, device = 0;
    HeldEvent event;
    PyRef raw;
    LifetimeList lifetimes;  // owned
    unsigned index = 0;
    bool write = false;

    static inline i64 alive = 0;  // for the tests of bounded memory

    explicit Step(const Rec& rec);
    Step(Step&& o) noexcept
        : lo(o.lo),
          hi(o.hi),
          strided(std::move(o.strided)),
          seq(o.seq),
          device(o.device),
          event(std::move(o.event)),
          raw(std::move(o.raw)),
          lifetimes(std::move(o.lifetimes)),
          index(o.index),
          write(o.write) {
        ++alive;
    }
    Step& operator=(Step&&) = delete;
    ~Step();

    ByteRange range() const { return strided ? *strided : ByteRange(lo, {}, hi - lo); }
};

struct Lifetime {
    int refs = 0;
    i64 id = 0, addr = 0, size = 0, owner = 0, device = 0;
    i64 domain = -1;       // where it was allocated: EAGER (clocks.h) or a capture
    i64 alloc_seq = 0;     // the alloc event's seq
    i64 free_seq = -1;     // the free event's seq, once freed
    bool pooled = false;   // the alloc event names a pool (a graph's): not a graph input
    bool ended = false;    // ended silently by an overlapping allocation (a malformed trace)
    // Allocated in a capture and written, while live, by an op of eager work or of another
    // graph: the program keeps its own state in it (docs/analysis.md §8.10, the escape check).
    bool kept = false;
    HeldEvent alloc;  // the alloc event (a capture's: its copy, kept with the capture's records)
    HeldEvent free;   // the free event, once freed
    std::vector<i64> recorded;  // streams named by record_stream
    // The last use of each non-owner stream, per domain: ((domain, stream), the ranges of its
    // last op that touched the block, in order), owned.
    std::vector<std::pair<std::pair<i64, i64>, std::vector<Rec*>>> last_use;

    i64 end() const { return addr + size; }
    ~Lifetime();
    void forget_uses();
};

inline void retain(Rec* r) { ++r->refs; }
inline void retain(Lifetime* l) { ++l->refs; }
inline void release(Rec* r) {
    if (--r->refs == 0) delete r;
}
inline void release(Lifetime* l) {
    if (--l->refs == 0) delete l;
}

// An owned reference to a Rec or a Lifetime (null allowed); also the pybind11 holder of their
// Python objects, so a record a finding is being built from outlives the engine that made it.
template <class T>
class Ref {
   public:
    Ref() = default;
    explicit Ref(T* p) : p_(p) {
        if (p_) retain(p_);
    }
    static Ref adopt(T* p) {  // takes a reference the caller already holds
        Ref r;
        r.p_ = p;
        return r;
    }
    Ref(const Ref& o) : Ref(o.p_) {}
    Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Ref& operator=(Ref o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~Ref() {
        if (p_) release(p_);
    }
    T* get() const { return p_; }
    T* operator->() const { return p_; }
    explicit operator bool() const { return p_ != nullptr; }

   private:
    T* p_ = nullptr;
};

inline Rec::~Rec() {
    --alive;
    Py_XDECREF(raw);
    Py_XDECREF(replay);
    for (Lifetime* l : lifetimes) release(l);
}

// A graph's program: its captured accesses in capture order, replayed in that order. Held in
// chunks of a fixed size rather than one vector: a capture of tens of thousands of accesses
// grew a vector by doubling, moving every step it held each time and touching up to twice
// the pages it kept, 71% of an analysis's page faults on the capture set
// (docs/performance.md). Steps never move once made.
class Program {
   public:
    static constexpr size_t CHUNK = 1024;

    void emplace_back(const Rec& rec) {
        if (chunks_.empty() || chunks_.back().size() == CHUNK) {
            chunks_.emplace_back();
            chunks_.back().reserve(CHUNK);
        }
        chunks_.back().emplace_back(rec);
    }
    void clear() { chunks_.clear(); }
    size_t size() const { return chunks_.empty() ? 0 : (chunks_.size() - 1) * CHUNK + chunks_.back().size(); }

    class const_iterator {
       public:
        const_iterator(const std::vector<std::vector<Step>>* chunks, size_t chunk, size_t at)
            : chunks_(chunks), chunk_(chunk), at_(at) {}
        const Step& operator*() const { return (*chunks_)[chunk_][at_]; }
        const_iterator& operator++() {
            if (++at_ == (*chunks_)[chunk_].size()) {
                ++chunk_;
                at_ = 0;
            }
            return *this;
        }
        bool operator!=(const const_iterator& o) const { return chunk_ != o.chunk_ || at_ != o.at_; }

       private:
        const std::vector<std::vector<Step>>* chunks_;
        size_t chunk_, at_;
    };
    const_iterator begin() const { return {&chunks_, 0, 0}; }
    const_iterator end() const { return {&chunks_, chunks_.size(), 0}; }

   private:
    std::vector<std::vector<Step>> chunks_;  // each reserved at CHUNK, full but the last
};

inline Step::Step(const Rec& rec)
    : lo(rec.rng.lo),
      hi(rec.rng.hi),
      strided(rec.rng.dense() ? nullptr : std::make_unique<ByteRange>(rec.rng)),
      seq(rec.seq),
      device(rec.device),
      event(rec.event),
      raw(rec.raw),
      lifetimes(rec.lifetimes),
      index(rec.index),
      write(rec.write) {
    ++alive;
    for (Lifetime* l : lifetimes) retain(l);
}

inline Step::~Step() {
    --alive;
    for (Lifetime* l : lifetimes) release(l);
}

inline void Lifetime::forget_uses() {
    std::vector<std::pair<std::pair<i64, i64>, std::vector<Rec*>>> uses;
    uses.swap(last_use);
    for (auto& use : uses)
        for (Rec* r : use.second) release(r);
}

inline Lifetime::~Lifetime() {
    forget_uses();
}

}  // namespace streamrace
