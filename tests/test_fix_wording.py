"""Fixes are advice a person can paste: stream names in code are Python, or placeholders
that the sentence explains; ``suggestion`` places the fix's join at a source line."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE, GRAPH_INPUT_FREED, RECORD_STREAM_NOOP, UNSAFE_FREE, suggestion
from streamrace.cli import main
from streamrace.trace.builder import TraceBuilder

REPO = Path(__file__).resolve().parents[1]
SIZE = 4096
PLACEHOLDER = r"\b(?:owner|user|later|earlier|consumer)_stream\b"


def _freed_before_join(main_name: str | None, side_name: str | None):
    tb = TraceBuilder()
    main, side = tb.stream(main_name), tb.stream(side_name)
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:1")
        tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:2")
        tb.wait_stream(side, main, at="model.py:3")
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:4")
        tb.free(x, at="model.py:5")
        y = tb.alloc(SIZE, main, addr=x, at="model.py:6")
        tb.op("aten::mul", main, writes=[tb.span(y, SIZE)], at="model.py:7")
        tb.wait_stream(main, side, at="model.py:8")
    (finding,) = analyze(tb.trace()).findings
    assert finding.kind == UNSAFE_FREE
    return finding


def _race(first_name: str | None, second_name: str | None):
    tb = TraceBuilder()
    main, side = tb.stream(first_name), tb.stream(second_name)
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:1")
        tb.wait_stream(side, main, at="model.py:2")
        tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:3")
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:4")
        tb.wait_stream(main, side, at="model.py:5")
    (finding,) = analyze(tb.trace()).findings
    assert finding.kind == DATA_RACE
    return finding


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _assert_python(code: str) -> None:
    ast.parse(code)  # raises SyntaxError for `stream#3.wait_stream(stream#2)`


@pytest.mark.parametrize("names", [("main", "side"), (None, None), (None, "side"), ("main", "kv cache")])
def test_unsafe_free_fix_is_python(names):
    finding = _freed_before_join(*names)
    spans = _code_spans(finding.fix)
    assert spans and all(_assert_python(code) is None for code in spans), finding.fix
    assert "#" not in "".join(spans)
    for placeholder in {name for code in spans for name in re.findall(PLACEHOLDER, code)}:
        assert f"`{placeholder}` is " in finding.fix, f"{placeholder} is not explained: {finding.fix}"


def test_named_streams_stay_in_the_code():
    finding = _freed_before_join("main", "side")
    assert "`main.wait_stream(side)`" in finding.fix and "`t.record_stream(side)`" in finding.fix
    assert not re.search(PLACEHOLDER, finding.fix), "no stream placeholder to explain"
    # no source to name the tensor: the placeholder says which tensor it is
    assert finding.fix.endswith(", where `t` is the tensor allocated at model.py:1")


def test_unnamed_streams_get_explained_placeholders():
    finding = _freed_before_join(None, None)
    assert "`owner_stream.wait_stream(user_stream)`" in finding.fix
    assert "`owner_stream` is stream#0" in finding.fix and "`user_stream` is stream#1" in finding.fix
    race = _race(None, "side")
    assert "`side.wait_stream(earlier_stream)`" in race.fix
    explained = (
        r"`earlier_stream` is stream#0, graph 1's capture stream, handle 0x[0-9a-f]+ \(the stream of aten::fill_\)"
    )
    assert re.search(explained, race.fix), race.fix
    for code in _code_spans(race.fix):
        _assert_python(code)


def test_a_placeholder_says_which_stream_object_it_is():
    """A stream the program never named is, to its reader, the graph's capture stream or a
    handle: the explanation gives both, not only the report's own ``stream#K``."""
    tb = TraceBuilder()
    main, side, third = tb.stream(None), tb.stream(None), tb.stream(None)
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:1")
        tb.wait_stream(side, main, at="model.py:2")
        tb.wait_stream(third, main, at="model.py:2")
        tb.op("aten::fill_", side, writes=[tb.span(x, SIZE)], at="model.py:3")
        tb.op("aten::sum", third, reads=[tb.span(x, SIZE)], at="model.py:4")
        tb.wait_stream(main, side, at="model.py:5")
        tb.wait_stream(main, third, at="model.py:5")
    (race,) = analyze(tb.trace()).findings
    assert f"`later_stream` is stream#2, handle {third:#x} (the stream of aten::sum)" in race.fix
    assert f"`earlier_stream` is stream#1, handle {side:#x} (the stream of aten::fill_)" in race.fix
    race = _race(None, None)
    assert "`later_stream` is stream#1, handle" in race.fix
    assert "`earlier_stream` is stream#0, graph 1's capture stream, handle" in race.fix


