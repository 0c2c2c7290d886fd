"""The escape check (docs/analysis.md §8.10) follows the engines: a block allocated in a
capture is the program's state when an op's write, from eager work or another graph, touches
its bytes while it lives (``Lifetime.kept``, marked by each engine as the op goes by). Cases
from a review of that change against the pass it replaced (which kept its own capture
membership and the dense hull of each write): tests/data/escapes/."""

from __future__ import annotations

import json
from pathlib import Path

from streamrace.analysis import analyze
from streamrace.analysis.detectors import CAPTURE_ALLOCATION_ESCAPED, STALE_READ
from streamrace.trace.io import load_trace, make_header, write_trace

CASES = Path(__file__).parent / "data" / "escapes"


def _kinds(path: Path) -> list[str]:
    return sorted(f.kind for f in analyze(load_trace(path)).findings)


def test_a_strided_write_between_a_blocks_bytes_keeps_no_state(engine: str) -> None:
    """The eager write's two elements lie either side of the block: its bytes are not the
    program's state, and the replay's overwrite read later is a stale read."""
    kinds = _kinds(CASES / "strided_write_between.jsonl")
    assert STALE_READ in kinds and CAPTURE_ALLOCATION_ESCAPED not in kinds


def test_a_strided_write_through_a_blocks_bytes_keeps_state(engine: str, tmp_path: Path) -> None:
    """Its twin: the same write with elements inside the block is the program's state."""
    lines = (CASES / "strided_write_between.jsonl").read_text().splitlines()
    header, events = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    for ev in events:
        if ev.get("op") == "eager_write":
            ev["writes"][0] = {"addr": 4096, "shape": [2], "stride": [32], "itemsize": 4}
    path = tmp_path / "through.jsonl"
    write_trace(path, make_header(**{k: v for k, v in header.items() if k not in ("format", "version")}), events)
    kinds = _kinds(path)
    assert CAPTURE_ALLOCATION_ESCAPED in kinds and STALE_READ not in kinds


def test_a_replay_recording_an_event_outside_the_capture_leaves_the_waiter_outside(engine: str) -> None:
    """Graph 1's replay records event 7 again, outside any capture: the stream that waits on
    it after is not in capture 2, so its write is the program's state (the pass before kept
    the capture's record and missed the replay's)."""
    kinds = _kinds(CASES / "replay_records_event_outside_capture.jsonl")
    assert kinds == [CAPTURE_ALLOCATION_ESCAPED]


def test_a_replay_waiting_on_a_captured_event_joins_the_capture(engine: str) -> None:
    """Graph 1 waits on event 7, recorded in capture 2: its replay puts stream 3 in capture 2,
    so stream 3's write is graph 2's own, not state, and the read is a stale read."""
    kinds = _kinds(CASES / "replay_waits_into_capture.jsonl")
    assert STALE_READ in kinds and CAPTURE_ALLOCATION_ESCAPED not in kinds
