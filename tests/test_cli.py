"""The command line: exit codes, one-line errors, the bundled example, JSON output, gzip input."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from streamrace import __version__
from streamrace.analysis.core import cpp_available
from streamrace.cli import main
from streamrace.trace import FORMAT_MINOR, FORMAT_VERSION
from streamrace.trace.builder import TraceBuilder

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "examples" / "traces" / "handbuilt_freed_before_join.jsonl"


@pytest.fixture(autouse=True)
def _from_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Source lines in the bundled trace are relative to the repository root, as in the README.
    monkeypatch.chdir(REPO)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamrace", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def _clean_trace(path: Path) -> Path:
    """main forks side, side reads x, main joins side, then frees x: correct."""
    tb = TraceBuilder()
    main_s, side = tb.stream("main"), tb.stream("side")
    with tb.capture(main_s):
        x = tb.alloc(4096, main_s, at="model.py:1")
        tb.op("aten::fill_", main_s, writes=[tb.span(x, 4096)], at="model.py:2")
        tb.wait_stream(side, main_s, at="model.py:3")
        tb.op("aten::sum", side, reads=[tb.span(x, 4096)], at="model.py:4")
        tb.wait_stream(main_s, side, at="model.py:5")
        tb.free(x, at="model.py:6")
    tb.write(str(path))
    return path


def _load_example_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_handbuilt_trace", REPO / "examples" / "make_handbuilt_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- user errors: exactly one line on stderr, exit code 2, no traceback ------------------------
def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, a piece of the expected error line)."""
    garbage = tmp / "garbage.jsonl"
    garbage.write_text("this is not a trace\n")
    binary = tmp / "binary.jsonl"
    binary.write_bytes(bytes(range(128, 256)))
    empty = tmp / "empty.jsonl"
    empty.write_bytes(b"")
    whole = BUNDLED.read_bytes()
    truncated = tmp / "truncated.jsonl"
    truncated.write_bytes(whole[: len(whole) // 2])
    packed = gzip.compress(whole)
    truncated_gz = tmp / "truncated.jsonl.gz"
    truncated_gz.write_bytes(packed[: len(packed) // 2])
    future = tmp / "future.jsonl"
    future.write_text(json.dumps({"format": "streamrace-trace", "version": FORMAT_VERSION + 1}) + "\n")
    invalid = tmp / "invalid.jsonl"
    invalid.write_text(
        json.dumps({"format": "streamrace-trace", "version": 1})
        + "\n"
        + json.dumps({"seq": 0, "ev": "alloc", "addr": 4096, "stream": 1})
        + "\n"
    )
    clean = _clean_trace(tmp / "clean.jsonl")
    return {
        "garbage": ([str(garbage)], f"{garbage}:1: invalid JSON"),
        "binary": ([str(binary)], f"{binary}:1: not text"),
        "empty": ([str(empty)], f"{empty}: empty file: no trace header"),
        "truncated": ([str(truncated)], "(truncated file?)"),
        "truncated gzip": ([str(truncated_gz)], "truncated or corrupt gzip data"),
        "future version": ([str(future)], f"{future}:1: trace format version {FORMAT_VERSION + 1} is newer"),
        "invalid event": ([str(invalid)], f"{invalid}:2: 'alloc' event is missing field 'size'"),
        "missing file": ([str(tmp / "absent.jsonl")], "absent.jsonl: no such file"),
        "directory": ([str(tmp)], f"{tmp}: is a directory, not a trace file"),
        "bad flag": ([str(clean), "--colour"], "unrecognized arguments: --colour"),
        "bad format": ([str(clean), "--format", "xml"], "argument --format: invalid choice: 'xml'"),
        "no trace": ([], "the following arguments are required: TRACE"),
        "one bad among good": ([str(clean), str(empty)], "empty file"),
        "unwritable output": ([str(clean), "-o", str(tmp / "no" / "such" / "dir.json")], "cannot write the report"),
    }


BAD_INPUTS = (
    "garbage",
    "binary",
    "empty",
    "truncated",
    "truncated gzip",
    "future version",
    "invalid event",
    "missing file",
    "directory",
    "bad flag",
    "bad format",
    "no trace",
    "one bad among good",
    "unwritable output",
)


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_user_error_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    cases = _bad_inputs(tmp_path)
    assert set(cases) == set(BAD_INPUTS)  # every case is run
    args, expected = cases[name]

    code = main(["analyze", *args])

    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("streamrace: error: ")
    assert expected in err
    assert "Traceback" not in err


def test_user_error_through_the_real_process(tmp_path: Path) -> None:
    """The same through `python -m streamrace`: no traceback reaches the terminal."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for args in (["analyze", str(empty)], ["analyze", "--bogus"], ["frobnicate"], []):
        proc = _run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1, (args, proc.stderr)
        assert proc.stderr.startswith("streamrace: error: ")
        assert "Traceback" not in proc.stderr


# -- results -----------------------------------------------------------------------------------
def test_clean_trace_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", str(_clean_trace(tmp_path / "clean.jsonl"))])

    out, err = capsys.readouterr()
    assert code == 0
    assert err == ""
    assert "no findings" in out


def test_bundled_race_trace_names_ops_streams_lines_and_fix() -> None:
    proc = _run("analyze", "examples/traces/handbuilt_freed_before_join.jsonl")

    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert "unsafe-free" in out
    # both ops, on both streams
    assert "aten::mm.out on stream indexer" in out
    assert "aten::linear on stream main" in out
    # the source lines, with their text from examples/dsv4_mini.py
    assert "examples/dsv4_mini.py:42" in out
    assert "torch.mm(qkv, self.w_idx, out=self.topk_scores)" in out
    assert "examples/dsv4_mini.py:32" in out
    assert "mixed = self.wmix(q)" in out
    assert "qkv = self.wqkv(hidden)" in out  # where the block was allocated
    # the fix
    assert "fix" in out
    assert "wait_stream(indexer)" in out
    assert "1 finding (1 error)" in out


def test_bundled_trace_is_what_the_example_script_writes(tmp_path: Path) -> None:
    """examples/traces/handbuilt_freed_before_join.jsonl is regenerated, not hand-edited."""
    out = tmp_path / "regenerated.jsonl"
    _load_example_script().main([str(out)])

    assert out.read_bytes() == BUNDLED.read_bytes()


def test_json_output_to_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"

    code = main(["analyze", str(BUNDLED), "--format", "json", "-o", str(report)])

    out, err = capsys.readouterr()
    assert code == 1
    assert (out, err) == ("", "")
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert {"streamrace", "trace_format", "findings", "summary"} <= doc.keys()
    assert doc["streamrace"] == __version__
    assert doc["trace_format"] == FORMAT_VERSION
    assert set(doc["summary"]) >= {"findings", "graphs", "ops", "accesses"}
    assert doc["summary"]["findings"] == len(doc["findings"]) == 1
    finding = doc["findings"][0]
    assert finding["kind"] == "unsafe-free"
    assert finding["trace"] == str(BUNDLED)
    assert [a["stream_label"] for a in finding["accesses"]] == ["indexer", "main"]
    per_trace = {key: value for key, value in doc["summary"].items() if key != "traces"}
    assert doc["traces"] == [{"path": str(BUNDLED), "summary": per_trace, "notes": []}]


def test_json_is_byte_identical_across_runs(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for out in (first, second):
        assert main(["analyze", str(BUNDLED), "--format", "json", "-o", str(out)]) == 1

    assert first.read_bytes() == second.read_bytes()


def test_gzip_trace_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    packed = tmp_path / "race.jsonl.gz"
    packed.write_bytes(gzip.compress(BUNDLED.read_bytes()))

    code = main(["analyze", str(packed)])

    out, _ = capsys.readouterr()
    assert code == 1
    assert "unsafe-free" in out


def test_several_traces_one_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = _clean_trace(tmp_path / "clean.jsonl")

    code = main(["analyze", str(clean), str(BUNDLED), "--format", "json"])

    out, _ = capsys.readouterr()
    doc = json.loads(out)
    assert code == 1
    assert [t["path"] for t in doc["traces"]] == [str(clean), str(BUNDLED)]
    assert [t["summary"]["findings"] for t in doc["traces"]] == [0, 1]
    assert doc["summary"]["traces"] == 2
    assert doc["summary"]["graphs"] == 2
    assert [f["trace"] for f in doc["findings"]] == [str(BUNDLED)]

    code = main(["analyze", str(clean), str(BUNDLED)])

    out, _ = capsys.readouterr()
    assert code == 1
    assert out.index(str(clean)) < out.index(str(BUNDLED))
    assert out.rstrip().endswith("total: 1 finding (1 error) in 1 of 2 traces analysed")


VERSION = f"streamrace {__version__} (trace format {FORMAT_VERSION}.{FORMAT_MINOR}; analysis engine: "


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(VERSION)

    assert main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--format" in out
    assert "exit codes" in out


def test_console_script_and_module_agree() -> None:
    """`python -m streamrace` is the console script's `main`."""
    proc = _run("--version")

    assert proc.returncode == 0
    assert proc.stdout.startswith(VERSION)


@pytest.mark.parametrize(
    ("core", "engine"),
    [
        ("python", "Python (STREAMRACE_CORE=python)" if cpp_available() else "Python (the C++ core is not built)"),
        ("auto", "C++ core" if cpp_available() else "Python (the C++ core is not built)"),
    ],
)
def test_version_says_which_analysis_engine_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, core: str, engine: str
) -> None:
    monkeypatch.setenv("STREAMRACE_CORE", core)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"{VERSION}{engine})\n"


def test_each_command_help_has_its_own_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """env's help printed analyze's table (findings, nothing recorded), which env never returns."""
    assert main(["env", "--help"]) == 0
    env_help = capsys.readouterr().out
    assert "exit codes:" in env_help and "findings" not in env_help and "nothing recorded" not in env_help
    assert "cannot be made or written" in env_help
    assert main(["diff", "--help"]) == 0
    assert "B has a finding that A lacks" in capsys.readouterr().out


def test_env_makes_a_missing_trace_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Else every process started later fails with "recorder not started: [Errno 2] ...",
    long after env exited 0 (recording.md's own example did)."""
    folder = tmp_path / "missing" / "dir"
    assert main(["env", "--trace-dir", str(folder)]) == 0
    assert folder.is_dir()
    assert f"export STREAMRACE_TRACE_DIR={folder}" in capsys.readouterr().out


def test_env_refuses_a_trace_folder_it_cannot_make(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    assert main(["env", "--trace-dir", str(taken)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"streamrace: error: --trace-dir {taken}: not a directory\n"
    assert main(["env", "--trace-dir", str(taken / "below")]) == 2
    assert "cannot make the folder" in capsys.readouterr().err


@pytest.mark.skipif(os.name != "posix", reason="needs a POSIX shell and pipe")
def test_closed_stdout_is_not_an_error() -> None:
    """`streamrace analyze ... | head`: no traceback, and the exit code still tells about findings."""
    many = " ".join([str(BUNDLED)] * 200)  # a report far larger than a pipe's buffer
    proc = subprocess.run(
        f"{sys.executable} -m streamrace analyze {many} | head -c 10 >/dev/null; exit ${{PIPESTATUS[0]}}",
        shell=True,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        executable="/bin/bash",
    )

    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""


# -- forward-compatible traces ----------------------------------------------------------------
def _with_unknown_events(source: Path, target: Path) -> Path:
    """``source`` with two events of a kind no streamrace knows, after line 5 and at the end,
    their seq numbers fitted between their neighbours' (the recorder's numbers skip)."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as raw:
        lines = [json.loads(line) for line in raw if line.strip()]
    header, events = lines[0], lines[1:]
    events = [{**ev, "seq": 2 * ev["seq"]} for ev in events]  # room for the new events
    events.insert(5, {"seq": events[4]["seq"] + 1, "ev": "graph_replay", "graph": 1, "stream": "anything"})
    events.append({"seq": events[-1]["seq"] + 1, "ev": "graph_replay", "graph": 1})
    with gzip.open(target, "wt", encoding="utf-8") as out:
        for line in [header, *events]:
            out.write(json.dumps(line) + "\n")
    return target


def _json_report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["analyze", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["dsv4_mini_race.jsonl.gz", "gallery_H2_fixed.jsonl.gz", BUNDLED.name])
def test_unknown_event_kinds_are_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    source = REPO / "examples" / "traces" / name
    extended = _with_unknown_events(source, tmp_path / "extended.jsonl.gz")

    code_before, before = _json_report(capsys, str(source))
    code_after, after = _json_report(capsys, str(extended))

    assert code_after == code_before and code_after in (0, 1)
    finding_keys = [(f["kind"], f["signature"], f["count"]) for f in after["findings"]]
    assert finding_keys == [(f["kind"], f["signature"], f["count"]) for f in before["findings"]]
    assert after["summary"] == before["summary"]
    (note,) = [n for n in after["notes"] if n["code"] == "unknown-events"]
    assert "graph_replay (2)" in note["message"]
    assert not [n for n in before["notes"] if n["code"] == "unknown-events"]

    main(["analyze", str(extended)])
    assert "2 events of a kind this streamrace does not know were skipped" in " ".join(capsys.readouterr().out.split())
    main(["analyze", "--format", "sarif", str(extended)])
    sarif = json.loads(capsys.readouterr().out)
    notes = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert "unknown-events" in [n["descriptor"]["id"] for n in notes]


def test_a_newer_minor_version_asks_for_an_upgrade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "newer.jsonl"
    lines = [
        {"format": "streamrace-trace", "version": FORMAT_VERSION, "minor": FORMAT_MINOR + 1},
        {"seq": 0, "ev": "stream", "stream": 1},
        {"seq": 1, "ev": "graph_fork", "graph": 1},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    code, doc = _json_report(capsys, str(path))

    assert code == 5, "no op in the trace: nothing recorded (docs/cli.md, exit codes)"
    assert [n["code"] for n in doc["notes"]] == ["unknown-events", "nothing-recorded"]
    note = doc["notes"][0]
    assert f"the trace is format {FORMAT_VERSION}.{FORMAT_MINOR + 1}" in note["message"]
    assert "upgrade" in note["message"]


def test_json_says_nothing_was_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit code 5 is the only sign in a pipeline without --exit-zero; with it, or in a file kept
    for later, the document itself must say that no trace had anything to check."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"format": "streamrace-trace", "version": 1}\n', encoding="utf-8")

    code, doc = _json_report(capsys, str(empty), "--exit-zero")

    assert code == 0 and doc["nothing_recorded"] is True
    (note,) = doc["notes"]
    assert note["code"] == "nothing-recorded" and note["trace"] == str(empty)
    assert note["message"].startswith("nothing recorded: the trace had no CUDA graph capture and no op")
    assert doc["traces"][0]["notes"] == [{"code": note["code"], "message": note["message"]}]

    code, doc = _json_report(capsys, str(empty), str(BUNDLED))
    assert code == 1 and doc["nothing_recorded"] is False, "one trace recorded something"
    assert [n["trace"] for n in doc["notes"]] == [str(empty)]
    code, doc = _json_report(capsys, str(BUNDLED))
    assert doc["nothing_recorded"] is False and doc["notes"] == []


# -- standard input and pipes -------------------------------------------------------------------
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_analyze_dash_reads_standard_input(packed: bool) -> None:
    data = BUNDLED.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", "--format", "json", "-"],
        input=gzip.compress(data) if packed else data,
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    from_file = _run("analyze", "--format", "json", str(BUNDLED))

    assert proc.returncode == from_file.returncode == 1, proc.stderr
    doc, expected = json.loads(proc.stdout), json.loads(from_file.stdout)
    assert doc["traces"][0]["path"] == "<stdin>"
    assert [f["signature"] for f in doc["findings"]] == [f["signature"] for f in expected["findings"]]


def test_bad_standard_input_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", "-"], input=b"", capture_output=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.decode() == "streamrace: error: <stdin>: empty file: no trace header\n"


def test_standard_input_twice_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamrace", "analyze", "-", "-"],
        input=BUNDLED.read_bytes(),
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "streamrace: error: standard input (-) is named more than once: it can be read only once\n"
    )


def test_analyze_help_names_dash_for_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--help"]) == 0
    assert "- for standard input" in capsys.readouterr().out


# -- the report never overwrites its input ------------------------------------------------------
def _same_file_paths(tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the bundled trace, and other paths to that same file: ./, .., a symbolic link
    and a hard link."""
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(BUNDLED.read_bytes())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.jsonl").symlink_to(trace)
    os.link(trace, tmp_path / "hard.jsonl")
    return trace, [
        str(trace),
        f"{tmp_path}/./t.jsonl",
        f"{tmp_path}/sub/../t.jsonl",
        f"{tmp_path}/sub/link.jsonl",
        f"{tmp_path}/hard.jsonl",
    ]


@pytest.mark.parametrize("command", ["analyze", "diff"])
def test_output_over_an_input_trace_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    trace, outputs = _same_file_paths(tmp_path)
    before = trace.read_bytes()
    inputs = [str(trace)] if command == "analyze" else [str(BUNDLED), str(trace)]
    for output in outputs:
        assert main([command, *inputs, "-o", output]) == 2, output
        _, err = capsys.readouterr()
        assert err == f"streamrace: error: -o {output}: is the trace {trace}; the report would overwrite its input\n"
    assert trace.read_bytes() == before
    assert main([command, *inputs, "-o", str(tmp_path / "report.txt")]) == (1 if command == "analyze" else 0)
    assert (tmp_path / "report.txt").stat().st_size > 0  # another file is fine
    assert trace.read_bytes() == before


@pytest.mark.parametrize("flag", ["--baseline", "--suppressions"])
def test_output_over_the_gate_s_own_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """The baseline and the suppressions are inputs too: a report written over one would turn
    the next gate into a failure to read it, silently."""
    gate = tmp_path / ("base.json" if flag == "--baseline" else "s.toml")
    if flag == "--baseline":
        assert main(["analyze", str(BUNDLED), "--format", "json", "-o", str(gate)]) == 1
    else:
        gate.write_text('[[suppress]]\nsignature = "0123456789abcdef"\nreason = "kept to demonstrate"\n')
    before = gate.read_bytes()
    capsys.readouterr()
    for output in (str(gate), f"{tmp_path}/./{gate.name}"):
        assert main(["analyze", str(BUNDLED), flag, str(gate), "-o", output]) == 2
        _, err = capsys.readouterr()
        assert err == f"streamrace: error: {output}: is the {flag} file {gate}; the report would overwrite it\n"
    assert gate.read_bytes() == before
    assert main(["analyze", str(BUNDLED), flag, str(gate), "-o", str(tmp_path / "report.txt")]) in (0, 1)


@pytest.mark.parametrize("flag", ["--json", "--sarif", "--html", "--perfetto"])
def test_run_refuses_a_report_over_its_kept_trace_or_another_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """``run -o t.jsonl.gz --json t.jsonl.gz`` wrote the report over the trace it had just kept
    (and told to analyse it again); refused before the program runs, by any path to the file."""
    marker = tmp_path / "ran"
    program = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    trace, others = _same_file_paths(tmp_path)
    before = trace.read_bytes()
    for output in others:
        assert main(["run", "-o", str(trace), flag, output, *program]) == 2, output
        _, err = capsys.readouterr()
        kept = f"is the trace kept at -o {trace}; the report would overwrite it"
        assert err == f"streamrace: error: {flag} {output}: {kept}\n"
    fresh = tmp_path / "new.jsonl.gz"  # not made yet: known by its path
    assert main(["run", "-o", str(fresh), flag, f"{tmp_path}/./new.jsonl.gz", *program]) == 2
    _, err = capsys.readouterr()
    assert err.endswith(f"is the trace kept at -o {fresh}; the report would overwrite it\n")
    other = "--sarif" if flag == "--json" else "--json"
    report = tmp_path / "report.out"
    assert main(["run", other, str(report), flag, f"{tmp_path}/sub/../report.out", *program]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("streamrace: error: ") and err.endswith("; one would overwrite the other\n")
    assert f"{other} " in err and f"{flag} " in err
    assert not marker.exists() and trace.read_bytes() == before and not fresh.exists()
    assert main(["run", "-o", str(fresh), flag, str(report), *program]) == 5  # apart: it runs (no torch)
    assert marker.exists()


def test_output_over_the_file_standard_input_reads_is_refused(tmp_path: Path) -> None:
    trace, _ = _same_file_paths(tmp_path)
    before = trace.read_bytes()
    with trace.open("rb") as stdin:
        proc = subprocess.run(
            [sys.executable, "-m", "streamrace", "analyze", "-", "-o", str(trace)],
            stdin=stdin,
            capture_output=True,
            cwd=REPO,
            timeout=60,
        )
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        f"streamrace: error: -o {trace}: is the trace <stdin>; the report would overwrite its input\n"
    )
    assert trace.read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("via", ["fifo", "/dev/stdin"])
def test_analyze_reads_a_fifo_and_dev_stdin(tmp_path: Path, via: str) -> None:
    packed = gzip.compress(BUNDLED.read_bytes())
    if via == "fifo":
        fifo = tmp_path / "trace.pipe"
        os.mkfifo(fifo)
        child = subprocess.Popen(
            [sys.executable, "-m", "streamrace", "analyze", str(fifo)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        with open(fifo, "wb") as out:
            out.write(packed)
        stdout, stderr = child.communicate(timeout=60)
    else:
        if not os.path.exists("/dev/stdin"):
            pytest.skip("no /dev/stdin")
        child = subprocess.Popen(
            [sys.executable, "-m", "streamrace", "analyze", "/dev/stdin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        stdout, stderr = child.communicate(packed, timeout=60)

    assert child.returncode == 1, stderr
    assert b"data-race" in stdout or b"unsafe-free" in stdout


# -- hostile traces through the real process ----------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        '{"seq":0,"ev":"alloc","addr":9223372036854775800,"size":4096,"stream":1}',
        '{"seq":0,"ev":"stream","stream":1,"x":NaN}',
        '{"seq":0,"ev":"stream","stream":1,"x":' + "[" * 3000 + "]" * 3000 + "}",
        '{"seq":0,"ev":"free","addr":1' + "0" * 5000 + "}",
        '{"seq":0,"ev":"stack","id":1,"frames":[],"stream":{"a":1}}',
    ],
    ids=["block end past 2^63", "NaN", "nested", "5000 digits", "unhashable stream"],
)
def test_hostile_trace_is_one_line_and_exit_2(tmp_path: Path, line: str) -> None:
    path = tmp_path / "hostile.jsonl"
    path.write_text('{"format":"streamrace-trace","version":1}\n' + line + "\n")

    for core in ("python", "auto"):
        proc = subprocess.run(
            [sys.executable, "-m", "streamrace", "analyze", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
            env={**os.environ, "STREAMRACE_CORE": core},
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"streamrace: error: {path}:2: ")
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# -- start-up --------------------------------------------------------------------------------------
def _modules_after(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    return set(proc.stdout.split())


def test_the_command_line_imports_nothing_heavy() -> None:
    """`streamrace --help` and a trace without graphs load neither torch nor networkx (nor the
    analysis, for --help); a trace with read-back graphs loads the graph check."""
    heavy = {"torch", "networkx", "rich"}
    on_import = _modules_after("import streamrace.cli")
    on_help = _modules_after(
        "import contextlib, io, streamrace.cli as c\nwith contextlib.redirect_stdout(io.StringIO()): c.main(['--help'])"
    )
    assert not heavy & on_import and not heavy & on_help
    assert "streamrace.analysis" not in on_help and "streamrace.report.text" not in on_help

    handbuilt = _modules_after(f"import streamrace.cli as c\nc.main(['analyze', '-o', '/dev/null', {str(BUNDLED)!r}])")
    assert "streamrace.analysis" in handbuilt and not heavy & handbuilt
    recorded = REPO / "examples" / "traces" / "gallery_H2_buggy.jsonl.gz"
    with_graphs = _modules_after(
        f"import streamrace.cli as c\nc.main(['analyze', '-o', '/dev/null', {str(recorded)!r}])"
    )
    assert "streamrace.analysis.graph_truth" in with_graphs and "torch" not in with_graphs


def test_the_console_ends_without_freeing_and_loses_no_output(capsys: pytest.CaptureFixture[str]) -> None:
    """The console script leaves what the analysis kept to the process's exit (os._exit,
    streamrace/short_lived.py); its report and exit code are main's, byte for byte."""
    from streamrace import short_lived

    proc = _run("analyze", "--format", "json", str(BUNDLED))
    code = main(["analyze", "--format", "json", str(BUNDLED)])
    assert proc.returncode == code == 1, proc.stderr
    assert proc.stdout == capsys.readouterr().out and proc.stdout.endswith("\n")
    assert short_lived._RETAINED is None, "main called in-process frees as before"


def test_jobs_analyse_traces_in_processes_and_report_the_same(tmp_path: Path) -> None:
    """analyze --jobs: one process per trace, up to N; the report and the exit code are the
    serial run's, byte for byte, in text and JSON."""
    traces = [str(p) for p in sorted((REPO / "examples" / "traces").glob("gallery_H*.jsonl.gz"))]
    assert len(traces) >= 4
    for format in ("text", "json"):
        serial = _run("analyze", *traces, "--format", format)
        parallel = _run("analyze", *traces, "--format", format, "--jobs", "3")
        assert serial.returncode == parallel.returncode == 1
        assert parallel.stdout == serial.stdout and parallel.stdout


def test_jobs_report_a_broken_trace_as_the_serial_run_does(tmp_path: Path) -> None:
    """A trace that fails to load in a worker is one line and exit 2, the serial run's line."""
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"format": "streamrace-trace", "version": 1}\n{"seq": 0, "ev": "op"}\n')
    traces = [str(p) for p in sorted((REPO / "examples" / "traces").glob("gallery_H*.jsonl.gz"))[:2]]
    serial = _run("analyze", *traces, str(broken))
    parallel = _run("analyze", *traces, str(broken), "-j", "2")
    assert serial.returncode == parallel.returncode == 2
    assert parallel.stderr == serial.stderr and len(parallel.stderr.splitlines()) == 1
