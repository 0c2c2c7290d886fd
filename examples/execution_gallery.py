"""Where a capture meets the rest of the program: HAZARDS.md X1-X6, each with its fixed twin.

Every scenario is a whole small program (eager set-up, captures, replays, eager work between
them), modelled on the serving code where the hazard was seen. ``torch.cuda._sleep`` delays
the right stream so that the buggy variant really corrupts its output while the fixed twin
does not; each scenario also checks its own premise (that the allocator really handed the
block out again where the story says it does), so a corruption count of zero on a buggy
variant can be told apart from a premise that did not hold on this machine.

Three more programs are correct patterns that a detector must not flag: the side-stream
warm-up that PyTorch's CUDA-graph documentation recommends (``E1``) and a capturable-Adam
training step with a side-stream branch (``E2``); the DSV4 decode's warm-up is in
``dsv4_mini_decode.py``.

    python examples/execution_gallery.py               # every scenario, buggy and fixed
    python examples/execution_gallery.py X4 --buggy
    python examples/execution_gallery.py --streamrace  # each one also recorded and analysed
    streamrace run -- python examples/execution_gallery.py X1 --buggy
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

import streamrace

N = 1 << 20  # 4 MiB of float32: large-pool blocks, handed out again only at the same size
SLEEP_CYCLES = 20_000_000  # about 10 ms on an H200: longer than the racing kernel
ROUNDS = 4


@dataclass
class Outcome:
    corrupted: int  # rounds whose result differs from the single-stream truth
    rounds: int
    premise: bool  # the allocator did what the scenario's story needs (block reuse)


def _stream(name: str) -> torch.cuda.Stream:
    stream = torch.cuda.Stream()
    streamrace.name_stream(stream, name)
    return stream


def static_output_consumer(fixed: bool) -> Outcome:
    """X1: a side stream clones the graph's static output while the next replay overwrites it."""
    static_in = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2
    main, consumer = torch.cuda.current_stream(), _stream("consumer")
    clones: list[torch.Tensor] = []
    consumed = torch.cuda.Event()
    for step in range(ROUNDS):
        if fixed and step:
            main.wait_event(consumed)  # the fix: the next replay waits for the last consumer
        static_in.fill_(float(step))
        graph.replay()
        consumer.wait_stream(main)
        with torch.cuda.stream(consumer):
            torch.cuda._sleep(SLEEP_CYCLES)
            clones.append(static_out.clone())
            consumed.record(consumer)
    torch.cuda.synchronize()
    corrupted = sum(not torch.equal(c, torch.full_like(c, 2.0 * step)) for step, c in enumerate(clones))
    return Outcome(corrupted, ROUNDS, premise=True)


def unwaited_input_staging(fixed: bool) -> Outcome:
    """X2: the next input is staged into the static input on a copy stream; the replay does not wait."""
    static_in = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2
    main, copier = torch.cuda.current_stream(), _stream("copy")
    sources = [torch.full((N,), float(step + 1), device="cuda") for step in range(ROUNDS)]
    corrupted = 0
    for source in sources:
        copier.wait_stream(main)  # the previous replay has read the input
        with torch.cuda.stream(copier):
            torch.cuda._sleep(SLEEP_CYCLES)
            static_in.copy_(source)
        if fixed:
            main.wait_stream(copier)  # the fix: the replay waits for the staged input
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not torch.equal(static_out, source * 2)
    return Outcome(corrupted, ROUNDS, premise=True)


def concurrent_shared_pool(fixed: bool) -> Outcome:
    """X3: two graphs sharing one pool are replayed concurrently on two streams."""
    x1, x2 = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")
    capture = _stream("capture")
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(first, stream=capture):
        scratch = x1 * 2
        scratch_ptr = scratch.data_ptr()
        torch.cuda._sleep(SLEEP_CYCLES)
        out1 = scratch + 1
        del scratch  # back to the pool: the next capture into it may take the block
    # The fix: private pools (or replays serialized on one stream).
    with torch.cuda.graph(second, stream=capture, pool=None if fixed else first.pool()):
        other = x2 * 3
        premise = (other.data_ptr() != scratch_ptr) if fixed else (other.data_ptr() == scratch_ptr)
        out2 = other + 1
        del other
    main, left, right = torch.cuda.current_stream(), _stream("left"), _stream("right")
    corrupted = 0
    for step in range(ROUNDS):
        x1.fill_(float(step + 1))
        x2.fill_(float(step + 10))
        left.wait_stream(main)
        right.wait_stream(main)
        with torch.cuda.stream(left):
            first.replay()
        with torch.cuda.stream(right):
            second.replay()
        torch.cuda.synchronize()
        corrupted += not (torch.equal(out1, x1 * 2 + 1) and torch.equal(out2, x2 * 3 + 1))
    return Outcome(corrupted, ROUNDS, premise)


