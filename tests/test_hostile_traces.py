"""Hostile traces (issue 27): inputs made to exhaust memory or time. Each ends, on both engines,
under a 4 GB address-space limit, in either a report or one line on stderr and exit code 2;
never a traceback, an internal error (4) or a crash.

Each case runs ``python -m streamrace`` in a child process with that limit (``RLIMIT_AS``),
so what is measured is the real command line, memory and all; the timeout is a guard against
a hang, not a timing assertion."""

from __future__ import annotations

import functools
import gzip
import json
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from analysis_engines import ENGINES
from benchmark_traces import engine_scale

from streamrace.analysis import analyze
from streamrace.analysis.core import cpp_available
from streamrace.errors import TraceError
from streamrace.trace.builder import TraceBuilder
from streamrace.trace.events import MAX_LINE_BYTES
from streamrace.trace.io import load_trace

REPO = Path(__file__).resolve().parent.parent
RACE = REPO / "examples" / "traces" / "dsv4_mini_race.jsonl.gz"
MEMORY_LIMIT = 4_000_000 * 1024  # `ulimit -v 4000000`
GUARD_SECONDS = 60
HEADER = (json.dumps({"format": "streamrace-trace", "version": 1}) + "\n").encode()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def streamrace(engine: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command line in a child process under the memory limit, on ``engine``."""
    return subprocess.run(
        [sys.executable, "-m", "streamrace", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=GUARD_SECONDS,
        preexec_fn=_limit_memory,
        env={"PATH": "/usr/bin:/bin", "STREAMRACE_CORE": engine, "PYTHONPATH": str(REPO)},
        cwd=cwd or REPO,
        stdin=subprocess.DEVNULL,
    )


def assert_refused(done: subprocess.CompletedProcess[str], problem: str) -> str:
    """Exit 2 with one stderr line, ``streamrace: error: ...`` naming ``problem``; the line."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("streamrace: error: "), lines[0]
    assert problem in lines[0], lines[0]
    return lines[0]


TOO_LONG = f"line longer than {MAX_LINE_BYTES:,} bytes (the limit of this streamrace)"


@pytest.fixture(scope="module")
def nul_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gzip of a header and 1 GiB of NUL bytes with no newline (about 1 MB on disk)."""
    path = tmp_path_factory.mktemp("bomb") / "nul.jsonl.gz"
    chunk = b"\0" * (16 << 20)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(HEADER)
        for _ in range(64):
            out.write(chunk)
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gzip_of_endless_nul_bytes_is_refused_at_the_line_limit(engine: str, nul_bomb: Path) -> None:
    line = assert_refused(streamrace(engine, "analyze", nul_bomb), TOO_LONG)
    assert line.startswith(f"streamrace: error: {nul_bomb}:2: ")


@pytest.mark.parametrize("engine", ENGINES)
def test_analyze_dev_zero_is_refused_at_the_line_limit(engine: str) -> None:
    assert_refused(streamrace(engine, "analyze", "/dev/zero"), f"/dev/zero:1: {TOO_LONG}")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("order", ["A B", "B A"])
def test_diff_with_dev_zero_is_refused_at_the_line_limit(engine: str, order: str) -> None:
    pair = (RACE, "/dev/zero") if order == "A B" else ("/dev/zero", RACE)
    assert_refused(streamrace(engine, "diff", *pair), f"/dev/zero:1: {TOO_LONG}")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_line_that_ends_just_past_the_limit_is_refused_even_when_its_start_is_json(
    engine: str, tmp_path: Path
) -> None:
    """The reader cuts a long line at the limit: a cut start that parses (an event padded with
    spaces) must not slip through as that event."""
    event = json.dumps({"seq": 0, "ev": "stream", "stream": 1}).encode()
    path = tmp_path / "padded.jsonl"
    path.write_bytes(HEADER + event + b" " * (MAX_LINE_BYTES - len(event) + 1) + b"\n")
    assert_refused(streamrace(engine, "analyze", path), f"padded.jsonl:2: {TOO_LONG}")


@pytest.mark.parametrize("last_newline", [True, False])
def test_the_line_limit_holds_at_its_boundary_on_both_readers(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, last_newline: bool
) -> None:
    """With the limit lowered to 200 bytes: a line of exactly 200 bytes (its newline not
    counted) reads, one of 201 is refused with its number, header and events alike."""
    from streamrace.trace import io as trace_io

    limit = 200
    monkeypatch.setattr(trace_io, "MAX_LINE_BYTES", limit)
    monkeypatch.setattr(trace_io, "_LINE_READ", limit + 1)

    def line(seq: int, length: int) -> bytes:
        event = json.dumps({"seq": seq, "ev": "stream", "stream": seq}).encode()
        return event + b" " * (length - len(event))

    def read(*lines: bytes) -> int:
        path = tmp_path / "t.jsonl"
        path.write_bytes(b"\n".join(lines) + (b"\n" if last_newline else b""))
        return len(trace_io.load_trace(path).events)

    header = HEADER.rstrip(b"\n")
    assert read(header, line(0, limit), line(1, limit)) == 2
    with pytest.raises(TraceError) as refused:
        read(header, line(0, limit), line(1, limit + 1))
    assert (refused.value.line, refused.value.problem) == (
        3,
        f"line longer than {limit:,} bytes (the limit of this streamrace)",
    )
    with pytest.raises(TraceError) as refused:
        read(header + b" " * (limit + 1 - len(header)), line(0, 10))
    assert refused.value.line == 1


# -- graph lifetimes the format rules out (docs/trace-format.md, replays and graph lifetimes) ----
def _replay_during_capture(tb: TraceBuilder) -> None:
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main) as graph:
        tb.replay(graph, side)


def _after(*steps: str) -> Callable[[TraceBuilder], None]:
    def build(tb: TraceBuilder) -> None:
        main = tb.stream("main")
        with tb.capture(main) as graph:
            pass
        for step in steps:
            {"replay": lambda: tb.replay(graph, main), "reset": lambda: tb.reset_graph(graph),
             "destroy": lambda: tb.destroy_graph(graph)}[step]()  # fmt: skip

    return build


IMPOSSIBLE_LIFETIMES = {
    # (how the trace is built, the problem, the offending event's place counted from the end)
    "replay during its capture": (_replay_during_capture, "replay of graph 1 before its capture ends", 1),
    "replay after destroy": (_after("replay", "destroy", "replay"), "replay of graph 1 after its graph_destroy", 0),
    "replay after reset": (_after("reset", "replay"), "replay of graph 1 after its graph_reset: the graph is gone", 0),
    "double destroy": (_after("destroy", "destroy"), "graph_destroy of graph 1 after its graph_destroy", 0),
    "destroy after reset": (_after("reset", "destroy"), "graph_destroy of graph 1 after its graph_reset", 0),
}


@pytest.mark.parametrize("case", IMPOSSIBLE_LIFETIMES)
def test_impossible_graph_lifetimes_are_refused_with_their_line(engine: str, tmp_path: Path, case: str) -> None:
    build, problem, from_end = IMPOSSIBLE_LIFETIMES[case]
    tb = TraceBuilder()
    build(tb)
    path = tmp_path / "t.jsonl"
    tb.write(str(path))
    assert_refused(streamrace(engine, "analyze", path), f"t.jsonl:{len(tb.events) + 1 - from_end}: {problem}")


def test_a_replay_is_refused_under_a_captures_header_and_the_graphs_lifetime_is_not(
    engine: str, tmp_path: Path
) -> None:
    """A recording of the captures alone records no replay, but the graphs' resets and
    collections (a free is judged against the graph's life)."""
    for kind in ("replay", "graph_reset", "graph_destroy"):
        tb = TraceBuilder(recording="captures")
        main = tb.stream("main")
        with tb.capture(main) as graph:
            pass
        tb.emit(kind, graph=graph, **({"stream": main} if kind == "replay" else {}))
        path = tmp_path / f"{kind}.jsonl"
        tb.write(str(path))
        if kind != "replay":
            assert [e["ev"] for e in load_trace(path).events][-1] == kind
            continue
        with pytest.raises(TraceError) as refused:
            load_trace(path)
        assert refused.value.problem == (
            "'replay' event in a trace whose header says recording 'captures' (the captures alone and the "
            "graphs' lifetimes: no replay)"
        )


def test_a_graph_lives_its_possible_life_and_an_unknown_graph_s_replay_is_noted(engine: str, tmp_path: Path) -> None:
    """Replays, then a reset; a new capture (a new graph id) replayed and destroyed; and one
    replay of a graph the trace never captured, which the analysis notes and skips."""
    tb = TraceBuilder()
    main = tb.stream("main")
    for _ in range(2):
        with tb.capture(main) as graph:
            pass
        tb.replay(graph, main)
        tb.replay(graph, main)
        tb.reset_graph(graph) if graph == 1 else tb.destroy_graph(graph)
    tb.destroy_graph(99)  # a graph the trace never captured: nothing to check against
    tb.replay(42, main)
    path = tmp_path / "t.jsonl"
    tb.write(str(path))
    result = analyze(load_trace(path))
    assert result.summary["replays"] == 4
    assert [note.code for note in result.notes] == ["replays-unknown-graph"]


# -- sizes the Python engine must take in near-linear work (issue 27) ----------------------------
SCALE = engine_scale()  # the shapes benchmarks/python_engine_scale.py times
LARGE = {
    "10k eager ops": (SCALE.many_small_eager_ops, 10_000),
    "one op of 20k ranges": (SCALE.one_op_of_many_ranges, 20_000),
    "2,000 strided ops": (SCALE.column_slices, 2_000),
    "2,000-op capture replayed": (functools.partial(SCALE.replayed_column_slices, replays=20), 2_000),
}


@pytest.mark.parametrize("shape", LARGE)
def test_an_access_meets_only_the_earlier_accesses_near_it(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python engine's shadow memory: each access meets a bounded number of earlier ones
    (the earlier ones it is checked against are counted), not every access of its 2 MiB, nor,
    for strided views, every access whose span meets its own."""
    from streamrace.analysis import shadow
    from streamrace.analysis.engine import Engine

    met, checks = [0], [0]
    ordered_before, check = shadow.ordered_before, shadow.ShadowMemory.check

    def counted(*args: object) -> bool:
        met[0] += 1
        return ordered_before(*args)  # type: ignore[arg-type]

    def counted_check(self: shadow.ShadowMemory, *args: object) -> object:
        checks[0] += 1
        return check(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(shadow, "ordered_before", counted)
    monkeypatch.setattr(shadow.ShadowMemory, "check", counted_check)
    build, count = LARGE[shape]
    tb = TraceBuilder()
    build(tb, count)
    engine = Engine()
    engine.run(tb.events)
    assert checks[0] == count * (2 if shape == "one op of 20k ranges" else 21 if "replayed" in shape else 1)
    assert met[0] <= 4 * checks[0]  # before: about checks**2 / 2


@pytest.mark.parametrize("shape", LARGE)
def test_large_shapes_get_the_same_report_from_both_engines_under_the_memory_limit(shape: str, tmp_path: Path) -> None:
    build, count = LARGE[shape]
    tb = TraceBuilder()
    build(tb, count)
    path = tmp_path / "t.jsonl"
    tb.write(str(path))
    reports = {}
    for engine in ("python", "cpp") if cpp_available() else ("python",):
        done = streamrace(engine, "analyze", "--format", "json", path)
        assert done.returncode in (0, 1) and done.stderr == "", done.stderr[-2000:]
        reports[engine] = done.stdout
    assert len(set(reports.values())) == 1
    expected = 2 * count if "ranges" in shape else count
    assert json.loads(reports["python"])["summary"]["accesses"] == expected


# -- enormous names in the reports for people ----------------------------------------------------
def _race(stream: str = "main", op: str = "aten::fill_") -> TraceBuilder:
    """``op`` on ``stream`` writes a block that aten::sum on `side` reads, unordered: one finding."""
    tb = TraceBuilder()
    main, side = tb.stream(stream), tb.stream("side")
    x = tb.alloc(4096, main, at="m.py:1")
    tb.op(op, main, writes=[tb.span(x, 4096)], at="m.py:2")
    tb.op("aten::sum", side, reads=[tb.span(x, 4096)], at="m.py:3")
    return tb


@pytest.mark.parametrize("fmt", ["text", "html", "sarif"])
def test_an_enormous_name_is_cut_and_says_so(tmp_path: Path, fmt: str) -> None:
    """A 1,000,000-character stream and op name: the text, HTML and SARIF reports show 500 characters
    of each and how many more there are; the JSON report keeps them whole."""
    long = 1_000_000
    path = tmp_path / "t.jsonl"
    _race("q" * long, "aten::" + "z" * long).write(str(path))
    done = streamrace("python", "analyze", "--format", fmt, path)
    assert done.returncode == 1, done.stderr[-2000:]
    # The page's data is ASCII JSON; the text report wraps: compare without either.
    shown = re.sub(r"\s+", "", done.stdout.replace("\\u2026", "…"))
    assert "q" * 500 + "…(999,500morecharacters)" in shown
    assert "aten::" + "z" * 494 + "…(999,506morecharacters)" in shown
    assert "q" * 501 not in shown and "z" * 501 not in shown
    assert len(done.stdout) < 200_000  # the report, not the names
    whole = streamrace("python", "analyze", "--format", "json", path)
    assert "q" * long in json.loads(whole.stdout)["findings"][0]["missing_edge"]


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_an_enormous_name_of_short_words_is_cut_too(tmp_path: Path, fmt: str) -> None:
    """A 2,000,000-character stream and op name made of short words (no word to cut): each text
    is cut at MAX_TEXT, so the report is the report's size, not the names' (before: 24 s, 50 MB)."""
    from streamrace.report.escape import MAX_TEXT

    words = 1_000_000
    path = tmp_path / "t.jsonl"
    _race("a " * words, "aten::" + "b " * words).write(str(path))
    done = streamrace("python", "analyze", "--format", fmt, path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "more characters)" in done.stdout
    assert "a " * MAX_TEXT not in done.stdout and len(done.stdout) < 2_000_000


# -- deep stacks ----------------------------------------------------------------------------------
def _deep(frames: int) -> TraceBuilder:
    """The one-race trace with each stack ``frames`` frames deeper."""
    tb = _race()
    for event in tb.events:
        if event["ev"] == "stack":
            event["frames"] += [[f"f{i % 97}.py", i + 1, f"fn{i}"] for i in range(frames)]
    return tb


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stack_of_more_frames_than_the_limit_is_refused(engine: str, tmp_path: Path) -> None:
    """A million-frame stack took 14-49 s to report (each report walks it); the reader refuses
    a stack past MAX_FRAMES, 78 times what the recorder walks, and one at the limit is read."""
    from streamrace.trace.events import MAX_FRAMES

    path = tmp_path / "deep.jsonl"
    _deep(1_000_000).write(str(path))
    line = assert_refused(streamrace(engine, "analyze", path), "deep.jsonl:")
    assert line.endswith(f"field 'frames' holds more than {MAX_FRAMES:,} frames (the limit of this streamrace)")
    _deep(MAX_FRAMES - 1).write(str(path))
    assert streamrace(engine, "analyze", "--format", "json", path).returncode == 1


@pytest.mark.parametrize("depth", ["1000000", "all"])
def test_a_deep_stack_shows_at_most_the_frame_limit(tmp_path: Path, depth: str) -> None:
    """Stacks of the most frames a trace may hold with --stack-depth 1000000 (or all): 1,000
    frames shown, the rest counted; before, each frame's call chain was a copy of all its
    callers (n**2 / 2)."""
    from streamrace.report.text import MAX_STACK_DEPTH
    from streamrace.trace.events import MAX_FRAMES

    frames = MAX_FRAMES - 1
    tb = _deep(frames)
    path = tmp_path / "deep.jsonl"
    tb.write(str(path))
    done = streamrace("python", "analyze", "--stack-depth", depth, path)
    assert done.returncode == 1, done.stderr[-2000:]
    shown = done.stdout.count("called from ")
    assert 0 < shown <= 3 * MAX_STACK_DEPTH  # the two accesses' stacks, the allocation's
    assert f"({frames + 1 - MAX_STACK_DEPTH:,} more frames)" in done.stdout
    # SARIF keeps as many frames a stack (before, every frame was an object: MemoryError at 1M).
    sarif = json.loads(streamrace("python", "analyze", "--format", "sarif", path).stdout)
    stacks = sarif["runs"][0]["results"][0]["stacks"]
    assert stacks and all(len(stack["frames"]) <= MAX_STACK_DEPTH for stack in stacks)
    assert f"({frames + 1 - MAX_STACK_DEPTH:,} more frames)" in stacks[0]["message"]["text"]
