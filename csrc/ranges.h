// Byte ranges: the exact set of bytes a (possibly strided) tensor view touches.
// A line-by-line port of streamrace/analysis/ranges.py (docs/analysis.md §3): the same
// canonical lattice, the same exact cases, the same search budget and run order, so both
// paths decide every overlap alike, including when they give up and assume one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace streamrace {

using i64 = long long;

constexpr i64 MAX_RUNS = 65536;
constexpr i64 SEARCH_BUDGET = 1 << 14;
// Every byte of a range or a block lies in [0, LIMIT): there every coordinate the overlap
// arithmetic forms fits 64 bits, and any intermediate that would not implies a range outside
// it. streamrace/analysis/ranges.py refuses exactly the same ranges (OUT_OF_RANGE), so both
// engines answer every trace alike.
constexpr i64 LIMIT = i64(1) << 62;

enum Overlap : int { NONE = 0, EXACT = 1, APPROXIMATE = 2 };

struct Dim {
    i64 n;  // count
    i64 s;  // byte stride
    bool operator==(const Dim& o) const { return n == o.n && s == o.s; }
};

// A range or a block outside [0, LIMIT): streamrace.errors.TraceLimitError on the Python side.
struct RangeLimit : std::overflow_error {
    using std::overflow_error::overflow_error;
};

[[noreturn]] inline void too_large() {
    throw RangeLimit(
        "a byte range or an allocation reaches outside [0, 2^62), where no device memory is: a corrupt trace");
}

inline i64 checked_mul(i64 a, i64 b) {
    i64 r;
    if (__builtin_mul_overflow(a, b, &r)) too_large();
    return r;
}

inline i64 checked_add(i64 a, i64 b) {
    i64 r;
    if (__builtin_add_overflow(a, b, &r)) too_large();
    return r;
}

// Python's floor division (the divisor is positive wherever it is used).
inline i64 floordiv(i64 a, i64 b) {
    i64 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

struct ByteRange {
    i64 base = 0, lo = 0, hi = 0;
    i64 run = 0;    // length of each contiguous run; 0 for an empty range
    i64 nruns = 0;  // number of runs, saturated just above MAX_RUNS (only compared with it)
    i64 step = 0;   // every run starts at base plus a multiple of this (0: dense, one run)
    std::vector<Dim> dims;  // byte stride ascending, each stride > run

    ByteRange() = default;
    ByteRange(i64 base_, std::vector<Dim> dims_, i64 run_) : base(base_), run(run_), dims(std::move(dims_)) {
        lo = base;
        hi = base;
        nruns = 0;
        if (run) {
            i64 end = checked_add(base, run);
            i64 count = 1;
            for (const Dim& d : dims) {
                end = checked_add(end, checked_mul(d.n - 1, d.s));
                count = count > MAX_RUNS ? count : std::min(count * std::min(d.n, MAX_RUNS + 1), MAX_RUNS + 1);
            }
            hi = end;
            nruns = count;
        }
        for (const Dim& d : dims) step = std::gcd(step, d.s);
        if (run && (lo < 0 || hi >= LIMIT)) too_large();  // an empty range holds no byte, anywhere
    }
    bool empty() const { return run == 0; }
    bool dense() const { return dims.empty(); }
    bool same_key(const ByteRange& o) const { return base == o.base && run == o.run && dims == o.dims; }
};

inline ByteRange interval(i64 addr, i64 nbytes) { return ByteRange(addr, {}, std::max<i64>(nbytes, 0)); }

// normalize() of ranges.py for the strided form; shape, stride in elements.
inline ByteRange normalize_strided(i64 addr, const std::vector<i64>& shape, const std::vector<i64>& stride,
                                   i64 itemsize) {
    std::vector<Dim> dims;
    for (size_t k = 0; k < shape.size(); ++k) {
        i64 n = shape[k];
        if (n == 0) return ByteRange(addr, {}, 0);
        if (n == 1 || stride[k] == 0) continue;
        i64 step = checked_mul(stride[k], itemsize);
        if (step < 0) {  // walk the dim backwards: same bytes, positive stride
            addr = checked_add(addr, checked_mul(n - 1, step));
            step = -step;
        }
        dims.push_back({n, step});
    }
    std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.s < b.s; });
    i64 run = itemsize;
    std::vector<Dim> out;
    for (const Dim& d : dims) {
        if (out.empty() && d.s <= run) {
            run = checked_add(run, checked_mul(d.n - 1, d.s));  // copies of the run touch: one longer run
        } else if (!out.empty() && d.s == out.back().s) {
            out.back().n = checked_add(out.back().n, d.n - 1);
        } else if (!out.empty() && d.s == checked_mul(out.back().n, out.back().s)) {
            out.back().n = checked_mul(out.back().n, d.n);
        } else {
            out.push_back(d);
        }
    }
    return ByteRange(addr, std::move(out), run);
}

struct Box {
    i64 low, up, s;
};

// _lattice_hits: is there an integer point m with low_k <= m_k <= up_k and
// lo <= sum m_k*s_k < hi? box is largest stride first. -1 when the budget runs out.
class LatticeSearch {
   public:
    LatticeSearch(const std::vector<Box>& box) : box_(box), rest_min_(box.size(), 0), rest_max_(box.size(), 0) {
        for (int k = int(box.size()) - 2; k >= 0; --k) {
            rest_min_[k] = rest_min_[k + 1] + box[k + 1].low * box[k + 1].s;
            rest_max_[k] = rest_max_[k + 1] + box[k + 1].up * box[k + 1].s;
        }
    }
    int hits(i64 lo, i64 hi) {
        if (box_.empty()) return lo <= 0 && 0 < hi;
        budget_ = SEARCH_BUDGET;
        int r = search(0, lo, hi);
        return r;
    }

