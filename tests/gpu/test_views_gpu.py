"""Tensors made over memory they do not own are views of it (issue 24, item 3): `_unsafe_view`,
a custom op's non-owning result (vLLM's weak_ref_tensor, made with from_blob: here through
DLPack) and `torch.as_tensor` over `__cuda_array_interface__` launch nothing and allocate
nothing, so making one on the main stream while a side stream reads the memory is no race. A
write through the view still is one (the positive twin)."""

from __future__ import annotations

import pytest
import torch

import streamrace
from streamrace.analysis.detectors import DATA_RACE

_VIEWS = torch.library.Library("streamrace_gpu_views", "DEF")
_VIEWS.define("weak_ref(Tensor x) -> Tensor")
_VIEWS.impl("weak_ref", lambda x: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x.detach())), "CUDA")


def _cuda_array_interface_view(x: torch.Tensor) -> torch.Tensor:
    class Borrowed:  # what CuPy, Numba or a C extension hands over: a pointer, not an owner
        __cuda_array_interface__ = x.__cuda_array_interface__

    return torch.as_tensor(Borrowed(), device="cuda")


MAKE_VIEW = {
    "unsafe_view": lambda x: torch.ops.aten._unsafe_view(x, [x.numel()]),
    "weak_ref": lambda x: torch.ops.streamrace_gpu_views.weak_ref(x),
    "cuda_array_interface": _cuda_array_interface_view,
}


def _program(make_view, write_through_view: bool, hooks: str):
    side = torch.cuda.Stream()
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with streamrace.watch(hooks=hooks) as session, torch.cuda.graph(graph):
        main = torch.cuda.current_stream()
        assert side != main, "a side stream of the capture stream's pool (tests/gpu/conftest.py)"
        y = x * 1  # made in the capture, so its bytes are the graph's own
        side.wait_stream(main)
        with torch.cuda.stream(side):
            z = y * 2  # the side stream reads y
        view = make_view(y)  # on main, before the join
        if write_through_view:
            view.add_(1)  # a real write, racing with the side stream's read
        main.wait_stream(side)
        del view
    return session, (y, z)


@pytest.mark.parametrize("hooks", ["native", "python"])
@pytest.mark.parametrize("name", sorted(MAKE_VIEW))
def test_making_a_non_owning_view_is_no_access(name, hooks):
    session, _ = _program(MAKE_VIEW[name], write_through_view=False, hooks=hooks)
    assert not session.errors
    assert session.findings == [], [f.kind for f in session.findings]
    blocks = [e for e in session.trace.events if e["ev"] == "alloc" and e["size"] >= 4 << 20]
    assert len(blocks) == 2, "y and z: the view is no allocation"


@pytest.mark.parametrize("hooks", ["native", "python"])
@pytest.mark.parametrize("name", sorted(MAKE_VIEW))
def test_a_write_through_the_view_still_races(name, hooks):
    session, _ = _program(MAKE_VIEW[name], write_through_view=True, hooks=hooks)
    assert [f.kind for f in session.findings] == [DATA_RACE]
