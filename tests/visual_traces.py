"""Traces and helpers for the visual reports' tests (test_visual_report.py, test_browser_report.py)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from streamrace.analysis import analyze
from streamrace.report import TraceResult, html
from streamrace.report.results import recorded_workdir
from streamrace.report.timeline import TimelineBuilder
from streamrace.trace.io import iter_trace

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "examples" / "traces"
DSV4_RACE = TRACES / "dsv4_mini_race.jsonl.gz"
REPLAY_RACE = TRACES / "execution_X1_buggy.jsonl.gz"
HOSTILE_NAME = "<img src=x onerror=window.__pwned=1>"
HOSTILE_SCRIPT = "</script><script>window.__pwned=1</script>"


def analysed(path: Path | str) -> TraceResult:
    """A trace analysed with its timeline, as ``streamrace analyze --format html`` does it."""
    events = iter_trace(path)
    header = next(events)
    builder = TimelineBuilder()
    result = analyze(header, builder.observe(events))
    return TraceResult(str(path), result, workdir=recorded_workdir(header), timeline=builder.timeline())


def page_data(page: str) -> dict[str, Any]:
    """The JSON an HTML report embeds for its script."""
    match = re.search(rf'<script type="application/json" id="{html.DATA_ID}">(.*?)</script>', page, re.S)
    assert match is not None, "the page embeds its data"
    return json.loads(match.group(1))


def write_many_ops(path: Path, ops: int, streams: int = 4) -> Path:
    """A trace of ``ops`` eager ops round-robin on ``streams`` streams, each stream handing on
    to the next through an event every 50 ops, and one unordered write-write pair at the end
    (so there is a finding to draw)."""
    handles = [0x1000 + 0x10 * n for n in range(streams)]
    seq = 0
    lines = [json.dumps({"format": "streamrace-trace", "version": 1, "minor": 1, "recording": "program"})]

    def emit(**event: Any) -> None:
        nonlocal seq
        lines.append(json.dumps({"seq": seq, **event}))
        seq += 1

    for n, handle in enumerate(handles):
        emit(ev="stream", stream=handle, name=f"lane{n}")
    emit(ev="stack", id=1, frames=[["model.py", 10, "step"]])
    base = 1 << 32
    for n, handle in enumerate(handles):
        emit(ev="alloc", addr=base + n * 4096, size=4096, stream=handle)
    event = 0
    for index in range(ops - 2):
        stream = index % streams
        span = {"addr": base + stream * 4096, "nbytes": 64}
        emit(ev="op", op=f"aten::op{index % 7}", stream=handles[stream], reads=[], writes=[span], stack=1)
        if index % 50 == 49:
            event += 1
            emit(ev="event_record", event=event, stream=handles[stream])
            for other in handles:
                if other != handles[stream]:
                    emit(ev="event_wait", event=event, stream=other)
            emit(ev="device_sync")
    shared = {"addr": base + 3 * 4096 + 2048, "nbytes": 64}
    emit(ev="op", op="aten::racing_write", stream=handles[0], reads=[], writes=[shared], stack=1)
    emit(ev="op", op="aten::racing_read", stream=handles[1], reads=[shared], writes=[], stack=1)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return path
