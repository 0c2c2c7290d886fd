"""Notes: what the trace header says about the limits of its own analysis."""

from __future__ import annotations

import pytest

from streamrace.analysis import analyze, header_notes
from streamrace.trace.builder import TraceBuilder


def _header(**facts):
    return {"format": "streamrace-trace", "version": 1, **facts}


def test_clean_recording_has_no_notes():
    header = _header(recorder_errors=[], allocations_dropped=0, allocator={"backend": "native", "caching": True})
    assert header_notes(header) == []
    assert header_notes(_header()) == [], "hand-built traces without the recorder's facts"


def test_recorder_errors_and_dropped_allocations():
    notes = header_notes(_header(recorder_errors=["on_alloc: boom", "graph read-back: no"], allocations_dropped=3))
    assert [n.code for n in notes] == ["recorder-errors", "allocations-dropped"]
    assert "2 times" in notes[0].message and "on_alloc: boom" in notes[0].message
    assert notes[1].message.startswith("3 allocations were left out")


def test_replays_the_recorder_could_not_record():
    (note,) = header_notes(_header(replays_unrecorded=3, replays_in_capture=0))
    assert note.code == "replays-unrecorded" and note.message.startswith("3 replays of CUDA graphs captured before")
    assert header_notes(_header(replays_unrecorded=0)) == []


@pytest.mark.parametrize(
    ("allocator", "why"),
    [
        ({"backend": "cudaMallocAsync", "caching": True}, "cudaMallocAsync"),
        ({"backend": "native", "caching": False}, "PYTORCH_NO_CUDA_MEMORY_CACHING"),
    ],
)
def test_allocators_outside_the_model_are_called_out(allocator, why):
    (note,) = header_notes(_header(allocator=allocator))
    assert note.code == "allocator-model" and why in note.message and "unsafe-free" in note.message


def test_analyze_carries_notes_from_either_entry_point():
    tb = TraceBuilder()
    tb.stream("main")
    trace = tb.trace()
    trace.header["recorder_errors"] = ["hook failed"]
    via_trace = analyze(trace)
    via_header = analyze(trace.header, trace.events)
    assert [n.code for n in via_trace.notes] == [n.code for n in via_header.notes] == ["recorder-errors"]
    doc = via_trace.to_dict()
    assert doc["notes"] == [{"code": "recorder-errors", "message": via_trace.notes[0].message}]
    assert list(doc)[:4] == ["streamrace", "trace_format", "findings", "summary"], "to_dict only adds keys"


def test_an_unfinished_recording_says_findings_may_be_missing():
    (note,) = header_notes(_header(incomplete=True, recording="program"))
    assert note.code == "trace-incomplete" and "findings may be missing" in note.message
    assert header_notes(_header(incomplete=False)) == []
