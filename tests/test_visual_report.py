"""The visual reports (streamrace/report/timeline.py, html.py, perfetto.py): what they place
where, from real traces, on both engines; the page's data and size; the CLI and plugin paths.
What a browser shows of the page is tests/test_browser_report.py."""

from __future__ import annotations

import json
import re
import shutil
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest
from visual_traces import DSV4_RACE, REPLAY_RACE, TRACES, analysed, page_data, write_many_ops

from streamrace.cli import main
from streamrace.report import demangle, html, perfetto, render
from streamrace.report.timeline import build_timeline
from streamrace.trace import load_trace
from streamrace.trace.builder import TraceBuilder


def _views(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {view["title"]: view for view in data["views"]}


def _columns(view: dict[str, Any], names: list[str]) -> list[tuple[str, str, int]]:
    """(lane label, name, seq) of each column of a view, from the page's data."""
    seq, out = 0, []
    for delta, lane, name in zip(view["seq"], view["lane"], view["name"], strict=True):
        seq += delta
        out.append((view["lanes"][lane], names[name], seq))
    return out


# -- the DSV4 seed race ------------------------------------------------------------------------
def test_html_of_the_dsv4_race_places_both_kernels_their_streams_the_tensor_and_the_edge() -> None:
    item = analysed(DSV4_RACE)
    data = page_data(html.render([item]))
    graph = _views(data)["graph 1 (capture)"]
    assert [lane.split(" ")[0] for lane in graph["lanes"]][:2] == ["main", "kv"]
    (finding,) = data["findings"]
    assert finding["kind"] == "unsafe-free" and data["views"][finding["view"]] is graph
    first, second = finding["accesses"]
    columns = _columns(graph, data["traces"][0]["names"])
    for access, op, stream in ((first, "aten::mul.Tensor", "kv"), (second, "aten::mm", "main")):
        assert access["exact"] and access["op"] == op
        lane, name, seq = columns[access["column"]]
        assert (lane.split(" ")[0], name, seq) == (stream, op, access["seq"]), "the highlighted column is the op"
    block = finding["block"]
    assert block["source"] == "qkv = x @ self.w_qkv" and block["alloc_location"] == "examples/dsv4_mini_decode.py:105"
    assert block["start"] < first["column"] < block["end"] <= block["reuse"] <= second["column"], (
        "allocated, read on kv, freed, handed to the mm: in that order"
    )
    assert finding["missing_edge"].startswith("no happens-before edge from aten::mul.Tensor on kv")
    assert "[1] error unsafe-free WAR aliasing" in finding["text"] and "105 | qkv = x @ self.w_qkv" in finding["text"]
    edges = zip(graph["edges"][::3], graph["edges"][1::3], strict=True)
    record_waits = [(columns[r][1], columns[w][1]) for r, w in edges]
    assert record_waits and all(r.startswith("record") and w.startswith("wait") for r, w in record_waits)


def test_perfetto_of_the_dsv4_race_has_a_track_per_stream_the_kernels_and_the_missing_edge() -> None:
    doc = json.loads(perfetto.render([analysed(DSV4_RACE)]))
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    (graph_pid,) = [pid for pid, name in processes.items() if name.endswith("graph 1 (capture)")]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
               and e["pid"] == graph_pid}  # fmt: skip
    tid = {name.split(" ")[0]: t for t, name in threads.items()}
    assert {"main", "kv"} <= set(tid)
    slices = {(e["tid"], e["ts"]): e for e in events if e["ph"] == "X" and e["pid"] == graph_pid}
    starts = {e["name"]: e for e in events if e["ph"] == "s" and e["name"] == "missing edge"}
    ends = {e["name"]: e for e in events if e["ph"] == "f" and e["name"] == "missing edge"}
    start, end = starts["missing edge"], ends["missing edge"]
    assert start["id"] == end["id"] and start["pid"] == end["pid"] == graph_pid
    assert (start["tid"], slices[start["tid"], start["ts"]]["name"]) == (tid["kv"], "aten::mul.Tensor")
    assert (end["tid"], slices[end["tid"], end["ts"]]["name"]) == (tid["main"], "aten::mm")
    (instant,) = [e for e in events if e["ph"] == "i"]
    assert instant["args"]["kind"] == "unsafe-free" and (instant["tid"], instant["ts"]) == (end["tid"], end["ts"])
    blocks = [e for e in events if e.get("cat") == "streamrace.block"]
    assert blocks[0]["name"].startswith("block allocated at examples/dsv4_mini_decode.py:105")
    assert blocks[1]["name"].startswith("reused by aten::mm")
    flows = [e for e in events if e["ph"] in "sf" and e["cat"] == "event"]
    assert flows and len(flows) % 2 == 0, "every event edge is a flow start and end"
    slice_at = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "X"}
    assert all((e["pid"], e["tid"], e["ts"]) in slice_at for e in flows), "each flow binds to a slice"


