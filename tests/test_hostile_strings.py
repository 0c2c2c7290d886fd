"""A trace is input: the report must not read what its frames name outside the source roots,
must not hang or eat memory on special files, and must show its strings escaped on the
terminal and in SARIF (streamrace/report/sources.py, escape.py)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streamrace.analysis import analyze
from streamrace.cli import main
from streamrace.report import ReportOptions, TraceResult, html, perfetto, sarif, text
from streamrace.report.escape import for_markdown, for_terminal
from streamrace.report.sources import MAX_FILE_BYTES, MAX_PATH_CHARS, SourceLines
from streamrace.trace.builder import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
SECRET = "streamrace-test-secret-0f9a3c"


def _race_at(path: Path, first: str, second: str, **names: str) -> Path:
    """A data race whose two accesses are at ``first`` and ``second`` ("file:line")."""
    tb = TraceBuilder(process={"cwd": names.pop("cwd", "/")})
    main_s, side = tb.stream(names.get("main", "main")), tb.stream(names.get("side", "side"))
    with tb.capture(main_s):
        x = tb.alloc(4096, main_s, at=first)
        tb.wait_stream(side, main_s)
        tb.op(names.get("op", "aten::fill_"), main_s, writes=[tb.span(x, 4096)], at=first)
        tb.op("aten::sum", side, reads=[tb.span(x, 4096)], at=second)
        tb.wait_stream(main_s, side)
    tb.write(str(path))
    return path


# -- source lines ---------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="needs Linux /proc and /dev")
def test_a_trace_naming_system_files_prints_nothing_of_them(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)  # opened for reading, it would block until a writer comes: never
    traces = [
        _race_at(tmp_path / "environ.jsonl", "/proc/self/environ:1", "/etc/passwd:1"),
        _race_at(tmp_path / "zero.jsonl", "/dev/zero:1", f"{fifo}:1"),
        # relative, and the trace claims it was recorded in / : still outside the source root
        _race_at(tmp_path / "relative.jsonl", "proc/self/environ:1", "../../../../../../etc/passwd:1", cwd="/"),
        _race_at(tmp_path / "stdin.jsonl", "/dev/stdin:1", "/proc/self/cmdline:1"),
    ]
    env = dict(os.environ, STREAMRACE_TEST_SECRET=SECRET)
    proc = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", *map(str, traces)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,  # a FIFO or /dev/zero read would hang or run out of memory
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.count("data-race") == 4, "every report completed"
    assert SECRET not in proc.stdout and "STREAMRACE_TEST_SECRET" not in proc.stdout
    assert "root:" not in proc.stdout
    assert "     1 | " not in proc.stdout, "no source text at all"


def test_source_lines_come_only_from_regular_files_under_the_roots(tmp_path: Path) -> None:
    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "model.py").write_text("x = 1\ny = qkv @ w\n")
    (outside / "secret.py").write_text("TOKEN = 'hunter2'\n")
    (root / "link.py").symlink_to(outside / "secret.py")  # a link out of the root
    (root / "big.py").write_bytes(b"a = 1\n" * (MAX_FILE_BYTES // 6 + 1))
    os.mkfifo(root / "fifo.py")
    lines = SourceLines([str(root)])
    assert lines.get("model.py", 2) == "y = qkv @ w"
    assert lines.get(str(root / "model.py"), 1) == "x = 1"
    assert lines.get("model.py", 3) is None and lines.get("model.py", 0) is None
    assert lines.get(str(outside / "secret.py"), 1) is None
    assert lines.get("../elsewhere/secret.py", 1) is None
    assert lines.get("link.py", 1) is None, "the link resolves outside the root"
    assert lines.get("big.py", 1) is None, "too large to be a source file"
    assert lines.get("fifo.py", 1) is None
    assert lines.get("model.py\0.txt", 1) is None
    # the recorded working directory: relative paths start there when it is under a root
    (root / "sub").mkdir()
    (root / "sub" / "model.py").write_text("z = 3\n")
    assert lines.get("model.py", 1, workdir=str(root / "sub")) == "z = 3"
    assert lines.get("secret.py", 1, workdir=str(outside)) is None, "a workdir outside the roots is no root"


def test_a_path_longer_than_any_file_system_takes_is_not_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame path of a million parts (a hostile trace's) is no file: it is refused before
    realpath, which would stat each part (30 s for a 1 MB path)."""
    lines = SourceLines([str(tmp_path)])
    resolved: list[str] = []
    realpath = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p: resolved.append(p) or realpath(p))
    assert lines.get("d/" * (MAX_PATH_CHARS // 2) + "x.py", 1) is None
    assert resolved == []
    (tmp_path / "x.py").write_text("x = 1\n")
    assert lines.get("x.py", 1) == "x = 1" and resolved, "an ordinary path is resolved as before"


def test_source_root_flag_picks_where_lines_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text("a = torch.ones(4)\nb = a.sum()\n")
    trace = _race_at(tmp_path / "t.jsonl", "model.py:1", "model.py:2")
    os.chdir(tmp_path)  # the current directory is not the project: no text by default
    try:
        assert main(["analyze", str(trace)]) == 1
        assert "a = torch.ones(4)" not in capsys.readouterr().out
        assert main(["analyze", "--source-root", str(project), str(trace)]) == 1
        out = capsys.readouterr().out
    finally:
        os.chdir(REPO)
    assert "a = torch.ones(4)" in out and "b = a.sum()" in out


# -- escaping -------------------------------------------------------------------------------
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202eevil\nforged line\ud800"
IN_TRACE = HOSTILE.replace("\ud800", "")  # the reader refuses lone surrogates in a trace


def test_escaping_makes_every_character_visible_and_is_idempotent() -> None:
    escaped = for_terminal(HOSTILE)
    assert escaped == "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\x0aforged line\\ud800"
    assert escaped.isprintable() and for_terminal(escaped) == escaped
    assert for_terminal("plain aten::mm.out at model.py:3 – ünïcode") == "plain aten::mm.out at model.py:3 – ünïcode"
    assert for_markdown("<img src=x onerror=alert(1)> [a](http://x)") == (
        "\\<img src=x onerror=alert\\(1\\)\\> \\[a\\]\\(http://x\\)"
    )


def _escaped_one_by_one(text: str) -> str:
    """The escape's definition, a character at a time."""
    out = []
    for char in text:
        code = ord(char)
        if char.isprintable():
            out.append(char)
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


MARKDOWN = "\\`*_{}[]()<>#+-.!|~&"


def test_escapes_are_their_definition_one_character_at_a_time() -> None:
    import random

    every = "".join(map(chr, range(0x110000)))
    assert for_terminal(every) == _escaped_one_by_one(every)
    rng = random.Random(27)
    alphabet = [*map(chr, range(0x180)), "\u202e", "\u2028", "\ud800", "\U000e0001", "中", "\u0301", *MARKDOWN]
    for _ in range(5_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(30)))
        escaped = _escaped_one_by_one(text)
        assert for_terminal(text) == escaped
        assert for_markdown(text) == "".join("\\" + c if c in MARKDOWN else c for c in escaped)
        # SARIF's plain text: each run of backslashes before a bracket doubled, the bracket escaped
        assert sarif._text(text) == re.sub(r"(\\*)([\[\]])", lambda m: m.group(1) * 2 + "\\" + m.group(2), escaped)


@pytest.mark.parametrize("escape", [for_terminal, for_markdown, sarif._text])
def test_escaping_a_long_name_makes_no_python_call_a_character(escape: Callable[[str], str]) -> None:
    """A 4 MB stream name of newlines, ``ESC [`` or U+202E took 30-40 s in the text report,
    40-60 s in HTML and over 100 s in SARIF (a Python callback a character, a dozen texts
    holding the name); each escape is a pass at C speed now, one Python call at most per
    distinct character."""
    name = "\x1b[31m\u202e\n\\x]`<" * 20_000
    calls = [0]

    def profile(frame: object, event: str, arg: object) -> None:
        calls[0] += event == "call"

    sys.setprofile(profile)
    try:
        escaped = escape(name)
    finally:
        sys.setprofile(None)
    assert escaped.isprintable() and len(escaped) > len(name)
    assert calls[0] < 100, f"{calls[0]:,} Python calls to escape {len(name):,} characters"


def test_long_runs_are_scanned_once() -> None:
    """A run of backslashes before no bracket, and words just short of MAX_WORD, were scanned
    again from each of their characters: SARIF's message of a stream named 100,000 backslashes
    did not end in 100 s, and a 4 MB name of 500-character words cost the text report 9 s."""
    import time

    from streamrace.report.escape import MAX_WORD, shown

    start = time.perf_counter()
    assert sarif._text("\\" * 40_000 + "x[") == "\\" * 40_000 + "x\\["
    assert time.perf_counter() - start < 2  # before: 25-30 s
    assert sarif._text("a\\\\[b") == "a" + "\\" * 4 + "\\[b"
    start = time.perf_counter()
    words = ("w" * MAX_WORD + " ") * 8_000
    assert shown(words).startswith(words[:1_000])
    assert time.perf_counter() - start < 2  # before: about a second, now a tenth


def _hostile_result(tmp_path: Path) -> TraceResult:
    trace = _race_at(
        tmp_path / "hostile.jsonl",
        f"mod{IN_TRACE}.py:1",
        "<img src=x onerror=alert(1)>.py:2",
        main=f"main{IN_TRACE}",
        op="aten::[click](https://evil.example)<script>x</script>\x1b[31m",
    )
    from streamrace.trace import load_trace

    return TraceResult(f"trace\x1b[1m{HOSTILE}.jsonl", analyze(load_trace(trace)))


def test_text_report_shows_trace_strings_escaped(tmp_path: Path) -> None:
    report = text.render([_hostile_result(tmp_path)])
    assert "\x1b" not in report and "\u202e" not in report and "\x07" not in report
    assert "forged line" not in report.replace("\\x0aforged line", ""), "no raw newline from the trace"
    assert report.encode("utf-8"), "no lone surrogate left to break the encoding"
    assert "\\x1b[31m" in report and "main\\x1b]0;pwned" in report


def test_coloured_report_keeps_its_own_colour_and_escapes_the_trace_s(tmp_path: Path) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    os.environ["FORCE_COLOR"] = "1"
    try:
        styled = text.terminal_style(Terminal())
    finally:
        del os.environ["FORCE_COLOR"]
    assert styled is not None
    report = text.render([_hostile_result(tmp_path)], ReportOptions(style=styled[0], width=styled[1]))
    assert "\x1b[" in report, "rich's colour codes are there"
    assert "\\x1b[31m" in report and "\x1b[31m" not in report.replace("\\x1b[31m", ""), "the trace's are escaped"
    assert "\\x1b[1m" not in report.replace("trace\\x1b[1m", ""), "rich's own codes are never escaped"


def test_sarif_messages_carry_no_markup_and_uris_stay_under_the_root(tmp_path: Path) -> None:
    doc = sarif.document([_hostile_result(tmp_path)])
    (result,) = doc["runs"][0]["results"]
    text_message, markdown = result["message"]["text"], result["message"]["markdown"]
    for message in (text_message, markdown):
        assert "\x1b" not in message and "\u202e" not in message
        assert "[click](" not in message, "no link can be forged"
    assert "\\[click\\]" in text_message
    assert not re.search(r"(?<!\\)[<>]", markdown), "every < and > is escaped in markdown"
    assert "\\<script\\>" in markdown
    assert "`main\\x1b" not in markdown
    related = [loc["message"]["text"] for loc in result["relatedLocations"]]
    assert all("\x1b" not in message for message in related)
    rendered = sarif.render([_hostile_result(tmp_path)])
    rendered.encode("utf-8")  # encodable: the lone surrogate of the trace is a JSON escape there
    assert json.loads(rendered) == json.loads(json.dumps(doc))


def _strings(data: object) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for key, value in data.items() for s in (*_strings(key), *_strings(value))]
    if isinstance(data, list):
        return [s for value in data for s in _strings(value)]
    return []


