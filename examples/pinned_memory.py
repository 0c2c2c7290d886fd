"""Pinned host memory (HAZARDS.md M1–M3): whole programs, each buggy with a fixed twin.

The host runs ahead of the GPU. A ``non_blocking`` copy from pinned memory reads it when the
copy's stream gets there, not when the host issued it; a ``non_blocking`` copy into pinned
memory lands then too; and a graph that captured a copy keeps the pinned address for every
replay. ``torch.cuda._sleep`` before each copy stands for the long kernels of a real step, so
that each buggy variant really corrupts on the GPU; each fixed twin is exact.

* ``m1_staging``: one pinned staging buffer per step, rewritten by the host for the next step
  while the last copy from it is pending (M1). Fixed: double-buffered, each buffer rewritten
  only after the event recorded after its last copy was synchronized.
* ``m1_replay``: a graph captured the H2D copy of its input from a static pinned buffer; the
  host writes the next step's input right after ``g.replay()`` (vLLM's async scheduling bug,
  M1 inside replays). Fixed: an event after the replay, synchronized before the write.
* ``m2_d2h``: results copied into pinned memory with ``non_blocking=True`` and read by the host
  at once (M2). Fixed: an event after the copy, synchronized before the read.
* ``m3_baked``: a graph captured an H2D copy from pinned memory allocated before the capture;
  the pinned tensor dies, the host allocator hands its block to the next pinned tensor and the
  replay copies that one's bytes (M3). Fixed: the pinned tensor is kept alive with the graph.
* ``serving_async``: a serving loop stages each step's token ids in pinned memory and, a step
  ahead, fills the buffer for the next step while the previous copy is still queued behind the
  model (M1, as in TensorRT-LLM #15546, vLLM #25279). Fixed: two staging buffers, each reused
  after its copy's event.

And two that look alike and are safe (the allocator's own rules; streamrace stays silent):
``eager_free`` (a pinned tensor freed with its copy pending: the allocator holds the block
until the copy's event completes) and ``capture_owned`` (pinned memory allocated inside the
capture and used there: never handed out again).

    python examples/pinned_memory.py                  # every scenario, both variants
    python examples/pinned_memory.py m1_staging --streamrace
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch

import streamrace

N = 1 << 16  # floats a staging buffer holds (256 KiB)
STEPS = 4
SLEEP_CYCLES = 20_000_000  # about 10 ms on an H200: far longer than the host's next write


@dataclass
class Outcome:
    corrupted: int  # steps whose data was wrong
    steps: int
    premise: bool  # what the scenario rests on held (the allocator's reuse, or its refusal)


def _stream(name: str) -> torch.cuda.Stream:
    stream = torch.cuda.Stream()
    streamrace.name_stream(stream, name)
    return stream


def m1_staging(fixed: bool, steps: int = STEPS) -> Outcome:
    copy = _stream("copy")
    dev = torch.zeros(steps, N, device="cuda")
    buffers = [torch.empty(N, pin_memory=True) for _ in range(2 if fixed else 1)]
    copied: list[torch.cuda.Event | None] = [None] * len(buffers)
    copy.wait_stream(torch.cuda.current_stream())  # dev was zeroed there
    for step in range(steps):
        slot = step % len(buffers)
        staging = buffers[slot]
        done = copied[slot]
        if fixed and done is not None:
            done.synchronize()  # the copy that last read this buffer is done
        staging.fill_(float(step))  # the host stages this step's inputs
        with torch.cuda.stream(copy):
            torch.cuda._sleep(SLEEP_CYCLES)  # the step's earlier kernels
            dev[step].copy_(staging, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            copied[slot] = event
    torch.cuda.synchronize()
    expected = torch.arange(steps, dtype=torch.float32, device="cuda")[:, None].expand(steps, N)
    corrupted = int((dev != expected).any(dim=1).sum().item())
    return Outcome(corrupted, steps, True)


def m1_replay(fixed: bool, steps: int = STEPS) -> Outcome:
    main = _stream("main")
    pinned_in = torch.zeros(N, pin_memory=True)
    static_in = torch.zeros(N, device="cuda")
    static_out = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_in.copy_(pinned_in, non_blocking=True)  # the replay reads pinned_in, every time
        static_out.copy_(static_in)
    results = torch.zeros(steps, N, device="cuda")
    main.wait_stream(torch.cuda.current_stream())  # results was zeroed there
    replayed: torch.cuda.Event | None = None
    for step in range(steps):
        if fixed and replayed is not None:
            replayed.synchronize()  # the previous replay's copy has read pinned_in
        pinned_in.fill_(float(step))  # the scheduler writes the next step's input
        with torch.cuda.stream(main):
            torch.cuda._sleep(SLEEP_CYCLES)
            graph.replay()
            results[step].copy_(static_out)
            replayed = torch.cuda.Event()
            replayed.record()
    torch.cuda.synchronize()
    expected = torch.arange(steps, dtype=torch.float32, device="cuda")[:, None].expand(steps, N)
    corrupted = int((results != expected).any(dim=1).sum().item())
    del graph
    return Outcome(corrupted, steps, True)


def m2_d2h(fixed: bool, steps: int = STEPS) -> Outcome:
    main = _stream("main")
    dev = torch.zeros(N, device="cuda")
    out = torch.zeros(N, pin_memory=True)
    main.wait_stream(torch.cuda.current_stream())  # dev was zeroed there
    corrupted = 0
    for step in range(steps):
        with torch.cuda.stream(main):
            torch.cuda._sleep(SLEEP_CYCLES)
            dev.fill_(float(step + 1))  # the step's result
            out.copy_(dev, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record()
        if fixed:
            landed.synchronize()
        seen = out.sum().item()  # the host reads the result
        corrupted += seen != float(step + 1) * N
    torch.cuda.synchronize()
    return Outcome(corrupted, steps, True)


def m3_baked(fixed: bool, steps: int = 1) -> Outcome:
    src = torch.empty(N, pin_memory=True)
    src.fill_(1.0)
    static = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static.copy_(src, non_blocking=True)  # the graph bakes src's host address
    kept = [src] if fixed else []  # fixed: the pinned tensor lives as long as the graph
    old = src.data_ptr()
    del src
    torch.cuda.synchronize()  # the free's event (on the capture stream) has completed
    other = torch.empty(N, pin_memory=True)  # the next pinned tensor of that size
    other.fill_(9.0)
    reused = other.data_ptr() == old
    corrupted = 0
    for _ in range(steps):
        static.zero_()
        graph.replay()
        torch.cuda.synchronize()
        corrupted += bool((static != 1.0).any().item())
    del graph, kept
    return Outcome(corrupted, steps, reused != fixed)


def serving_async(fixed: bool, steps: int = STEPS) -> Outcome:
    main = _stream("main")
    tokens = 256
    weight = torch.randn(1024, 64, device="cuda")
    ids_gpu = torch.zeros(steps, tokens, dtype=torch.long, device="cuda")
    staging = [torch.zeros(tokens, dtype=torch.long, pin_memory=True) for _ in range(2 if fixed else 1)]
    sampled = torch.zeros(steps, dtype=torch.long, pin_memory=True)
    staged: list[torch.cuda.Event | None] = [None] * len(staging)
    base = torch.arange(tokens, dtype=torch.long)
    main.wait_stream(torch.cuda.current_stream())  # weight and ids_gpu were made there
    for step in range(steps):
        slot = step % len(staging)
        ids_cpu = staging[slot]
        done = staged[slot]
        if fixed and done is not None:
            done.synchronize()  # the copy that last read this buffer is done
        ids_cpu.copy_((base + step) % 1024)  # the scheduler prepares this step's batch
        with torch.cuda.stream(main):
            torch.cuda._sleep(SLEEP_CYCLES)  # the previous step's model still runs
            ids_gpu[step].copy_(ids_cpu, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
            staged[slot] = copied
            hidden = weight[ids_gpu[step]]  # embedding lookup
            token = hidden.sum(dim=1).argmax()
            sampled[step : step + 1].copy_(token.view(1), non_blocking=True)
    torch.cuda.synchronize()  # the tokens are read after the whole loop
    expected = (torch.arange(tokens, device="cuda")[None, :] + torch.arange(steps, device="cuda")[:, None]) % 1024
    corrupted = int((ids_gpu != expected).any(dim=1).sum().item())
    return Outcome(corrupted, steps, True)


def eager_free(fixed: bool = True, steps: int = 1) -> Outcome:
    """Safe: a pinned tensor freed while its copy is pending. The allocator records an event
    for the copy and hands the block out again only once it completed: the next pinned
    tensor gets another block (the premise), and the copy reads what it was given."""
    main = _stream("main")
    dev = torch.zeros(N, device="cuda")
    src = torch.empty(N, pin_memory=True)
    src.fill_(3.0)
    old = src.data_ptr()
    main.wait_stream(torch.cuda.current_stream())  # dev was zeroed there
    with torch.cuda.stream(main):
        torch.cuda._sleep(SLEEP_CYCLES)
        dev.copy_(src, non_blocking=True)
    del src
    other = torch.empty(N, pin_memory=True)  # while the copy is still pending
    other.fill_(5.0)
    protected = other.data_ptr() != old
    torch.cuda.synchronize()
    corrupted = int(bool((dev != 3.0).any().item()))
    return Outcome(corrupted, steps, protected)


def capture_owned(fixed: bool = True, steps: int = 1) -> Outcome:
    """Safe: pinned memory allocated inside the capture and used by a captured copy is never
    handed out again, even once freed: the replay keeps reading its bytes (the premise)."""
    static = torch.zeros(N, device="cuda")
    graph = torch.cuda.CUDAGraph()
    # Pinned memory is allocated during the capture: only a thread-local capture allows it.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        src = torch.empty(N, pin_memory=True)
        src.fill_(4.0)
        static.copy_(src, non_blocking=True)
    old = src.data_ptr()
    del src
    torch.cuda.synchronize()
    other = torch.empty(N, pin_memory=True)
    other.fill_(8.0)
    never_reused = other.data_ptr() != old
    static.zero_()
    graph.replay()
    torch.cuda.synchronize()
    corrupted = int(bool((static != 4.0).any().item()))
    del graph
    return Outcome(corrupted, steps, never_reused)


SCENARIOS: dict[str, Callable[..., Outcome]] = {
    "m1_staging": m1_staging,
    "m1_replay": m1_replay,
    "m2_d2h": m2_d2h,
    "m3_baked": m3_baked,
    "serving_async": serving_async,
}
SAFE: dict[str, Callable[..., Outcome]] = {"eager_free": eager_free, "capture_owned": capture_owned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="*", choices=[*SCENARIOS, *SAFE], help="default: all")
    parser.add_argument("--streamrace", action="store_true", help="record each variant and print its findings")
    args = parser.parse_args()
    for name in args.scenario or [*SCENARIOS, *SAFE]:
        run = SCENARIOS.get(name) or SAFE[name]
        for fixed in (False, True) if name in SCENARIOS else (True,):
            label = f"{name} {'fixed' if fixed else 'buggy'}"
            if args.streamrace:
                with streamrace.watch(hooks="python") as session:
                    outcome = run(fixed)
                kinds = [(f.kind, f.count) for f in session.findings]
                print(f"{label}: corrupted {outcome.corrupted}/{outcome.steps}, premise {outcome.premise}, {kinds}")
            else:
                outcome = run(fixed)
                print(f"{label}: corrupted {outcome.corrupted}/{outcome.steps}, premise {outcome.premise}")


if __name__ == "__main__":
    main()
