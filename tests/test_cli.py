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
    assert out.rstrip().endswith("total: 1 finding (1 error) in 1 trace of 2 traces analysed")


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"streamrace {__version__} (trace format {FORMAT_VERSION}.{FORMAT_MINOR})\n"

    assert main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--format" in out
    assert "exit codes" in out


def test_console_script_and_module_agree() -> None:
    """`python -m streamrace` is the console script's `main`."""
    proc = _run("--version")

    assert proc.returncode == 0
    assert proc.stdout.strip() == f"streamrace {__version__} (trace format {FORMAT_VERSION}.{FORMAT_MINOR})"


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
