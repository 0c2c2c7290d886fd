"""Static outputs and capture-time allocations (HAZARDS.md M4, M5): three whole programs, each
with a fixed twin, that really corrupt on a GPU and that streamrace reports.

* ``graphed``: ``make_graphed_callables`` hands out ``static_output.detach()`` on every call;
  the training loop keeps each step's output for a later report without a clone, so every kept
  output is the last step's (M4: ``stale-static-output``). Fixed: ``.clone()`` each step.
* ``view``: a plain ``CUDAGraph`` serving loop keeps ``static_out[:n]`` of each step and reads
  the first after the second replay (M4). Fixed: ``static_out[:n].clone()``.
* ``workspace``: ROCm aiter #5393's shape. A lazily cached workspace is first asked for inside
  the capture of a second graph sharing the first graph's pool, so it is given the block of the
  first graph's freed temporary; the program fills it once, and the first graph's replay
  overwrites it (M5: ``capture-allocation-escaped``). Fixed: the workspace is made before any
  capture.

    python examples/static_outputs.py                  # every scenario, buggy and fixed
    python examples/static_outputs.py workspace --buggy
    python examples/static_outputs.py --streamrace     # each one also recorded and analysed
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch

import streamrace

N = 1 << 20  # 4 MiB of float32: large-pool blocks, handed out again only at the same size
STEPS = 3
CANARY = 1234.5


@dataclass
class Outcome:
    corrupted: int  # steps (or replays) whose kept value differs from what it should be
    rounds: int
    premise: bool  # the allocator did what the story needs


def graphed(fixed: bool) -> Outcome:
    """M4: the outputs of a graphed callable kept across steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256, device="cuda")
    sample = torch.randn(64, 256, device="cuda")
    step_fn = torch.cuda.make_graphed_callables(model, (sample,))
    inputs = [torch.full((64, 256), float(step + 1), device="cuda") for step in range(STEPS)]
    kept = []
    for x in inputs:
        out = step_fn(x)
        kept.append(out.clone() if fixed else out)  # the fix: a copy before the next call replays
    torch.cuda.synchronize()
    with torch.no_grad():  # eagerly: the module's own forward now replays the graph too
        want = [torch.nn.functional.linear(x, model.weight, model.bias) for x in inputs]
    corrupted = sum(not torch.allclose(k, w) for k, w in zip(kept, want, strict=True))
    premise = kept[0].data_ptr() == kept[-1].data_ptr() if not fixed else True
    return Outcome(corrupted, STEPS, premise)


def view(fixed: bool) -> Outcome:
    """M4: a plain graph's ``static_out[:n]`` kept across replays."""
    static_in = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2 + 1
    kept = []
    for step in range(STEPS):
        static_in.fill_(float(step))
        graph.replay()
        tokens = static_out[: N // 2]
        kept.append(tokens.clone() if fixed else tokens)  # the fix: a copy before the next replay
    torch.cuda.synchronize()
    corrupted = sum(not torch.all(k == 2.0 * step + 1).item() for step, k in enumerate(kept))
    return Outcome(corrupted, STEPS, True)


_CACHE: dict[str, torch.Tensor] = {}


def _workspace() -> torch.Tensor:
    """A lazily cached workspace, as a library keeps its split-K workspace: made on first use."""
    if "ws" not in _CACHE:
        _CACHE["ws"] = torch.empty(N, device="cuda")
    return _CACHE["ws"]


def workspace(fixed: bool) -> Outcome:
    """M5: a workspace first allocated inside a capture of a shared pool, then clobbered."""
    _CACHE.clear()
    src = torch.full((N,), 3.0, device="cuda")
    pool = torch.cuda.graph_pool_handle()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    if fixed:
        _workspace()  # the fix: persistent buffers before any capture
    with torch.cuda.graph(first, pool=pool):
        temporary = src * 2.0
        temporary_ptr = temporary.data_ptr()
        first_out = temporary.sum()
        del temporary  # its block goes back to the pool
    with torch.cuda.graph(second, pool=pool):
        ws = _workspace()  # buggy: first asked for here, so made from the pool
        second_out = ws * 1.0
    premise = (ws.data_ptr() == temporary_ptr) != fixed
    ws.fill_(CANARY)  # the state the library sets once
    corrupted = 0
    for _ in range(STEPS):
        first.replay()
        second.replay()
        torch.cuda.synchronize()
        corrupted += not torch.all(second_out == CANARY).item()
    del first_out
    return Outcome(corrupted, STEPS, premise)


@dataclass(frozen=True)
class Scenario:
    title: str
    run: Callable[[bool], Outcome]
    finding: str


SCENARIOS = {
    "graphed": Scenario("a make_graphed_callables output kept across steps", graphed, "stale-static-output"),
    "view": Scenario("a plain graph's static_out[:n] kept across replays", view, "stale-static-output"),
    "workspace": Scenario(
        "a cached workspace first allocated in a later capture of a shared pool",
        workspace,
        "capture-allocation-escaped",
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all): {', '.join(SCENARIOS)}")
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--buggy", action="store_true", help="only the buggy variant")
    variant.add_argument("--fixed", action="store_true", help="only the fixed variant")
    parser.add_argument("--streamrace", action="store_true", help="record each variant and print its findings")
    args = parser.parse_args()
    unknown = [name for name in args.names if name not in SCENARIOS]
    if unknown:
        parser.error(f"no scenario {', '.join(unknown)}; scenarios are {', '.join(SCENARIOS)}")
    variants = [False] if args.buggy else [True] if args.fixed else [False, True]
    for name in args.names or SCENARIOS:
        scenario = SCENARIOS[name]
        for fixed in variants:
            label = f"{name} {'fixed' if fixed else 'buggy'}"
            if args.streamrace:
                with streamrace.watch() as session:
                    outcome = scenario.run(fixed)
                found = [f.kind for f in session.findings]
                extra = f", findings {found}"
            else:
                outcome, extra = scenario.run(fixed), ""
            print(f"{label}: corrupted {outcome.corrupted}/{outcome.rounds}, premise {outcome.premise}{extra}")


if __name__ == "__main__":
    main()
