"""Print the graph pool's block layout after capturing the DSV4 example, with or without streamrace.

Run twice in fresh processes by tests/gpu/test_recorder_gpu.py: the layouts must be identical,
which shows the recorder allocates nothing and changes no allocation the program makes.
"""

import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example


def layout() -> list[list[object]]:
    segments = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    return [
        [i, list(seg["segment_pool_id"]), b["address"] - seg["address"], b["size"], b["state"]]
        for i, seg in enumerate(segments)
        for b in seg["blocks"]
    ]


def main() -> None:
    record = "--record" in sys.argv
    dsv4 = load_example("dsv4_mini_decode")
    torch.zeros(1, device="cuda")
    layer = dsv4.MiniDecodeLayer("bug", latent=False, sleep_cycles=1000, streams=dsv4.DecodeStreams())
    if record:
        import streamrace

        with streamrace.watch() as session:
            model = dsv4.capture(layer)
        findings = sum(f.graph is not None for f in session.findings)  # in the captures (not the warm-ups)
    else:
        model = dsv4.capture(layer)
        findings = None
    first = model.graphs[max(model.graphs)][1].data_ptr()
    outputs = {bs: out.data_ptr() - first for bs, (_, out) in model.graphs.items()}
    print(json.dumps({"layout": layout(), "outputs": outputs, "findings": findings}))


if __name__ == "__main__":
    main()
