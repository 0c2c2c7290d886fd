"""A library's own event record, on a real GPU (trace format 1.7): a kernel torch never sees
writes a buffer on a side stream, the library records a torch event there itself
(``cudaEventRecord`` on the event's handle, which no hook hears), and the main stream waits on
the event through torch and reads the buffer. The captured graph orders the read after the
write; before 1.7 the trace had the wait and no record, and both hook sets reported a data race
the graph does not have. Now the wait stands in for the record (an ``event_record`` with
``inferred``), and the recording has no finding; without the wait, the race is reported."""

from __future__ import annotations

import pytest
import torch

import streamrace

cudart = pytest.importorskip("cuda.bindings.runtime")
compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
pytestmark = pytest.mark.skipif(compile_kernel is None, reason="this torch has no torch.cuda._compile_kernel")

FILL = r"""
__global__ void fill(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f;
}
"""


def library_write_then_read(hooks: str, wait: bool) -> tuple[streamrace.Session, torch.Tensor]:
    """The capture, recorded with ``hooks``, replayed; (the session, what the read made)."""
    fill = compile_kernel(FILL, "fill")
    x = torch.zeros(1 << 16, device="cuda")
    side = torch.cuda.Stream()
    done = torch.cuda.Event()
    graph = torch.cuda.CUDAGraph()
    with streamrace.watch(hooks=hooks) as session:
        done.record()  # torch makes the event's handle at its first record, heard
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                fill(grid=(x.numel() // 256, 1, 1), block=(256, 1, 1), args=[x, x.numel()])
                event, stream = cudart.cudaEvent_t(done.cuda_event), cudart.cudaStream_t(side.cuda_stream)
                (err,) = cudart.cudaEventRecord(event, stream)  # the library's own: no hook hears it
                assert err == cudart.cudaError_t.cudaSuccess, err
            if wait:
                main.wait_event(done)
            y = x * 3
            main.wait_stream(side)
    x.zero_()
    graph.replay()
    torch.cuda.synchronize()
    return session, y


def done_event(events: list[dict]) -> int:
    """The library's event: the one recorded eagerly before the capture (torch's first record)."""
    return next(e["event"] for e in events if e["ev"] == "event_record")


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_the_library_s_own_record_orders_the_read_and_the_recording_finds_nothing(hooks):
    session, y = library_write_then_read(hooks, wait=True)
    assert torch.all(y == 6.0), "the read ran before the library's write"
    assert not session.errors, session.errors
    events = session.trace.events
    stood_in = [e for e in events if e["ev"] == "event_record" and e.get("inferred")]
    assert len(stood_in) == 1 and stood_in[0]["event"] == done_event(events), stood_in
    (wait,) = [e for e in events if e["ev"] == "event_wait" and e["event"] == stood_in[0]["event"]]
    assert stood_in[0]["seq"] == wait["seq"] - 1, (stood_in, wait)
    kernels = [e for e in events if e["ev"] == "kernel" and "fill" in e["name"]]
    assert len(kernels) == 1 and kernels[0]["seq"] < stood_in[0]["seq"], kernels
    assert session.findings == [], session.report()


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_without_the_wait_the_race_is_reported(hooks):
    session, _ = library_write_then_read(hooks, wait=False)
    assert not session.errors, session.errors
    assert not [e for e in session.trace.events if e["ev"] == "event_record" and e.get("inferred")]
    assert "data-race" in {f.kind for f in session.findings}, session.report()
