"""Which streams a capture's checks ask the driver about (unseen_launches.h, PythonHooks).

A check before a launch, or before a free outside an op, compares capturing streams' frontiers
with what the hooks last saw, to place launches no hook saw before the event that follows.
After a change of stream it looks at every stream of the capture (the program may have been
anywhere); after an event hook, only at the streams the events named beside its own: a program
that records or waits moves between those. A free that looked at every stream spares the frees
after it on its stream that look; the next launch still looks at every stream.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph  # noqa: E402
from test_hooks_differential import COPY, KINDS, MAIN, SIDE, record_program  # noqa: E402


def three_streams(fake: FakeCuda, body) -> None:
    """A capture on MAIN that forks SIDE and COPY off, each launching once, runs ``body``
    (given the fake and a tensor), and joins both back."""
    with fake.on(MAIN):
        x = fake.alloc()
        graph = FakeGraph(fake)
        graph.capture_begin()
        fork = fake.event()
        fake.record(fork)
        for stream in (SIDE, COPY):
            with fake.on(stream):
                fake.wait(fork)
                torch.mul(x, 2.0, out=fake.alloc())
        torch.mul(x, 2.0, out=x)  # MAIN launches last: checks from here on are MAIN's
        body(fake, x)
        for stream in (SIDE, COPY):
            done = fake.event()
            with fake.on(stream):
                fake.record(done)
            fake.wait(done)
        graph.capture_end()


@pytest.mark.parametrize("kind", KINDS)
def test_after_an_event_hook_a_launch_asks_about_the_streams_the_events_named(kind):
    asked = {}

    def body(fake: FakeCuda, x: torch.Tensor) -> None:
        joined = fake.event()
        fake.record(joined)  # on MAIN
        with fake.on(SIDE):
            fake.wait(joined)
        fake.frontier_queries.clear()
        torch.mul(x, 3.0, out=x)  # on MAIN again
        asked.update(fake.frontier_queries)

    recorder, _ = record_program(kind, lambda fake: three_streams(fake, body))
    assert recorder.errors == []
    assert asked.get(SIDE) == 1 and COPY not in asked and asked.get(MAIN, 0) >= 2, asked


@pytest.mark.parametrize("kind", KINDS)
def test_frees_after_one_that_asked_about_every_stream_ask_about_their_own(kind):
    asked = []

    def body(fake: FakeCuda, x: torch.Tensor) -> None:
        a, b = fake.alloc(), fake.alloc()
        with fake.on(SIDE):  # a change of stream: the first free asks about every stream
            for block in (a, b):
                fake.frontier_queries.clear()
                fake.free(block)
                asked.append(dict(fake.frontier_queries))
            fake.frontier_queries.clear()
            torch.mul(x, 2.0, out=fake.alloc())  # a launch after the frees still asks about all
            asked.append(dict(fake.frontier_queries))

    recorder, _ = record_program(kind, lambda fake: three_streams(fake, body))
    assert recorder.errors == []
    first, second, launch = asked
    assert first == {MAIN: 1, SIDE: 1, COPY: 1}, first
    assert second == {SIDE: 1}, second
    assert launch.get(MAIN) == 1 and launch.get(COPY) == 1, launch


@pytest.mark.parametrize("kind", KINDS)
def test_a_view_op_asks_the_driver_nothing(kind):
    """A view op (slice, detach, alias) launches nothing: no check runs for it, and the
    launch after it checks as it would have (a library kernel launched unseen before the view
    is still caught up before that launch's event)."""
    asked = []

    def body(fake: FakeCuda, x: torch.Tensor) -> None:
        fake.launch("kernel", "lib_scale", params=[[x.data_ptr()]])  # unseen, on MAIN
        fake.frontier_queries.clear()
        views = (x[1:], x.detach(), torch.ops.aten.alias(x))
        asked.append(dict(fake.frontier_queries))
        torch.mul(views[0], 2.0, out=fake.alloc())

    recorder, _ = record_program(kind, lambda fake: three_streams(fake, body))
    assert recorder.errors == []
    assert asked == [{}], asked
    events = recorder.trace_events()
    order = [e.get("name") or e.get("op") for e in events if e["ev"] in ("kernel", "op")]
    assert order[-3:] == ["aten::mul.out", "lib_scale", "aten::mul.out"], order
