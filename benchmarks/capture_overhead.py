"""Capture and replay cost of recording, side by side in one process (needs a CUDA GPU).

The DSV4 decode example (examples/dsv4_mini_decode.py, fixed variant) stacked N layers deep is
captured repeatedly:

* plain, under ``streamrace.watch()`` with the native hooks, the same without reading the
  captured graph back (what the read-back costs), the native hooks hearing torch's GPU-trace
  calls through ``torch.cuda._gpu_trace`` instead of straight from its C++ (what the
  interposer saves), the native hooks taking allocation facts from the allocator's history
  instead of its trace tracker (what the tracker saves: no history kept, none read back), and
  with the Python reference hooks (in turn, so drift hits all alike);
* then under PyTorch's CUDA sanitizer (CSAN), last, because enabling it cannot be undone;

and the graphs captured plain and under streamrace are replayed alternately. Each capture
starts with the garbage collector's generations empty, so that none collects another's garbage.
Printed: median times and the ratios to plain, the median of each repeat's ratio to its own
plain run (``pairs``, which drift moves least), and the fastest of each configuration's
captures against plain's fastest (what a capture costs where nothing else on the machine got in
its way: a busy host's interruptions only ever add). Absolute times only mean something on the machine that ran it.
``--hook-times`` builds the native hooks with their phase timers (csrc/recorder/hook_timers.h,
a build of its own) and prints where a streamrace capture's hook time goes.

    python benchmarks/capture_overhead.py --layers 32 --repeats 7
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import pathlib
import statistics
import sys
import time

import torch

import streamrace
from streamrace.analysis import analyze

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _example():
    spec = importlib.util.spec_from_file_location("dsv4_mini_decode", ROOT / "examples" / "dsv4_mini_decode.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dsv4_mini_decode"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


class DeepDecoder:
    """N example layers sharing one set of streams, each layer's output feeding the next."""

    def __init__(self, dsv4, layers: int) -> None:
        streams = dsv4.DecodeStreams()
        self.layers = [dsv4.MiniDecodeLayer("keep-alive", False, 0, streams) for _ in range(layers)]

    def forward(self, x: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            out = layer.forward(x, loc)
            x = torch.cat([out, out], dim=1)
        return x


def decoder_on_gpu(layers: int, batch: int) -> tuple[DeepDecoder, torch.Tensor, torch.Tensor, torch.cuda.Stream]:
    """The stacked example, its input and cache slots on the GPU, and a stream to run it on."""
    dsv4 = _example()
    model = DeepDecoder(dsv4, layers)
    x = torch.randn(batch, dsv4.HIDDEN, device="cuda")
    loc = torch.arange(batch, device="cuda")
    return model, x, loc, torch.cuda.Stream()


PHASES: dict[str, list[float]] = {}  # --breakdown: config -> [body, end] seconds, summed
HOOK_TIMES: list[dict[str, tuple[int, float]]] = []  # --hook-times: each streamrace capture's


def capture(
    model: DeepDecoder, x: torch.Tensor, loc: torch.Tensor, stream: torch.cuda.Stream, pool, phase: str | None = None
) -> tuple:
    """One capture, timed from the first captured op to the instantiated graph. Each starts
    with the garbage collector's generations empty: the previous configuration's garbage (an
    analysis of its trace, say) is not this one's to collect; what its own objects cost in
    collections during the capture still counts."""
    graph = torch.cuda.CUDAGraph()
    gc.collect()
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = model.forward(x, loc)
        body = time.perf_counter()
    end = time.perf_counter()
    if phase is not None:
        PHASES.setdefault(phase, []).append((body - start, end - body))
    return end - start, graph, out


@contextlib.contextmanager
def through_python(enabled: bool):
    """The native hooks hearing torch's GPU-trace calls through torch.cuda._gpu_trace."""
    from streamrace.record.hooks import NativeHooks

    original = NativeHooks.interpose
    if enabled:
        NativeHooks.interpose = lambda self, gpu_trace: ()
    try:
        yield
    finally:
        NativeHooks.interpose = original


@contextlib.contextmanager
def history_facts(enabled: bool):
    """The native hooks without their allocator trace tracker: facts from the history."""
    from streamrace.record.hooks import NativeHooks

    original = NativeHooks.use_allocator_facts
    if enabled:
        NativeHooks.use_allocator_facts = lambda self: "benchmark: history facts"
    try:
        yield
    finally:
        NativeHooks.use_allocator_facts = original


@contextlib.contextmanager
def python_end_timed(enabled: bool):
    """--hook-times: the capture lifecycle's two steps at capture_end, timed whole (the native
    catch-up and read-back inside the first are also timed on their own)."""
    from streamrace.record.captures import CaptureLifecycle

    timed: dict[str, tuple[int, float]] = {}
    originals = {name: getattr(CaptureLifecycle, name) for name in ("before_end", "on_end")}

    def timing(name: str, original):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                calls, seconds = timed.get(f"end: {name}", (0, 0.0))
                timed[f"end: {name}"] = (calls + 1, seconds + time.perf_counter() - start)

        return wrapper

    if enabled:
        for name, original in originals.items():
            setattr(CaptureLifecycle, name, timing(name, original))
    try:
        yield timed
    finally:
        for name, original in originals.items():
            setattr(CaptureLifecycle, name, original)


def replay_time(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / replays


def paired_ratio(times: dict[str, list[float]], name: str) -> str:
    """The median of row ``name``'s ratio, in each repeat, to that repeat's plain run, which ran
    a moment before it: the machine's drift between repeats and calls moves it least (the
    medians' ratio of one benchmark moved by 0.3 between calls on the shared H100s). Blank for
    plain itself, and for CSAN, whose runs come after every repeat (enabling it cannot be undone)."""
    if name in ("plain", "csan"):
        return ""
    return f"{statistics.median(v / p for p, v in zip(times['plain'], times[name], strict=True)):.2f}"


def print_replays(replays: dict[str, list[float]], width: int) -> None:
    """The replay table: each configuration's median time a replay and its ratio to plain."""
    base = statistics.median(replays["plain"])
    print(f"{'replay':<{width}}{'median us':>12}{'ratio':>10}")
    for name, values in replays.items():
        median = statistics.median(values)
        print(f"{name:<{width}}{median * 1e6:>12.2f}{median / base:>10.3f}")


def _profile(path: str, model: DeepDecoder, x: torch.Tensor, loc: torch.Tensor, stream, pool) -> None:
    """Where a recorded capture's time goes, by Python function, its body (the ops) and its
    capture_end apart (the native hooks show as the builtins that call them)."""
    import cProfile
    import io
    import pstats

    body, end = cProfile.Profile(), cProfile.Profile()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with streamrace.watch():
        context = torch.cuda.graph(graph, pool=pool, stream=stream)
        context.__enter__()
        body.enable()
        model.forward(x, loc)
        body.disable()
        end.enable()
        context.__exit__(None, None, None)
        end.disable()
    text = io.StringIO()
    for title, profiler in (("the ops (the capture's body)", body), ("capture_end", end)):
        text.write(f"# {title}\n")
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    pathlib.Path(path).write_text(text.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--no-csan", action="store_true", help="skip the CUDA sanitizer comparison")
    parser.add_argument("--profile", metavar="FILE", help="also write a cProfile of one recorded capture here")
    parser.add_argument("--hook-times", action="store_true", help="time the native hooks' phases (own build)")
    args = parser.parse_args(argv)
    if args.hook_times:
        from streamrace.record import native

        os.environ[native.ENV_HOOK_TIMES] = "1"  # before the hooks are first loaded
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")

    model, x, loc, stream = decoder_on_gpu(args.layers, args.batch)
    pool = torch.cuda.graph_pool_handle()
    with torch.cuda.stream(stream):
        for _ in range(2):
            model.forward(x, loc)  # warm-up: cuBLAS handles, workspaces, allocator segments
    torch.cuda.synchronize()

    configs = {
        "streamrace": {"hooks": "native"},
        "no read-back": {"hooks": "native", "read_graphs": False},
        "via python": {"hooks": "native", "via_python": True},
        "history facts": {"hooks": "native", "history": True},
        "python hooks": {"hooks": "python"},
    }
    from streamrace.record import native

    sources: dict[str, object] = {}
    times: dict[str, list[float]] = {"plain": [], **{name: [] for name in configs}}
    graphs = {}
    ops = analysis = 0.0
    caught = 0  # kernel events the last capture's catch-ups made: launches no op made
    for _ in range(args.repeats):
        elapsed, graphs["plain"], _ = capture(model, x, loc, stream, pool, "plain")
        times["plain"].append(elapsed)
        for name, options in configs.items():
            watch_options = {k: v for k, v in options.items() if k not in ("history", "via_python")}
            timed = name == "streamrace" and args.hook_times
            with (
                history_facts(bool(options.get("history"))),
                through_python(bool(options.get("via_python"))),
                streamrace.watch(**watch_options) as session,
            ):
                if timed:
                    native.load().reset_hook_times()
                with python_end_timed(timed) as python_end:
                    elapsed, graph, _ = capture(model, x, loc, stream, pool, name)
                if timed:
                    HOOK_TIMES.append({**native.load().hook_times(), **python_end})
            assert session.recorder.hooks_kind == options["hooks"] and not session.errors, session.errors
            sources[name] = session.trace.header["allocator"].get("facts")
            assert session.findings == [], session.report()
            times[name].append(elapsed)
            graphs.setdefault(name, graph)
            if name == "streamrace":
                caught = sum(1 for e in session.trace.events if e["ev"] == "kernel" and e.get("inferred"))
        ops = session.result.summary["ops"]
        start = time.perf_counter()
        analyze(session.trace)
        analysis = time.perf_counter() - start

    if args.profile:
        _profile(args.profile, model, x, loc, stream, pool)

    replays: dict[str, list[float]] = {"plain": [], "streamrace": []}  # native hooks
    for _ in range(args.repeats):
        for name in ("plain", "streamrace"):
            replays[name].append(replay_time(graphs[name], args.replays))

    if not args.no_csan:
        from torch.cuda._sanitizer import enable_cuda_sanitizer

        enable_cuda_sanitizer()
        times["csan"] = [capture(model, x, loc, stream, pool)[0] for _ in range(args.repeats)]

    plain = statistics.median(times["plain"])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.layers} layers, batch {args.batch}")
    print(f"captured ops per graph: {ops}; analysis of one capture's trace: {analysis * 1e3:.1f} ms")
    print(f"launches no op made, caught up in a streamrace capture: {caught}")
    for name, source in sources.items():
        print(f"allocation facts ({name}): {source}")
    fastest_plain = min(times["plain"])
    print(f"{'capture':<12}{'median ms':>12}{'ratio':>10}{'pairs':>8}{'fastest ms':>12}{'ratio':>8}")
    for name, values in times.items():
        median = statistics.median(values)
        pairs = paired_ratio(times, name)
        fastest = min(values)
        print(
            f"{name:<12}{median * 1e3:>12.2f}{median / plain:>10.2f}{pairs:>8}"
            f"{fastest * 1e3:>12.2f}{fastest / fastest_plain:>8.2f}"
        )
    print(f"{'phases':<14}{'body ms':>10}{'end ms':>10}   (median of the ops and of capture_end)")
    for name, values in PHASES.items():
        body = statistics.median(v[0] for v in values)
        end = statistics.median(v[1] for v in values)
        print(f"{name:<14}{body * 1e3:>10.2f}{end * 1e3:>10.2f}")
    print_replays(replays, 12)
    if HOOK_TIMES:
        print_hook_times(HOOK_TIMES, statistics.median(v[0] for v in PHASES["plain"]), ops)
    return 0


def print_hook_times(captures: list[dict[str, tuple[int, float]]], plain_body: float, ops: int) -> None:
    """Each phase's median time a capture, against the plain capture's body and per op."""
    print(f"{'hook phase':<20}{'calls':>8}{'ms':>9}{'x plain body':>14}{'us per op':>11}   (median capture)")
    for phase in captures[0]:
        calls = statistics.median(c[phase][0] for c in captures)
        seconds = statistics.median(c[phase][1] for c in captures)
        print(f"{phase:<20}{calls:>8.0f}{seconds * 1e3:>9.2f}{seconds / plain_body:>14.3f}{seconds / ops * 1e6:>11.2f}")


if __name__ == "__main__":
    sys.exit(main())