def test_every_sarif_result_string_is_escaped_properties_included(tmp_path: Path) -> None:
    """Not only the messages: ``properties.fix`` and ``.missingEdge`` name the trace's streams
    and ops too, and a viewer shows them as they are."""
    (result,) = sarif.document([_hostile_result(tmp_path)])["runs"][0]["results"]
    properties = result["properties"]
    assert "main\\x1b]0;pwned" in properties["fix"] + properties["missingEdge"], "the stream name is there, escaped"
    unprintable = [s for s in _strings(result) if not s.isprintable()]
    assert unprintable == []


def _hostile_drawn(tmp_path: Path) -> TraceResult:
    """The hostile race, with markup and script in its names, analysed with its timeline."""
    from streamrace.report.timeline import build_timeline
    from streamrace.trace import load_trace

    path = _race_at(
        tmp_path / "drawn.jsonl",
        "</script><script>window.__pwned=1</script>.py:1",
        "<!--<img src=x onerror=window.__pwned=1>.py:2",
        main="</script><script>window.__pwned=1</script>",
        side="<img src=x onerror=window.__pwned=1>",
        op=f"aten::<b>bold</b>&amp;{IN_TRACE}",
    )
    trace = load_trace(path)
    timeline = build_timeline(trace.events)
    return TraceResult(f"<i>{HOSTILE}</i>.jsonl", analyze(trace), timeline=timeline)