   private:
    int search(size_t k, i64 lo, i64 hi) {
        const Box& b = box_[k];
        i64 m_lo = std::max(b.low, -floordiv(rest_max_[k] - lo, b.s));
        i64 m_hi = std::min(b.up, floordiv(hi - 1 - rest_min_[k], b.s));
        if (m_lo > m_hi) return 0;
        if (k + 1 == box_.size()) return 1;
        for (i64 m = m_lo; m <= m_hi; ++m) {
            if (--budget_ < 0) return -1;
            int r = search(k + 1, lo - m * b.s, hi - m * b.s);
            if (r != 0) return r;
        }
        return 0;
    }
    const std::vector<Box>& box_;
    std::vector<i64> rest_min_, rest_max_;
    i64 budget_ = SEARCH_BUDGET;
};

inline int lattice_hits(const std::vector<Box>& box, i64 lo, i64 hi) { return LatticeSearch(box).hits(lo, hi); }

inline int same_lattice(const ByteRange& a, const ByteRange& b) {
    std::vector<Box> box;
    for (size_t k = a.dims.size(); k-- > 0;) box.push_back({1 - b.dims[k].n, a.dims[k].n - 1, a.dims[k].s});
    i64 d = b.base - a.base;
    // A run of a at offset t meets a run of b at offset d iff d - a.run < t < d + b.run.
    return lattice_hits(box, d - a.run + 1, d + b.run);
}

// Does r touch a byte of [lo, hi)? 1 yes, 0 no, -1 undecided.
inline int meets_interval(const ByteRange& r, i64 lo, i64 hi) {
    if (r.hi <= lo || hi <= r.lo) return 0;
    if (r.dense() || (lo <= r.lo && r.hi <= hi)) return 1;
    std::vector<Box> box;
    for (size_t k = r.dims.size(); k-- > 0;) box.push_back({0, r.dims[k].n - 1, r.dims[k].s});
    // A run at offset t from base meets [lo, hi) iff lo - run < base + t < hi.
    return lattice_hits(box, lo - r.run + 1 - r.base, hi - r.base);
}

// Does some run of small, clipped to [lo, hi), meet big? Runs in the order of
// ByteRange.runs(): the first dim varies fastest.
inline int runs_meet(const ByteRange& small, const ByteRange& big, i64 lo, i64 hi) {
    std::vector<i64> idx(small.dims.size(), 0);
    i64 start = small.base;
    while (true) {
        i64 s = std::max(start, lo), e = std::min(start + small.run, hi);
        if (s < e) {
            int hit = meets_interval(big, s, e);
            if (hit != 0) return hit;
        }
        size_t k = 0;
        for (; k < idx.size(); ++k) {
            if (++idx[k] < small.dims[k].n) {
                start += small.dims[k].s;
                break;
            }
            start -= (small.dims[k].n - 1) * small.dims[k].s;
            idx[k] = 0;
        }
        if (k == idx.size()) return 0;
    }
}

inline bool same_strides(const ByteRange& a, const ByteRange& b) {
    if (a.dims.size() != b.dims.size()) return false;
    for (size_t k = 0; k < a.dims.size(); ++k)
        if (a.dims[k].s != b.dims[k].s) return false;
    return true;
}

// Python's modulo for a positive m.
inline i64 floormod(i64 a, i64 m) { return ((a % m) + m) % m; }

// ranges.py overlaps' residue test: a and b lie in different residues modulo the gcd of their steps,
// so they share no byte.
inline bool apart_modulo(const ByteRange& a, const ByteRange& b) {
    const i64 m = a.step == b.step ? a.step : std::gcd(a.step, b.step);
    return m > a.run && m > b.run && floormod(b.base - a.base, m) >= a.run && floormod(a.base - b.base, m) >= b.run;
}

// overlaps(a, b, within) of ranges.py; within = [w0, w1) when has_within.
inline Overlap overlaps(const ByteRange& a, const ByteRange& b, bool has_within = false, i64 w0 = 0, i64 w1 = 0) {
    i64 lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
    if (has_within) {
        lo = std::max(lo, w0);
        hi = std::min(hi, w1);
    }
    if (a.run == 0 || b.run == 0 || lo >= hi) return NONE;
    if ((a.step != 0 || b.step != 0) && apart_modulo(a, b)) return NONE;
    if (!has_within || (w0 <= std::min(a.lo, b.lo) && std::max(a.hi, b.hi) <= w1)) {
        if (a.dense() && b.dense()) return EXACT;
        if (!a.dims.empty() && same_strides(a, b)) {
            int hit = same_lattice(a, b);
            if (hit >= 0) return hit ? EXACT : NONE;
        }
    }
    const ByteRange& small = a.nruns <= b.nruns ? a : b;
    const ByteRange& big = a.nruns <= b.nruns ? b : a;
    if (small.nruns <= MAX_RUNS) {
        int hit = runs_meet(small, big, lo, hi);
        if (hit >= 0) return hit ? EXACT : NONE;
    }
    return APPROXIMATE;
}

// True only when every byte of y is provably a byte of x (conservative).
inline bool covers(const ByteRange& x, const ByteRange& y) {
    if (y.run == 0) return true;
    if (x.run == 0) return false;
    if (x.dense()) return x.lo <= y.lo && y.hi <= x.hi;
    return x.same_key(y);
}

}  // namespace streamrace
