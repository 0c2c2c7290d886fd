"""Ops under torch.func's transforms, recorded by both sets of hooks on the fake CUDA.

A TorchDispatchMode (the Python hooks) sees the ops a transform's rules run on the tensors
underneath. The native hooks see each op first with the transform's layer in place, on its
wrappers, and then again, boxed, below the layer: only that call is recorded (op_hooks.h,
``in_a_transform_layer``), with the op's own arguments from the top of the boxed stack. So a
race through an op under vmap or grad is found as it is without them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph, memcopy  # noqa: E402
from test_hooks_differential import KINDS, MAIN, SIDE, analyzed, record_program, recorded_alike  # noqa: E402

ROWS = 4


def _shapes(ranges: list[dict]) -> list[tuple]:
    return [(r.get("shape"), r.get("stride"), r.get("itemsize")) for r in ranges]


def recorded_as_alike(program) -> list[dict]:
    """The native hooks' events of a program both hook sets recorded with the same ops, each
    touching ranges of the same shapes, and the same findings. Addresses are left out: the
    transforms' temporaries are the CPU allocator's, which hands an address back at its own
    pace (tests/test_hooks_differential.py's ``recorded_alike`` compares the fake's blocks)."""
    recorded = [record_program(kind, program)[0] for kind in KINDS]
    assert [r.errors for r in recorded] == [[], []]
    native, python = [r.trace_events() for r in recorded]

    def ops(events: list[dict]) -> list[tuple]:
        return [
            (e["ev"], e.get("op") or e.get("name"), e["stream"], _shapes(e["reads"]), _shapes(e["writes"]))
            for e in events
            if e["ev"] in ("op", "kernel")
        ]

    assert ops(native) == ops(python)
    kinds = [[(f.kind, f.hazard) for f in analyzed(events).findings] for events in (native, python)]
    assert kinds[0] == kinds[1]
    return native


def vmapped_program(fake: FakeCuda, joined: bool = True) -> None:
    """A capture on MAIN forks SIDE, where a vmapped in-place multiply writes ``y`` row by row
    from ``x``; MAIN then overwrites ``x``, after joining SIDE back (``joined``) or before."""

    def multiply(x: torch.Tensor, y: torch.Tensor) -> None:
        torch.vmap(torch.Tensor.mul_)(y.view(ROWS, -1), x.view(ROWS, -1))

    side_stream_program(fake, multiply, lambda x, y: x.fill_(0.0), joined=joined)


def test_both_hook_sets_record_a_vmapped_op_alike_with_its_bytes():
    events = recorded_alike(vmapped_program)
    (mul,) = [e for e in events if e["ev"] == "op" and e["op"].startswith("aten::mul")]
    allocs = [e for e in events if e["ev"] == "alloc"]
    x, y = allocs[0]["addr"], allocs[1]["addr"]
    assert [r["addr"] for r in mul["reads"]] == [x]
    assert [w["addr"] for w in mul["writes"]] == [y]
    assert analyzed(events).findings == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_vmapped_read_the_main_stream_overwrites_before_the_join_races(kind):
    recorder, _ = record_program(kind, lambda fake: vmapped_program(fake, joined=False))
    assert recorder.errors == []
    findings = analyzed(recorder.trace_events()).findings
    assert [(f.kind, f.hazard) for f in findings] == [("data-race", "WAR")]


def side_stream_program(fake: FakeCuda, side_work, main_work, joined: bool = False) -> None:
    """A capture on MAIN forks SIDE for ``side_work(x, w)``; MAIN does ``main_work(x, w)``
    before joining SIDE back, or after (``joined``). What each returns is kept until the
    capture ends, as a captured graph's outputs are: a fresh result is the CPU allocator's
    here, which the fake does not see allocate or free, so a result freed on SIDE could hand
    its address to MAIN's, two tensors the recorder would take for one (a WAW race that
    came and went with the allocator's reuse)."""
    x, w = fake.alloc(), fake.alloc()
    graph = FakeGraph(fake)
    fork, done = fake.event(), fake.event()
    with fake.on(MAIN):
        graph.capture_begin()
        x.fill_(2.0)
        fake.record(fork)
        with fake.on(SIDE):
            fake.wait(fork)
            kept = [side_work(x, w)]
            fake.record(done)
        if joined:
            fake.wait(done)
        kept.append(main_work(x, w))
        if not joined:
            fake.wait(done)
        graph.capture_end()
    del kept