def test_the_execution_view_shows_replays_as_slices_on_their_stream() -> None:
    item = analysed(REPLAY_RACE)
    data = page_data(html.render([item]))
    execution = _views(data)["execution view: eager work and replays"]
    columns = _columns(execution, data["traces"][0]["names"])
    replays = [(lane, name) for lane, name, _ in columns if name.startswith("replay of graph")]
    assert len(replays) == item.result.summary["replays"] == 4
    (finding,) = data["findings"]
    assert data["views"][finding["view"]] is execution
    write = next(a for a in finding["accesses"] if a["access"] == "write")
    assert columns[write["column"]][1] == "replay of graph 1"
    assert write["captured"] == "examples/execution_gallery.py:55"


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.jsonl*")))
def test_every_committed_trace_draws_each_finding_on_its_own_columns(name: str) -> None:
    item = analysed(TRACES / name)
    data = page_data(html.render([item]))
    assert len(data["findings"]) == len(item.result.findings)
    for finding in data["findings"]:
        for access in finding["accesses"]:
            if access["exact"]:
                view = data["views"][access["view"]]
                assert sum(view["seq"][: access["column"] + 1]) == access["seq"]
    json.loads(perfetto.render([item]))


def test_several_traces_are_one_page_each_finding_in_its_own_trace_s_view() -> None:
    items = [analysed(DSV4_RACE), analysed(REPLAY_RACE)]
    data = page_data(html.render(items))
    assert [t["path"] for t in data["traces"]] == [str(DSV4_RACE), str(REPLAY_RACE)]
    assert [f["trace"] for f in data["findings"]] == [0, 1]
    assert [f["number"] for f in data["findings"]] == [1, 2], "one list on the page: each number once"
    assert data["findings"][1]["text"].lstrip().startswith("[2]")
    for finding in data["findings"]:
        view = data["views"][finding["view"]]
        assert view["trace"] == finding["trace"]
        names = data["traces"][view["trace"]]["names"]
        second = finding["accesses"][-1]
        assert _columns(view, names)[second["column"]][2] == second["seq"]
    events = json.loads(perfetto.render(items))["traceEvents"]
    processes = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert any(p.startswith(str(DSV4_RACE)) for p in processes) and any(
        p.startswith(str(REPLAY_RACE)) for p in processes
    )
    assert len({e["pid"] for e in events}) == len(processes), "a process per view of every trace"


def test_reports_are_the_same_whichever_engine_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("streamrace._core")
    pages = {}
    for core in ("cpp", "python"):
        monkeypatch.setenv("STREAMRACE_CORE", core)
        item = analysed(DSV4_RACE)
        pages[core] = (html.render([item]), perfetto.render([item]))
    assert pages["cpp"] == pages["python"]


