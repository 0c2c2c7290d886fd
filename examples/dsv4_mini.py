"""A miniature of the DeepSeek-V4 attention prologue with the freed-before-join bug (H1).

The sparse indexer runs on a side stream while the main stream carries on with the attention
prologue; the two overlap inside the captured CUDA graph. ``qkv`` is made on the main stream
and read by the indexer, but its last reference dies when ``_prologue`` returns, before the
main stream joins the side stream. The graph pool hands its block to the next main-stream
allocation of the same size (``mixed``), and at replay ``wmix`` writes the bytes the indexer
is still reading.

``examples/make_handbuilt_trace.py`` writes a trace of ``capture()`` by hand, pointing at the
lines of this file, so that ``streamrace analyze`` can show them. The fix, as in SGLang PR
#36547, is to keep ``qkv`` alive until after ``wait_stream``.
"""

import torch


class MiniSparseAttention(torch.nn.Module):
    def __init__(self, dim: int, q_dim: int, topk: int, tokens: int, side: torch.cuda.Stream) -> None:
        super().__init__()
        self.q_dim = q_dim
        self.side = side
        self.wqkv = torch.nn.Linear(dim, 3 * q_dim, bias=False)
        self.q_norm = torch.nn.RMSNorm(q_dim)
        self.wmix = torch.nn.Linear(q_dim, 3 * q_dim, bias=False)
        self.wo = torch.nn.Linear(3 * q_dim, dim, bias=False)
        self.w_idx = torch.nn.Parameter(torch.randn(3 * q_dim, topk))
        self.register_buffer("topk_scores", torch.zeros(tokens, topk))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        q = self._prologue(hidden)
        mixed = self.wmix(q)
        torch.cuda.current_stream().wait_stream(self.side)
        return self.wo(mixed) + self.topk_scores.sum()

    def _prologue(self, hidden: torch.Tensor) -> torch.Tensor:
        qkv = self.wqkv(hidden)
        qkv_ready = torch.cuda.Event()
        qkv_ready.record()
        with torch.cuda.stream(self.side):
            self.side.wait_event(qkv_ready)
            torch.mm(qkv, self.w_idx, out=self.topk_scores)
        q = self.q_norm(qkv[:, : self.q_dim])
        return q


@torch.inference_mode()
def capture(
    tokens: int = 8, dim: int = 1024, q_dim: int = 512, topk: int = 64
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
    """Capture one forward pass; replaying the graph runs the indexer and ``wmix`` at once."""
    side = torch.cuda.Stream()
    model = MiniSparseAttention(dim, q_dim, topk, tokens, side).to("cuda", torch.bfloat16)
    hidden = torch.randn(tokens, dim, device="cuda", dtype=torch.bfloat16)
    # Warm up eagerly on a side stream, as serving engines do: cuBLAS cannot initialise
    # itself inside a capture.
    warmup = torch.cuda.Stream()
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        for _ in range(2):
            model(hidden)
    torch.cuda.current_stream().wait_stream(warmup)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(hidden)
    return graph, hidden, out
