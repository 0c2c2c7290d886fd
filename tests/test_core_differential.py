"""The C++ core (csrc/) against the Python reference engine: identical findings, byte for byte.

Both engines analyse the same traces and their JSON (``AnalysisResult.to_dict`` and every raw
finding) must be equal: on the oracle property test's random programs (replays, resets and
freed graph inputs among them), on the execution view's programs, on programs whose
blocks and views are spread over every granule size of the C++ shadow index (and cross its
boundaries), on every committed real trace, and on the synthetic capture set of the
benchmark. The engines must also forget the same accesses. Skipped when the extension is not
built; ``.ci/run`` builds it.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from analysis_engines import core
from benchmark_traces import capture_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_execution_view import PROGRAMS as EXECUTION_VIEW
from test_liveness_parity import PROGRAMS as LIVENESS
from test_oracle_property import programs

from streamrace.analysis import AnalysisResult, analyze
from streamrace.analysis.core import CORE_ENV, CppEngine, cpp_available, new_engine, selected_core
from streamrace.analysis.engine import Engine
from streamrace.errors import TraceLimitError, UsageError
from streamrace.trace import load_trace
from streamrace.trace.builder import TraceBuilder
from streamrace.trace.io import Trace

ROOT = pathlib.Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "examples" / "traces").glob("*.jsonl*"))
needs_cpp = pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")
PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def as_json(result: AnalysisResult) -> str:
    doc = result.to_dict("0")
    doc["raw_findings"] = [f.to_dict() for f in result.raw_findings]
    return json.dumps(doc)


def agree(trace: Trace) -> AnalysisResult:
    """Analyse with both cores; their JSON must be identical, and so what they remember."""
    with core("python"):
        reference = analyze(trace)
    with core("cpp"):
        fast = analyze(trace)  # a list: captured events held as they are
        streamed = analyze(Trace(trace.header, iter(trace.events), stacks=trace.stacks))  # copied
    assert as_json(fast) == as_json(reference) == as_json(streamed)
    engines = [new_engine(trace.stacks, core=name) for name in ("python", "cpp")]
    for engine in engines:
        engine.run(trace.events)
    assert engines[0].remembered() == engines[1].remembered()
    return reference


@needs_cpp
@PROPERTY
@given(programs())
def test_cores_agree_on_the_oracle_programs(trace):
    agree(trace)


# -- programs spread over the address space -------------------------------------------------
# Blocks sit near boundaries of 4 KiB .. 16 MiB granules and span 1 byte to 64 MiB, so accesses
# land on every level of the C++ shadow index and straddle its granules; views are any shape
# and stride (negative, zero, self-overlapping, too many runs to compare exactly).
BOUNDARIES = [1 << b for b in (12, 16, 20, 21, 24)]


@st.composite
def block(draw: st.DrawFn) -> tuple[int, int]:
    unit = draw(st.sampled_from(BOUNDARIES))
    addr = 0x7F00_0000_0000 + draw(st.integers(1, 8)) * unit + draw(st.integers(-96, 96))
    size = 1 << draw(st.integers(0, 26))
    return addr, max(1, size + draw(st.integers(-16, 16)))


@st.composite
def view(draw: st.DrawFn, addr: int, size: int) -> dict:
    if draw(st.booleans()):
        start = draw(st.integers(0, size - 1))
        return TraceBuilder.span(addr + start, draw(st.integers(0, size - start)))
    if draw(st.integers(0, 7)) == 0:  # more runs than MAX_RUNS on both sides: assumed to overlap,
        # unless they lie in different residues of their steps' common divisor
        stride = draw(st.sampled_from([2, 3, 4, 6]))
        return TraceBuilder.view(addr, [70_000], [stride], 1, offset=draw(st.integers(0, 3)))
    dims = draw(st.integers(0, 3))
    if draw(st.integers(0, 7)) == 0:  # long lattices: searches near (or over) their budget
        shape = [draw(st.integers(200, 5_000)), draw(st.integers(1, 300))][: max(dims, 1)]
    else:
        shape = [draw(st.integers(0, 40)) for _ in range(dims)]
    stride = [draw(st.integers(-70, 70)) for _ in shape]
    itemsize = draw(st.sampled_from([1, 2, 4, 8]))
    return TraceBuilder.view(addr, shape, stride, itemsize, offset=draw(st.integers(0, 64)))


@st.composite
def wide_programs(draw: st.DrawFn) -> Trace:
    tb = TraceBuilder()
    streams = [tb.stream(f"s{i}") for i in range(draw(st.integers(2, 4)))]
    live: dict[int, tuple[int, int]] = {}  # addr -> (size, owner)
    statics = [draw(block()) for _ in range(2)]  # memory allocated before recording
    capture: tuple[int, set[int]] | None = None
    graphs = 0
    for _ in range(draw(st.integers(5, 40))):
        step = draw(st.sampled_from(["op", "op", "op", "alloc", "free", "handoff", "sync", "record_stream", "capture"]))
        stream = draw(st.sampled_from(sorted(capture[1]) if capture and draw(st.booleans()) else streams))
        regions = [(addr, size) for addr, (size, _) in live.items()] + statics
        if step == "op":
            reads = [draw(view(*draw(st.sampled_from(regions)))) for _ in range(draw(st.integers(0, 3)))]
            writes = [draw(view(*draw(st.sampled_from(regions)))) for _ in range(draw(st.integers(0, 2)))]
            tb.op("aten::op", stream, reads=reads, writes=writes, at=f"prog.py:{draw(st.integers(1, 5))}")
        elif step == "alloc":
            addr, size = draw(block())
            live[tb.alloc(size, stream, addr=addr, at=f"prog.py:{draw(st.integers(10, 12))}")] = (size, stream)
        elif step == "free" and live:
            addr = draw(st.sampled_from(sorted(live)))
            del live[addr]
            tb.free(addr, at="prog.py:20")
        elif step == "handoff" and live:
            # another stream uses a block, its owner frees it and allocates again, maybe there
            addr = draw(st.sampled_from(sorted(live)))
            size, owner = live.pop(addr)
            user = draw(st.sampled_from([s for s in streams if s != owner]))
            tb.op("aten::use", user, reads=[draw(view(addr, size))], at="prog.py:40")
            tb.free(addr, at="prog.py:20")
            size = draw(st.sampled_from([1 << draw(st.integers(0, 26)), 64]))
            addr = tb.alloc(size, owner, addr=addr if draw(st.booleans()) else None, at="prog.py:41")
            live[addr] = (size, owner)
            tb.op("aten::fill_", owner, writes=[tb.span(addr, size)], at="prog.py:42")
        elif step == "sync":
            tb.wait_stream(stream, draw(st.sampled_from(streams)))
            if capture and stream in capture[1]:
                capture[1].update(streams)  # wait_stream pulls only waiters; keep a superset
        elif step == "record_stream" and live:
            tb.record_stream(draw(st.sampled_from(sorted(live))), stream, at="prog.py:30")
        elif step == "capture":
            if capture is None and graphs < 2:
                graphs += 1
                graph = tb.emit("capture_begin", graph=graphs, stream=stream, device=0, pool=[1, 0])["graph"]
                capture = (graph, {stream})
            elif capture is not None:
                tb.emit("capture_end", graph=capture[0])
                capture = None
    if capture is not None:
        tb.emit("capture_end", graph=capture[0])
    return tb.trace()


@needs_cpp
@PROPERTY
@given(wide_programs())
def test_cores_agree_across_granules_and_levels(trace):
    agree(trace)


# -- the execution view ---------------------------------------------------------------------------
@needs_cpp
@pytest.mark.parametrize("name", sorted(EXECUTION_VIEW))
def test_cores_agree_on_the_execution_view_programs(name):
    """X1-X6 and their fixed twins, and the correct patterns around captures: replays, stale
    reads and freed graph inputs alike."""
    agree(EXECUTION_VIEW[name]().trace())


@needs_cpp
@pytest.mark.parametrize("name", sorted(LIVENESS))
def test_cores_agree_on_the_liveness_cases(name):
    """PyTorch's check_input_liveness cases as traces: freed graph inputs with their next
    owners, and the cases torch accepts."""
    agree(LIVENESS[name]().trace())


# -- real and synthetic traces ------------------------------------------------------------------
@needs_cpp
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_cores_agree_on_every_committed_trace(path):
    agree(load_trace(path))


@needs_cpp
def test_cores_agree_on_the_benchmark_capture_set():
    result = agree(capture_set())
    assert [(f.kind, f.count, f.aliasing) for f in result.findings] == [
        ("unsafe-free", 3, True),  # batch size 1: the next same-size allocation takes the block
        ("unsafe-free", 9, False),
    ]


# -- limits both cores keep alike ----------------------------------------------------------------
# The reader refuses all of these (tests/test_trace_io.py); an in-memory trace, which no reader
# checked, must still get the same clear refusal from both engines, never a crash or two answers.
OUTSIDE = {
    "addr 2^63": ("op", {"writes": [{"addr": 1 << 63, "nbytes": 8}]}),
    "end at 2^62": ("op", {"writes": [{"addr": (1 << 62) - 8, "nbytes": 8}]}),
    "below 0": ("op", {"reads": [{"addr": 4096, "shape": [2], "stride": [-(1 << 20)], "itemsize": 4}]}),
    "stride 2^64": ("op", {"reads": [{"addr": 0, "shape": [1], "stride": [1 << 64], "itemsize": 4}]}),
    "span 2^62": ("op", {"reads": [{"addr": 0, "shape": [3, 1 << 40], "stride": [1 << 61, 1], "itemsize": 8}]}),
    "block near 2^63": ("alloc", {"addr": (1 << 63) - 1, "size": (1 << 63) - 1}),
    "block to 2^62": ("alloc", {"addr": (1 << 62) - 4096, "size": 4096}),
    "size 2^64": ("alloc", {"addr": 0, "size": 1 << 64}),
}


@needs_cpp
@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_both_cores_refuse_ranges_outside_62_bits_alike(case):
    kind, fields = OUTSIDE[case]
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    tb.op("k0", side, writes=[tb.span(4096, 8)])
    if kind == "op":
        tb.op("k", main, writes=[tb.span(8192, 8)])
    else:
        tb.alloc(4096, main)
    tb.events[-1].update(fields)
    messages = []
    for name in ("python", "cpp"):
        with core(name), pytest.raises(TraceLimitError) as refused:
            analyze(tb.trace())
        messages.append(str(refused.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("event seq ") and "outside [0, 2^62)" in messages[0]


@needs_cpp
def test_ranges_just_inside_the_limit_agree():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    top = (1 << 62) - 4096
    x = tb.alloc(4095, main, addr=top)
    tb.op("k1", main, writes=[tb.span(x, 4095)])
    tb.op("k2", side, reads=[{"addr": top, "shape": [3, 5], "stride": [1000, 1], "itemsize": 1}])
    assert len(agree(tb.trace()).findings) == 1


@pytest.mark.parametrize("name", ["python", pytest.param("cpp", marks=needs_cpp)])
def test_the_last_bytes_the_reader_accepts_analyse_alike(name):
    end = 1 << 62  # trace-format.md, limits: every byte below 2^62
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    tb.op("k1", main, writes=[tb.span(end - 17, 16)])
    tb.op("k2", side, reads=[tb.view(end - 65, [4], [-2], itemsize=8, offset=6)])
    with core(name):
        (finding,) = analyze(tb.trace()).findings
    assert finding.kind == "data-race"


def test_core_selection(monkeypatch):
    monkeypatch.setenv(CORE_ENV, "python")
    assert selected_core() == "python" and isinstance(new_engine(), Engine)
    monkeypatch.setenv(CORE_ENV, "fortran")
    with pytest.raises(UsageError, match="STREAMRACE_CORE='fortran'"):
        selected_core()
    monkeypatch.setenv(CORE_ENV, "auto")
    assert selected_core() == ("cpp" if cpp_available() else "python")
    monkeypatch.setenv(CORE_ENV, "cpp")
    if cpp_available():
        assert isinstance(new_engine(), CppEngine)
    else:
        with pytest.raises(UsageError, match="not built"):
            new_engine()
