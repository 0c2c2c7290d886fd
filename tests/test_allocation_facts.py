"""Every allocation's own size, stream and pool, or none: the recorder's allocation facts.

On the fake allocator (fake_cuda.py), which knows how each allocation was really made, with
both sets of hooks, each way facts used to go wrong:

* (a) allocations before the first capture (a warm-up) had no history entry and were dropped;
* (b) a block freed early took the size and stream of a later allocation at its address,
  live when recording ended;
* (c) history entries were matched by order within a lookahead, so hooks that ran in another
  order than the allocator (two threads) missed theirs;

and the history's bounds: restarted at every resolve, and an overflow leaves allocations
unknown, never wrong. tests/gpu/test_allocation_facts_gpu.py holds the same on an H200.
"""

from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph  # noqa: E402
from test_hooks_differential import KINDS, MAIN, SIDE, allocation_facts, record_program, true_facts  # noqa: E402

from streamrace.record import native  # noqa: E402
from streamrace.record.facts import process_facts  # noqa: E402

hook_kinds = pytest.mark.parametrize("kind", KINDS)


def _exact(recorder, fake: FakeCuda) -> None:
    events = recorder.trace_events()
    assert recorder.errors == []
    assert recorder.dropped_allocations == 0
    assert allocation_facts(events) == true_facts(fake)


def warmup_then_capture(fake: FakeCuda) -> None:
    """(a): a side-stream warm-up, then a capture."""
    with fake.on(SIDE):
        for _ in range(3):
            fake.free(fake.alloc(64))
    with fake.on(MAIN):
        graph = FakeGraph(fake)
        graph.capture_begin()
        fake.alloc(100)
        graph.capture_end()


@hook_kinds
def test_a_warmup_before_any_capture_has_its_facts(kind):
    recorder, fake = record_program(kind, warmup_then_capture)
    _exact(recorder, fake)
    assert len(fake.truth) == 4


def freed_then_reused(fake: FakeCuda) -> None:
    """(b): a block freed early; its address handed out again on another stream, live at the end."""
    with fake.on(SIDE):
        early = fake.alloc(64)
        fake.free(early)
    fake.empty_cache()
    with fake.on(MAIN):
        fake.alloc(8)


@hook_kinds
@pytest.mark.parametrize("initialized", [False, True], ids=["fresh", "initialized"])
def test_b_a_freed_block_never_takes_a_later_allocations_facts(kind, initialized):
    recorder, fake = record_program(kind, freed_then_reused, initialized=initialized)
    [facts] = true_facts(fake).values()
    assert facts == [(64, SIDE, None), (8, MAIN, None)], "the premise: one address, two allocations"
    _exact(recorder, fake)


def racing_hooks(fake: FakeCuda) -> None:
    """(c): the allocator makes three allocations in order, their hooks run in reverse."""
    fake.alloc(8)  # CUDA initialized, the facts on
    for _ in range(2):
        for tensor in fake.alloc_racing([16, 32, 48]):
            fake.free(tensor)


@hook_kinds
def test_c_hooks_in_another_order_than_the_allocator_still_match(kind):
    recorder, fake = record_program(kind, racing_hooks, tracker=False)
    _exact(recorder, fake)
    assert recorder.allocation_facts["source"] == "allocator history"


def many_allocations(fake: FakeCuda, recorder_box: list) -> None:
    for step in range(200):
        with fake.on(MAIN if step % 2 else SIDE):
            fake.free(fake.alloc(8 + step % 50))
        if step % 20 == 19:
            recorder_box[0].resolve_allocations()  # as the incremental trace writer does
            assert len(fake._history) == 0, "read and restarted"


@hook_kinds
def test_the_history_is_restarted_at_every_resolve_and_stays_exact(kind):
    box: list = []

    def program(fake):
        from streamrace.record.installation import active

        box.append(active())
        many_allocations(fake, box)

    recorder, fake = record_program(kind, program, tracker=False)
    _exact(recorder, fake)
    assert recorder.allocations._unmatched == {}, "every history entry found its allocation"


