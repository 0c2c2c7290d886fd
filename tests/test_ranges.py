"""Byte ranges: canonical forms and exact overlap (docs/analysis.md §3)."""

from __future__ import annotations

import itertools
import random

import pytest

from streamrace.analysis.ranges import MAX_RUNS, Overlap, covers, interval, normalize, overlaps
from streamrace.trace.builder import TraceBuilder

view, span = TraceBuilder.view, TraceBuilder.span
BASE = 0x1000


def byte_set(rng: dict) -> set[int]:
    """The bytes of a trace range, by enumerating its elements (the definition)."""
    if "nbytes" in rng:
        return set(range(rng["addr"], rng["addr"] + rng["nbytes"]))
    out: set[int] = set()
    for index in itertools.product(*(range(n) for n in rng["shape"])):
        start = rng["addr"] + sum(i * s for i, s in zip(index, rng["stride"], strict=True)) * rng["itemsize"]
        out.update(range(start, start + rng["itemsize"]))
    return out


def test_contiguous_span():
    r = normalize(span(BASE, 64))
    assert r.dense and r.span() == (BASE, BASE + 64) and r.nruns == 1


def test_2d_contiguous_is_dense():
    r = normalize(view(BASE, [4, 8]))
    assert r.dense and r.span() == (BASE, BASE + 128)


def test_transpose_is_the_same_dense_bytes():
    x, xt = normalize(view(BASE, [4, 8])), normalize(view(BASE, [8, 4], [1, 8]))
    assert xt.dense and xt == x


def test_column_slice_is_strided():
    r = normalize(view(BASE, [4, 2], [8, 1], offset=3))  # x[:, 3:5] of a 4x8 float tensor
    assert not r.dense
    assert r.dims == ((4, 32),) and r.run == 8
    assert r.span() == (BASE + 12, BASE + 3 * 32 + 12 + 8)


def test_zero_stride_and_size_one_dims_are_dropped():
    expanded = normalize(view(BASE, [3, 5], [0, 1]))  # x.expand(3, 5) of 5 floats
    assert expanded.dense and expanded.span() == (BASE, BASE + 20)
    assert normalize(view(BASE, [1, 5, 1], [99, 1, 7])) == expanded


def test_scalar_is_one_item():
    r = normalize(view(BASE, [], [], itemsize=2, offset=3))
    assert r.dense and r.span() == (BASE + 6, BASE + 8)


def test_empty_view_touches_nothing():
    empty = normalize(view(BASE, [0, 4]))
    whole = normalize(span(BASE, 1 << 20))
    assert empty.empty and normalize(span(BASE, 0)).empty
    assert overlaps(empty, whole) is Overlap.NONE and overlaps(whole, empty) is Overlap.NONE
    assert covers(whole, empty) and not covers(empty, whole)


def test_negative_stride_is_walked_forwards():
    flipped = normalize({"addr": BASE + 7 * 4, "shape": [8], "stride": [-1], "itemsize": 4})
    assert flipped == normalize(view(BASE, [8]))
    every_other = normalize({"addr": BASE + 6 * 4, "shape": [4], "stride": [-2], "itemsize": 4})
    assert every_other == normalize(view(BASE, [4], [2]))


def test_adjacent_half_open_ranges_do_not_overlap():
    assert overlaps(normalize(span(BASE, 16)), normalize(span(BASE + 16, 16))) is Overlap.NONE
    assert overlaps(normalize(span(BASE, 17)), normalize(span(BASE + 16, 16))) is Overlap.EXACT


def test_overlapping_slices():
    x = view(BASE, [8])
    assert overlaps(normalize(view(BASE, [3], offset=0)), normalize(view(BASE, [3], offset=2))) is Overlap.EXACT
    assert overlaps(normalize(view(BASE, [2], offset=0)), normalize(view(BASE, [3], offset=2))) is Overlap.NONE
    assert overlaps(normalize(x), normalize(view(BASE, [1], offset=7))) is Overlap.EXACT


def test_interleaved_views_do_not_overlap():
    evens = normalize(view(BASE, [4, 4], [8, 2], offset=0))  # x[:, ::2] of a 4x8 tensor
    odds = normalize(view(BASE, [4, 4], [8, 2], offset=1))  # x[:, 1::2]
    assert evens.span()[0] < odds.span()[1] and odds.span()[0] < evens.span()[1]
    assert overlaps(evens, odds) is Overlap.NONE
    assert overlaps(evens, normalize(view(BASE, [2, 4], [8, 2], offset=16))) is Overlap.EXACT  # rows 2-3
    assert overlaps(odds, normalize(view(BASE, [4], [1], offset=8))) is Overlap.EXACT  # row 1


def test_same_lattice_with_different_counts_and_items():
    # x[::2] of floats against the bytes 2..3 of every other float: same step, different runs.
    floats = normalize(view(BASE, [8], [2]))
    halves = normalize({"addr": BASE + 2, "shape": [8], "stride": [4], "itemsize": 2})
    assert overlaps(floats, halves) is Overlap.EXACT
    shifted = normalize({"addr": BASE + 4, "shape": [8], "stride": [4], "itemsize": 2})
    assert overlaps(floats, shifted) is Overlap.NONE


