"""The programs of PyTorch 2.13's ``check_input_liveness`` tests (test/test_cuda_graph_debug.py,
../shared/peer-suites/liveness_cases.md), one function per case, as torch 2.11 runs them:
the same program without the kwarg 2.11 does not have.

Each program marks its lines: ``# FREE`` where torch raises at the next replay (the free of a
captured graph's external input, where streamrace must report it), ``# OWNER`` where the
program (not torch's test) allocates the freed block's next owner and fills it, so that the
replay after the free shows the danger: it reads the owner's bytes. ``Proof`` keeps what the
program shows on the GPU. Shared by tests/gpu/test_liveness_parity_gpu.py and
tests/gpu/record_liveness_fixtures.py.
"""

# ruff: noqa: F821 (lambdas over names the program then deletes: what these programs are about)

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SENTINEL = 7.0  # what a next owner holds; a replay that reads it reads the owner's bytes


class Proof:
    """What a program shows on the GPU, besides what streamrace says: its exact results where
    torch accepts, and where it raises, whether the next owner got the freed block and the
    replay then read the owner's bytes."""

    def __init__(self) -> None:
        self.checks: list[tuple[str, bool]] = []
        self.owners: list[tuple[int, bool]] = []  # (freed block's address, the owner got it)

    def exact(self, what: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        self.checks.append((what, torch.equal(actual, expected)))

    def close(self, what: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        self.checks.append((what, torch.allclose(actual, expected, rtol=1e-3, atol=1e-3)))

    def holds(self, what: str, fact: bool) -> None:
        self.checks.append((what, bool(fact)))

    def took(self, owner: torch.Tensor, freed: int) -> None:
        """``owner`` was allocated right after the free of the block at ``freed``."""
        self.owners.append((freed, owner.data_ptr() == freed))

    def reads_owner(self, what: str, actual: torch.Tensor, predicted: torch.Tensor, approx: bool = False) -> None:
        """After the replay: ``actual`` is what the graph computes from the owner's bytes
        (``predicted``). Only a proof where the owner got the block."""
        if self.owners and all(taken for _, taken in self.owners):
            same = torch.allclose(actual, predicted, rtol=1e-3, atol=1e-3) if approx else torch.equal(actual, predicted)
            self.checks.append((what, same))

    @property
    def premise(self) -> bool | None:
        """Whether every next owner got its freed block (None: the program has none)."""
        return all(taken for _, taken in self.owners) if self.owners else None

    @property
    def exact_all(self) -> bool:
        return all(held for _, held in self.checks)


# -- torch's helpers ---------------------------------------------------------------------------
def _warmup(op: Callable[[], Any], n: int = 3) -> None:
    """torch's _warmup_op: the op three times on a side stream, which here first waits for the
    current one, as PyTorch's documented warm-up does. torch's helper does not: its side stream
    reads the inputs while their producers may still run, a data race of its own (streamrace
    reports it as ``data-race``), beside the point of these cases."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            op()


def _capture(op: Callable[[], Any], **graph_kwargs: Any) -> tuple[torch.cuda.CUDAGraph, Any]:
    """torch's _capture_graph, without check_input_liveness."""
    g = torch.cuda.CUDAGraph()
    _warmup(op)
    with torch.cuda.graph(g, **graph_kwargs):
        out = op()
    return g, out


def _full(shape: tuple[int, ...], value: float = SENTINEL) -> torch.Tensor:
    """A predicted result. (The next owners are made on their own lines: ``# OWNER`` is where
    their allocation is reported.)"""
    return torch.full(shape, value, device="cuda")


class SimpleMLP(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _mlp_with(model: SimpleMLP, x: torch.Tensor, weights: dict[int, torch.Tensor]) -> torch.Tensor:
    """The MLP with some layers' weights replaced (what a replay computes after the swap)."""
    for i, layer in enumerate(model.layers):
        weight = weights[i] if i in weights else layer.weight  # noqa: SIM401 (a deleted weight is not asked for)
        x = torch.relu(F.linear(x, weight, layer.bias))
    return x


class ScaleOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (scale,) = ctx.saved_tensors
        return grad * scale, None


@torch.library.custom_op("streamrace_liveness::scale", mutates_args=())
def scale_op(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * scale


@scale_op.register_fake
def _(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


# -- the 19 cases of test_cuda_graph_debug.py ----------------------------------------------------
def nothing_dead_ok(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    g.replay()
    p.exact("y == 2x", y, x * 2)
    return g, y, x


def dead_input_tensor(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    freed = x.data_ptr()
    del x  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, owner


def dead_intermediate_tensors_ok(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = x * 2
        y = tmp + 1
    del tmp
    g.replay()
    p.exact("y == 2x + 1", y, x * 2 + 1)
    del y
    g.replay()
    return g, x


def model_weight_dead(p: Proof) -> tuple:
    model = SimpleMLP(width=64, depth=5).cuda()
    x = torch.randn(8, 64, device="cuda")
    g = torch.cuda.CUDAGraph()
    _warmup(lambda: model(x))
    with torch.no_grad(), torch.cuda.graph(g):
        y = model(x)
    g.replay()
    with torch.no_grad():
        p.close("y == model(x)", y, model(x))
    freed = model.layers[2].weight.data_ptr()
    del model.layers[2].weight  # FREE
    owner = torch.full((64, 64), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    with torch.no_grad():
        predicted = _mlp_with(model, x, {2: owner})
    g.replay()
    p.reads_owner("y == the MLP with layer 2's weight the next owner's", y, predicted, approx=True)
    return g, y, model, owner, x  # x too: an input freed at the return, under the live graph, is a finding


def model_training_weight_dead(p: Proof) -> tuple:
    model = nn.Linear(32, 16).cuda()
    x = torch.randn(8, 32, device="cuda")
    static_grad = torch.randn(8, 16, device="cuda")
    for _ in range(3):
        model(x).backward(static_grad)
    g = torch.cuda.CUDAGraph()
    model.zero_grad()
    with torch.cuda.graph(g):
        out = model(x)
        out.backward(static_grad)
    seen = out.detach()  # not in torch's test: out's bytes, before the replay (the static output held)
    g.replay()
    del out
    freed = model.weight.data_ptr()
    del model.weight  # FREE
    owner = torch.full((16, 32), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    with torch.no_grad():
        predicted = F.linear(x, owner, model.bias)
    g.replay()
    p.reads_owner("out == x @ owner.T + bias", seen, predicted, approx=True)
    return g, seen, model, x, static_grad, owner


def view_tensor(p: Proof) -> tuple:
    base = torch.randn(100, device="cuda")
    view = base[10:50]
    g, y = _capture(lambda: view * 2)
    del view
    g.replay()
    p.exact("y == 2 base[10:50] (the base keeps the storage)", y, base[10:50] * 2)
    freed = base.data_ptr()
    del base  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((40,), 2 * SENTINEL))
    return g, y, owner


def nested_structure_inputs(p: Proof) -> tuple:
    xs = [torch.randn(10, device="cuda") for _ in range(3)]
    ys = [torch.randn(10, device="cuda") for _ in range(3)]
    g, result = _capture(lambda: torch._foreach_add(xs, ys))
    freed = ys[1].data_ptr()
    del ys[1]  # FREE
    owner = torch.full((10,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("result[1] == xs[1] + the next owner's bytes", result[1], xs[1] + SENTINEL)
    return g, result, xs, ys, owner


def empty_tensor_not_tracked(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    empty = torch.empty(0, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
        z = empty.view(0)
    p.holds("the empty tensor has no memory", empty.data_ptr() == 0)
    del empty
    g.replay()
    p.exact("y == 2x", y, x * 2)
    return g, y, z, x


def non_capturing_stream_inputs_not_tracked(p: Proof) -> tuple:
    """As torch's test, and then the default stream waits for ``other_stream`` before ``y``
    goes: torch's test frees ``y`` while ``other_stream`` may still read it, an eager unsafe
    free of its own (``non_capturing_stream_as_written``)."""
    capture_stream = torch.cuda.Stream()
    other_stream = torch.cuda.Stream()
    x = torch.randn(100, device="cuda")
    y = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(capture_stream), torch.cuda.graph(g, capture_error_mode="relaxed"):
        result = x * 2
        with torch.cuda.stream(other_stream):
            other_result = y * 3
    torch.cuda.current_stream().wait_stream(other_stream)  # not in torch's test
    del y
    g.replay()
    p.exact("result == 2x", result, x * 2)
    return g, result, other_result, x


def shared_pool_tensor_not_tracked(p: Proof) -> tuple:
    pool = torch.cuda.graph_pool_handle()
    x = torch.randn(100, device="cuda")
    g1 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        y = x + 1
        w = torch.randn(100, device="cuda")
    external_input = torch.randn(100, device="cuda")
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=pool):
        z = y * 2 + external_input
        q = w + 1
    del y
    g1.replay()
    g2.replay()
    p.exact("z == (x + 1) * 2 + external_input", z, (x + 1) * 2 + external_input)
    del w
    g1.replay()
    g2.replay()
    return g1, g2, z, q, x, external_input


def alive_storage_dead_tensor_ok(p: Proof) -> tuple:
    a = torch.randn(100, device="cuda")
    b = torch.empty(100, device="cuda")
    b.set_(a.untyped_storage())
    g, y = _capture(lambda: a * 2)
    del a
    g.replay()
    p.exact("y == 2b (b keeps a's storage)", y, b * 2)
    freed = b.data_ptr()
    del b  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, owner


def dead_storage_raises(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    freed = x.data_ptr()
    x.set_(torch.randn(100, device="cuda").untyped_storage())  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, x, owner


def resize_larger_detected(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    freed = x.data_ptr()
    x.resize_(100000)  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, x, owner


def pinned_memory_tensor_tracked(p: Proof) -> tuple:
    pinned = torch.randn(100).pin_memory()
    cuda_dest = torch.empty(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cuda_dest.copy_(pinned, non_blocking=True)
        y = cuda_dest * 2
    g.replay()
    p.exact("y == 2 * pinned", y, pinned.cuda() * 2)
    del pinned  # FREE
    g.replay()
    return g, y, cuda_dest


def recapture_without_clears_stale_state(p: Proof) -> tuple:
    g = torch.cuda.CUDAGraph()
    x = torch.randn(32, device="cuda")
    with torch.cuda.graph(g):
        y = x * 2
    freed = x.data_ptr()
    del x  # FREE
    owner = torch.full((32,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((32,), 2 * SENTINEL))
    g.reset()
    x2 = torch.randn(32, device="cuda")
    with torch.cuda.graph(g):
        y2 = x2 * 3
    g.replay()
    p.exact("after reset and recapture: y2 == 3 x2", y2, x2 * 3)
    return g, y, y2, x2, owner


def higher_order_op_during_capture(p: Proof) -> tuple:
    from torch._higher_order_ops.wrap import wrap

    def inner_fn(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    x = torch.randn(32, device="cuda")
    g, y = _capture(lambda: wrap(inner_fn, x))
    g.replay()
    p.exact("y == 2x", y, x * 2)
    return g, y, x


def error_message_contains_all_tracebacks(p: Proof) -> tuple:
    a = torch.randn(100, device="cuda")
    b = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = a + b
    freed = (a.data_ptr(), b.data_ptr())

    def delete_tensors() -> None:
        nonlocal a, b
        del a, b  # FREE

    delete_tensors()
    owner_a = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    owner_b = torch.full((100,), 2 * SENTINEL, device="cuda")  # OWNER
    p.took(owner_a, freed[0])
    p.took(owner_b, freed[1])
    g.replay()
    p.reads_owner("y == the two next owners' bytes added", y, _full((100,), 3 * SENTINEL))
    return g, y, owner_a, owner_b


def custom_autograd_function(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    scale = torch.tensor(2.0, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        y = ScaleOp.apply(x, scale)
    freed = scale.data_ptr()
    del scale  # FREE
    owner = torch.full((), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == x * the next owner's bytes", y, x * SENTINEL)
    return g, y, x, owner


def torch_library_custom_op(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    scale = torch.tensor(3.0, device="cuda")
    g, y = _capture(lambda: scale_op(x, scale))
    freed = scale.data_ptr()
    del scale  # FREE
    owner = torch.full((), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == x * the next owner's bytes", y, x * SENTINEL)
    return g, y, x, owner


# -- cases of other stored versions of the file (liveness_cases.md, "Extra cases") ---------------
def multiple_inputs_one_dead(p: Proof) -> tuple:
    a = torch.randn(100, device="cuda")
    b = torch.randn(100, device="cuda")
    g, y = _capture(lambda: a + b)
    freed = a.data_ptr()
    del a  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == the next owner's bytes + b", y, b + SENTINEL)
    return g, y, b, owner


def model_nothing_dead(p: Proof) -> tuple:
    model = SimpleMLP(width=64, depth=5).cuda()
    x = torch.randn(8, 64, device="cuda")
    g = torch.cuda.CUDAGraph()
    _warmup(lambda: model(x))
    with torch.no_grad(), torch.cuda.graph(g):
        y = model(x)
    g.replay()
    with torch.no_grad():
        p.close("y == model(x)", y, model(x))
    return g, y, model, x


def model_weights_dead(p: Proof) -> tuple:
    model = SimpleMLP(width=64, depth=5).cuda()
    x = torch.randn(8, 64, device="cuda")
    g = torch.cuda.CUDAGraph()
    _warmup(lambda: model(x))
    with torch.no_grad(), torch.cuda.graph(g):
        y = model(x)
    del model  # FREE
    g.replay()
    return g, y, x


def dies_between_replays(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    g.replay()
    p.exact("y == 2x", y, x * 2)
    freed = x.data_ptr()
    del x  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, owner


def view_and_base_dead_together(p: Proof) -> tuple:
    base = torch.randn(100, device="cuda")
    view = base[10:50]
    g, y = _capture(lambda: view * 2)
    freed = base.data_ptr()
    del base, view  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((40,), 2 * SENTINEL))
    return g, y, owner


def output_tensor_dead_ok(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    del y
    g.replay()
    return g, x


def cpu_result_op(p: Proof) -> tuple:
    """torch.equal of a tensor with itself: a bool, no kernel (it short-circuits)."""
    x = torch.randn(100, device="cuda")
    _warmup(lambda: torch.equal(x, x))
    w = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        same = torch.equal(x, x)
        z = w * 2  # torch's test captures torch.equal alone (an empty graph)
    p.holds("torch.equal(x, x) is True", same)
    g.replay()
    p.exact("z == 2w", z, w * 2)
    return g, z, x, w


def cpu_result_op_input_freed(p: Proof) -> tuple:
    """cpu_result_op, then x goes: no captured kernel reads it, so torch does not track it."""
    x = torch.randn(100, device="cuda")
    _warmup(lambda: torch.equal(x, x))
    w = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        same = torch.equal(x, x)
        z = w * 2
    p.holds("torch.equal(x, x) is True", same)
    del x
    g.replay()
    p.exact("z == 2w", z, w * 2)
    return g, z, w


def pinned_non_copy_op(p: Proof) -> tuple:
    pinned = torch.randn(100).pin_memory()
    cuda_tensor = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    _warmup(lambda: pinned * 2)
    with torch.cuda.graph(g):
        on_host = pinned * 2  # a CPU op: eager, not captured
        y = cuda_tensor * 2
    del pinned
    g.replay()
    p.exact("y == 2 cuda_tensor", y, cuda_tensor * 2)
    return g, y, on_host, cuda_tensor


def capture_main_replay_thread(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    g, y = _capture(lambda: x * 2)
    freed = x.data_ptr()
    del x  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    worker = threading.Thread(target=g.replay)
    worker.start()
    worker.join()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, owner


def capture_thread_replay_main(p: Proof) -> tuple:
    x = torch.randn(100, device="cuda")
    graphs = []

    def capture_worker() -> None:
        g = torch.cuda.CUDAGraph()
        _warmup(lambda: x * 2)
        with torch.cuda.graph(g):
            y = x * 2
        graphs.append((g, y))

    worker = threading.Thread(target=capture_worker)
    worker.start()
    worker.join()
    g, y = graphs[0]
    freed = x.data_ptr()
    del x  # FREE
    owner = torch.full((100,), SENTINEL, device="cuda")  # OWNER
    p.took(owner, freed)
    g.replay()
    p.reads_owner("y == 2 * the next owner's bytes", y, _full((100,), 2 * SENTINEL))
    return g, y, owner


def _training(model_on: Callable[[], nn.Module], width: int, out: int, batch: int) -> tuple:
    model = model_on()
    x = torch.randn(batch, width, device="cuda")
    static_grad = torch.randn(batch, out, device="cuda")
    for _ in range(3):
        model(x).backward(static_grad)
    g = torch.cuda.CUDAGraph()
    model.zero_grad()
    return model, x, static_grad, g


class _NoAutogradThreads:
    """torch's TestCUDAGraphDebugTraining: autograd's device threads off, on a side stream."""

    def __enter__(self) -> torch.cuda.Stream:
        self.was = torch.autograd.is_multithreading_enabled()
        torch.autograd.set_multithreading_enabled(False)
        self.stream = torch.cuda.Stream()
        self.context = torch.cuda.stream(self.stream)
        self.context.__enter__()
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        self.context.__exit__(*exc)
        torch.autograd.set_multithreading_enabled(self.was)


def training_forward_backward(p: Proof) -> tuple:
    with _NoAutogradThreads():
        model, x, static_grad, g = _training(lambda: nn.Linear(32, 16).cuda(), 32, 16, 8)
        with torch.cuda.graph(g):
            out = model(x)
            out.backward(static_grad)
        g.replay()
        freed = x.data_ptr()
        del x  # FREE
        owner = torch.full((8, 32), SENTINEL, device="cuda")  # OWNER
        p.took(owner, freed)
        with torch.no_grad():
            predicted = model(owner)
        g.replay()
        p.reads_owner("out == the model of the next owner's bytes", out.detach(), predicted, approx=True)
        return g, out, model, static_grad, owner


def training_weight_deleted(p: Proof) -> tuple:
    with _NoAutogradThreads():
        model, x, static_grad, g = _training(lambda: nn.Linear(32, 16).cuda(), 32, 16, 8)
        with torch.cuda.graph(g):
            out = model(x)
            out.backward(static_grad)
        del model, out  # FREE
        g.replay()
        return g, x, static_grad


def training_multilayer(p: Proof) -> tuple:
    def sequential() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).cuda()

    with _NoAutogradThreads():
        model, x, static_grad, g = _training(sequential, 64, 16, 4)
        with torch.cuda.graph(g):
            out = model(x)
            out.backward(static_grad)
        g.replay()
        freed = static_grad.data_ptr()
        del static_grad  # FREE
        owner = torch.full((4, 16), SENTINEL, device="cuda")  # OWNER
        p.took(owner, freed)
        bias_grad = model[2].bias.grad
        g.replay()
        p.reads_owner("the last bias's grad == the next owner's rows summed", bias_grad, owner.sum(0), approx=True)
        return g, out, model, x, owner


def non_capturing_stream_as_written(p: Proof) -> tuple:
    """Case 9 exactly as torch writes it: ``y`` is freed while ``other_stream``, which never
    joined the capture and was never waited for, may still read it. Not a graph input (torch
    and streamrace agree), but an eager free before the join: streamrace's unsafe-free (X6)."""
    capture_stream = torch.cuda.Stream()
    other_stream = torch.cuda.Stream()
    x = torch.randn(100, device="cuda")
    y = torch.randn(100, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(capture_stream), torch.cuda.graph(g, capture_error_mode="relaxed"):
        result = x * 2
        with torch.cuda.stream(other_stream):
            other_result = y * 3
    del y  # UNSAFE
    g.replay()
    p.exact("result == 2x", result, x * 2)
    return g, result, other_result, x


# -- the table ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One program and what torch 2.13's check does with it."""

    number: str  # its row in liveness_cases.md: "1".."19", or "extra"
    program: Callable[[Proof], tuple]
    torch_raises: bool
    host_memory: bool = False  # the freed input is pinned host memory: needs host recording (issue 26 M3)
    # Findings of other kinds that are right here (a different hazard in the same program).
    other_kinds: tuple[str, ...] = ()
    # Captures in another thread: the Python hooks' dispatch mode is the main thread's, so they
    # see its kernels only through the graph's read-back (cuda-bindings).
    other_thread_capture: bool = False
    note: str = ""

    @property
    def name(self) -> str:
        return self.program.__name__

    def lines(self, tag: str) -> list[int]:
        """The program's lines marked ``# TAG``."""
        source, first = inspect.getsourcelines(self.program)
        return [first + i for i, text in enumerate(source) if text.rstrip().endswith(f"# {tag}")]


CASES = [
    Case("1", nothing_dead_ok, False),
    Case("2", dead_input_tensor, True),
    Case("3", dead_intermediate_tensors_ok, False),
    Case("4", model_weight_dead, True),
    Case("5", model_training_weight_dead, True),
    Case("6", view_tensor, True, note="the first free (the view) keeps the storage: no finding there"),
    Case("7", nested_structure_inputs, True),
    Case("8", empty_tensor_not_tracked, False),
    Case("9", non_capturing_stream_inputs_not_tracked, False, note="joined before the free (see the as-written row)"),
    Case("10", shared_pool_tensor_not_tracked, False),
    Case("11", alive_storage_dead_tensor_ok, True, note="the first free (a) keeps the storage (b aliases it)"),
    Case("12", dead_storage_raises, True),
    Case("13", resize_larger_detected, True),
    Case("14", pinned_memory_tensor_tracked, True, host_memory=True),
    Case("15", recapture_without_clears_stale_state, True),
    Case("16", higher_order_op_during_capture, False),
    Case("17", error_message_contains_all_tracebacks, True),
    Case("18", custom_autograd_function, True),
    Case("19", torch_library_custom_op, True),
    Case("extra", multiple_inputs_one_dead, True),
    Case("extra", model_nothing_dead, False),
    Case("extra", model_weights_dead, True),
    Case("extra", dies_between_replays, True),
    Case("extra", view_and_base_dead_together, True),
    Case("extra", output_tensor_dead_ok, False),
    Case("extra", cpu_result_op, False),
    Case("extra", cpu_result_op_input_freed, False, note="x freed: torch.equal(x, x) launched nothing"),
    Case("extra", pinned_non_copy_op, False),
    Case("extra", capture_main_replay_thread, True),
    Case("extra", capture_thread_replay_main, True, other_thread_capture=True),
    Case("extra", training_forward_backward, True),
    Case("extra", training_weight_deleted, True),
    Case("extra", training_multilayer, True),
    Case("9", non_capturing_stream_as_written, False, other_kinds=("unsafe-free",), note="as torch writes it"),
]


@dataclass
class Row:
    """One case's result, for the table."""

    case: Case
    hooks: str
    found: list[str] = field(default_factory=list)  # "kind at line", per finding
    owner_named: str = "-"
    proof: str = "-"
    verdict: str = "?"
