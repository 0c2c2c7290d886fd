"""The text and JSON reporters on hand-made findings (no engine involved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamrace import __version__
from streamrace.analysis import AnalysisResult
from streamrace.analysis.detectors import DATA_RACE, RECORD_STREAM_NOOP, UNSAFE_FREE
from streamrace.analysis.findings import Access, Allocation, Finding
from streamrace.report import REPORTERS, ReportOptions, TraceResult, json_report, render, text
from streamrace.trace import FORMAT_VERSION

MAIN, SIDE = 0x5000, 0x5010


@pytest.fixture
def model_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user source file the findings point at, by a path relative to the current directory."""
    monkeypatch.chdir(tmp_path)
    lines = [f"line_{n} = {n}" for n in range(1, 41)]
    lines[9] = "    x = torch.empty(1024, device='cuda')"
    lines[11] = "        y = x.sum()"
    lines[13] = "    del x"
    lines[14] = "    z = torch.ones(1024, device='cuda')"
    (tmp_path / "model.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "model.py"


def _unsafe_free(src: str, graph: int = 1) -> Finding:
    return Finding(
        kind=UNSAFE_FREE,
        hazard="WAR",
        accesses=[
            Access(
                "aten::sum", SIDE, "side", "read", 7, f"{src}:12", [[src, 12, "branch"], [src, 30, "forward"]], graph
            ),
            Access("aten::fill_", MAIN, "main", "write", 11, f"{src}:15", [[src, 15, "forward"]], graph),
        ],
        message="The block allocated at model.py:10 is freed on main while aten::sum on side may still read it.",
        missing_edge=(
            "no happens-before edge from aten::sum on side (model.py:12) "
            "to the next allocation on main after the free (model.py:14)"
        ),
        fix="keep the tensor alive until after `main.wait_stream(side)` (join, then free)",
        aliasing=True,
        graph=graph,
        allocation=Allocation(
            addr=0x7F0000001000,
            size=3 << 20,
            stream=MAIN,
            stream_label="main",
            pool=[graph, 0],
            alloc_seq=3,
            alloc_location=f"{src}:10",
            alloc_stack=[[src, 10, "forward"]],
            free_seq=9,
            free_location=f"{src}:14",
            free_stack=[[src, 14, "forward"]],
            reused_by={
                "op": "aten::fill_",
                "stream": MAIN,
                "stream_label": "main",
                "seq": 11,
                "location": f"{src}:15",
                "alloc_seq": 10,
                "alloc_location": f"{src}:15",
            },
        ),
        count=4,
        graphs=[graph, graph + 1],
    )


def _eager_race() -> Finding:
    return Finding(
        kind=DATA_RACE,
        hazard="RAW",
        accesses=[
            Access("aten::add_", 0x7000, "0x7000", "write", 1, None),
            Access(
                "my_triton_kernel", SIDE, "side", "read", 2, "gone.py:5", inferred=True, range={"approximate": True}
            ),
        ],
        message="my_triton_kernel reads bytes that aten::add_ wrote, and nothing orders the two (RAW).",
        missing_edge="no happens-before edge",
        fix="wait",
    )


def _noop(src: str) -> Finding:
    return Finding(
        kind=RECORD_STREAM_NOOP,
        hazard=None,
        accesses=[Access("record_stream", MAIN, "main", "record_stream", 5, f"{src}:13")],
        message="record_stream names main, the stream that allocated the block, so it does nothing.",
        fix="record on the consumer stream, not the allocating one: `t.record_stream(side)`",
        graph=1,
    )


def _result(findings: list[Finding], graphs: int = 2) -> AnalysisResult:
    summary = {"findings": len(findings), "graphs": graphs, "ops": 12, "accesses": 30}
    return AnalysisResult(findings=findings, raw_findings=findings, summary=summary)


# -- text ------------------------------------------------------------------------------------
def test_text_shows_everything_a_person_needs(model_py: str) -> None:
    out = text.render([TraceResult("run.jsonl", _result([_unsafe_free(model_py)]))])

    assert out.splitlines()[0] == "run.jsonl"
    assert "graph 1: 1 finding (1 error)" in out
    assert "[1] error unsafe-free WAR aliasing (seen 4 times, in graphs 1, 2)" in out
    # both accesses: op, stream label and handle, source line with its text, the caller
    assert "read          aten::sum on stream side (0x5010)" in out
    assert "at model.py:12 in branch" in out
    assert "12 | y = x.sum()" in out
    assert "called from model.py:30 in forward" in out
    assert "write         aten::fill_ on stream main (0x5000)" in out
    assert "15 | z = torch.ones(1024, device='cuda')" in out
    # the allocation's story
    assert "allocation    3,145,728 bytes (3.0 MiB) at 0x7f0000001000, stream main (0x5000), graph pool\n" in out
    assert "\n" + " " * 24 + "(1, 0)\n" in out, "wrapped at 100 columns, under the second column"
    assert "allocated at  model.py:10 in forward" in out
    assert "10 | x = torch.empty(1024, device='cuda')" in out
    assert "freed at      model.py:14 in forward" in out
    assert "reused by     aten::fill_ on stream main (0x5000) at model.py:15" in out
    # the missing edge and the fix
    assert "missing edge  no happens-before edge from aten::sum on side" in out
    assert "fix           keep the tensor alive until after `main.wait_stream(side)`" in out
    assert f"signature     {_unsafe_free(model_py).signature}" in out
    assert out.rstrip().endswith("summary: 1 finding (1 error); analysed 2 graphs, 12 ops, 30 accesses")


def test_text_prints_shared_callers_once(model_py: str) -> None:
    finding = _unsafe_free(model_py)
    finding.accesses[0].stack.append([model_py, 40, "main"])  # branch <- forward <- main
    finding.accesses[1].stack.append([model_py, 40, "main"])  # forward <- main
    finding.allocation.alloc_stack.append([model_py, 38, "main"])  # forward <- main, another line

    out = text.render([TraceResult("run.jsonl", _result([finding]))])

    assert out.count("called from model.py:40 in main") == 2
    assert "called from model.py:40 in main, as above" in out
    assert "called from model.py:38 in main\n" in out


def test_text_groups_by_graph_with_counts(model_py: str) -> None:
    findings = [_unsafe_free(model_py, graph=1), _eager_race(), _noop(model_py)]

    out = text.render([TraceResult("run.jsonl", _result(findings))])

    lines = out.splitlines()
    graph_1 = lines.index("  graph 1: 2 findings (1 error, 1 warning)")
    eager = lines.index("  eager (outside any capture): 1 finding (1 error)")
    assert graph_1 < eager  # groups in order of first occurrence
    assert [line.strip()[:3] for line in lines if line.strip().startswith("[")] == ["[1]", "[2]", "[3]"]
    assert "summary: 3 findings (2 errors, 1 warning)" in out


def test_text_without_source_or_stack(model_py: str) -> None:
    out = text.render([TraceResult("run.jsonl", _result([_eager_race()]))])

    # an unnamed stream shows its handle once; a missing line says so; an unreadable file shows no text
    assert "write         aten::add_ on stream 0x7000" in out
    assert "no user source line recorded" in out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "at gone.py:5")
    assert " | " not in lines[at + 1]
    assert "(direction inferred: treated as a write)" in out
    assert "(overlap assumed" in out


