"""PyTorch 2.13's ``check_input_liveness`` cases (../shared/peer-suites/liveness_cases.md) as the
traces the recorder writes for them (tests/gpu/liveness_cases.py runs the programs on the GPU):
``graph-input-freed`` exactly where torch raises at the next replay, made at the free, naming
the block's next owner where a later allocation took it; nothing where torch accepts. Both
engines (the ``engine`` fixture)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import GRAPH_INPUT_FREED, UNSAFE_FREE
from streamrace.analysis.findings import Finding
from streamrace.trace.builder import TraceBuilder

pytestmark = pytest.mark.usefixtures("engine")
N = 400  # torch.randn(100): 400 bytes asked for, in a 512-byte block
F = "case.py"


class Program:
    """The shape every case shares: the default stream, torch's warm-up on a side stream,
    ``torch.cuda.graph``'s synchronize and its own capture stream, replays on the default
    stream."""

    def __init__(self) -> None:
        self.tb = TraceBuilder()
        self.main = self.tb.stream()
        self.capture_stream = self.tb.stream()

    def tensor(self, line: int, nbytes: int = N) -> int:
        x = self.tb.alloc(nbytes, self.main, at=f"{F}:{line}")
        self.tb.op("aten::randn", self.main, writes=[self.tb.span(x, nbytes)], at=f"{F}:{line}")
        return x

    def capture(self, reads: list[tuple[int, int]], line: int, warmup: bool = True) -> tuple[int, int]:
        """``g, y = _capture_graph(lambda: op(*reads))``: (graph, the output in its pool)."""
        tb = self.tb
        spans = [tb.span(addr, nbytes) for addr, nbytes in reads]
        if warmup:
            side = tb.stream()
            tb.wait_stream(side, self.main)
            for _ in range(3):
                out = tb.alloc(N, side, at=f"{F}:{line}")
                tb.op("aten::mul", side, spans, [tb.span(out, N)], at=f"{F}:{line}")
                tb.free(out, at=f"{F}:{line}")
        tb.device_sync()  # torch.cuda.graph's, before it captures
        with tb.capture(self.capture_stream) as graph:
            y = tb.alloc(N, self.capture_stream, at=f"{F}:{line}", pool=(graph, 0))
            tb.op("aten::mul", self.capture_stream, spans, [tb.span(y, N)], at=f"{F}:{line}")
        return graph, y

    def owner(self, freed: int, line: int, nbytes: int = N) -> int:
        """The next allocation on the default stream takes the freed block, and fills it."""
        owner = self.tb.alloc(nbytes, self.main, addr=freed, at=f"{F}:{line}")
        self.tb.op("aten::full", self.main, writes=[self.tb.span(owner, nbytes)], at=f"{F}:{line}")
        return owner

    def replay(self, graph: int, line: int) -> None:
        self.tb.replay(graph, self.main, at=f"{F}:{line}")

    def findings(self) -> list[Finding]:
        return analyze(self.tb.trace()).findings


def frees(findings: list[Finding]) -> list[str | None]:
    assert all(f.kind == GRAPH_INPUT_FREED for f in findings), [f.kind for f in findings]
    return [f.accesses[1].location for f in findings]


# -- torch raises: a finding at the free, with the next owner --------------------------------
def dead_input_tensor(p: Program) -> None:  # #2, and dies-between-replays
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2)
    p.replay(graph, 3)
    p.tb.free(x, at=f"{F}:4")
    p.owner(x, 5)
    p.replay(graph, 6)


def test_a_freed_input_is_reported_at_the_free_with_its_next_owner() -> None:
    p = Program()
    dead_input_tensor(p)
    [freed] = p.findings()
    use, free = freed.accesses
    assert (use.op, use.location, free.access, free.location) == ("aten::mul", f"{F}:2", "free", f"{F}:4")
    assert freed.allocation is not None and freed.allocation.alloc_location == f"{F}:1"
    reuse = freed.allocation.reused_by
    assert reuse is not None, "the allocation that took the block is named"
    assert (reuse["op"], reuse["location"], reuse["alloc_location"]) == ("aten::full", f"{F}:5", f"{F}:5")
    assert f"it went to the tensor allocated at {F}:5, its next owner" in freed.message
    assert f"replayed after the free at {F}:6" in freed.message
    assert freed.aliasing, "the replay reads the owner's bytes"


def test_the_next_owner_is_named_before_any_replay_corrupts() -> None:
    """Latent: the block is taken, the graph is never replayed again but lives on."""
    p = Program()
    x = p.tensor(1)
    p.capture([(x, N)], 2)
    p.tb.free(x, at=f"{F}:4")
    p.owner(x, 5)
    [freed] = p.findings()
    assert "latent" in freed.message and not freed.aliasing
    assert freed.allocation is not None and freed.allocation.reused_by is not None
    assert freed.allocation.reused_by["alloc_location"] == f"{F}:5"


def test_an_owner_never_used_is_named_by_its_allocation_alone() -> None:
    p = Program()
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2)
    p.tb.free(x, at=f"{F}:4")
    p.tb.alloc(N, p.main, addr=x, at=f"{F}:5")  # torch.empty: nothing runs through it
    p.replay(graph, 6)
    [freed] = p.findings()
    assert f"it went to the tensor allocated at {F}:5" in freed.message
    assert freed.allocation is not None and freed.allocation.reused_by is None


def test_an_allocation_after_the_graph_is_gone_is_no_next_owner() -> None:
    p = Program()
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2)
    p.tb.free(x, at=f"{F}:4")
    p.replay(graph, 5)
    p.tb.reset_graph(graph, at=f"{F}:6")
    p.owner(x, 7)
    [freed] = p.findings()
    assert "next owner" not in freed.message and freed.allocation is not None
    assert freed.allocation.reused_by is None


def test_an_allocation_elsewhere_is_no_next_owner() -> None:
    p = Program()
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2)
    p.tb.free(x, at=f"{F}:4")
    p.owner(p.tb.alloc(N, p.main), 5)  # another block
    p.replay(graph, 6)
    [freed] = p.findings()
    assert "next owner" not in freed.message


def test_two_inputs_freed_at_once_each_name_their_own_owner() -> None:  # #17
    p = Program()
    a, b = p.tensor(1), p.tensor(2)
    graph, _ = p.capture([(a, N), (b, N)], 3, warmup=False)
    p.tb.free(a, at=[f"{F}:5 in delete_tensors", f"{F}:7"])
    p.tb.free(b, at=[f"{F}:5 in delete_tensors", f"{F}:7"])
    p.owner(a, 8)
    p.owner(b, 9)
    p.replay(graph, 10)
    findings = p.findings()
    assert frees(findings) == [f"{F}:5", f"{F}:5"], "the deletion line, in the helper"
    assert [f.allocation.alloc_location for f in findings if f.allocation] == [f"{F}:1", f"{F}:2"]
    assert [f.allocation.reused_by["alloc_location"] for f in findings if f.allocation and f.allocation.reused_by] == [
        f"{F}:8",
        f"{F}:9",
    ]
    assert all(f"replayed after the free at {F}:10" in f.message for f in findings)


def view_tensor(p: Program) -> None:  # #6: the view dies first, its base keeps the storage
    base = p.tensor(1)
    graph, _ = p.capture([(base + 40, 160)], 3)  # base[10:50]
    p.replay(graph, 4)  # after `del view`: no free, the base holds the block
    p.tb.free(base, at=f"{F}:5")
    p.owner(base, 6)
    p.replay(graph, 7)


def alive_storage_dead_tensor(p: Program) -> None:  # #11: b aliases a's storage
    a = p.tensor(1)
    b = p.tb.alloc(N, p.main, at=f"{F}:2")
    p.tb.free(b, at=f"{F}:3")  # b.set_(a.untyped_storage()): b's own block goes
    graph, _ = p.capture([(a, N)], 4)
    p.replay(graph, 5)  # after `del a`: b keeps the storage
    p.tb.free(a, at=f"{F}:6")  # `del b`
    p.owner(a, 7)
    p.replay(graph, 8)


def model_weights(p: Program) -> None:  # #4: a Parameter of a captured MLP, deleted
    weights = [p.tensor(1, 64 * 64 * 4) for _ in range(3)]
    x = p.tensor(2, 8 * 64 * 4)
    graph, _ = p.capture([(w, 64 * 64 * 4) for w in weights] + [(x, 8 * 64 * 4)], 3)
    p.replay(graph, 4)
    p.tb.free(weights[1], at=f"{F}:5")
    p.owner(weights[1], 6, 64 * 64 * 4)
    p.replay(graph, 7)


def set_storage(p: Program) -> None:  # #12: x.set_(new storage) frees the old block inside the op
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2)
    p.tensor(3)  # the new storage, made first
    p.tb.free(x, at=f"{F}:3")
    p.owner(x, 4)
    p.replay(graph, 5)


def recapture_after_reset(p: Program) -> None:  # #15
    x = p.tensor(1)
    graph, _ = p.capture([(x, N)], 2, warmup=False)
    p.tb.free(x, at=f"{F}:3")
    p.owner(x, 4)
    p.replay(graph, 5)
    p.tb.reset_graph(graph, at=f"{F}:6")
    x2 = p.tensor(7)
    again, _ = p.capture([(x2, N)], 8, warmup=False)
    p.replay(again, 9)


RAISING: dict[str, tuple[Callable[[Program], None], str, str]] = {
    "dead_input_tensor": (dead_input_tensor, f"{F}:4", f"{F}:5"),
    "view_tensor": (view_tensor, f"{F}:5", f"{F}:6"),
    "alive_storage_dead_tensor": (alive_storage_dead_tensor, f"{F}:6", f"{F}:7"),
    "model_weights": (model_weights, f"{F}:5", f"{F}:6"),
    "set_storage": (set_storage, f"{F}:3", f"{F}:4"),
    "recapture_after_reset": (recapture_after_reset, f"{F}:3", f"{F}:4"),
}


@pytest.mark.parametrize("name", sorted(RAISING))
def test_where_torch_raises_one_finding_at_the_free_naming_the_next_owner(name: str) -> None:
    program, free_line, owner_line = RAISING[name]
    p = Program()
    program(p)
    findings = p.findings()
    assert frees(findings) == [free_line]
    reuse = findings[0].allocation.reused_by if findings[0].allocation else None
    assert reuse is not None and reuse["alloc_location"] == owner_line
    assert "replayed after the free" in findings[0].message


# -- torch accepts: nothing ------------------------------------------------------------------
def intermediates_and_output_freed(p: Program) -> None:  # #3, and the output dead
    x = p.tensor(1)
    tb, cs = p.tb, p.capture_stream
    with tb.capture(cs) as graph:
        tmp = tb.alloc(N, cs, at=f"{F}:3", pool=(graph, 0))
        tb.op("aten::mul", cs, [tb.span(x, N)], [tb.span(tmp, N)], at=f"{F}:3")
        y = tb.alloc(N, cs, at=f"{F}:4", pool=(graph, 0))
        tb.op("aten::add", cs, [tb.span(tmp, N)], [tb.span(y, N)], at=f"{F}:4")
    tb.free(tmp, at=f"{F}:5")
    p.replay(graph, 6)
    tb.op("aten::equal", p.main, [tb.span(y, N), tb.span(x, N)], at=f"{F}:7")
    tb.free(y, at=f"{F}:8")
    p.replay(graph, 9)


def shared_pool(p: Program) -> None:  # #10: y and w live in the pool g1 and g2 share
    x = p.tensor(1)
    tb, cs = p.tb, p.capture_stream
    with tb.capture(cs) as first:
        pool = (first, 0)
        y = tb.alloc(N, cs, at=f"{F}:3", pool=pool)
        tb.op("aten::add", cs, [tb.span(x, N)], [tb.span(y, N)], at=f"{F}:3")
        w = tb.alloc(N, cs, at=f"{F}:4", pool=pool)
        tb.op("aten::randn", cs, writes=[tb.span(w, N)], at=f"{F}:4")
    external = p.tensor(5)
    with tb.capture(cs, pool=pool) as second:
        z = tb.alloc(N, cs, at=f"{F}:7", pool=pool)
        tb.op("aten::mul", cs, [tb.span(y, N), tb.span(external, N)], [tb.span(z, N)], at=f"{F}:7")
        q = tb.alloc(N, cs, at=f"{F}:8", pool=pool)
        tb.op("aten::add", cs, [tb.span(w, N)], [tb.span(q, N)], at=f"{F}:8")
    tb.free(y, at=f"{F}:9")
    p.replay(first, 10)
    p.replay(second, 11)
    tb.free(w, at=f"{F}:12")
    p.replay(first, 13)
    p.replay(second, 14)


def view_dies_first(p: Program) -> None:  # #6's first half: the base holds the storage
    base = p.tensor(1)
    graph, _ = p.capture([(base + 40, 160)], 3)
    p.replay(graph, 4)


def non_capturing_stream(p: Program, joined: bool) -> None:  # #9
    x, y = p.tensor(1), p.tensor(2)
    tb, cs = p.tb, p.capture_stream
    other = tb.stream()
    tb.device_sync()
    with tb.capture(cs) as graph:
        result = tb.alloc(N, cs, at=f"{F}:5", pool=(graph, 0))
        tb.op("aten::mul", cs, [tb.span(x, N)], [tb.span(result, N)], at=f"{F}:5")
        other_result = tb.alloc(N, other, at=f"{F}:7")  # eager: `other` never joined the capture
        tb.op("aten::mul", other, [tb.span(y, N)], [tb.span(other_result, N)], at=f"{F}:7")
    if joined:
        tb.wait_stream(p.main, other, at=f"{F}:8")
    tb.free(y, at=f"{F}:9")
    p.replay(graph, 10)
    check = tb.alloc(N, p.main, at=f"{F}:11")  # assertEqual(result, x * 2)
    tb.op("aten::mul", p.main, [tb.span(x, N)], [tb.span(check, N)], at=f"{F}:11")


ACCEPTING: dict[str, Callable[[Program], None]] = {
    "intermediates_and_output_freed": intermediates_and_output_freed,
    "shared_pool": shared_pool,
    "view_dies_first": view_dies_first,
    "non_capturing_stream_joined": lambda p: non_capturing_stream(p, joined=True),
}


@pytest.mark.parametrize("name", sorted(ACCEPTING))
def test_where_torch_accepts_nothing(name: str) -> None:
    p = Program()
    ACCEPTING[name](p)
    assert p.findings() == []


def test_a_non_capturing_stream_s_input_freed_unjoined_is_an_eager_unsafe_free_not_a_graph_input() -> None:
    """#9 exactly as torch writes it: y is no input of the graph (torch agrees), but it is
    freed on the default stream while `other`, never waited for, may still read it."""
    p = Program()
    non_capturing_stream(p, joined=False)
    [finding] = p.findings()
    assert finding.kind == UNSAFE_FREE and finding.hazard == "WAR"
    assert finding.allocation is not None and finding.allocation.free_location == f"{F}:9"


def _built(program: Callable[[Program], None]) -> Callable[[], TraceBuilder]:
    def build() -> TraceBuilder:
        p = Program()
        program(p)
        return p.tb

    return build


# Every case's trace, for the engines' differential (tests/test_core_differential.py).
PROGRAMS: dict[str, Callable[[], TraceBuilder]] = {
    **{name: _built(program) for name, (program, _, _) in RAISING.items()},
    **{name: _built(program) for name, program in ACCEPTING.items()},
    "non_capturing_stream_as_written": _built(lambda p: non_capturing_stream(p, joined=False)),
}