def test_html_report_keeps_trace_strings_out_of_the_markup(tmp_path: Path) -> None:
    page = html.render([_hostile_drawn(tmp_path)])
    head, _, body = page.partition("<body>")
    assert "<i>" not in head and "&lt;i&gt;" in head, "the title is escaped"
    data_start = body.index(f'<script type="application/json" id="{html.DATA_ID}">') + len(html.DATA_ID) + 38
    data = body[data_start : body.index("</script>", data_start)]
    assert not re.search(r"[<>&]", data), "no markup character inside the data element"
    assert page.count("</script>") == 2 and page.count("<script") == 2, "no trace string ends or opens a script"
    assert "<img" not in page and "<b>" not in page
    decoded = json.loads(data)
    labels = [lane for view in decoded["views"] for lane in view["lanes"]]
    assert "</script><script>window.__pwned=1</script>" in labels, "shown as itself, once decoded"
    (finding,) = decoded["findings"]
    assert "<!--<img src=x onerror=window.__pwned=1>.py:2" in finding["text"]
    # Printable as in the text report: no bidirectional override or control character
    # reorders or hides what the page shows.
    assert any(f"aten::<b>bold</b>&amp;{for_terminal(IN_TRACE)}" == name for name in decoded["traces"][0]["names"])
    assert not re.search(r"[\x00-\x1f\u202a-\u202e\u2066-\u2069]", json.dumps(decoded, ensure_ascii=False))
    page.encode("utf-8")  # the lone surrogate is a JSON escape there


