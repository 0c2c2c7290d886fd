"""An op that raised, on a GPU (tests/test_raising_ops.py on the CPU): a refused out= write on
the main stream while a side stream reads the buffer is no race, and the buffer is untouched;
a non-reentrant checkpoint (its recomputation stops by raising above an op) runs eagerly and
captured as it does without the recorder, with either hook set."""

from __future__ import annotations

import pytest
import torch

import streamrace

N = 1 << 20


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_a_refused_write_is_no_race_and_writes_nothing(hooks):
    x = torch.randn(N, device="cuda")
    z = torch.ones(N, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with streamrace.watch(hooks=hooks) as session, torch.cuda.graph(graph):
        main = torch.cuda.current_stream()
        assert side != main
        side.wait_stream(main)
        with torch.cuda.stream(side):
            y = z * 2  # the side stream reads z
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.add(x, 1.0, out=z.view(torch.int32))
        main.wait_stream(side)
    assert not session.errors
    assert session.findings == [], [f.kind for f in session.findings]
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.ones_like(z)) and torch.equal(y, torch.full_like(z, 2.0))


def _checkpointed_step(capture: bool) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    w = torch.randn(256, 256, device="cuda", requires_grad=True)
    x = torch.randn(64, 256, device="cuda", requires_grad=True)

    def step() -> None:
        y = torch.utils.checkpoint.checkpoint(lambda t: torch.relu(t @ w).sin() @ w, x, use_reentrant=False)
        y.sum().backward()

    if capture:
        step()  # warm-up: autograd's streams and the grads' buffers
        x.grad, w.grad = None, None
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        graph.replay()
    else:
        step()
    torch.cuda.synchronize()
    return x.grad.clone(), w.grad.clone()


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "captured"])
@pytest.mark.parametrize("hooks", ["native", "python"])
def test_a_non_reentrant_checkpoint_runs_as_without_the_recorder(hooks, capture):
    expected = _checkpointed_step(capture)
    with streamrace.watch(hooks=hooks) as session:
        got = _checkpointed_step(capture)
    assert not session.errors, session.errors
    assert session.findings == [], [f.kind for f in session.findings]
    assert all(torch.allclose(g, e) for g, e in zip(got, expected, strict=True))
