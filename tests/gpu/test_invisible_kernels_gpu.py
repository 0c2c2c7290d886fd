"""Kernels the dispatcher never sees: Triton, CuPy RawKernel, a custom CUDA extension, and
inductor's compiled kernels under cudagraph trees. Each buggy case is flagged and really
corrupts at replay; each twin is clean and exact."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch

import streamrace
from streamrace.analysis.detectors import DATA_RACE

N = 1 << 20
SLEEP = 20_000_000
HERE = pathlib.Path(__file__).name


def _capture_and_replay(body, check, name: str, replays: int = 3):
    """Capture ``body`` under watch() on a named main stream; count replays where ``check`` fails.

    With STREAMRACE_FIXTURE_DIR set, the trace is kept there as NAME.jsonl.gz (CI fixtures)."""
    main = torch.cuda.Stream()
    streamrace.name_stream(main, "main")
    graph = torch.cuda.CUDAGraph()
    fixtures = os.environ.get("STREAMRACE_FIXTURE_DIR")
    trace = os.path.join(fixtures, f"{name}.jsonl.gz") if fixtures else None
    with streamrace.watch(trace) as session, torch.cuda.graph(graph, stream=main):
        outputs = body()
    corrupted = 0
    for _ in range(replays):
        graph.replay()
        torch.cuda.synchronize()
        corrupted += not check(outputs)
    return session, corrupted


def _verdict(session, corrupted: int, fixed: bool):
    """Proven twice: a fixed twin reports nothing and replays exactly (returns None); a buggy
    one corrupts its replays and is flagged as exactly one data race (returned)."""
    if fixed:
        assert session.findings == [] and corrupted == 0, session.report()
        return None
    assert corrupted > 0
    races = [f for f in session.findings if f.kind == DATA_RACE]
    assert len(races) == 1, session.report()
    return races[0]


# -- Triton ----------------------------------------------------------------------------------
triton = pytest.importorskip("triton")
tl = triton.language


@triton.jit
def double_into(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@pytest.mark.parametrize("fixed", [False, True])
def test_triton_kernel_on_side_stream(fixed):
    x = torch.randn(N, device="cuda")
    buf = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    streamrace.name_stream(side, "side")
    double_into[(N // 1024,)](x, buf, N, BLOCK=1024)  # compile before capture
    torch.cuda.synchronize()

    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP)
            double_into[(N // 1024,)](x, buf, N, BLOCK=1024)
        if fixed:
            main.wait_stream(side)
        out = buf + 1
        main.wait_stream(side)
        return out

    def check(out):
        good = torch.equal(out, x * 2 + 1)
        buf.zero_()
        torch.cuda.synchronize()
        return good

    buf.zero_()
    session, corrupted = _capture_and_replay(body, check, f"triton_{'fixed' if fixed else 'buggy'}")
    kernels = [e for e in session.trace.events if e["ev"] == "kernel" and e["name"].startswith("triton:")]
    assert len(kernels) == 1
    assert kernels[0]["inferred"] is False and len(kernels[0]["reads"]) == 1 and len(kernels[0]["writes"]) == 1
    race = _verdict(session, corrupted, fixed)
    if race is None:
        return
    first, second = race.accesses
    assert first.op == "triton:double_into" and first.stream_label == "side"
    assert second.op == "aten::add.Tensor" and second.stream_label == "main"
    assert first.location.endswith(f"{HERE}:{_line_of('double_into[(N // 1024,)](x, buf, N, BLOCK=1024)', 2)}")
    assert second.location.endswith(f"{HERE}:{_line_of('out = buf + 1')}")
    text = session.report()
    assert "triton:double_into" in text and "aten::add.Tensor" in text


def _line_of(snippet: str, occurrence: int = 1) -> int:
    lines = pathlib.Path(__file__).read_text().splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if snippet in line]
    return hits[occurrence - 1]


# -- CuPy ------------------------------------------------------------------------------------
CUPY_SOURCE = r"""
extern "C" __global__ void triple_into(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i];
}
"""


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("annotated", [False, True])
def test_cupy_raw_kernel_on_torch_stream(fixed, annotated):
    cp = pytest.importorskip("cupy")
    kernel = cp.RawKernel(CUPY_SOURCE, "triple_into")
    x = torch.randn(N, device="cuda")
    buf = torch.zeros(N, device="cuda")
    side = torch.cuda.Stream()
    streamrace.name_stream(side, "side")
    kernel.compile()
    if annotated:
        streamrace.kernel_access("triple_into", reads=[0], writes=[1])

    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side), cp.cuda.ExternalStream(side.cuda_stream):
            torch.cuda._sleep(SLEEP)
            kernel((N // 256,), (256,), (cp.asarray(x), cp.asarray(buf), cp.int32(N)))
        if fixed:
            main.wait_stream(side)
        out = buf - 1
        main.wait_stream(side)
        return out

    def check(out):
        good = torch.allclose(out, x * 3 - 1)
        buf.zero_()
        torch.cuda.synchronize()
        return good

    try:
        name = f"cupy_{'annotated_' if annotated else ''}{'fixed' if fixed else 'buggy'}"
        session, corrupted = _capture_and_replay(body, check, name)
    finally:
        streamrace.record.capture_nodes._ANNOTATIONS.clear()
    kernels = [e for e in session.trace.events if e["ev"] == "kernel" and e["name"] == "triple_into"]
    assert len(kernels) == 1 and kernels[0]["inferred"] is not annotated
    assert session.trace.header["kernel_nodes"]["resolved_words"] >= 2
    race = _verdict(session, corrupted, fixed)
    if race is None:
        return
    assert race.hazard == "RAW", session.report()
    assert race.accesses[0].op == "triple_into" and race.accesses[0].inferred is not annotated


# -- a custom CUDA extension whose kernel writes through a pointer its schema hides --------------
EXTENSION_CPP = r"""
#include <torch/extension.h>
void launch_scale(const float* x, float* out, float* hidden, int64_t n, cudaStream_t stream);
static float* g_workspace = nullptr;