def test_default_stream_is_torch_cuda_default_stream():
    tb = TraceBuilder()
    side = tb.stream("side")
    x = tb.alloc(SIZE, 0, at="model.py:1")
    tb.op("aten::fill_", 0, writes=[tb.span(x, SIZE)], at="model.py:2")
    tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:3")
    (race,) = analyze(tb.trace()).findings
    assert "`side.wait_stream(torch.cuda.default_stream())`" in race.fix


def test_suggestion_joins_before_the_later_access_or_the_free():
    race = _race("main", "side")
    hint = suggestion(race)
    assert (hint.code, hint.before) == ("side.wait_stream(main)", "model.py:4")
    unsafe = _freed_before_join(None, "side")
    hint = suggestion(unsafe)
    assert (hint.code, hint.before) == ("owner_stream.wait_stream(side)", "model.py:5")
    assert hint.code in unsafe.fix, "the suggestion is the fix's own code"


def test_record_stream_noop_fix_names_the_consumer_in_python():
    tb = TraceBuilder()
    main, side = tb.stream(None), tb.stream(None)
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:1")
        tb.wait_stream(side, main, at="model.py:2")
        tb.op("aten::sum", side, reads=[tb.span(x, SIZE)], at="model.py:3")
        tb.record_stream(x, main, at="model.py:4")
        tb.free(x, at="model.py:5")
        tb.alloc(SIZE, main, at="model.py:6")
        tb.wait_stream(main, side, at="model.py:7")
    noop = next(f for f in analyze(tb.trace()).findings if f.kind == RECORD_STREAM_NOOP)
    assert "`t.record_stream(consumer_stream)`" in noop.fix and "`consumer_stream` is stream#1" in noop.fix
    assert suggestion(noop) is None


def test_a_free_where_a_local_died_at_return_is_not_an_exact_place():
    """handbuilt: qkv is a local of _prologue, freed when it returns to forward's line 31;
    dsv4_mini_race: ``del qkv`` in the function that made it."""
    from pathlib import Path

    from streamrace.trace import load_trace

    traces = Path(__file__).resolve().parents[1] / "examples" / "traces"
    (returned,) = analyze(load_trace(traces / "handbuilt_freed_before_join.jsonl")).findings
    (deleted,) = analyze(load_trace(traces / "dsv4_mini_race.jsonl.gz")).findings
    assert suggestion(returned).exact is False and "last reference" in suggestion(returned).why
    assert suggestion(deleted).exact is True and suggestion(deleted).why == "join kv before the free"


# -- names and places as the source shows them (examples/dsv4_mini_decode.py) -------------------
REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
DSV4 = REPO / "examples" / "traces" / "dsv4_mini_race.jsonl.gz"


def _from_repo(path: str) -> list[str] | None:
    source = REPO / path
    return source.read_text(encoding="utf-8").splitlines() if source.is_file() else None


def _dsv4(sources=_from_repo):
    from streamrace.trace import load_trace

    (finding,) = analyze(load_trace(DSV4), sources=sources).findings
    return finding


def test_the_fix_uses_the_tensor_and_stream_names_of_the_source():
    """``qkv = x @ self.w_qkv`` ... ``with torch.cuda.stream(s.kv):`` ... ``del qkv``."""
    finding = _dsv4()
    assert "keep `qkv` alive until after `main.wait_stream(s.kv)`" in finding.fix
    assert "`qkv.record_stream(s.kv)`" in finding.fix
    assert "where" not in finding.fix, "nothing left to explain"
    for code in _code_spans(finding.fix):
        _assert_python(code)
    assert finding.fix_code == "main.wait_stream(s.kv)" and suggestion(finding).code == finding.fix_code
    assert finding.accesses[0].stream_code == "s.kv"