def test_text_record_stream_noop_names_no_op_twice(model_py: str) -> None:
    out = text.render([TraceResult("run.jsonl", _result([_noop(model_py)]))])

    assert "[1] warning record-stream-noop" in out
    assert "record_stream on stream main (0x5000)" in out
    assert "record_stream record_stream" not in out
    assert "13 | line_13 = 13" in out


def test_text_no_findings(model_py: str) -> None:
    out = text.render([TraceResult("clean.jsonl", _result([]))])

    assert out == "clean.jsonl\n  summary: no findings; analysed 2 graphs, 12 ops, 30 accesses\n"


def test_text_several_traces_end_with_a_total(model_py: str) -> None:
    traces = [TraceResult("a.jsonl", _result([_unsafe_free(model_py)])), TraceResult("b.jsonl", _result([]))]

    out = text.render(traces)

    assert out.index("a.jsonl") < out.index("b.jsonl")
    assert out.rstrip().splitlines()[-1] == "total: 1 finding (1 error) in 1 of 2 traces analysed"


@pytest.mark.parametrize(
    ("found", "total"),
    [
        ((True, True), "total: 2 findings (2 errors) in all 2 traces analysed"),
        ((False, False), "total: no findings in 2 traces analysed"),
    ],
)
def test_text_total_names_the_traces_once(model_py: str, found: tuple[bool, bool], total: str) -> None:
    """It read "in 2 traces of 2 traces analysed"."""
    traces = [TraceResult(f"{n}.jsonl", _result([_unsafe_free(model_py)] if f else [])) for n, f in enumerate(found)]
    assert text.render(traces).rstrip().splitlines()[-1] == total


def test_text_style_sees_every_role(model_py: str) -> None:
    """Colour is a Style; the layout must route its pieces through it."""
    roles: set[str] = set()

    def spy(piece: str, role: str) -> str:
        roles.add(role)
        return piece

    findings = [_unsafe_free(model_py), _eager_race(), _noop(model_py)]
    styled = text.render([TraceResult("run.jsonl", _result(findings))], ReportOptions(style=spy))

    assert styled == text.render([TraceResult("run.jsonl", _result(findings))])
    assert {
        "heading",
        "error",
        "warning",
        "kind",
        "hazard",
        "op",
        "stream",
        "location",
        "source",
        "label",
        "fix",
        "code",
    } <= roles


