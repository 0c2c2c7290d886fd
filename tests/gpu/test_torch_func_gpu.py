"""An op under torch.vmap on a side stream of a capture: the buggy twin (the main stream reads
what the vmapped op writes before joining the side stream) is flagged and really corrupts at
replay; the fixed twin is clean and exact (tests/test_torch_func_ops.py on the CPU)."""

from __future__ import annotations

import pytest
import torch
from test_invisible_kernels_gpu import SLEEP, N, _capture_and_replay, _verdict

import streamrace

ROWS = 8


@pytest.mark.parametrize("fixed", [False, True])
def test_a_vmapped_write_on_a_side_stream(fixed):
    x = torch.randn(N, device="cuda")
    buf = torch.ones(N, device="cuda")
    side = torch.cuda.Stream()
    streamrace.name_stream(side, "side")
    multiply = torch.vmap(torch.Tensor.mul_)

    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP)
            multiply(buf.view(ROWS, -1), x.view(ROWS, -1))
        if fixed:
            main.wait_stream(side)
        out = buf + 1
        main.wait_stream(side)
        return out

    def check(out):
        good = torch.equal(out, x + 1)
        buf.fill_(1.0)
        torch.cuda.synchronize()
        return good

    session, corrupted = _capture_and_replay(body, check, f"vmap_{'fixed' if fixed else 'buggy'}")
    (mul,) = [e for e in session.trace.events if e["ev"] == "op" and e["op"].startswith("aten::mul_")]
    assert [w["addr"] for w in mul["writes"]] == [buf.data_ptr()]
    race = _verdict(session, corrupted, fixed)
    if race is None:
        return
    first, second = race.accesses
    assert first.op.startswith("aten::mul_") and first.stream_label == "side"
    assert second.op == "aten::add.Tensor" and second.stream_label == "main"