# Composites a batching rule runs with autograd off, so never taken apart: recorded from their
# schema they read what they only take a shape from (view_as's other), or hide the copy
# they make (contiguous), which then reads back as a kernel with inferred accesses.
SIDE_WORK = {
    "view_as": lambda x, w: torch.vmap(torch.Tensor.view_as)(x.view(ROWS, -1), w.view(ROWS, -1)),
    "expand_as": lambda x, w: torch.vmap(lambda a, b: a[:1].expand_as(b))(x.view(ROWS, -1), w.view(ROWS, -1)),
    "contiguous": lambda x, w: torch.vmap(lambda a: a.t().contiguous())(x.view(ROWS, ROWS, -1)),
}


@pytest.mark.parametrize("work", SIDE_WORK)
def test_a_vmapped_composite_is_recorded_as_the_ops_its_rule_runs(work):
    """MAIN writes ``w`` and reads ``x`` meanwhile: the side stream only reads ``x``."""

    def program(fake: FakeCuda) -> None:
        side_stream_program(fake, SIDE_WORK[work], lambda x, w: (w.fill_(0.0), x.sum()))

    events = recorded_as_alike(program)
    assert not [e for e in events if e["ev"] == "kernel"], "every node is an op's"
    assert analyzed(events).findings == []


def stale_view_program(fake: FakeCuda) -> None:
    """A graph's static output viewed after one replay, and a vmapped view of that taken and
    read after the next: the value read is the second replay's (format 1.5's stale check)."""
    with fake.on(MAIN):
        x = fake.alloc(64)
        x.fill_(1.0)
        graph = FakeGraph(fake)
        graph.capture_begin()
        out = fake.alloc(64)
        torch.mul(x, 2.0, out=out)
        graph.capture_end()
        graph.work = lambda: memcopy(out, x)
        total = fake.alloc(64)
        graph.replay()
        kept = out.view(ROWS, -1)
        graph.replay()
        part = torch.vmap(lambda t: t[:2])(kept)
        torch.mul(part, 1.0, out=total.view(ROWS, -1)[:, :2])


@pytest.mark.parametrize("kind", KINDS)
def test_a_vmapped_view_of_a_kept_static_output_is_stale_as_its_base(kind):
    recorder, _ = record_program(kind, stale_view_program, own_storages=True)
    assert recorder.errors == []
    events = recorder.trace_events()
    views = [e for e in events if e["ev"] == "view"]
    assert len(views) == 2 and views[1]["base"] == views[0]["tensor"], "the vmapped view names the kept one"
    assert [f.kind for f in analyzed(events, minor=5).findings] == ["stale-static-output"]


def grad_program(fake: FakeCuda) -> None:
    """An eager torch.func.grad on MAIN, of a function that squares and sums ``x``."""
    x = fake.alloc()
    with fake.on(MAIN):
        x.fill_(1.0)
        torch.func.grad(lambda t: (t * t).sum())(x[:ROWS])


def test_both_hook_sets_record_the_ops_under_grad_alike():
    events = recorded_as_alike(grad_program)
    ops = [e["op"] for e in events if e["ev"] == "op"]
    assert ops.count("aten::mul.Tensor") == 3 and "aten::sum" in ops