def test_huge_lattices_of_different_steps_are_approximate():
    a = normalize({"addr": BASE, "shape": [MAX_RUNS + 1], "stride": [2], "itemsize": 1})
    b = normalize({"addr": BASE + 1, "shape": [MAX_RUNS + 1], "stride": [3], "itemsize": 1})
    assert overlaps(a, b) is Overlap.APPROXIMATE
    # One side small enough to walk run by run: exact again.
    c = normalize({"addr": BASE + 1, "shape": [MAX_RUNS], "stride": [4], "itemsize": 1})
    assert overlaps(a, c) is Overlap.NONE


def test_huge_lattices_in_different_residues_share_no_byte():
    """Steps 4 and 6 meet modulo 2: bytes at even and at odd addresses never meet, however many
    runs each has; at the same residue the overlap stays assumed."""
    a = normalize({"addr": BASE, "shape": [MAX_RUNS + 1], "stride": [4], "itemsize": 1})
    odd = normalize({"addr": BASE + 1, "shape": [MAX_RUNS + 1], "stride": [6], "itemsize": 1})
    even = normalize({"addr": BASE + 2, "shape": [MAX_RUNS + 1], "stride": [6], "itemsize": 1})
    assert overlaps(a, odd) is Overlap.NONE
    assert overlaps(a, even) is Overlap.APPROXIMATE
    # A dense byte at an odd address, and an odd-residue view of two dims (steps 8 and 12).
    assert overlaps(a, interval(BASE + (1 << 20) + 1, 1)) is Overlap.NONE
    two_dims = normalize({"addr": BASE + 3, "shape": [MAX_RUNS + 1, 2], "stride": [8, 12], "itemsize": 1})
    assert overlaps(two_dims, even) is Overlap.NONE


def test_overlap_within_an_interval():
    a, b = normalize(span(BASE, 64)), normalize(view(BASE, [8], [2]))  # b: floats 0, 2, 4, ...
    assert overlaps(a, b, within=(BASE + 4, BASE + 8)) is Overlap.NONE  # float 1 is not in b
    assert overlaps(a, b, within=(BASE + 4, BASE + 9)) is Overlap.EXACT
    assert overlaps(a, interval(BASE + 64, 8), within=(0, 1 << 40)) is Overlap.NONE


def test_covers_is_conservative():
    whole, half = normalize(span(BASE, 64)), normalize(view(BASE, [4, 2], [4, 1]))
    assert covers(whole, half) and not covers(half, whole)
    assert covers(half, normalize(view(BASE, [4, 2], [4, 1])))
    assert not covers(normalize(span(BASE + 1, 64)), half)


def _random_range(rnd: random.Random) -> dict:
    base = BASE + rnd.randint(0, 48)
    if rnd.random() < 0.2:
        return span(base, rnd.randint(0, 24))
    ndim = rnd.randint(0, 3)
    return {
        "addr": base,
        "shape": [rnd.randint(0, 4) for _ in range(ndim)],
        "stride": [rnd.randint(-6, 6) for _ in range(ndim)],
        "itemsize": rnd.choice([1, 2, 4]),
    }


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_byte_sets(seed):
    rnd = random.Random(seed)
    for _ in range(3000):
        x, y = _random_range(rnd), _random_range(rnd)
        bx, by = byte_set(x), byte_set(y)
        rx, ry = normalize(x), normalize(y)
        assert bool(overlaps(rx, ry)) == bool(bx & by), (x, y)
        assert overlaps(rx, ry) is not Overlap.APPROXIMATE
        if bx:
            assert rx.span() == (min(bx), max(bx) + 1), x
        if covers(rx, ry):
            assert by <= bx, (x, y)
        lo, hi = sorted(rnd.randint(BASE - 8, BASE + 100) for _ in range(2))
        assert bool(overlaps(rx, ry, within=(lo, hi))) == bool(bx & by & set(range(lo, hi))), (x, y, lo, hi)


def test_a_pair_that_meets_early_is_decided_there():
    """Two lattices of different strides, walked run by run: the walk stops at the first run
    that meets, and of one dim visits only the runs inside the window, as the C++ core's does.
    Before, every run of the smaller was listed first: 2,000 strided ops of different strides
    took 138 s in the Python engine (C++ 0.5 s), now 11 s."""
    import time

    a = normalize({"addr": BASE, "shape": [MAX_RUNS], "stride": [3], "itemsize": 2})
    b = normalize({"addr": BASE + 2, "shape": [MAX_RUNS], "stride": [2], "itemsize": 2})
    end = a.hi
    start = time.perf_counter()
    for _ in range(300):
        assert overlaps(a, b) is Overlap.EXACT  # at a's first runs
        assert overlaps(a, b, within=(end - 64, end)) is Overlap.NONE  # past b's end
        assert overlaps(a, normalize(span(end - 2, 2)), within=(end - 64, end)) is Overlap.EXACT
    assert time.perf_counter() - start < 1  # before: 4-5 s, each pair listing 65,536 runs