def test_perfetto_report_is_strict_json_with_the_strings_printable(tmp_path: Path) -> None:
    rendered = perfetto.render([_hostile_drawn(tmp_path)])
    rendered.encode("utf-8")
    names = {event["name"] for event in json.loads(rendered)["traceEvents"]}
    assert f"aten::<b>bold</b>&amp;{for_terminal(IN_TRACE)}" in names
    assert all(name.isprintable() for name in names), "no override or control character in a slice's name"


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("model.py", {"uri": "model.py", "uriBaseId": "%SRCROOT%"}),
        ("./pkg/../model.py", {"uri": "model.py", "uriBaseId": "%SRCROOT%"}),
        ("pkg/a b.py", {"uri": "pkg/a%20b.py", "uriBaseId": "%SRCROOT%"}),
        ("../outside.py", None),
        ("pkg/../../outside.py", None),
        ("/etc/../opt/app/m.py", {"uri": "file:///opt/app/m.py"}),
        ("//host/share.py", {"uri": "file:///host/share.py"}),
    ],
)
def test_sarif_uris_are_normalized(path: str, uri: dict | None) -> None:
    location = sarif._location(f"{path}:3")
    if uri is None:
        assert location is None
    else:
        assert location["physicalLocation"]["artifactLocation"] == uri


def test_error_lines_are_escaped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path / f"no{HOSTILE}.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b]0;pwned" in err