def random_rows_program(fake: FakeCuda) -> None:
    """Under vmap with different randomness per row, SIDE draws rows from no batched input;
    MAIN reads them before joining SIDE back: a race."""

    def draw(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda t: torch.randn(16), randomness="different")(x.view(ROWS, -1))

    holder: list[torch.Tensor] = []
    side_stream_program(fake, lambda x, w: holder.append(draw(x, w)), lambda x, w: holder[0].sum())


@pytest.mark.parametrize("kind", KINDS)
def test_random_rows_drawn_under_vmap_race_with_an_unjoined_read(kind):
    recorder, _ = record_program(kind, random_rows_program)
    assert recorder.errors == []
    assert [(f.kind, f.hazard) for f in analyzed(recorder.trace_events()).findings] == [("data-race", "RAW")]


def fallback_program(fake: FakeCuda) -> None:
    """An op with no batching rule (vmap runs it row by row, boxed) writes rows 0-1 of ``w`` on
    SIDE from ``x``, while MAIN reads ``x`` and rows 2-3 of ``w``: no race."""

    def side(x: torch.Tensor, w: torch.Tensor) -> None:
        torch.vmap(lambda a, b: a.addcdiv_(b, b))(w.view(ROWS, -1)[:2], x.view(ROWS, -1)[:2])

    side_stream_program(fake, side, lambda x, w: (x.sum(), w.view(ROWS, -1)[2:].sum()))


def test_an_op_vmap_runs_row_by_row_is_recorded_alike_for_each_row():
    events = recorded_as_alike(fallback_program)
    rows = [e for e in events if e["ev"] == "op" and e["op"].startswith("aten::addcdiv_")]
    assert len(rows) == 2 and not [e for e in events if e["ev"] == "kernel"]
    assert analyzed(events).findings == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_eager_row_by_row_write_under_vmap_races_with_an_unjoined_read(kind):
    """Eager, with no dispatch mode of the fake's below the hooks (as on a GPU): SIDE's
    vmapped lerp_ writes ``w`` while MAIN reads it without waiting."""

    def program(fake: FakeCuda) -> None:
        x, w = fake.alloc(), fake.alloc()
        ready = fake.event()
        with fake.on(MAIN):
            x.fill_(2.0)
            w.fill_(1.0)
            fake.record(ready)
        with fake.on(SIDE):
            fake.wait(ready)
            torch.vmap(lambda a, b: a.lerp_(b, 0.5))(w.view(ROWS, -1), x.view(ROWS, -1))
        with fake.on(MAIN):
            w.sum()

    recorder, _ = record_program(kind, program, kernels=False)
    assert recorder.errors == []
    assert [(f.kind, f.hazard) for f in analyzed(recorder.trace_events()).findings] == [("data-race", "RAW")]


@torch.jit.script
def _stacked_sums(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.cat([a, b], 0)
    d = torch.stack([a, b])
    return c.sum(0) + d.sum(0) + torch.add(a, b, alpha=2)


@pytest.mark.parametrize("kind", KINDS)
def test_a_torchscript_function_s_ops_are_recorded_with_their_own_arguments_and_results(kind):
    """Eager, with no dispatch mode of the fake's below the hooks (as on a GPU): TorchScript's
    interpreter calls each op boxed, over a stack that may hold the function's other values
    below the op's own arguments and results; each op is recorded with its own."""

    def program(fake: FakeCuda) -> None:
        x, w = fake.alloc(), fake.alloc()
        with fake.on(MAIN):
            _stacked_sums(x.view(ROWS, -1), w.view(ROWS, -1))

    recorder, _ = record_program(kind, program, kernels=False)
    assert recorder.errors == []
    sums = [e for e in recorder.trace_events() if e["ev"] == "op" and e["op"] == "aten::sum.dim_IntList"]
    assert [[r["shape"] for r in e["reads"]] for e in sums] == [[[2 * ROWS, 16]], [[2, ROWS, 16]]]
    assert [[w["shape"] for w in e["writes"]] for e in sums] == [[[16]], [[ROWS, 16]]]
