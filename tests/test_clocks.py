"""Happens-before: vector clocks per domain, events, host syncs, captures (docs/analysis.md §1–2)."""

from __future__ import annotations

from dataclasses import dataclass

from streamrace.analysis.clocks import EAGER, HappensBefore, ordered_before

A, B, C = 0x10, 0x20, 0x30


@dataclass
class Op:
    domain: object
    stream: int
    tick: int
    clock: dict[int, int]
    host: dict[int, int]


def op(hb: HappensBefore, stream: int) -> Op:
    domain, clock, tick = hb.op(stream)
    return Op(domain, stream, tick, dict(clock), dict(hb.host_clock(domain)))


def before(a: Op, b: Op) -> bool:
    assert a.domain == b.domain
    return ordered_before(a.stream, a.tick, b.clock, b.host)


def test_program_order_and_no_order_across_streams():
    hb = HappensBefore()
    a1, a2, b1 = op(hb, A), op(hb, A), op(hb, B)
    assert before(a1, a2)
    assert not before(a1, b1) and not before(a2, b1)


def test_record_then_wait_orders_up_to_the_record():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.record(1, A)
    a2 = op(hb, A)  # after the record: not covered
    hb.wait(1, B)
    b1 = op(hb, B)
    assert before(a1, b1) and not before(a2, b1)


def test_happens_before_is_transitive_through_events():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.record(1, A)
    hb.wait(1, B)
    hb.record(2, B)
    hb.wait(2, C)
    assert before(a1, op(hb, C))


def test_rerecord_replaces_the_snapshot_even_from_another_stream():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.record(1, A)
    c1 = op(hb, C)
    hb.record(1, C)  # overrides the record on A
    hb.wait(1, B)
    b1 = op(hb, B)
    assert before(c1, b1) and not before(a1, b1)


def test_deleted_and_never_recorded_events_order_nothing():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.record(1, A)
    hb.forget(1)  # event_delete (or a re-created id)
    hb.wait(1, B)
    hb.wait(2, B)  # never recorded
    assert not before(a1, op(hb, B))


def test_stream_sync_orders_later_work_on_every_stream_but_expires():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.stream_sync(A)
    a2 = op(hb, A)  # issued after the sync: not synchronized
    b1 = op(hb, B)
    new = op(hb, C)  # a stream first used after the sync
    assert before(a1, b1) and before(a1, new)
    assert not before(a2, b1)


def test_device_and_event_sync():
    hb = HappensBefore()
    a1, b1 = op(hb, A), op(hb, B)
    hb.device_sync()
    c1 = op(hb, C)
    assert before(a1, c1) and before(b1, c1)

    hb = HappensBefore()
    a1 = op(hb, A)
    hb.record(1, A)
    a2 = op(hb, A)
    hb.event_sync(1)
    b1 = op(hb, B)
    assert before(a1, b1) and not before(a2, b1)


def test_capture_is_its_own_domain_with_a_fresh_clock():
    hb = HappensBefore()
    eager = op(hb, A)
    hb.capture_begin(7, A)
    captured = op(hb, A)
    assert (eager.domain, captured.domain) == (EAGER, 7)
    assert captured.tick == 1 and captured.clock == {A: 1}
    assert op(hb, B).domain is EAGER  # a stream that never joined stays eager
    hb.capture_end(7)
    after = op(hb, A)
    assert after.domain is EAGER and before(eager, after) and A not in hb.members(7)


def test_side_stream_joins_the_capture_by_waiting_on_it():
    hb = HappensBefore()
    hb.capture_begin(1, A)
    a1 = op(hb, A)
    hb.record(5, A)
    hb.wait(5, B)  # side.wait_stream(capturing)
    assert hb.domain(B) == 1 and hb.members(1) == {A, B}
    b1 = op(hb, B)
    assert b1.domain == 1 and before(a1, b1)
    hb.record(6, B)
    hb.wait(6, A)
    a2 = op(hb, A)
    assert before(b1, a2)
    hb.capture_end(1)
    assert hb.domain(B) is EAGER


def test_cross_domain_waits_order_nothing():
    hb = HappensBefore()
    e1 = op(hb, B)
    hb.record(1, B)  # eager record
    hb.capture_begin(1, A)
    hb.wait(1, A)  # a capturing stream waits on an eager record: no edge
    assert op(hb, A).clock.get(B, 0) == 0 and e1.domain is EAGER
    hb.record(2, A)
    hb.capture_begin(2, C)
    hb.wait(2, C)  # a member of another graph: stays in its own, no edge
    assert hb.domain(C) == 2 and op(hb, C).clock.get(A, 0) == 0


def test_snapshot_of_an_ended_capture_orders_nothing():
    hb = HappensBefore()
    hb.capture_begin(1, A)
    op(hb, A)
    hb.record(1, A)
    hb.capture_end(1)
    hb.wait(1, B)
    assert hb.domain(B) is EAGER and op(hb, B).clock.get(A, 0) == 0


def test_host_syncs_order_no_captured_work():
    hb = HappensBefore()
    hb.capture_begin(1, A)
    op(hb, A)
    hb.stream_sync(A)  # illegal while capturing: ignored
    hb.device_sync()
    hb.capture_end(1)
    assert op(hb, B).clock.get(A, 0) == 0


def test_current_clock_of_a_free_sees_host_syncs():
    hb = HappensBefore()
    b1 = op(hb, B)
    hb.stream_sync(B)
    domain, clock = hb.current(A)
    assert domain is EAGER and ordered_before(B, b1.tick, clock, hb.host_clock(domain))


def test_host_syncs_are_not_copied_into_every_later_clock():
    """The host clock stays apart (ordered_before reads it): a stream used after the host
    synchronized many streams holds its own tick only, and is still ordered after them."""
    hb = HappensBefore()
    synced = [op(hb, stream) for stream in range(100)]
    for stream in range(100):
        hb.stream_sync(stream)
    late = op(hb, 1000)
    assert late.clock == {1000: 1}
    assert all(before(a, late) for a in synced)


def test_device_sync_joins_only_clocks_that_grew_since_the_last_one():
    hb = HappensBefore()
    a1 = op(hb, A)
    hb.device_sync()
    b1 = op(hb, B)  # B's clock grew after the first device_sync, A's did not
    hb.device_sync()
    a2 = op(hb, A)  # after the last device_sync: not synchronized
    c1 = op(hb, C)
    assert before(a1, c1) and before(b1, c1) and not before(a2, c1)