# -- JSON ------------------------------------------------------------------------------------
def test_json_is_the_contract(model_py: str) -> None:
    result = _result([_unsafe_free(model_py), _noop(model_py)])

    doc = json.loads(json_report.render([TraceResult("run.jsonl", result)]))

    contract = result.to_dict(__version__)
    assert doc["streamrace"] == __version__
    assert doc["trace_format"] == FORMAT_VERSION
    assert doc["findings"] == [{**f, "trace": "run.jsonl"} for f in contract["findings"]]
    counts = {**contract["summary"], "suppressed": 0, "baselined": 0}
    assert doc["summary"] == {**counts, "traces": 1}
    assert doc["traces"] == [{"path": "run.jsonl", "summary": counts, "notes": []}]
    assert doc["notes"] == [] and doc["suppressed"] == []
    assert list(doc)[:4] == ["streamrace", "trace_format", "findings", "summary"]


def test_json_merges_several_traces(model_py: str) -> None:
    a, b = _result([_unsafe_free(model_py)], graphs=3), _result([_noop(model_py), _eager_race()], graphs=1)

    doc = json_report.document([TraceResult("a.jsonl", a), TraceResult("b.jsonl", b)])

    assert [f["trace"] for f in doc["findings"]] == ["a.jsonl", "b.jsonl", "b.jsonl"]
    assert doc["summary"] == {
        "findings": 3,
        "graphs": 4,
        "ops": 24,
        "accesses": 60,
        "suppressed": 0,
        "baselined": 0,
        "traces": 2,
    }
    assert [t["summary"]["findings"] for t in doc["traces"]] == [1, 2]


def test_json_is_deterministic(model_py: str) -> None:
    def once() -> str:
        findings = [_unsafe_free(model_py), _eager_race(), _noop(model_py)]
        return json_report.render([TraceResult("run.jsonl", _result(findings))])

    assert once() == once()
    assert once().endswith("}\n")


# -- the registry and the one-result helper ----------------------------------------------------
def test_reporters_registry_and_render(model_py: str) -> None:
    result = _result([_unsafe_free(model_py)])

    assert list(REPORTERS) == ["text", "json", "sarif", "html", "perfetto"]
    assert render(result).startswith("<memory>\n")
    assert json.loads(render(result, format="json"))["findings"][0]["trace"] == "<memory>"
    with pytest.raises(ValueError, match="unknown report format 'svg'"):
        render(result, format="svg")
    with pytest.raises(ValueError, match="the html report draws the trace's events: pass trace="):
        render(result, format="html")


# -- stack depth, notes, the fix as code, terminal colour, progress ---------------------------
def _deep(model_py: str) -> Finding:
    finding = _unsafe_free(model_py)
    finding.accesses[0].stack.extend([[model_py, 31 + n, f"caller{n}"] for n in range(5)])
    return finding


def test_text_stack_depth_limits_frames(model_py: str) -> None:
    result = _result([_deep(model_py)])

    short = text.render([TraceResult("run.jsonl", result)])
    full = text.render([TraceResult("run.jsonl", result)], ReportOptions(stack_depth=None))
    one = text.render([TraceResult("run.jsonl", result)], ReportOptions(stack_depth=1))

    # the read's stack: model.py:12 (its line), 30, 31, ..., 35: 7 frames
    assert "called from model.py:30 in forward" in short and "called from model.py:31 in caller0" in short
    assert "called from model.py:32" not in short and "(4 more frames)" in short
    assert "called from model.py:35 in caller4" in full and "more frame" not in full
    assert "called from model.py:30" not in one and "(6 more frames)" in one


def test_text_shows_trace_notes_first(model_py: str) -> None:
    from streamrace.analysis import Note

    result = _result([])
    result.notes = [Note("allocator-model", "the allocator backend is cudaMallocAsync: the model does not apply")]

    out = text.render([TraceResult("run.jsonl", result)])

    assert out.splitlines()[1] == "  note: the allocator backend is cudaMallocAsync: the model does not apply"


def test_text_fix_as_code_before_the_free(model_py: str) -> None:
    out = text.render([TraceResult("run.jsonl", _result([_unsafe_free(model_py)]))])

    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("suggestion"))
    assert lines[at].strip() == "suggestion    join side before the free (model.py:14):"
    assert lines[at + 1].strip() == "+ | main.wait_stream(side)"
    assert lines[at + 2].strip() == "14 | del x"


