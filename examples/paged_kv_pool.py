"""A miniature paged KV cache under overlap scheduling (HAZARDS.md M7), buggy and fixed.

A serving engine keeps its KV cache as one tensor of pages and hands pages to requests itself;
the caching allocator sees one block for the engine's whole life. With overlap scheduling the
host runs a step ahead of the GPU: while the decode step of request A is still in flight on the
compute stream, the scheduler sees A finish, takes its page back and gives it to request B,
whose prefill writes its KV into the page on the prefill stream. Unless the free waits for the
step, B's write lands under A's read. The pool says what it does with ``streamrace.annotate``,
so streamrace reports the free (``pool-unsafe-free``) whether or not this run corrupted.

    python examples/paged_kv_pool.py                 # both variants: corrupted rounds of each
    python examples/paged_kv_pool.py --buggy --streamrace
    streamrace run -- python examples/paged_kv_pool.py --buggy

``torch.cuda._sleep`` stands for a long decode kernel, so that the buggy variant really
corrupts A's result; the fixed twin makes the prefill stream wait for the step's event before
the page goes back, and is exact.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

import streamrace
from streamrace import annotate

PAGES = 4
PAGE_ELEMENTS = 1 << 20  # 4 MiB of float32 per page
SLEEP_CYCLES = 20_000_000  # about 10 ms on an H200: longer than B's prefill write
ROUNDS = 4


class PagedKVPool:
    """Pages of one KV tensor, handed out last-freed first, as block managers do."""

    def __init__(self, pages: int, page_elements: int) -> None:
        self.cache = torch.zeros(pages, page_elements, device="cuda")
        self._free = list(range(pages))

    def alloc(self, stream: torch.cuda.Stream) -> int:
        page = self._free.pop()
        annotate.alloc(self.cache[page], pool="kv", stream=stream)
        return page

    def free(self, page: int, stream: torch.cuda.Stream) -> None:
        annotate.free(self.cache[page], pool="kv", stream=stream)
        self._free.append(page)


@dataclass
class Outcome:
    corrupted: int  # rounds whose decode read B's KV instead of A's
    rounds: int
    premise: bool  # B was given A's page every round (the pool's last-freed-first order)


def _stream(name: str) -> torch.cuda.Stream:
    stream = torch.cuda.Stream()
    streamrace.name_stream(stream, name)
    return stream


def run(fixed: bool, rounds: int = ROUNDS) -> Outcome:
    compute, prefill = _stream("compute"), _stream("prefill")
    pool = PagedKVPool(PAGES, PAGE_ELEMENTS)
    # The cache is zeroed on the default stream: both side streams start after that.
    compute.wait_stream(torch.cuda.current_stream())
    prefill.wait_stream(torch.cuda.current_stream())
    corrupted, premise = 0, True
    for _ in range(rounds):
        a = pool.alloc(compute)
        with torch.cuda.stream(compute):
            pool.cache[a].fill_(1.0)  # request A's KV
            torch.cuda._sleep(SLEEP_CYCLES)  # the decode step's long kernel
            attended = pool.cache[a].sum()  # ... reads A's page
            step_done = torch.cuda.Event()
            step_done.record()
        # The host, a step ahead: A has finished, so its page goes back and B gets it.
        if fixed:
            prefill.wait_event(step_done)  # take the page back only after the step
        pool.free(a, prefill)
        b = pool.alloc(prefill)
        premise &= b == a
        with torch.cuda.stream(prefill):
            pool.cache[b].fill_(7.0)  # request B's prefill writes its KV
        torch.cuda.synchronize()
        corrupted += attended.item() != float(PAGE_ELEMENTS)
        pool.free(b, prefill)  # after the synchronize: nothing uses it any more
    return Outcome(corrupted, rounds, premise)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--buggy", action="store_true", help="only the buggy variant")
    variant.add_argument("--fixed", action="store_true", help="only the fixed variant")
    parser.add_argument("--streamrace", action="store_true", help="record each variant and print its findings")
    args = parser.parse_args()
    variants = [False] if args.buggy else [True] if args.fixed else [False, True]
    for fixed in variants:
        name = "fixed" if fixed else "buggy"
        if args.streamrace:
            with streamrace.watch() as session:
                outcome = run(fixed)
            kinds = [(f.kind, f.aliasing) for f in session.findings]
            summary = f"corrupted {outcome.corrupted}/{outcome.rounds}, premise {outcome.premise}"
            print(f"{name}: {summary}, findings {kinds}")
        else:
            outcome = run(fixed)
            print(f"{name}: corrupted {outcome.corrupted}/{outcome.rounds}, premise {outcome.premise}")


if __name__ == "__main__":
    main()
