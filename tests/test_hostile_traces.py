"""Hostile traces (issue 27): inputs made to exhaust memory or time. Each ends, on both engines,
under a 4 GB address-space limit, in either a report or one line on stderr and exit code 2;
never a traceback, an internal error (4) or a crash.

Each case runs ``python -m streamrace`` in a child process with that limit (``RLIMIT_AS``),
so what is measured is the real command line, memory and all; the timeout is a guard against
a hang, not a timing assertion."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_engines import ENGINES

from streamrace.trace.events import MAX_LINE_BYTES

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
    from streamrace.errors import TraceError
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
