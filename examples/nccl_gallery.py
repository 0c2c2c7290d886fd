"""NCCL collectives inside captures and eagerly (HAZARDS.md X5): each hazard with its fixed twin.

PyTorch's NCCL process group runs an ``async_op=True`` collective on an internal stream of
its own, which waits for the caller's stream when the collective is issued; the caller's
stream waits for the collective only at ``work.wait()``. Each scenario breaks that contract
once, the way serving and training code does, and its twin keeps it:

    N1  captured: the collective's output is read before work.wait()        (data-race, RAW)
    N2  captured: the next layer overwrites the collective's input before
        work.wait()                                                           (data-race, WAR)
    N3  eager: the collective's output is read before work.wait()           (data-race, RAW)
    N4  a captured collective's input is freed while the graph lives; the
        block is handed out again and the next replay reads the new owner's
        data                                                                  (graph-input-freed)

Runs with one rank on one GPU (a one-rank NCCL group is real NCCL: its all-gather is a copy
on the internal stream), or with one rank per GPU under torchrun. The collective is an
all-gather: at one rank an in-place all-reduce changes nothing, so it could not show a wrong
result, while an all-gather's copy can. To make the race's outcome certain rather than
likely, each round first queues a large all-gather on the internal stream (waited for
properly): the collective under test starts only after it, while the caller's stream runs on.

    python examples/nccl_gallery.py --check            # every scenario, buggy and fixed
    python examples/nccl_gallery.py N2 --buggy --check
    python examples/nccl_gallery.py --streamrace       # each one also recorded and analysed
    streamrace run -- python examples/nccl_gallery.py N1 --buggy
    streamrace run -- torchrun --nproc-per-node 2 examples/nccl_gallery.py N1 --buggy
"""

from __future__ import annotations

import os

# No NVLink multicast anywhere (NVLS, symmetric memory, NVSHMEM): set before CUDA and NCCL
# start, inherited by every subprocess.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _name, _value in NO_MULTICAST.items():
    os.environ.setdefault(_name, _value)

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import streamrace  # noqa: E402

N = 1 << 20  # elements a rank contributes (4 MiB of float32)
# elements of the all-gather that keeps the internal stream busy (2 GiB, about 1.5 ms on the
# H200): 512 MiB was not enough when the Python hooks slow the host down (N3 corrupted 0 of 4)
BUSY = 1 << 29
ROUNDS = 4
# NCCL's watchdog thread queries events while a capture runs: only this capture's own thread
# is held to the capture's rules.
CAPTURE_MODE = "thread_local"


@dataclass
class Outcome:
    corrupted: int  # rounds whose result differs from what a correct program computes
    rounds: int
    premise: bool  # the machine did what the scenario's story needs (N4: the block reused)


def setup() -> tuple[int, int]:
    """The process group (one rank here, or torchrun's), its first collective run eagerly:
    NCCL's communicator must exist before a capture. (rank, world size)."""
    if not dist.is_initialized():
        if "RANK" in os.environ:  # torchrun
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        else:
            torch.cuda.set_device(0)
            store = dist.FileStore(os.path.join(tempfile.mkdtemp(prefix="nccl_gallery_"), "store"), 1)
            dist.init_process_group("nccl", rank=0, world_size=1, store=store, device_id=torch.device("cuda", 0))
        warm = torch.zeros(dist.get_world_size(), device="cuda")
        dist.all_gather_into_tensor(warm, warm[:1].clone())
        torch.cuda.synchronize()
    return dist.get_rank(), dist.get_world_size()


def _value(step: int, rank: int) -> float:
    return float(step * 10 + rank + 1)


def _expected(step: int, world: int, shift: float = 0.0) -> torch.Tensor:
    """What an all-gather of every rank's ``_value`` gives, each rank's chunk in order."""
    return torch.cat([torch.full((N,), _value(step, r) + shift, device="cuda") for r in range(world)])


class _Busy:
    """A large all-gather queued on the internal stream ahead of the collective under test."""

    def __init__(self, world: int) -> None:
        self.src = torch.ones(BUSY, device="cuda")
        self.dst = torch.empty(BUSY * world, device="cuda")

    def start(self) -> dist.Work:
        return dist.all_gather_into_tensor(self.dst, self.src, async_op=True)


