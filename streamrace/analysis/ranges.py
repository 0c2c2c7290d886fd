"""Byte ranges: the exact set of bytes a (possibly strided) tensor view touches.

A trace range is ``{addr, nbytes}`` or ``{addr, shape, stride, itemsize}`` (stride in
elements). ``normalize`` turns either into one canonical form, a lattice of equal-length
contiguous runs::

    {base + sum(i_k * stride_k) + b : 0 <= i_k < count_k, 0 <= b < run}

with dims sorted by byte stride, size-1 and zero-stride dims dropped, negative strides
flipped and collapsible dims merged, so a transpose of a contiguous tensor is dense again and
two views of one tensor with the same step compare by their lattices (docs/analysis.md §3).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import IntEnum
from itertools import product
from math import gcd
from typing import Any

from streamrace.errors import TraceLimitError

# Above this many runs on the smaller side, two different lattices are not compared run by
# run: the overlap is assumed (docs/analysis.md §3, step 4).
MAX_RUNS = 65_536
# Nodes one lattice search may visit before it gives up: proper lattices need a handful per
# dim; only self-overlapping or pathological strides get near it.
_SEARCH_BUDGET = 1 << 14
# Every byte a range or a block holds lies in [0, LIMIT): no device has memory beyond (real
# addresses stay below 2^48), and within it every coordinate the overlap arithmetic forms fits
# 64 bits, so the C++ core computes exactly what this module does. Both engines refuse the
# same ranges, with the same words (docs/analysis.md §3).
LIMIT = 1 << 62
_INT64 = 1 << 63
OUT_OF_RANGE = "a byte range or an allocation reaches outside [0, 2^62), where no device memory is: a corrupt trace"


class Overlap(IntEnum):
    """Truthy when the ranges may share a byte; APPROXIMATE when that was assumed, not proven."""

    NONE = 0
    EXACT = 1
    APPROXIMATE = 2


class ByteRange:
    """A canonical byte range; immutable by convention (shared by the shadow and findings)."""

    __slots__ = ("base", "dims", "hi", "lo", "nruns", "run", "step")

    def __init__(self, base: int, dims: tuple[tuple[int, int], ...], run: int) -> None:
        self.base = base
        self.dims = dims  # ((count, byte_stride), ...), byte stride ascending, each stride > run
        self.run = run  # length of each contiguous run; 0 for an empty range
        self.lo = base
        self.hi = base + run + sum((n - 1) * s for n, s in dims) if run else base
        if run and (base < 0 or self.hi >= LIMIT):  # an empty range holds no byte, anywhere
            raise TraceLimitError(OUT_OF_RANGE)
        nruns = 1
        for n, _ in dims:
            nruns *= n
        self.nruns = nruns if run else 0
        # Every run starts at base plus a multiple of this (0: dense, one run).
        self.step = gcd(*(s for _, s in dims))

    @property
    def empty(self) -> bool:
        return self.run == 0

    @property
    def dense(self) -> bool:
        """Contiguous bytes: one run."""
        return not self.dims

    def span(self) -> tuple[int, int]:
        """The half-open interval ``[lo, hi)`` that holds every byte of the range."""
        return self.lo, self.hi

    def key(self) -> tuple[int, tuple[tuple[int, int], ...], int]:
        return self.base, self.dims, self.run

    def runs(self) -> list[tuple[int, int]]:
        """Every run as ``(start, end)``, ascending by the lattice order. Use only when small."""
        starts = [self.base]
        for n, s in self.dims:
            starts = [x + i * s for i in range(n) for x in starts]
        return [(x, x + self.run) for x in starts]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteRange) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"ByteRange(base={self.base:#x}, dims={self.dims}, run={self.run})"


def interval(addr: int, nbytes: int) -> ByteRange:
    """The contiguous range ``[addr, addr + nbytes)``."""
    return ByteRange(addr, (), max(nbytes, 0))


def check_block(addr: int, size: int) -> None:
    """Refuse an allocation outside [0, LIMIT), as the C++ core does."""
    if not 0 <= addr < LIMIT or size < -_INT64 or addr + size >= LIMIT:
        raise TraceLimitError(OUT_OF_RANGE)


def _int64(*values: int) -> None:
    # The C++ core reads every number of a range as a 64-bit integer.
    for value in values:
        if not -_INT64 <= value < _INT64:
            raise TraceLimitError(OUT_OF_RANGE)


def normalize(rng: Mapping[str, Any]) -> ByteRange:
    """The canonical form of a trace range (see the module docstring)."""
    addr = rng["addr"]
    if "nbytes" in rng:
        nbytes = rng["nbytes"]
        if nbytes < -_INT64 or not -_INT64 <= addr < _INT64:  # beyond 64 bits, as the C++ core reads them
            raise TraceLimitError(OUT_OF_RANGE)
        return interval(addr, nbytes)
    itemsize = rng["itemsize"]
    _int64(addr, itemsize, *rng["shape"], *rng["stride"])
    dims: list[tuple[int, int]] = []
    for n, stride in zip(rng["shape"], rng["stride"], strict=True):
        if n == 0:
            return ByteRange(addr, (), 0)
        if n == 1 or stride == 0:
            continue
        step = stride * itemsize
        if step < 0:  # walk the dim backwards: same bytes, positive stride
            addr += (n - 1) * step
            step = -step
        dims.append((n, step))
    dims.sort(key=lambda d: d[1])
    run = itemsize
    out: list[tuple[int, int]] = []
    for n, step in dims:
        if not out and step <= run:
            # Consecutive copies of the run touch or overlap: one longer run.
            run += (n - 1) * step
        elif out and step == out[-1][1]:
            # Two dims of one stride enumerate offsets 0..(n1 + n2 - 2) of it.
            out[-1] = (out[-1][0] + n - 1, step)
        elif out and step == out[-1][0] * out[-1][1]:
            out[-1] = (out[-1][0] * n, out[-1][1])
        else:
            out.append((n, step))
    return ByteRange(addr, tuple(out), run)


class _BudgetExhausted(Exception):
    pass


def _lattice_hits(box: list[tuple[int, int, int]], lo: int, hi: int) -> bool | None:
    """Is there an integer point ``m`` with ``L_k <= m_k <= U_k`` and ``lo <= sum m_k*s_k < hi``?

    ``box`` is ``[(L, U, s), ...]`` with ``s > 0``, largest stride first. Mixed-radix search
    from the outermost dim: the remaining dims bound what they can add, which leaves a small
    window of values for each dim. None when the search budget runs out.
    """
    k_last = len(box) - 1
    rest_min = [0] * len(box)
    rest_max = [0] * len(box)
    for k in range(k_last - 1, -1, -1):
        low, up, s = box[k + 1]
        rest_min[k] = rest_min[k + 1] + low * s
        rest_max[k] = rest_max[k + 1] + up * s
    budget = [_SEARCH_BUDGET]

    def search(k: int, lo: int, hi: int) -> bool:
        low, up, s = box[k]
        m_lo = max(low, -((rest_max[k] - lo) // s))  # ceil((lo - rest_max) / s)
        m_hi = min(up, (hi - 1 - rest_min[k]) // s)
        if m_lo > m_hi:
            return False
        if k == k_last:
            return True
        for m in range(m_lo, m_hi + 1):
            budget[0] -= 1
            if budget[0] < 0:
                raise _BudgetExhausted
            if search(k + 1, lo - m * s, hi - m * s):
                return True
        return False

    if not box:
        return lo <= 0 < hi
    try:
        return search(0, lo, hi)
    except _BudgetExhausted:
        return None


def _same_lattice(a: ByteRange, b: ByteRange) -> bool | None:
    """Exact overlap of two ranges with the same strides, from the differences of their indices."""
    box = [(1 - nb, na - 1, s) for (na, s), (nb, _) in zip(reversed(a.dims), reversed(b.dims), strict=True)]
    d = b.base - a.base
    # A run of a at offset t meets a run of b at offset d iff d - a.run < t < d + b.run.
    return _lattice_hits(box, d - a.run + 1, d + b.run)


def _meets_interval(r: ByteRange, lo: int, hi: int) -> bool | None:
    """Does ``r`` touch a byte of ``[lo, hi)``?"""
    if r.hi <= lo or hi <= r.lo:
        return False
    if r.dense or (lo <= r.lo and r.hi <= hi):
        return True
    box = [(0, n - 1, s) for n, s in reversed(r.dims)]
    # A run at offset t from base meets [lo, hi) iff lo - run < base + t < hi.
    return _lattice_hits(box, lo - r.run + 1 - r.base, hi - r.base)


def _run_starts(r: ByteRange, lo: int, hi: int) -> Iterator[int]:
    """The starts of ``r``'s runs in the order of ``ByteRange.runs()`` (the first dim varies
    fastest), one at a time, as csrc/ranges.h's runs_meet walks them: a pair that meets at its
    first runs is decided there, not after listing all of them (2,000 strided views of
    different strides, whose spans all overlap: 138 s, where the C++ core took 0.5 s). Of a
    single dim, only the runs that reach into ``[lo, hi)``: the others meet nothing there."""
    base, run = r.base, r.run
    if len(r.dims) == 1:
        ((n, step),) = r.dims
        first = max(0, -((base + run - 1 - lo) // step))  # ceil((lo - run + 1 - base) / step)
        last = min(n - 1, (hi - 1 - base) // step)
        return (base + i * step for i in range(first, last + 1))
    offsets = [[i * step for i in range(n)] for n, step in reversed(r.dims)]
    return (base + sum(offset) for offset in product(*offsets))


def _runs_meet(small: ByteRange, big: ByteRange, lo: int, hi: int) -> bool | None:
    """Does some run of ``small``, clipped to ``[lo, hi)``, meet ``big``? None: undecided."""
    run = small.run
    for start in _run_starts(small, lo, hi):
        start, end = max(start, lo), min(start + run, hi)
        if start >= end:
            continue
        hit = _meets_interval(big, start, end)
        if hit is None:
            return None
        if hit:
            return True
    return False


def overlaps(a: ByteRange, b: ByteRange, within: tuple[int, int] | None = None) -> Overlap:
    """Whether ``a`` and ``b`` share a byte (inside ``within = [lo, hi)`` when given).

    Exact in the cases of docs/analysis.md §3 (disjoint spans, both dense, apart modulo their
    steps, one lattice, at most MAX_RUNS runs on one side); otherwise Overlap.APPROXIMATE, a
    conservative yes.
    """
    lo, hi = max(a.lo, b.lo), min(a.hi, b.hi)
    if within is not None:
        lo, hi = max(lo, within[0]), min(hi, within[1])
    if a.run == 0 or b.run == 0 or lo >= hi:
        return Overlap.NONE
    if a.step or b.step:
        # Apart modulo their steps: each one's bytes are its base plus a multiple of its step
        # plus less than its run, so modulo a divisor m of both steps they lie in
        # [base, base + run); two such windows miss each other iff each starts at least the
        # other's run after it. Then no byte is shared, whatever the spans and run counts.
        m = gcd(a.step, b.step)
        if m > a.run and m > b.run and (b.base - a.base) % m >= a.run and (a.base - b.base) % m >= b.run:
            return Overlap.NONE
    if within is None or (within[0] <= min(a.lo, b.lo) and max(a.hi, b.hi) <= within[1]):
        if a.dense and b.dense:
            return Overlap.EXACT
        if len(a.dims) == 1 and len(b.dims) == 1 and a.dims[0][1] == b.dims[0][1]:
            # One stride each, the same (column slices of one matrix): _same_lattice's search
            # in closed form, as it is the pair a shadow memory meets most.
            (na, step), (nb, _) = a.dims[0], b.dims[0]
            d = b.base - a.base
            first = max(1 - nb, -((a.run - 1 - d) // step))  # ceil((d - a.run + 1) / step)
            return Overlap.EXACT if first <= min(na - 1, (d + b.run - 1) // step) else Overlap.NONE
        if a.dims and [s for _, s in a.dims] == [s for _, s in b.dims]:
            hit = _same_lattice(a, b)
            if hit is not None:
                return Overlap.EXACT if hit else Overlap.NONE
    small, big = (a, b) if a.nruns <= b.nruns else (b, a)
    if small.nruns <= MAX_RUNS:
        hit = _runs_meet(small, big, lo, hi)
        if hit is not None:
            return Overlap.EXACT if hit else Overlap.NONE
    return Overlap.APPROXIMATE


def covers(x: ByteRange, y: ByteRange) -> bool:
    """True only when every byte of ``y`` is provably a byte of ``x`` (conservative)."""
    if y.run == 0:
        return True
    if x.run == 0:
        return False
    if x.dense:
        return x.lo <= y.lo and y.hi <= x.hi
    return x.key() == y.key()
