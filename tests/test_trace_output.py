"""A trace written as the program runs: bounded recorder memory over a long loop, and a file
that is a valid trace all along and whole at the end (streamrace/record/trace_output.py,
streamrace/trace/incremental.py)."""

from __future__ import annotations

import gc
import os
import shutil
import threading

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda, FakeGraph, Kernels, memcopy  # noqa: E402
from hook_traces import canonical, first_difference  # noqa: E402
from op_engines import native_module  # noqa: E402

from streamrace.record.recorder import Recorder  # noqa: E402
from streamrace.record.trace_output import TraceOutput  # noqa: E402
from streamrace.record.traces import finish_trace  # noqa: E402
from streamrace.session import watch  # noqa: E402
from streamrace.trace.incremental import IncrementalTraceWriter  # noqa: E402
from streamrace.trace.io import iter_trace, load_trace, make_header  # noqa: E402

MAIN, COPY = 0x1000, 0x3000
HOOKS = pytest.mark.parametrize("kind", ["native", "python"])


def _events(n: int, start: int = 0) -> list[dict]:
    return [{"seq": start + i, "ev": "device_sync", "device": 0} for i in range(n)]


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_the_partial_file_is_a_trace_all_along_and_the_final_one_has_the_final_header(tmp_path, name):
    path = tmp_path / name
    writer = IncrementalTraceWriter(path, make_header(incomplete=True))
    partial = tmp_path / (name + ".partial")
    for chunk in range(3):
        writer.write(_events(5, 5 * chunk))
        writer.wait()  # the chunk is compressed and written beside the caller
        header, *events = list(iter_trace(partial))
        assert header["incomplete"] is True and [e["seq"] for e in events] == list(range(5 * chunk + 5))
    writer.finish(make_header(final=True), _events(2, 15))
    assert not partial.exists()
    header, *events = list(iter_trace(path))
    assert header["final"] is True and "incomplete" not in header
    assert [e["seq"] for e in events] == list(range(17))
    assert writer.events_written == 17


def test_a_chunk_that_fails_to_land_fails_the_next_call(tmp_path, monkeypatch):
    writer = IncrementalTraceWriter(tmp_path / "t.jsonl.gz", make_header())

    def full_disk(data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "_write", full_disk)
    writer.write(_events(3))  # the caller goes on: the chunk is written beside it
    with pytest.raises(OSError, match="No space left"):
        writer.write(_events(3, 3))  # the first chunk's failure, and this chunk is not taken
    writer.write(_events(3, 6))
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    writer.wait()  # each failure is said once


