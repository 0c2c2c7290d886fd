// The two records the analysis keeps: an access (one range of one op) and an allocation
// lifetime. They point at each other (an access at the blocks it touched, a block at the
// last use of each other stream), so both are reference counted by hand, and the lifetimes
// drop their last uses as soon as nothing can read them again (lifetimes.h): that breaks
// every cycle and is what keeps memory bounded on a long trace.
#pragma once

#include <Python.h>

#include <utility>
#include <vector>

#include "ranges.h"

namespace streamrace {

struct Lifetime;

struct Rec {
    int refs = 0;
    bool write = false;
    unsigned stream_index = 0;  // dense stream number (clocks)
    i64 order = 0;              // global position among all accesses
    i64 stream = 0, tick = 0, domain = 0, device = 0;
    ByteRange rng;
    PyObject* event = nullptr;  // the op (or kernel) event, owned
    PyObject* raw = nullptr;    // the range as written in the trace, owned
    std::vector<Lifetime*> lifetimes;  // the live lifetimes it touched, owned
    static inline i64 alive = 0;       // for the tests of bounded memory

    Rec() { ++alive; }
    ~Rec();
};

struct Lifetime {
    int refs = 0;
    i64 id = 0, addr = 0, size = 0, owner = 0, device = 0;
    PyObject* alloc = nullptr;  // the alloc event, owned
    PyObject* free = nullptr;   // the free event, once freed, owned
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

inline Rec::~Rec() {
    --alive;
    Py_XDECREF(event);
    Py_XDECREF(raw);
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
    Py_XDECREF(alloc);
    Py_XDECREF(free);
}

}  // namespace streamrace