# -- capture membership, as the engines define it ---------------------------------------------
def test_a_stream_that_waits_on_a_capture_joins_its_view_and_a_cross_domain_wait_draws_no_edge() -> None:
    tb = TraceBuilder()
    main_s, side = tb.stream("main"), tb.stream("side")
    eager = tb.event()
    tb.record(eager, main_s)
    with tb.capture(main_s) as graph:
        tb.op("aten::fill_", main_s, writes=[tb.span(tb.alloc(64, main_s), 64)])
        tb.wait_stream(side, main_s)  # side joins the capture
        tb.op("aten::sum", side, reads=[])
        tb.wait(eager, main_s)  # an eager record: orders nothing inside the capture
    tb.op("aten::add", side, reads=[])
    timeline = build_timeline(tb.trace().events)
    capture, execution = timeline.view(graph), timeline.view(None)
    assert capture is not None and execution is not None
    assert [timeline.labels[s] for s in capture.streams] == ["main", "side"]
    assert [timeline.names[n] for n in capture.names].count("aten::sum") == 1
    assert [timeline.names[n] for n in execution.names] == ["record event 1", "aten::add"]
    assert len(capture.edges) == 1, "the wait_stream's edge, not the eager event's"


# -- size and shape ------------------------------------------------------------------------------
def test_a_page_of_100k_ops_costs_a_few_bytes_an_op_and_no_element_per_op(tmp_path: Path) -> None:
    ops = 100_000
    item = analysed(write_many_ops(tmp_path / "many.jsonl.gz", ops))
    page = html.render([item])
    assert item.result.summary["ops"] == ops and len(item.result.findings) == 1
    assert len(page) / ops < 24, f"{len(page) / ops:.1f} bytes an op"
    markup = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert markup.count("<") < 120, "the page's elements do not grow with the ops"
    events = json.loads(perfetto.render([item]))["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) >= ops


def test_the_page_fetches_nothing_and_lets_only_its_own_script_run() -> None:
    page = html.render([analysed(DSV4_RACE)])
    assert not re.search(r"\b(src|href)\s*=", page), "no resource is referenced"
    assert not re.search(r"https?://", page.replace("http-equiv", "")), "no address at all"
    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert (
        "default-src 'none'" in policy
        and "script-src 'sha256-" in policy
        and "unsafe-inline" not in policy.split("script-src")[1]
    )
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "fetch(", "XMLHttp"):
        assert forbidden not in page


# -- where they are asked for ----------------------------------------------------------------
def test_analyze_writes_either_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page, events = tmp_path / "r.html", tmp_path / "r.json"
    assert main(["analyze", str(DSV4_RACE), "--format", "html", "-o", str(page)]) == 1
    assert main(["analyze", str(DSV4_RACE), "--format", "perfetto", "-o", str(events)]) == 1
    assert page_data(page.read_text())["findings"][0]["kind"] == "unsafe-free"
    assert json.loads(events.read_text())["traceEvents"]


def test_render_draws_a_loaded_trace() -> None:
    item = analysed(DSV4_RACE)
    trace = load_trace(DSV4_RACE)
    assert page_data(render(item.result, "html", trace))["views"] == page_data(html.render([item]))["views"]


def test_run_writes_the_html_and_perfetto_reports_beside_the_others(tmp_path: Path) -> None:
    import sys

    page, events = tmp_path / "run.html", tmp_path / "run.json"
    code = (
        "import os, shutil; "
        f"shutil.copy({str(DSV4_RACE)!r}, os.path.join(os.environ['STREAMRACE_TRACE_DIR'], 'streamrace-1.jsonl.gz'))"
    )
    kept = tmp_path / "kept.jsonl.gz"
    args = ["run", "-o", str(kept), "--html", str(page), "--perfetto", str(events), "--", sys.executable, "-c", code]
    assert main(args) == 1
    assert page_data(page.read_text())["findings"][0]["accesses"][1]["op"] == "aten::mm"
    assert any(e.get("name") == "missing edge" for e in json.loads(events.read_text())["traceEvents"])