def test_terminal_style_colours_only_terminals() -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert text.terminal_style(io.StringIO()) is None, "a pipe or file gets plain text"
    styled = text.terminal_style(Terminal())
    assert styled is not None
    style, width = styled
    assert style("error", "error") != "error" and "\x1b[" in style("error", "error")
    assert style("plain words", "text") == "plain words"
    assert 60 <= width <= 140


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}, {"FORCE_COLOR": ""}])
def test_text_to_a_pipe_is_plain_and_imports_no_rich_unless_colour_is_forced(env: dict[str, str]) -> None:
    """A pipe gets plain text without rich's import (start-up); FORCE_COLOR or TTY_COMPATIBLE
    colour it through rich as before, and an empty FORCE_COLOR does not."""
    import os
    import subprocess
    import sys

    trace = Path(__file__).resolve().parents[1] / "examples" / "traces" / "gallery_H2_buggy.jsonl.gz"
    code = (
        "import sys\nfrom streamrace.cli import main\nmain(sys.argv[1:])\nprint('rich' in sys.modules, file=sys.stderr)"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(trace)], capture_output=True, text=True, env={**base, **env}
    )
    coloured = bool(env.get("FORCE_COLOR") or env.get("TTY_COMPATIBLE"))
    assert "data-race" in proc.stdout and ("\x1b[" in proc.stdout) == coloured, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == str(coloured), "rich imported only to colour"


def test_terminal_style_honours_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("NO_COLOR", "1")
    styled = text.terminal_style(Terminal())
    assert styled is not None
    assert styled[0]("error", "error") == "\x1b[1merror\x1b[0m", "bold, not red"


def test_progress_only_on_a_terminal_for_large_traces(tmp_path: Path) -> None:
    import io

    from streamrace.progress import analysis_progress, text_size
    from streamrace.trace import iter_trace

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    race = Path(__file__).resolve().parents[1] / "examples" / "traces" / "dsv4_mini_race.jsonl.gz"
    assert text_size(str(race)) > race.stat().st_size, "gzip: the uncompressed size from the trailer"
    expected = list(iter_trace(race))

    quiet = io.StringIO()
    with analysis_progress(str(race), iter(expected), stream=quiet, threshold=0) as feed:
        assert list(feed.events) == expected and feed.progress is None
    assert quiet.getvalue() == "", "not a terminal: no bar"

    shown = Terminal()
    with analysis_progress(str(race), iter(expected), stream=shown, threshold=0) as feed:
        assert list(feed.events) == expected
    assert "analysing dsv4_mini_race.jsonl.gz" in shown.getvalue()

    small = Terminal()
    with analysis_progress(str(race), iter(expected), stream=small) as feed:
        assert list(feed.events) == expected
    assert small.getvalue() == "", "a small trace: no bar"


def test_progress_of_a_trace_read_directly_follows_its_reader(tmp_path: Path) -> None:
    """The C++ core reads the file itself: the bar asks the reader how far it is."""
    import io

    from streamrace.analysis import Progress, analyze
    from streamrace.progress import analysis_progress
    from streamrace.trace import iter_trace
    from streamrace.trace.io import make_header, write_trace

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    path = tmp_path / "long.jsonl.gz"
    syncs = ({"seq": seq, "ev": "stream_sync", "stream": 7} for seq in range(40_000))
    write_trace(path, make_header(), syncs)
    events = iter_trace(path)
    header = next(events)
    shown = Terminal()
    read: list[int | None] = []
    with analysis_progress(str(path), events, stream=shown, threshold=0) as feed:
        assert feed.events is events, "handed on unchanged, so the core may read the lines itself"
        assert feed.progress is not None
        progress = feed.progress

        def watched(now: Progress) -> None:
            read.append(events.position())
            progress(now)

        analyze(header, feed.events, progress=watched)
    assert "analysing long.jsonl.gz" in shown.getvalue()
    moved = [at for at in read if at is not None]
    assert len(moved) >= 3 and moved == sorted(moved) and moved[-1] > 0


def test_text_wraps_at_the_documented_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every committed trace's report, source text included, fits 100 columns (and 60, the
    narrowest): a line goes past only when it is one word longer than a whole line."""
    from streamrace.analysis import analyze
    from streamrace.report.options import WIDTH
    from streamrace.trace import load_trace

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)  # the source lines are read, and can be long
    traces = sorted((repo / "examples" / "traces").iterdir())
    results = [TraceResult(str(p.relative_to(repo)), analyze(load_trace(p))) for p in traces]
    for width in (WIDTH, 60):
        out = text.render(results, ReportOptions(width=width))
        assert "…" in out if width == 60 else True, "long source lines are cut, not wrapped"
        long = [line for line in out.splitlines() if len(line) > width and " " in line.strip()]
        assert long == [], f"{len(long)} lines wider than {width}: {long[:3]}"
    assert "main.wait_stream(kv)" in text.render(results), "wrapping keeps code spans whole"
