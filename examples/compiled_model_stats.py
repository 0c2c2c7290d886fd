"""How much of a model-sized capture the dispatcher never sees, and how well streamrace resolves it.

A 12-block pre-norm MLP stack of GPT-2 small's width is compiled with
``torch.compile(mode="reduce-overhead")``: inductor fuses the norms, activations and residual
adds into Triton kernels that its own launchers start, and cudagraph trees capture them. None
of those launches is an aten op, so streamrace finds them as graph nodes and resolves their
parameter words against the live allocations. Printed: graph nodes, invisible kernels,
parameter words and how many resolved.

    python examples/compiled_model_stats.py
"""

from __future__ import annotations

import sys

import torch

import streamrace


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    model = torch.nn.Sequential(*[Block(768) for _ in range(12)]).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(8, 128, 768, device="cuda")
    with torch.no_grad(), streamrace.watch() as session:
        for _ in range(3):  # cudagraph trees: warm up, then record
            out = compiled(x)
    torch.cuda.synchronize()
    with torch.no_grad():
        exact = torch.allclose(out, model(x), atol=1e-3, rtol=1e-3)
    events = session.trace.events
    nodes = [n for e in events if e["ev"] == "graph" for n in e["nodes"]]
    owner_kind = {
        e["seq"]: ("op" if e["ev"] == "op" else e["name"].split(":")[0]) for e in events if e["ev"] in ("op", "kernel")
    }
    owners: dict[str, int] = {}
    for node in nodes:
        kind = owner_kind.get(node.get("op"), "unowned")
        key = kind if kind in ("op", "triton", "unowned") else "other launch"
        owners[key] = owners.get(key, 0) + 1
    stats = session.trace.header["kernel_nodes"]
    print(f"captures: {session.result.summary['graphs']}, graph nodes: {len(nodes)}, created by: {owners}")
    print(
        f"kernel nodes: {sum(n['type'] == 'kernel' for n in nodes)}, of which dispatcher-invisible: "
        f"{stats['invisible_kernels']}"
    )
    print(
        f"their parameter words (candidate pointers): {stats['param_words']}, resolved to live allocations: "
        f"{stats['resolved_words']}"
    )
    print(f"findings: {len(session.findings)}, recorder errors: {len(session.errors)}, output matches eager: {exact}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