void set_workspace(torch::Tensor w) { g_workspace = w.data_ptr<float>(); }

torch::Tensor scale(torch::Tensor x) {
    auto out = torch::empty_like(x);
    launch_scale(x.data_ptr<float>(), out.data_ptr<float>(), g_workspace, x.numel(),
                 at::cuda::getCurrentCUDAStream());
    return out;
}

TORCH_LIBRARY(streamrace_test, m) {
    m.def("set_workspace(Tensor w) -> ()");
    m.def("scale(Tensor x) -> Tensor");  // says nothing about the workspace it writes
}
TORCH_LIBRARY_IMPL(streamrace_test, CUDA, m) {
    m.impl("set_workspace", &set_workspace);
    m.impl("scale", &scale);
}
"""

EXTENSION_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>
__global__ void scale_kernel(const float* x, float* out, float* hidden, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { out[i] = 2.0f * x[i]; hidden[i] = -1.0f; }
}
void launch_scale(const float* x, float* out, float* hidden, int64_t n, cudaStream_t stream) {
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, out, hidden, n);
}
"""


@pytest.fixture(scope="module")
def extension():
    from torch.utils.cpp_extension import load_inline

    load_inline(
        "streamrace_test_ext",
        cpp_sources=["#include <ATen/cuda/CUDAContext.h>\n" + EXTENSION_CPP],
        cuda_sources=[EXTENSION_CU],
        is_python_module=False,
        verbose=False,
    )
    return torch.ops.streamrace_test


@pytest.mark.parametrize("fixed", [False, True])
def test_extension_writes_an_undeclared_pointer(extension, fixed):
    workspace = torch.zeros(N, device="cuda")  # the op writes -1 here, its schema says nothing
    extension.set_workspace(workspace)
    x = torch.randn(N, device="cuda")
    side = torch.cuda.Stream()
    streamrace.name_stream(side, "side")

    def body():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP)
            seen = workspace + 0  # side reads the workspace
        if fixed:
            main.wait_stream(side)
        out = extension.scale(x)  # main writes it through the hidden pointer
        main.wait_stream(side)
        return seen, out

    def check(outputs):
        seen, _ = outputs
        good = bool((seen == 0).all())
        workspace.zero_()
        torch.cuda.synchronize()
        return good

    session, corrupted = _capture_and_replay(body, check, f"extension_{'fixed' if fixed else 'buggy'}")
    race = _verdict(session, corrupted, fixed)
    if race is None:
        return
    write = race.accesses[1]
    assert write.op == "streamrace_test::scale" and write.inferred and write.access == "write"


# -- inductor under cudagraph trees ----------------------------------------------------------
def test_torch_compile_reduce_overhead_is_clean():
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)]).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(32, 256, device="cuda")
    with streamrace.watch() as session:
        for _ in range(4):
            out = compiled(x)
    torch.cuda.synchronize()
    assert torch.allclose(out, model(x), atol=1e-4)
    assert session.result.summary["graphs"] >= 1, "cudagraph trees captured under the recorder"
    assert session.findings == [], session.report()
    assert not session.errors, session.errors