def test_a_trace_that_recorded_nothing_is_not_drawn_as_a_clean_run(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"format": "streamrace-trace", "version": 1}\n')
    (trace,) = page_data(html.render([analysed(empty)]))["traces"]
    assert trace["recorded_nothing"] is True
    (race,) = page_data(html.render([analysed(DSV4_RACE)]))["traces"]
    assert race["recorded_nothing"] is False


def test_a_padded_scatter_draws_no_missing_edge_between_its_ordered_pair() -> None:
    traces = Path(__file__).resolve().parent.parent / "examples" / "traces"
    data = page_data(html.render([analysed(traces / "dsv4_padded_race.jsonl.gz")]))
    assert {(f["kind"], f["unordered"]) for f in data["findings"]} == {("unsafe-free", True), ("padded-scatter", False)}


# -- stream names (issue 27) -------------------------------------------------------------------
def _named_and_unnamed(tmp_path: Path) -> tuple[Path, int, int]:
    """A trace of a stream the program named (``side``) and one it did not."""
    tb = TraceBuilder()
    named, unnamed = tb.stream("side"), tb.stream()
    x = tb.alloc(256, named)
    tb.op("aten::fill_", named, writes=[tb.span(x, 256)])
    tb.op("aten::neg", unnamed, reads=[tb.span(x, 256)])
    trace = tmp_path / "names.jsonl"
    tb.write(str(trace))
    return trace, named, unnamed


def test_html_names_lanes_and_accesses_by_the_stream_and_keeps_the_handle_apart(tmp_path: Path) -> None:
    data = page_data(html.render([analysed(DSV4_RACE)]))
    graph = _views(data)["graph 1 (capture)"]
    handle = {e["name"]: f"{e['stream']:#x}" for e in load_trace(DSV4_RACE).events if e["ev"] == "stream"}
    assert graph["lanes"][:2] == ["main", "kv"], "the program's names, not 'main (0x...)'"
    assert graph["handles"][:2] == [handle["main"], handle["kv"]]
    (finding,) = data["findings"]
    assert [(a["stream"], a["handle"]) for a in finding["accesses"]] == [("kv", handle["kv"]), ("main", handle["main"])]
    assert (finding["block"]["stream"], finding["block"]["handle"]) == ("main", handle["main"])
    trace, named, unnamed = _named_and_unnamed(tmp_path)
    (view,) = page_data(html.render([analysed(trace)]))["views"]
    assert view["lanes"] == ["side", "stream#1"] and view["handles"] == [f"{named:#x}", f"{unnamed:#x}"]


def test_perfetto_names_a_stream_s_track_by_its_name_and_an_unnamed_one_by_label_and_handle(tmp_path: Path) -> None:
    trace, named, unnamed = _named_and_unnamed(tmp_path)
    events = json.loads(perfetto.render([analysed(trace)]))["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["finding 1: the block", "side", f"stream#1 ({unnamed:#x})"]
    streams = {e["name"]: (threads[e["tid"]], e["args"]["stream"]) for e in events if e.get("cat") == "op"}
    unnamed_track = f"stream#1 ({unnamed:#x})"
    assert streams == {"aten::fill_": ("side", f"{named:#x}"), "aten::neg": (unnamed_track, f"{unnamed:#x}")}
    doc = json.loads(perfetto.render([analysed(DSV4_RACE)]))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"main", "kv", "indexer", "weights", "query"} <= names and not any("(0x" in name for name in names)


# -- kernel names demangled for display (issue 27) ---------------------------------------------
SLEEP_SYMBOL = "_ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl"
SLEEP_SHOWN = "at::cuda::(anonymous namespace)::spin_kernel(long)"
needs_cxxfilt = pytest.mark.skipif(shutil.which("c++filt") is None, reason="needs c++filt (binutils)")


