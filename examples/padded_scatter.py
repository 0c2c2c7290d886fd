"""Padded batches through a stale index (HAZARDS.md H9), and its two fixed twins.

A serving engine captures its decode step for a batch of ``BS`` rows and replays it with ``n``
real rows, the rest padding. The step writes each row's K into a KV cache through ``loc``, a
static input of the graph (``cache[loc] = k``: ``index_put_``). Each step copies the real
rows' slots into ``loc[:n]``:

* ``stale`` (the bug): only ``loc[:n]`` is refreshed, so the padding rows keep the slots of
  the warm-up batch, which other requests own now; the replay writes the padded rows there;
* ``reserved``: the padding rows are set to a reserved slot that no request owns, every step;
* ``guarded``: the graph computes its index from the real token count,
  ``torch.where(arange(bs) < n, loc, reserved)``, so the stale entries never reach the write.

Each round compares the cache after the replay with an eager write of the real rows alone: a
slot outside the real rows (and the reserved one) that changed is a live slot corrupted.

    python examples/padded_scatter.py --variant stale --trace padded_stale.jsonl.gz
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch

import streamrace

VARIANTS = ("stale", "reserved", "guarded")
BS, N_REAL, SLOTS, HEAD = 8, 3, 64, 128
RESERVED = SLOTS - 1  # a slot no request owns: where padding rows may write
ROUNDS = 4


@dataclass
class Outcome:
    corrupted: int  # rounds in which a live slot outside the real rows changed
    rounds: int


def run(variant: str, rounds: int = ROUNDS) -> Outcome:
    """Capture the step for ``BS`` rows, then replay it ``rounds`` times with ``N_REAL`` real rows."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    cache = torch.zeros(SLOTS, HEAD, device="cuda")
    k = torch.randn(BS, HEAD, device="cuda", generator=gen)  # static input: the rows' K
    loc = torch.arange(BS, device="cuda")  # static input: each row's slot (the warm-up batch's)
    n_real = torch.full((1,), BS, device="cuda")  # static input of the guarded step
    positions = torch.arange(BS, device="cuda")

    def step() -> None:
        index = torch.where(positions < n_real, loc, RESERVED) if variant == "guarded" else loc
        cache[index] = k * 2

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # PyTorch's recipe: warm up on a side stream
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    corrupted = 0
    for _ in range(rounds):
        cache.copy_(torch.randn(SLOTS, HEAD, device="cuda", generator=gen))  # other requests' live KV
        real_k = torch.randn(N_REAL, HEAD, device="cuda", generator=gen)
        # Real slots never include the warm-up's, so a stale entry always names another slot.
        real_loc = BS + torch.randperm(RESERVED - BS, device="cuda", generator=gen)[:N_REAL]
        k[:N_REAL].copy_(real_k)
        loc[:N_REAL].copy_(real_loc)
        if variant == "reserved":
            loc[N_REAL:].fill_(RESERVED)
        if variant == "guarded":
            n_real.fill_(N_REAL)
        want = cache.clone()
        want[real_loc] = real_k * 2  # the real rows alone, eagerly
        graph.replay()
        torch.cuda.synchronize()
        changed = (cache != want).any(dim=1)
        changed[RESERVED] = False
        corrupted += bool(changed.any())
    return Outcome(corrupted, rounds)


def record(variant: str, trace: str | None = None) -> tuple[streamrace.Session, Outcome]:
    """The whole program under streamrace.watch(): set-up, warm-up, capture, replays."""
    with streamrace.watch(trace) as session:
        outcome = run(variant)
    return session, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=VARIANTS, default="stale")
    parser.add_argument("--trace", help="write the recorded trace here (.gz compresses)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    session, outcome = record(args.variant, args.trace)
    print(session.report())
    verdict = "CORRUPTED" if outcome.corrupted else "exact"
    print(f"replay check: {verdict}: a live slot changed in {outcome.corrupted} of {outcome.rounds} replays")
    # The proof each variant owes: the stale one corrupts, the twins never do.
    return 0 if (outcome.corrupted > 0) == (args.variant == "stale") else 1


if __name__ == "__main__":
    sys.exit(main())
