"""A serving-shaped program, run with or without streamrace; prints what it computed as JSON.

Warm-up on a side stream (as PyTorch's CUDA-graph documentation recommends), two captures into
one pool (a step and its sampling), then steps of: the next input staged on a copy stream, the
main stream waiting for it, both graphs replayed, an eager op on their output; then the
sampling graph reset and the step graph collected. Run twice in fresh processes by
tests/gpu/test_recorder_gpu.py: the outputs must be bit-identical and the allocator's block
layout the same, which shows that recording replays and eager work changes nothing the
program does; the recorded run also says what its trace holds.
"""

import gc
import hashlib
import json
import sys

import torch

STEPS, BATCH, HIDDEN = 12, 8, 256


def layout() -> list[list[object]]:
    segments = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    return [
        [i, list(seg["segment_pool_id"]), b["address"] - seg["address"], b["size"], b["state"]]
        for i, seg in enumerate(segments)
        for b in seg["blocks"]
    ]


def program() -> tuple[str, dict[str, int]]:
    """The outputs' digest, and the streams by name (raw handles)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(HIDDEN, HIDDEN, device="cuda", generator=gen) / HIDDEN**0.5
    static_in = torch.zeros(BATCH, HIDDEN, device="cuda")
    main, side, copy = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ weight) + x

    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(static_in)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    step_graph, sample_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(step_graph, stream=main):
        static_out = step(static_in)
    with torch.cuda.graph(sample_graph, pool=step_graph.pool(), stream=main):
        probs = torch.softmax(static_out, dim=-1)
    digest = hashlib.sha256()
    staged_ready = torch.cuda.Event()
    with torch.cuda.stream(main):
        for i in range(STEPS):
            with torch.cuda.stream(copy):
                staged = torch.randn(BATCH, HIDDEN, device="cuda", generator=gen)  # the next input
                staged_ready.record(copy)
            main.wait_event(staged_ready)
            static_in.copy_(staged)
            staged.record_stream(main)
            del staged
            step_graph.replay()
            sample_graph.replay()
            tokens = probs.argmax(dim=-1) + i  # eager sampling between replays
            digest.update(repr(tokens.cpu().tolist()).encode())
    torch.cuda.synchronize()
    digest.update(repr(static_out.cpu().view(torch.int32).tolist()).encode())  # the bits, exactly
    sample_graph.reset()
    del step_graph
    gc.collect()
    streams = {"main": main.cuda_stream, "copy": copy.cuda_stream, "side": side.cuda_stream}
    return digest.hexdigest(), streams


def main() -> None:
    torch.zeros(1, device="cuda")
    record = sys.argv[1] if len(sys.argv) > 1 else None
    if record:
        import streamrace

        with streamrace.watch(record) as session:
            digest, streams = program()
        errors = session.errors
    else:
        digest, streams = program()
        errors = None
    torch.cuda.synchronize()
    print(json.dumps({"digest": digest, "layout": layout(), "streams": streams, "errors": errors}))


if __name__ == "__main__":
    main()