def _kernel_race(tmp_path: Path) -> Path:
    """A capture where a kernel the dispatcher never saw (named by its symbol) reads what an
    op on another stream writes, unordered: a finding whose second access is the kernel."""
    tb = TraceBuilder()
    main_s, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main_s) as graph:
        x = tb.alloc(256, main_s)
        tb.wait_stream(side, main_s)
        tb.op("aten::fill_", main_s, writes=[tb.span(x, 256)])
        tb.emit(
            "kernel", graph=graph, node=0, name=SLEEP_SYMBOL, stream=side, device=0, reads=[tb.span(x, 256)], writes=[]
        )
        tb.wait_stream(main_s, side)
    trace = tmp_path / "kernel.jsonl"
    tb.write(str(trace))
    return trace


@needs_cxxfilt
def test_kernel_symbols_are_demangled_in_the_html_and_perfetto_reports_by_one_cxxfilt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    item = analysed(_kernel_race(tmp_path))
    calls: list[list[str]] = []
    popen = subprocess.Popen

    def counted(args: list[str], **kwargs: Any) -> Any:
        calls.append(args)
        return popen(args, **kwargs)

    monkeypatch.setattr(demangle.subprocess, "Popen", counted)
    data = page_data(html.render([item, item, analysed(TRACES / "extension_buggy.jsonl.gz")]))
    assert len(calls) == 1, "one c++filt for all the names of the report, not one per name"
    for trace in data["traces"]:
        assert SLEEP_SHOWN in trace["names"] and SLEEP_SYMBOL not in trace["names"]
    accesses = [(a["op"], a["stream"]) for f in data["findings"] for a in f["accesses"]]
    assert accesses[:2] == [("aten::fill_", "main"), (SLEEP_SHOWN, "side")]
    events = json.loads(perfetto.render([item]))["traceEvents"]
    (sleep,) = [e for e in events if e.get("cat") == "kernel"]
    assert (sleep["name"], sleep["args"]["symbol"]) == (SLEEP_SHOWN, SLEEP_SYMBOL)
    assert len(calls) == 2
    # The machine formats keep the trace's raw name.
    for machine in ("json", "sarif"):
        report = render(item.result, machine)
        assert SLEEP_SYMBOL in report and SLEEP_SHOWN not in report


def _demangling_bomb() -> str:
    """A 255-character symbol whose back-references demangle to about 1.1 GB of text."""
    digits = string.digits + string.ascii_uppercase

    def substitution(n: int) -> str:
        if n == 0:
            return "S0_"
        return "S" + "".join(reversed([digits[(n // 36**k) % 36] for k in range(3) if n >= 36**k])) + "_"

    return "_Z1fSt4pairIiiE" + "".join(f"S_I{substitution(i)}{substitution(i)}E" for i in range(24))


@needs_cxxfilt
def test_a_name_that_demangles_past_the_bound_is_shown_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """c++filt's output is read up to MAX_DEMANGLED a name: a symbol that would demangle to a
    gigabyte (back-references) costs that much and no more, and is shown raw."""
    assert len(_demangling_bomb()) == 255
    assert demangle.demangled([_demangling_bomb()]) == {}
    assert demangle.demangled([SLEEP_SYMBOL]) == {SLEEP_SYMBOL: SLEEP_SHOWN}
    monkeypatch.setattr(demangle, "MAX_DEMANGLED", len(SLEEP_SHOWN) - 1)
    assert demangle.demangled([SLEEP_SYMBOL]) == {}


def test_without_cxxfilt_or_with_a_hostile_name_kernel_names_stay_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    assert demangle.demangled(["aten::mm", "_Z3foo\nbar", "_Zx y"]) == {}, "only one-line symbols reach c++filt"
    monkeypatch.setattr(demangle.shutil, "which", lambda name: None)
    names = page_data(html.render([analysed(TRACES / "extension_buggy.jsonl.gz")]))["traces"][0]["names"]
    assert SLEEP_SYMBOL in names