def out_of_order_shared_pool(fixed: bool) -> Outcome:
    """X4: three graphs sharing a pool, replayed out of capture order.

    The first graph's scratch block is freed inside its capture; the second graph's static
    output is handed that block; the third reads the second's output. Replayed in capture
    order each graph's writes land before the next one reads; replaying the second before the
    first lets the first's scratch write overwrite the output the third still needs.
    """
    x = torch.zeros(N, device="cuda")
    graphs = [torch.cuda.CUDAGraph() for _ in range(3)]
    with torch.cuda.graph(graphs[0]):
        scratch = x * 2
        scratch_ptr = scratch.data_ptr()
        out1 = scratch + 1
        del scratch
    pool = graphs[0].pool()
    with torch.cuda.graph(graphs[1], pool=pool):
        out2 = x * 3
    with torch.cuda.graph(graphs[2], pool=pool):
        out3 = out2 + 1
    premise = out2.data_ptr() == scratch_ptr
    order = (0, 1, 2) if fixed else (1, 0, 2)  # the fix: replay in capture order
    corrupted = 0
    for step in range(ROUNDS):
        x.fill_(float(step + 1))
        for index in order:
            graphs[index].replay()
        torch.cuda.synchronize()
        corrupted += not (torch.equal(out1, x * 2 + 1) and torch.equal(out3, x * 3 + 1))
    return Outcome(corrupted, ROUNDS, premise)


def foreign_input_freed(fixed: bool) -> Outcome:
    """X5: a graph reads an input made before capture (not in its pool); the owner frees it."""
    corrupted, premise = 0, True
    for step in range(ROUNDS):
        x = torch.full((N,), float(step + 1), device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = x * 2
        want = torch.full((N,), 2.0 * (step + 1), device="cuda")
        x_ptr = x.data_ptr()
        if not fixed:
            del x  # the bug: the graph still reads these bytes; the fix keeps x as long as the graph
        other = torch.full((N,), -7.0, device="cuda")  # the next same-size allocation
        premise &= (other.data_ptr() == x_ptr) != fixed
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not torch.equal(out, want)
        del graph, other
    return Outcome(corrupted, ROUNDS, premise)


def eager_freed_before_use(fixed: bool) -> Outcome:
    """X6: eager side-stream lifetime: freed on the allocating stream while another still reads it."""
    main, side = torch.cuda.current_stream(), _stream("side")
    corrupted, premise = 0, True
    for step in range(ROUNDS):
        x = torch.full((N,), float(step + 1), device="cuda")
        made = x * 2
        made_ptr = made.data_ptr()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            result = made + 1
        if fixed:
            made.record_stream(side)  # the fix: the block waits for the side stream's use
        del made
        later = torch.full((N,), 99.0, device="cuda")  # the next main-stream allocation
        premise &= (later.data_ptr() == made_ptr) != fixed
        main.wait_stream(side)
        torch.cuda.synchronize()
        corrupted += not torch.equal(result, x * 2 + 1)
        del later, result
    return Outcome(corrupted, ROUNDS, premise)


def _train_step_model() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    trunk = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).cuda()
    branch = torch.nn.Linear(256, 256).cuda()
    return trunk, branch


def documented_side_stream_warmup(fixed: bool) -> Outcome:
    """E1 (correct): PyTorch's whole-network capture recipe, warm-up on a side stream."""
    del fixed  # one variant: the pattern is correct as documented
    model, _ = _train_step_model()
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    static_input = torch.randn(64, 256, device="cuda")
    static_target = torch.randn(64, 256, device="cuda")
    warmup = _stream("warmup")
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(static_input), static_target).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(warmup)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_input), static_target)
        static_loss.backward()
        optimizer.step()
    losses = []
    for _ in range(ROUNDS):
        static_input.copy_(torch.randn(64, 256, device="cuda"))
        graph.replay()
        losses.append(static_loss.item())
    return Outcome(sum(not torch.isfinite(torch.tensor(v)) for v in losses), ROUNDS, premise=True)