def test_without_the_source_the_fix_keeps_the_recorded_names():
    finding = _dsv4(sources=None)
    assert "`main.wait_stream(kv)`" in finding.fix and "`t.record_stream(kv)`" in finding.fix
    assert "where `t` is the tensor allocated at examples/dsv4_mini_decode.py:105" in finding.fix
    assert finding.signature == _dsv4().signature == "b6f65c0d63ec7f36", "names never change the signature"


def test_a_shared_helper_points_the_fix_at_its_caller():
    """The kv read is in rms_norm, called from many lines; the fix goes where it was called
    with qkv (line 115), the report's stack still starts in the helper."""
    read = _dsv4().accesses[0]
    assert read.location == "examples/dsv4_mini_decode.py:50" and read.stack[0][2] == "rms_norm"
    assert read.site == "examples/dsv4_mini_decode.py:115"
    assert "after aten::mul.Tensor (examples/dsv4_mini_decode.py:115 via rms_norm)" in _dsv4().fix


def test_a_race_in_a_shared_helper_is_joined_before_the_caller_s_line():
    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    helper_from_4 = tb.emit("stack", id=90, frames=[["model.py", 40, "norm"], ["model.py", 4, "forward"]])["id"]
    helper_from_9 = tb.emit("stack", id=91, frames=[["model.py", 40, "norm"], ["model.py", 9, "forward"]])["id"]
    with tb.capture(main):
        x = tb.alloc(SIZE, main, at="model.py:1")
        y = tb.alloc(SIZE, main, at="model.py:1")
        tb.wait_stream(side, main, at="model.py:2")
        tb.op("aten::fill_", main, writes=[tb.span(x, SIZE)], at="model.py:3")
        tb.emit("op", op="aten::mul", stream=side, device=0, reads=[tb.span(x, SIZE)], writes=[], stack=helper_from_4)
        tb.emit("op", op="aten::mul", stream=main, device=0, reads=[tb.span(y, SIZE)], writes=[], stack=helper_from_9)
        tb.wait_stream(main, side, at="model.py:5")
    (race,) = analyze(tb.trace()).findings
    later = race.accesses[1]
    assert later.location == "model.py:40" and later.site == "model.py:4"
    assert suggestion(race).before == "model.py:4", "before the line that called the helper"
    assert "before aten::mul (model.py:4 via norm)" in race.fix


def test_an_invisible_kernel_s_line_is_only_near():
    """A kernel the recorder caught up on has the next recorded event's stack: its line is
    shown as near, a Triton launch's as it is."""
    from streamrace.report import TraceResult, text

    tb = TraceBuilder()
    main, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main) as graph:
        x = tb.alloc(SIZE, main, at="model.py:1")
        tb.wait_stream(side, main, at="model.py:2")
        stack = tb.emit("stack", id=99, frames=[["model.py", 3, "forward"]])["id"]
        tb.emit("kernel", graph=graph, node=0, name="cupy_scale", stream=side, device=0, reads=[], stack=stack,
                writes=[tb.span(x, SIZE)], inferred=True)  # fmt: skip
        tb.emit("kernel", graph=graph, node=1, name="triton:add", stream=main, device=0, reads=[tb.span(x, SIZE)],
                writes=[], stack=stack)  # fmt: skip
        tb.wait_stream(main, side, at="model.py:5")
    (race,) = analyze(tb.trace()).findings
    caught_up, triton = race.accesses
    assert caught_up.near and not triton.near
    assert "cupy_scale on side (near model.py:3)" in race.message
    report = text.render([TraceResult("t.jsonl", analyze(tb.trace()))])
    assert "near model.py:3 in forward" in report and "at model.py:3 in forward" in report


@pytest.mark.parametrize(
    ("trace", "name"),
    [("examples/traces/execution_X5_buggy.jsonl.gz", "x"), ("examples/traces/nccl_N4_buggy.jsonl.gz", "inp")],
)
def test_graph_input_freed_fix_names_the_one_tensor_throughout(trace, name, capsys, monkeypatch):
    """The fix said "keep `x` alive ... or copy new data into `t`, where `t` is ...": two names
    for one tensor. Where the source names it, both halves use that name."""
    monkeypatch.chdir(REPO)
    main(["analyze", trace, "--format", "json"])
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["kind"] == GRAPH_INPUT_FREED
    assert f"keep `{name}` alive" in finding["fix"] and f"copy new data into `{name}`" in finding["fix"]
    assert "`t`" not in finding["fix"], finding["fix"]
