"""A graph's own event nodes and a kernel that polls a pinned flag, on a real GPU (trace format
1.6; issue 24): the shape of PyTorch's ``test_graph_external_wait_and_record``, written here.
One graph spins on a pinned flag and records an ``Event(external=True)``; a second waits on it,
copies into pinned memory and records another. The order is real (the host reads the old value
before it sets the flag, the new one after synchronizing the second event), both hook sets name
each event node's event and the pinned flag the kernel points into, and the recording has no
finding; a host read after the flag without the synchronization still has one."""

from __future__ import annotations

import time

import pytest
import torch

import streamrace
from streamrace.analysis.detectors import PINNED_READ_BEFORE_COPY

SPIN = r"""
__global__ void wait_for_cpu(int *pinned_cpu_flag) {
    int flag = 0;
    do {
        asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(flag) : "l"(pinned_cpu_flag) : "memory");
    } while (flag == 0);
}
"""

compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
pytestmark = pytest.mark.skipif(compile_kernel is None, reason="this torch has no torch.cuda._compile_kernel")


def signalled_copy(synchronize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(what the host read before setting the flag, what it read after it)."""
    spin = compile_kernel(SPIN, "wait_for_cpu")
    x = torch.ones(4, device="cuda")
    x_cpu = torch.zeros(4).pin_memory()
    flag = torch.zeros(1, dtype=torch.int32).pin_memory()
    start, end = torch.cuda.Event(external=True), torch.cuda.Event(external=True)
    signalling = torch.cuda.CUDAGraph()
    with torch.cuda.graph(signalling, capture_error_mode="relaxed"):
        spin(grid=(1, 1, 1), block=(1, 1, 1), args=[flag])
        start.record()
    working = torch.cuda.CUDAGraph()
    with torch.cuda.graph(working, capture_error_mode="relaxed"):
        start.wait()
        x_cpu.copy_(x, non_blocking=True)
        end.record()
    with torch.cuda.stream(torch.cuda.Stream()):
        signalling.replay()
    with torch.cuda.stream(torch.cuda.Stream()):
        working.replay()
    time.sleep(0.2)  # the copy would have landed by now, were it not behind the spinning kernel
    early = x_cpu.clone()
    flag[0] = 1
    if synchronize:
        end.synchronize()
    late = x_cpu.clone()
    torch.cuda.synchronize()
    return early, late


def test_the_order_is_real():
    early, late = signalled_copy()
    assert torch.all(early == 0.0), "the copy ran before the host set the flag"
    assert torch.all(late == 1.0), "the copy had not landed after its external event was synchronized"


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_the_recording_names_the_event_nodes_and_the_polled_flag_and_finds_nothing(hooks):
    torch.cuda.synchronize()
    with streamrace.watch(hooks=hooks) as session:
        signalled_copy()
    assert not session.errors
    events = session.trace.events
    graphs = [e for e in events if e["ev"] == "graph"]
    named = [n for g in graphs for n in g["nodes"] if n["type"] in ("eventrecord", "waitevent")]
    assert sorted(n["type"] for n in named) == ["eventrecord", "eventrecord", "waitevent"]
    assert all(isinstance(n.get("event"), int) and n["event"] > 0 for n in named), named
    spins = [e for e in events if e["ev"] == "kernel" and "wait_for_cpu" in e["name"]]
    assert len(spins) == 1 and spins[0].get("host_ranges"), spins
    flags = [e for e in events if e["ev"] == "host_alloc" and e["addr"] == spins[0]["host_ranges"][0]["addr"]]
    assert len(flags) == 1, "the kernel's host range is the pinned flag's block"
    assert session.findings == [], [f.message for f in session.findings]


def test_a_read_after_the_flag_without_the_synchronization_is_still_found():
    torch.cuda.synchronize()
    with streamrace.watch() as session:
        signalled_copy(synchronize=False)
    assert not session.errors
    assert [f.kind for f in session.findings] == [PINNED_READ_BEFORE_COPY], [f.message for f in session.findings]