def test_a_forked_child_writes_nothing_into_its_parents_file(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    writer = IncrementalTraceWriter(path, make_header())
    writer.write(_events(3))
    writer.wait()
    size = os.path.getsize(writer.partial_path)
    writer._pid = os.getpid() + 1  # as the parent's writer looks from a forked child
    writer.write(_events(3, 3))
    writer.finish(make_header(), _events(1, 6))
    assert os.path.getsize(writer.partial_path) == size and not path.exists()


def serving_loop(fake: FakeCuda, steps: int) -> None:
    """A decode-shaped loop: each step stages the next input on COPY (a fresh block, filled),
    MAIN waits for it, copies it into the static input, replays, and samples the output."""
    static_in, static_out, sample = fake.alloc(), fake.alloc(), fake.alloc()
    graph = FakeGraph(fake, work=lambda: memcopy(static_out, static_in))
    with fake.on(MAIN):
        torch.add(static_in, 1.0, out=static_out)  # warm-up
        graph.capture_begin()
        torch.add(static_in, 1.0, out=static_out)
        graph.capture_end()
    ready = fake.event()
    for step in range(steps):
        with fake.on(COPY):
            staged = fake.alloc()
            staged.fill_(float(step))
            fake.record(ready)
        with fake.on(MAIN):
            fake.wait(ready)
            static_in.copy_(staged)
            graph.replay()
            torch.mul(static_out, 0.5, out=sample)
        fake.free(staged)


def _record(kind: str, steps: int, trace: str | None, flush_events: int = 400, watch_memory: bool = False):
    if kind == "native":
        native_module()
    fake = FakeCuda()
    retained: list[int] = []
    unflushed: list[int] = []
    allocations: list[int] = []
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake, trace=trace, flush_events=flush_events)
        recorder.start()
        if watch_memory:
            # Measured at every replay: the recorder's own wrapper runs first, then this one.
            replay = FakeGraph.replay

            def measured(graph):
                replay(graph)
                retained.append(len(recorder.events))
                allocations.append(len(recorder.allocations._allocs))
                unflushed.append(recorder.position() - 1 - recorder.output.written_through)

            FakeGraph.replay = measured
        try:
            serving_loop(fake, steps)
        finally:
            if watch_memory:
                FakeGraph.replay = replay
            recorder.stop()
    assert recorder.errors == []
    if trace is not None and watch_memory:
        # The allocator bookkeeping lets freed, written-out allocations go too.
        assert max(allocations[steps // 2 :]) <= max(allocations[: steps // 2]), "no allocation kept per step"
    return recorder, retained, unflushed


@HOOKS
def test_a_long_loop_keeps_bounded_recorder_memory_and_writes_the_whole_trace(kind, tmp_path):
    steps, flush_events = 2000, 400
    path = str(tmp_path / "loop.jsonl.gz")
    # Recorded twice from one line (so that their stacks are the same): to the file, and in memory.
    (recorder, retained, unflushed), (kept, _, _) = [_record(kind, steps, p, flush_events, True) for p in (path, None)]
    finish_trace(recorder)
    assert recorder.output.flushes >= steps * 8 // flush_events // 2, "flushed all along"
    per_step = 12  # events one step numbers, at most
    assert max(unflushed) <= flush_events + per_step, "events waiting for a flush"
    assert max(retained) <= flush_events + per_step + 16, "events in the recorder's memory"
    assert max(retained[steps // 2 :]) <= max(retained[: steps // 2]) + per_step, "no growth with the run"

    # The file is complete and valid: the same events, one for one, as a recording that kept
    # everything in memory.
    header, *written = list(iter_trace(path))
    assert header["recording"] == "program" and "incomplete" not in header
    assert sum(e["ev"] == "replay" for e in written) == steps
    assert sum(e["ev"] == "op" for e in written) == 2 + 3 * steps
    difference = first_difference(canonical(written), canonical(kept.trace_events()))
    assert difference is None, difference
    assert not os.path.exists(path + ".partial")


@HOOKS
def test_no_flush_while_a_capture_is_open(kind, tmp_path):
    if kind == "native":
        native_module()
    fake = FakeCuda()
    path = str(tmp_path / "t.jsonl")
    with Kernels(fake):
        recorder = Recorder(hooks=kind, runtime=fake, trace=path, flush_events=1)
        recorder.start()
        try:
            x, y = fake.alloc(), fake.alloc()
            graph = FakeGraph(fake)
            with fake.on(MAIN):
                graph.capture_begin()
                torch.add(x, 1.0, out=y)
                assert recorder.flush() is False, "a capture's events settle only at its end"
                graph.capture_end()  # a flush point: everything settled is written
            assert recorder.output.written_through >= 0
            assert not [e for e in recorder.events if e["ev"] not in ("stack", "stream")]
            recorder.output.landed()
            header, *partial = list(iter_trace(path + ".partial"))
            assert header["incomplete"] is True
            assert [e["ev"] for e in partial if e["ev"] in ("capture_begin", "capture_end", "graph")] == [
                "capture_begin",
                "capture_end",
                "graph",
            ]
            assert all(e["size"] > 1 for e in partial if e["ev"] == "alloc"), "allocations resolved before"
        finally:
            recorder.stop()
    finish_trace(recorder)
    assert load_trace(path).header["recording"] == "program"


def test_a_nested_watch_keeps_its_events_through_the_process_recordings_flushes(tmp_path):
    fake = FakeCuda()
    process_trace = str(tmp_path / "process.jsonl")
    with Kernels(fake):
        recorder = Recorder(hooks="python", runtime=fake, trace=process_trace, flush_events=50)
        recorder.start()
        try:
            serving_loop(fake, 20)  # flushed already
            with watch(str(tmp_path / "block.jsonl")) as session:
                serving_loop(fake, 40)  # flushed meanwhile, kept for the block
            assert recorder.output.flushes >= 2
            block_end = recorder.position()
            serving_loop(fake, 20)  # the next flushes let the block's events go
            recorder.settle()  # the hooks' events since the last flush, into the log
            retained = [e["seq"] for e in recorder.events if e["ev"] not in ("stack", "stream")]
            assert retained and min(retained) >= block_end, "the hold went with the block"
        finally:
            recorder.stop()
    finish_trace(recorder)
    block = session.trace
    assert block is not None and sum(e["ev"] == "replay" for e in block.events) == 40
    used = {e["stack"] for e in block.events if "stack" in e}
    assert used <= set(block.stacks), "every stack it uses is defined in it"
    whole = load_trace(process_trace)
    assert sum(e["ev"] == "replay" for e in whole.events) == 80


def test_watch_with_a_path_writes_as_it_goes_and_analyses_the_file(tmp_path):
    fake = FakeCuda()
    path = tmp_path / "w.jsonl.gz"
    with Kernels(fake), watch(str(path), hooks="python", runtime=fake, flush_events=30) as session:
        serving_loop(fake, 30)
        assert session.recorder.output.flushes > 0
        assert (tmp_path / "w.jsonl.gz.partial").exists()
    assert session.result is not None and session.result.summary["ops"] == 2 + 3 * 30
    assert "w.jsonl.gz" in session.report() and session._trace is None, "reported without reading the file back"
    assert sum(e["ev"] == "replay" for e in session.trace.events) == 30, "read back from the file"
    assert not (tmp_path / "w.jsonl.gz.partial").exists()


def test_an_unwritable_trace_path_fails_before_recording_starts(tmp_path):
    from streamrace.record.installation import active

    recorder = Recorder(hooks="python", runtime=FakeCuda(), trace=str(tmp_path / "missing" / "t.jsonl"))
    with pytest.raises(FileNotFoundError):
        recorder.start()
    assert active() is None


@pytest.mark.parametrize("program_collects", [True, False], ids=["collector-on", "collector-off"])
@pytest.mark.parametrize(
    ("watched_part", "flush_events"),
    [(TraceOutput, 200), (Recorder, 1 << 40)],
    ids=["each-flush", "settling-at-stop"],
)
def test_no_garbage_collection_inside_a_flush_and_the_programs_setting_kept(
    program_collects, watched_part, flush_events, tmp_path, monkeypatch
):
    # A collection as often as the collector may start one: without the pause, every flush
    # (hundreds of events made and let go) would start some, and so would the settling of a
    # recording that never flushed, at its stop (every event it made, drained at once).
    method = "flush" if watched_part is TraceOutput else "settle"
    inside, collected_inside = [False], []
    original = getattr(watched_part, method)

    def watched(self):
        inside[0] = True
        try:
            return original(self)
        finally:
            inside[0] = False

    def on_collection(phase, info):
        if phase == "start" and inside[0]:
            collected_inside.append(info["generation"])

    monkeypatch.setattr(watched_part, method, watched)
    threshold, was_enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(10, 2, 2)
    gc.callbacks.append(on_collection)
    (gc.enable if program_collects else gc.disable)()
    try:
        recorder, _, _ = _record("python", 300, str(tmp_path / "t.jsonl"), flush_events=flush_events)
        assert gc.isenabled() is program_collects, "the collector as the program left it"
    finally:
        gc.callbacks.remove(on_collection)
        gc.set_threshold(*threshold)
        (gc.enable if was_enabled else gc.disable)()
    finish_trace(recorder)
    assert (recorder.output.flushes >= 5) is (watched_part is TraceOutput)
    # A flush lets its events go before the collector comes back; the settled events of a
    # stop stay (they are the recording), so at most the one collection as it comes back.
    assert len(collected_inside) <= (0 if watched_part is TraceOutput else 1), collected_inside


def test_a_flush_on_another_thread_waits_for_an_event_being_emitted(tmp_path):
    """The Python hooks draw an event's seq and store the event as one step. A worker thread's
    flush between the two (a replay of its own, then the flush it triggers) wrote the later
    seq, and the event, stored after, fell below what the file held: lost."""
    fake = FakeCuda()
    recorder = Recorder(hooks="python", runtime=fake, trace=str(tmp_path / "t.jsonl.gz"), flush_events=1 << 40)
    recorder.start()
    hooks = recorder.log.hooks
    draw, workers = hooks.next_seq, []

    def worker() -> None:
        recorder.log.emit("device_sync", device=0)  # an event of the worker's, after the main thread's
        recorder.flush()

    def drawn_then_flushed_elsewhere() -> int:
        seq = draw()
        if not workers:  # once: the main thread's event is drawn, not stored yet
            workers.append(threading.Thread(target=worker))
            workers[0].start()
            workers[0].join(0.2)  # it waits for the event to be stored (before the fix: it flushed)
        return seq

    hooks.next_seq = drawn_then_flushed_elsewhere
    with fake.on(MAIN):
        fake.record(fake.event())
    workers[0].join()
    del hooks.next_seq
    recorder.stop()
    assert recorder.errors == []
    events = load_trace(finish_trace(recorder)).events
    assert recorder.output.flushes == 1
    assert [e["seq"] for e in events] == list(range(len(events))), "no event lost"
    assert [e["ev"] for e in events if e["ev"] in ("event_create", "device_sync")] == ["event_create", "device_sync"]


@HOOKS
def test_a_ctrl_c_right_after_a_chunk_went_out_leaves_a_readable_trace(kind, tmp_path, monkeypatch):
    """A KeyboardInterrupt (or a signal handler's exception) landing in a flush after its chunk
    was handed to the writer, before the flush noted it: the next flush, or the finish at exit,
    passes those events again. They were written twice and the trace could not be read (seq
    does not increase); the writer now writes each seq once."""
    if kind == "native":
        native_module()
    write, interrupted = IncrementalTraceWriter.write, []

    def write_then_interrupted(self, events, lines=None):
        write(self, events, lines)
        if (events or lines) and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # where the program's Ctrl-C could land

    monkeypatch.setattr(IncrementalTraceWriter, "write", write_then_interrupted)
    fake = FakeCuda()
    recorder = Recorder(hooks=kind, runtime=fake, trace=str(tmp_path / "t.jsonl.gz"), flush_events=20)
    recorder.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            serving_loop(fake, 40)  # the program's Ctrl-C reaches it, in a replay's flush
        serving_loop(fake, 10)  # it goes on (or exits: the finish below runs at its exit)
    finally:
        recorder.stop()
    events = load_trace(finish_trace(recorder)).events
    seqs = [e["seq"] for e in events]
    assert interrupted and recorder.output.flushes >= 2
    assert seqs == sorted(set(seqs)), "each event once, in order"
    assert recorder.errors == []


@HOOKS
def test_a_disk_that_stays_full_is_tried_less_and_less_often(kind, tmp_path, monkeypatch):
    """A failed flush keeps its events, so every later try writes the whole backlog: tried at
    every replay once due, a disk that stays full cost the program the square of its events.
    After a failure the next try waits twice as long as the last; once the disk has room again
    the trace is whole."""
    if kind == "native":
        native_module()
    write, tries, full = IncrementalTraceWriter.write, [], [True]

    def write_to_a_full_disk(self, events, lines=None):
        tries.append(len(events) + len(lines or ()))
        if full[0]:
            raise OSError(28, "No space left on device")
        write(self, events, lines)

    monkeypatch.setattr(IncrementalTraceWriter, "write", write_to_a_full_disk)
    fake = FakeCuda()
    recorder = Recorder(hooks=kind, runtime=fake, trace=str(tmp_path / "t.jsonl.gz"), flush_events=20)
    recorder.start()
    try:
        serving_loop(fake, 300)  # about 2,000 events: a hundred flushes' worth
        failed = len(tries)
        full[0] = False
        serving_loop(fake, 100)
    finally:
        recorder.stop()
    assert 3 <= failed <= 10, tries  # 20, 40, 80, ... events apart, not at every replay
    assert recorder.output.flushes >= 10, "back to a flush every 20 events or so once there is room"
    assert recorder.errors and all(e.startswith("trace output: OSError") for e in recorder.errors)
    events = load_trace(finish_trace(recorder)).events
    assert [e["seq"] for e in events] == list(range(len(events))), "nothing lost"


class _DiskFullOnce:
    """``os.write`` that, at its ``at``-th call, writes half of what it is given and fails the
    call after (ENOSPC), once; the disk has room again after."""

    def __init__(self, at: int) -> None:
        self.calls, self.at, self.failed = 0, at, False
        self._write = os.write

    def __call__(self, fd: int, data) -> int:
        self.calls += 1
        if self.calls == self.at:
            return self._write(fd, bytes(data)[: max(1, len(data) // 2)])
        if self.calls == self.at + 1 and not self.failed:
            self.failed = True
            raise OSError(28, "No space left on device")
        return self._write(fd, data)


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_a_chunk_cut_short_by_a_full_disk_lands_whole_with_the_next_write(tmp_path, monkeypatch, name):
    """A chunk whose write failed half-way: its events are gone from the recorder by then, so
    the writer keeps the bytes that did not land and writes them first next time. Lost, the
    chunk left a trace whose later events name stacks it never defined; written again whole,
    a gzip member's start twice."""
    path = tmp_path / name
    writer = IncrementalTraceWriter(path, make_header(incomplete=True))
    disk = _DiskFullOnce(at=1)
    monkeypatch.setattr(os, "write", disk)
    writer.write(_events(400))
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    assert disk.failed and writer.landed_through == -1, "half a chunk is in the file"
    writer.write(_events(400))  # the same events again (a flush retried): taken already
    writer.write(_events(5, 400))
    writer.finish(make_header(final=True), _events(2, 405))
    header, *events = list(iter_trace(path))
    assert header["final"] is True
    assert [e["seq"] for e in events] == list(range(407)), "every event once, in order"


@HOOKS
def test_a_recording_whose_disk_fills_for_a_moment_writes_the_whole_trace(kind, tmp_path, monkeypatch):
    """The same in a recording: one flush's chunk cut short by a full disk, one recorder error,
    and the trace whole and readable at the end."""
    if kind == "native":
        native_module()
    fake = FakeCuda()
    recorder = Recorder(hooks=kind, runtime=fake, trace=str(tmp_path / "t.jsonl.gz"), flush_events=20)
    recorder.start()
    disk = _DiskFullOnce(at=3)  # the header's write, the first chunk's, then half of the second
    monkeypatch.setattr(os, "write", disk)
    try:
        serving_loop(fake, 60)
    finally:
        recorder.stop()
    events = load_trace(finish_trace(recorder)).events
    assert disk.failed
    assert [e["seq"] for e in events] == sorted({e["seq"] for e in events}), "each event once, in order"
    assert [e["ev"] for e in events].count("replay") == 60, "no replay lost"
    assert len(recorder.errors) == 1 and recorder.errors[0].startswith("trace output: OSError")


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_the_partial_file_stays_a_trace_after_a_write_cut_short(tmp_path, monkeypatch, name):
    """What a failed write got into the file is taken back: until the next write lands, the
    partial file is the trace of the chunks before it, which a killed process leaves."""
    writer = IncrementalTraceWriter(tmp_path / name, make_header(incomplete=True))
    writer.write(_events(5))
    writer.wait()
    monkeypatch.setattr(os, "write", _DiskFullOnce(at=1))
    writer.write(_events(300, 5))
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    _, *events = list(iter_trace(writer.partial_path))
    assert [e["seq"] for e in events] == list(range(5))
    writer.write(_events(1, 305))
    writer.wait()
    _, *events = list(iter_trace(writer.partial_path))
    assert [e["seq"] for e in events] == list(range(306))


def test_a_chunk_whose_compression_failed_is_compressed_again_with_the_next(tmp_path, monkeypatch):
    writer = IncrementalTraceWriter(tmp_path / "t.jsonl.gz", make_header())
    compressed, failed = writer._compressed, []

    def out_of_memory_once(data: bytes) -> bytes:
        if not failed:
            failed.append(True)
            raise MemoryError
        return compressed(data)

    monkeypatch.setattr(writer, "_compressed", out_of_memory_once)
    writer.write(_events(5))
    with pytest.raises(MemoryError):
        writer.wait()
    writer.write(_events(5, 5))
    writer.finish(make_header(final=True), _events(1, 10))
    assert [e["seq"] for e in list(iter_trace(writer.path))[1:]] == list(range(11))


def test_a_writer_thread_whose_start_was_cut_short_took_nothing(tmp_path, monkeypatch):
    """A KeyboardInterrupt in Thread.start (or no thread left to start): the chunk was not
    taken, its events are passed again, and every later call works."""
    writer = IncrementalTraceWriter(tmp_path / "t.jsonl.gz", make_header())
    start = threading.Thread.start

    def interrupted(thread):
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.write(_events(5))
    monkeypatch.setattr(threading.Thread, "start", start)
    writer.write(_events(8))  # the same events, and more
    writer.finish(make_header(final=True), [])
    assert [e["seq"] for e in list(iter_trace(writer.path))[1:]] == list(range(8))


@HOOKS
def test_a_finish_that_fails_leaves_no_trace_and_can_be_run_again(kind, tmp_path, monkeypatch):
    """The final file appears whole or not at all: a finish cut short (a full disk, a Ctrl-C
    while the partial file is copied) leaves the partial file, and a second finish writes the
    whole trace. The last chunk's failure, with room again at the end, is a recorder error in
    the final header, and its events are in the trace."""
    if kind == "native":
        native_module()
    fake = FakeCuda()
    path = tmp_path / "t.jsonl.gz"
    recorder = Recorder(hooks=kind, runtime=fake, trace=str(path), flush_events=20)
    recorder.start()
    try:
        serving_loop(fake, 20)
        monkeypatch.setattr(os, "write", _DiskFullOnce(at=1))  # the last flush's chunk
        serving_loop(fake, 3)
    finally:
        recorder.stop()
    copy = shutil.copyfileobj

    def interrupted_copy(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfileobj", interrupted_copy)
    with pytest.raises(KeyboardInterrupt):
        finish_trace(recorder)
    assert not path.exists() and os.path.exists(str(path) + ".partial")
    monkeypatch.setattr(shutil, "copyfileobj", copy)
    trace = load_trace(finish_trace(recorder))
    seqs = [e["seq"] for e in trace.events]
    assert seqs == sorted(set(seqs)) and [e["ev"] for e in trace.events].count("replay") == 23
    assert any(error.startswith("trace output: OSError") for error in trace.header["recorder_errors"])