def output_read_before_wait(fixed: bool) -> Outcome:
    """N1: captured; the caller doubles the gathered output before waiting for the gather."""
    rank, world = setup()
    busy = _Busy(world)
    inp = torch.zeros(N, device="cuda")
    out = torch.zeros(N * world, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
        occupied = busy.start()
        work = dist.all_gather_into_tensor(out, inp, async_op=True)
        if fixed:
            work.wait()  # the fix: wait for the collective before reading its output
        doubled = out * 2
        if not fixed:
            work.wait()
        occupied.wait()
    corrupted = 0
    for step in range(ROUNDS):
        inp.fill_(_value(step, rank))
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not torch.equal(doubled, _expected(step, world) * 2)
    return Outcome(corrupted, ROUNDS, premise=True)


def input_overwritten_before_wait(fixed: bool) -> Outcome:
    """N2: captured; the next layer writes the gather's input in place before the wait."""
    rank, world = setup()
    busy = _Busy(world)
    inp = torch.zeros(N, device="cuda")
    out = torch.zeros(N * world, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
        occupied = busy.start()
        work = dist.all_gather_into_tensor(out, inp, async_op=True)
        if fixed:
            work.wait()  # the fix: the input is the collective's until its wait
        inp.add_(100.0)  # the next layer reuses the activation buffer
        if not fixed:
            work.wait()
        occupied.wait()
    corrupted = 0
    for step in range(ROUNDS):
        inp.fill_(_value(step, rank))
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not torch.equal(out, _expected(step, world))
    return Outcome(corrupted, ROUNDS, premise=True)


def eager_output_read_before_wait(fixed: bool) -> Outcome:
    """N3: eager; as N1, without a graph (the execution view)."""
    rank, world = setup()
    busy = _Busy(world)
    inp = torch.zeros(N, device="cuda")
    out = torch.zeros(N * world, device="cuda")
    corrupted = 0
    for step in range(ROUNDS):
        inp.fill_(_value(step, rank))
        occupied = busy.start()
        work = dist.all_gather_into_tensor(out, inp, async_op=True)
        if fixed:
            work.wait()
        doubled = out * 2
        if not fixed:
            work.wait()
        occupied.wait()
        torch.cuda.synchronize()
        corrupted += not torch.equal(doubled, _expected(step, world) * 2)
    return Outcome(corrupted, ROUNDS, premise=True)


def captured_input_freed(fixed: bool) -> Outcome:
    """N4: the gather's input, made outside the graph's pool and filled once, is dropped after
    the capture while the graph still gathers from it (TensorRT-LLM #18023: an NCCL window
    buffer freed while the graph's collective uses it)."""
    rank, world = setup()
    inp = torch.full((N,), _value(0, rank), device="cuda")
    out = torch.zeros(N * world, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
        work = dist.all_gather_into_tensor(out, inp, async_op=True)
        work.wait()
    del work
    kept = inp if fixed else None  # the fix: the buffer lives as long as the graph
    freed_at = inp.data_ptr()
    del inp
    other = torch.empty(N, device="cuda")  # buggy: the allocator hands the freed block out again
    premise = (other.data_ptr() != freed_at) if fixed else (other.data_ptr() == freed_at)
    corrupted = 0
    for step in range(ROUNDS):
        other.fill_(-1.0 - step)  # the block's new owner writes its own data
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not torch.equal(out, _expected(0, world))
    del graph, kept  # the graph first: freeing its input after it is gone is no hazard
    return Outcome(corrupted, ROUNDS, premise)


@dataclass(frozen=True)
class Scenario:
    title: str
    run: Callable[[bool], Outcome]
    finding: str  # the kind streamrace reports for the buggy variant


SCENARIOS: dict[str, Scenario] = {
    "N1": Scenario(
        "captured: the all-gather's output is read before work.wait()", output_read_before_wait, "data-race"
    ),
    "N2": Scenario(
        "captured: the next layer overwrites the all-gather's input before work.wait()",
        input_overwritten_before_wait,
        "data-race",
    ),
    "N3": Scenario(
        "eager: the all-gather's output is read before work.wait()", eager_output_read_before_wait, "data-race"
    ),
    "N4": Scenario(
        "a captured all-gather's input is freed while the graph lives", captured_input_freed, "graph-input-freed"
    ),
}


def record(key: str, fixed: bool, trace: str | None = None, **options: Any) -> tuple[streamrace.Session, Outcome]:
    """Run one scenario whole under streamrace.watch() (the process group set up before);
    ``options`` go to the recorder (``hooks="python"``)."""
    setup()
    with streamrace.watch(trace, **options) as session:
        outcome = SCENARIOS[key].run(fixed)
        torch.cuda.synchronize()
    return session, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="ID", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--fixed", action="store_true", help="only the fixed twins")
    parser.add_argument("--buggy", action="store_true", help="only the buggy variants")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 unless every buggy variant corrupts and no twin does"
    )
    parser.add_argument("--streamrace", action="store_true", help="record and analyse each variant too")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        parser.error("needs a CUDA GPU and NCCL")
    rank, world = setup()
    failed = False
    for key in args.scenarios or SCENARIOS:
        scenario = SCENARIOS[key]
        for fixed in [True] if args.fixed else [False] if args.buggy else [False, True]:
            if args.streamrace:
                session, outcome = record(key, fixed)
                kinds = sorted({f.kind for f in session.findings})
                failed |= kinds != ([] if fixed else [scenario.finding])
            else:
                outcome = scenario.run(fixed)
            print(
                f"rank {rank}/{world} {key} {'fixed' if fixed else 'buggy'}: {scenario.title}\n"
                f"    {outcome.corrupted} of {outcome.rounds} rounds corrupted; "
                f"premise {'held' if outcome.premise else 'FAILED'}"
                + (f"; streamrace: {', '.join(kinds) or 'no findings'}" if args.streamrace else ""),
                flush=True,
            )
            if args.check:
                failed |= not outcome.premise or (outcome.corrupted == 0) != fixed
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
