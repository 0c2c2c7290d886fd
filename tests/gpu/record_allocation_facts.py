"""Record one correct eager-then-capture pattern and what the allocator really did, in a fresh
process (run by tests/gpu/test_allocation_facts_gpu.py):

    STREAMRACE_HOOKS=native|python python tests/gpu/record_allocation_facts.py E1|E2 fresh|initialized

``fresh``: CUDA is first initialized inside the recording (a program that starts streamrace
first); ``initialized``: before it. The truth is an observer of the test's own, a
``torch.cuda._gpu_trace`` allocation callback that reads the new block's requested size, its
segment's stream and pool out of the allocator's live state at that moment, and the stream
current then. Prints one JSON line: the recording's facts and the truth, per address in order.
"""

import json
import os
import pathlib
import sys

import torch
from torch.cuda import _gpu_trace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example

import streamrace

OBSERVED: list[tuple[int, int, int, int, list[int] | None]] = []  # addr, size, segment stream, current stream, pool
OBSERVING = [False]


def observe(addr: int) -> None:
    if not OBSERVING[0]:
        return
    current = torch.cuda.current_stream().cuda_stream
    for segment in torch.cuda.memory.memory_snapshot():
        for block in segment["blocks"]:
            if block["address"] == addr and block["state"] == "active_allocated":
                pool = list(segment.get("segment_pool_id") or (0, 0))
                size = block.get("requested_size") or block["size"]
                OBSERVED.append((addr, size, segment["stream"], current, pool if any(pool) else None))
                return
    OBSERVED.append((addr, -1, -1, current, None))  # not found: the test fails on it


def main() -> None:
    scenario, start = sys.argv[1], sys.argv[2]
    gallery = load_example("execution_gallery")
    if start == "initialized":
        torch.zeros(1, device="cuda")
    _gpu_trace.register_callback_for_memory_allocation(observe)
    OBSERVING[0] = True
    with streamrace.watch(eager_ops=True) as session:
        outcome = gallery.SCENARIOS[scenario].run(True)
    OBSERVING[0] = False
    recorded = [(e["addr"], e["size"], e["stream"], e.get("pool")) for e in session.trace.events if e["ev"] == "alloc"]
    print(
        json.dumps(
            {
                "hooks": session.recorder.hooks_kind,
                "wanted": os.environ.get("STREAMRACE_HOOKS"),
                "facts": session.trace.header["allocator"].get("facts"),
                "dropped": session.trace.header["allocations_dropped"],
                "errors": session.errors,
                "findings": [f"{f.kind}: {f.signature}" for f in session.findings],
                "recorded": recorded,
                "observed": OBSERVED,
                "corrupted": outcome.corrupted,
            }
        )
    )


if __name__ == "__main__":
    main()