def capturable_adam_side_branch(fixed: bool) -> Outcome:
    """E2 (correct): a captured training step with a side-stream branch and capturable Adam."""
    del fixed
    trunk, branch = _train_step_model()
    params = [*trunk.parameters(), *branch.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3, capturable=True)
    static_input = torch.randn(64, 256, device="cuda")
    side = _stream("branch")

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        main = torch.cuda.current_stream()
        hidden = trunk(static_input)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            extra = branch(hidden)
        main.wait_stream(side)
        loss = (hidden + extra).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    warmup = _stream("warmup")
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(warmup)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step()
    losses = []
    for _ in range(ROUNDS):
        static_input.copy_(torch.randn(64, 256, device="cuda"))
        graph.replay()
        losses.append(static_loss.item())
    return Outcome(sum(not torch.isfinite(torch.tensor(v)) for v in losses), ROUNDS, premise=True)


@dataclass(frozen=True)
class Scenario:
    title: str
    run: Callable[[bool], Outcome]
    correct_pattern: bool = False  # no buggy variant: a detector must report nothing
    finding: str | None = None  # the kind streamrace reports for the buggy variant


SCENARIOS: dict[str, Scenario] = {
    "X1": Scenario(
        "a side-stream consumer clones the static output; the next replay overwrites it",
        static_output_consumer,
        finding="data-race",
    ),
    "X2": Scenario(
        "the next input is staged on a copy stream; the replay does not wait",
        unwaited_input_staging,
        finding="data-race",
    ),
    "X3": Scenario(
        "two graphs sharing one pool are replayed concurrently on two streams",
        concurrent_shared_pool,
        finding="data-race",
    ),
    "X4": Scenario(
        "three graphs sharing a pool are replayed out of capture order",
        out_of_order_shared_pool,
        finding="stale-read",
    ),
    "X5": Scenario(
        "a graph's input made outside its pool is freed after capture",
        foreign_input_freed,
        finding="graph-input-freed",
    ),
    "X6": Scenario(
        "eager: freed on the allocating stream while a side stream reads it",
        eager_freed_before_use,
        finding="unsafe-free",
    ),
    "E1": Scenario(
        "PyTorch's side-stream warm-up, then a whole-network capture",
        documented_side_stream_warmup,
        True,
    ),
    "E2": Scenario("capturable Adam with a side-stream branch", capturable_adam_side_branch, True),
}


def record(key: str, fixed: bool, trace: str | None = None) -> tuple[streamrace.Session, Outcome]:
    """Run one scenario whole (set-up, captures, replays, eager work) under streamrace.watch()."""
    with streamrace.watch(trace) as session:
        outcome = SCENARIOS[key].run(fixed)
        torch.cuda.synchronize()
    return session, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="ID", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--fixed", action="store_true", help="only the fixed twins (and the correct patterns)")
    parser.add_argument("--buggy", action="store_true", help="only the buggy variants")
    parser.add_argument("--streamrace", action="store_true", help="record and analyse each variant too")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    failed = False
    for key in args.scenarios or SCENARIOS:
        scenario = SCENARIOS[key]
        variants = [True] if scenario.correct_pattern or args.fixed else [False] if args.buggy else [False, True]
        for fixed in variants:
            buggy = not fixed and not scenario.correct_pattern
            if args.streamrace:
                session, outcome = record(key, fixed)
                kinds = sorted({f.kind for f in session.findings})
                # The detector's proof: the buggy variant's kind, and nothing on the others.
                failed |= kinds != ([scenario.finding] if buggy else [])
            else:
                outcome = scenario.run(fixed)
            name = "correct" if scenario.correct_pattern else "fixed" if fixed else "buggy"
            print(
                f"{key} {name}: {scenario.title}\n"
                f"    {outcome.corrupted} of {outcome.rounds} rounds corrupted; "
                f"premise {'held' if outcome.premise else 'FAILED'}"
                + (f"; streamrace: {', '.join(kinds) or 'no findings'}" if args.streamrace else "")
            )
            # The proof each variant owes: the buggy one corrupts, the fixed one never does.
            failed |= not outcome.premise or (outcome.corrupted == 0) == buggy
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