@hook_kinds
def test_a_history_that_overflowed_leaves_allocations_unknown_never_wrong(kind):
    def program(fake):
        fake.alloc(8)
        for step in range(10):
            fake.free(fake.alloc(16 + step))  # all at one address, the history holds 4
        fake.alloc(100)  # there too, live at the end

    recorder, fake = record_program(kind, program, tracker=False, history_entries=4)
    events = recorder.trace_events()
    assert recorder.dropped_allocations > 0
    truth = true_facts(fake)
    for addr, facts in allocation_facts(events).items():
        seqs = _allocs_at(recorder, addr)
        known = [truth[addr][i] for i, seq in enumerate(seqs) if seq not in recorder.allocations.unknown]
        assert facts == known, "what is reported is the allocation's own"


def _allocs_at(recorder, addr: int) -> list[int]:
    return [e["seq"] for e in recorder.events if e["ev"] == "alloc" and e["addr"] == addr]


@hook_kinds
def test_a_history_the_program_records_itself_is_left_alone(kind):
    """Not ours to restart: only the live blocks give facts, for what is still live."""

    def program(fake):
        fake.free(fake.alloc(40))  # freed: unknown
        fake.alloc(24)  # at the same address, live at the end: its own facts only

    recorder, fake = record_program(kind, program, tracker=False, initialized=True, program_history=True)
    events = recorder.trace_events()
    assert recorder.allocation_facts["source"] == "live blocks"
    assert fake._history_on and fake._history, "the program's history kept recording, untouched"
    assert len(true_facts(fake)) == 1, "the premise: one address"
    assert [(e["size"], e["stream"]) for e in events if e["ev"] == "alloc"] == [(24, 0)]
    assert recorder.dropped_allocations == 1


@hook_kinds
def test_resolve_allocations_settles_everything_so_far(kind):
    seen = {}

    def program(fake):
        from streamrace.record.installation import active

        recorder = active()
        a = fake.alloc(24)
        fake.free(fake.alloc(40))
        recorder.resolve_allocations()
        allocs = [e for e in recorder.events if e["ev"] == "alloc"]
        seen["mid"] = [(e["size"], e["stream"]) for e in allocs]
        fake.free(a)

    record_program(kind, program)
    assert seen["mid"] == [(24, 0), (40, 0)], "exact at once, the recording still running"


@hook_kinds
def test_eager_allocations_in_a_private_pool_carry_it(kind):
    def program(fake):
        fake.alloc(8)
        with fake.use_pool((5, 0)):
            fake.free(fake.alloc(32))

    recorder, fake = record_program(kind, program)
    _exact(recorder, fake)
    pools = [e.get("pool") for e in recorder.trace_events() if e["ev"] == "alloc"]
    assert pools == [None, [5, 0]]


def test_the_header_says_where_allocation_facts_came_from():
    recorder, _ = record_program("python", warmup_then_capture)
    facts = process_facts(recorder)["allocator"]["facts"]
    why = "the Python hooks have no allocator trace tracker"
    assert facts == {"source": "allocator history", "tracker_unavailable": why}
    recorder, _ = record_program("native", warmup_then_capture)
    assert process_facts(recorder)["allocator"]["facts"] == {"source": "allocator trace tracker"}


def test_the_tracker_is_built_only_for_a_cuda_torch_with_cuda_headers(tmp_path, monkeypatch):
    if torch.version.cuda is None:
        assert native.tracker_build() == "torch is not a CUDA build"
    include = tmp_path / "include"
    include.mkdir()
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(pathlib.Path, "is_file", lambda self: False)  # no header anywhere
    assert native.cuda_include_dir() is None
    monkeypatch.undo()
    (include / "cuda_runtime_api.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert native.cuda_include_dir() == include


def test_the_cpu_build_says_why_it_has_no_tracker():
    from op_engines import native_module

    module = native_module()
    assert module.allocator_tracker_built is (native.tracker_unavailable is None)
