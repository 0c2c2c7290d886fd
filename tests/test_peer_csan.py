"""PyTorch's CUDA Sanitizer (CSAN) event-handler cases, ported to streamrace traces.

The scenarios are those of ``TestEventHandler`` in pytorch ``test/test_cuda_sanitizer.py``
(docs/design.md, the peer suites): synthetic streams, events and tensors, kernel launches
that read or write whole tensors, and the same expected outcome (a launch is good or bad).
A kernel's read-only tensors are ``reads`` of the op and its read-write tensors ``writes``.

Every case runs in eager form and, where it makes sense, inside one capture: the streams are
forked from a dedicated capture stream before their first kernel (which orders nothing, the
capture stream has done nothing yet) and joined back at the end, so the scenario's own
records and waits are the only ordering, as in CSAN. Host synchronisations (device, stream,
event synchronize) are eager only by nature: they are illegal while capturing and order no
captured work; ``test_host_syncs_order_no_captured_work`` pins that down.

Every good case has a bad twin, and the reverse, so each test can fail either way.
(The ArgumentHandler cases, add/cat/split/out=/nonzero, belong to the recorder's tests.)
"""

from __future__ import annotations

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import DATA_RACE
from streamrace.trace.builder import TraceBuilder

TENSOR_BYTES = 256
BOTH = pytest.mark.parametrize("mode", ["eager", "capture"])


class Csan:
    """CSAN's handler vocabulary over a TraceBuilder: stream(i), event(i), tensor(i), kernel."""

    def __init__(self, mode: str, tensors: int = 3) -> None:
        self.tb = TraceBuilder()
        self.mode = mode
        self._streams: dict[int, int] = {}
        self._events: dict[int, int] = {}
        self._line = 100
        self._capture = None
        # Tensors exist before the scenario (graph inputs in the capture form), one
        # allocation site each.
        setup = self._make_stream(-1)
        self.tensors = [self.tb.alloc(TENSOR_BYTES, setup, at=f"setup.py:{i + 1}") for i in range(tensors)]
        if mode == "capture":
            self._capture_stream = self.tb.stream("capture")
            self._capture = self.tb.capture(self._capture_stream)
            self.graph = self._capture.__enter__()

    def _make_stream(self, i: int) -> int:
        if i not in self._streams:
            self._streams[i] = self.tb.stream(f"stream{i}" if i >= 0 else "setup")
            if self._capture is not None and i >= 0:
                self.tb.wait_stream(self._streams[i], self._capture_stream)
        return self._streams[i]

    def stream(self, i: int) -> int:
        return self._make_stream(i)

    def event(self, i: int) -> int:
        if i not in self._events:
            self._events[i] = self.tb.event()
        return self._events[i]

    def record(self, event: int, stream: int) -> None:
        self.tb.record(self.event(event), self.stream(stream))

    def wait(self, event: int, stream: int) -> None:
        self.tb.wait(self.event(event), self.stream(stream))

    def kernel(self, stream: int, read_only: tuple[int, ...] = (), read_write: tuple[int, ...] = ()) -> int:
        """One launch on stream(stream); returns its seq. Each launch has its own source line."""
        self._line += 1
        return self.tb.op(
            "aten::kernel",
            self.stream(stream),
            reads=[self.tb.span(self.tensors[t], TENSOR_BYTES) for t in read_only],
            writes=[self.tb.span(self.tensors[t], TENSOR_BYTES) for t in read_write],
            at=f"csan.py:{self._line}",
        )

    def analyze(self):
        if self._capture is not None:
            for i, stream in sorted(self._streams.items()):
                if i >= 0:
                    self.tb.wait_stream(self._capture_stream, stream)
            self._capture.__exit__(None, None, None)
            self._capture = None
        self.result = analyze(self.tb.trace())
        return self.result

    def races_at(self, seq: int) -> list:
        """The raw data-race findings whose later access is the launch ``seq``."""
        return [f for f in self.result.raw_findings if f.kind == DATA_RACE and f.accesses[1].seq == seq]

    def check(self, good: list[int] = (), bad: dict[int, int] | None = None) -> None:
        """Analyse; launches in ``good`` have no finding, each launch in ``bad`` has that many,
        and nothing else is reported at all."""
        bad = bad or {}
        result = self.analyze()
        for seq in good:
            assert self.races_at(seq) == [], f"launch {seq} should be good"
        for seq, count in bad.items():
            assert len(self.races_at(seq)) == count, f"launch {seq} should have {count} finding(s)"
        assert len(result.raw_findings) == sum(bad.values()), [f.to_dict() for f in result.raw_findings]
        if self.mode == "capture":
            assert all(f.graph == self.graph for f in result.raw_findings)
        else:
            assert all(f.graph is None for f in result.raw_findings)


def the_race(c: Csan, seq: int):
    (finding,) = c.races_at(seq)
    return finding


@BOTH
def test_empty_kernel_launch(mode):
    c = Csan(mode)
    k = c.kernel(0)
    c.check(good=[k])


@BOTH
def test_simple_passing(mode):
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    k2 = c.kernel(2, read_only=(1,))
    c.check(good=[k1, k2])


@BOTH
def test_simple_error(mode):
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    k2 = c.kernel(2, read_write=(1,))
    c.check(good=[k1], bad={k2: 1})
    f = the_race(c, k2)
    assert f.hazard == "WAR"
    assert (f.accesses[0].seq, f.accesses[0].access, f.accesses[0].stream_label) == (k1, "read", "stream1")
    assert (f.accesses[1].seq, f.accesses[1].access, f.accesses[1].stream_label) == (k2, "write", "stream2")
    assert f.aliasing is False


@BOTH
@pytest.mark.parametrize("synced", [True, False])
def test_simple_sync(mode, synced):
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    c.record(0, 1)
    if synced:
        c.wait(0, 2)
    k2 = c.kernel(2, read_write=(1,))
    if synced:
        c.check(good=[k1, k2])
    else:
        c.check(bad={k2: 1})


@BOTH
def test_reads_check_last_write(mode):
    # Not only the first read after a write is checked against it: every read is.
    c = Csan(mode)
    k1 = c.kernel(1, read_write=(1,))
    c.record(0, 1)
    c.wait(0, 2)
    k2 = c.kernel(2, read_only=(1,))
    k3 = c.kernel(3, read_only=(1,))
    c.check(good=[k1, k2], bad={k3: 1})
    f = the_race(c, k3)
    assert (f.hazard, f.accesses[0].seq) == ("RAW", k1)


@BOTH
def test_branch_sync(mode):
    # Two streams may read after both waited for a writer, but not write without more sync.
    c = Csan(mode)
    c.kernel(1, read_write=(1,))
    c.record(0, 1)
    c.wait(0, 2)
    c.wait(0, 3)
    k2 = c.kernel(2, read_only=(1,))
    k3 = c.kernel(3, read_only=(1,))
    k4 = c.kernel(2, read_write=(1,))
    c.check(good=[k2, k3], bad={k4: 1})
    f = the_race(c, k4)
    assert f.hazard == "WAR"
    assert (f.accesses[0].seq, f.accesses[0].stream_label) == (k3, "stream3")


@BOTH
@pytest.mark.parametrize("broken_link", [None, 0, 5, 9])
def test_chain_sync(mode, broken_link):
    # Happens-before is transitive along a chain of ten record/wait hand-offs.
    c = Csan(mode)
    k0 = c.kernel(0, read_only=(1,))
    for i in range(10):
        c.record(i, i)
        if i != broken_link:
            c.wait(i, i + 1)
    k10 = c.kernel(10, read_write=(1,))
    if broken_link is None:
        c.check(good=[k0, k10])
    else:
        c.check(bad={k10: 1})
        assert the_race(c, k10).accesses[0].seq == k0


@BOTH
def test_expired_record(mode):
    # A read issued after the record is not covered by a wait on that record.
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    c.record(0, 1)
    k2 = c.kernel(1, read_only=(1,))
    c.wait(0, 2)
    k3 = c.kernel(2, read_write=(1,))
    c.check(good=[k1, k2], bad={k3: 1})
    f = the_race(c, k3)
    assert (f.hazard, f.accesses[0].seq) == ("WAR", k2)


@BOTH
@pytest.mark.parametrize(
    "delete, create",
    [(True, True), (True, False), (False, True), (False, False)],
    ids=["deleted-and-recreated", "deleted", "recreated", "untouched-twin"],
)
def test_deleted_record(mode, delete, create):
    # A deleted event, or an id created anew, carries no snapshot: the wait orders nothing.
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    c.record(0, 1)
    if delete:
        c.tb.delete_event(c.event(0))
    if create:
        c.tb.emit("event_create", event=c.event(0))
    c.wait(0, 2)
    k2 = c.kernel(2, read_write=(1,))
    if delete or create:
        c.check(good=[k1], bad={k2: 1})
    else:
        c.check(good=[k1, k2])


@BOTH
def test_all_reads_checked_failing(mode):
    # Ten readers; the writer waits for nine of them. The tenth read still races.
    c = Csan(mode)
    reads = {}
    for i in range(1, 11):
        reads[i] = c.kernel(i, read_only=(1,))
        c.record(i, i)
    for i in range(1, 10):
        c.wait(i, 0)
    k = c.kernel(0, read_write=(1,))
    c.check(good=list(reads.values()), bad={k: 1})
    f = the_race(c, k)
    assert (f.hazard, f.accesses[0].seq, f.accesses[0].stream_label) == ("WAR", reads[10], "stream10")


@BOTH
def test_all_reads_checked_passing(mode):
    c = Csan(mode)
    reads = []
    for i in range(1, 10):
        reads.append(c.kernel(i, read_only=(1,)))
        c.record(i, i)
    for i in range(1, 10):
        c.wait(i, 0)
    k = c.kernel(0, read_write=(1,))
    c.check(good=[*reads, k])


@BOTH
def test_multiple_errors(mode):
    # One launch writing ten tensors that another stream wrote: ten races, one per tensor.
    c = Csan(mode, tensors=10)
    k0 = c.kernel(0, read_write=tuple(range(10)))
    k1 = c.kernel(1, read_write=tuple(range(10)))
    c.check(good=[k0], bad={k1: 10})
    raw = c.races_at(k1)
    assert all(f.hazard == "WAW" and f.accesses[0].seq == k0 for f in raw)
    assert sorted(f.accesses[1].range["addr"] for f in raw) == sorted(c.tensors)
    # Ten tensors from ten allocation sites: ten distinct findings after dedup.
    assert len(c.result.findings) == 10
    assert sorted(f.allocation.alloc_location for f in c.result.findings) == sorted(
        f"setup.py:{i + 1}" for i in range(10)
    )


@BOTH
@pytest.mark.parametrize("merged", [True, False])
def test_correct_state_merging(mode, merged):
    # After a wait, a stream's clock is the pointwise maximum of its own and the snapshot.
    c = Csan(mode)
    c.kernel(1, read_write=(1,))
    c.kernel(2, read_write=(2,))
    c.record(1, 1)
    c.record(2, 2)
    c.kernel(1, read_write=(1,))
    k2b = c.kernel(2, read_write=(2,))
    c.wait(1, 2)
    c.wait(2, 1)
    if merged:
        c.record(3, 2)
        c.wait(3, 1)
    k = c.kernel(1, read_write=(1, 2))
    if merged:
        c.check(good=[k])
    else:
        # stream1 only knows stream2 up to event 2, before stream2's second write.
        c.check(bad={k: 1})
        f = the_race(c, k)
        assert (f.hazard, f.accesses[0].seq, f.accesses[1].range["addr"]) == ("WAW", k2b, c.tensors[2])


@BOTH
@pytest.mark.parametrize("tensor, racy", [(1, True), (2, False)])
def test_record_override(mode, tensor, racy):
    # Re-recording event 1 on stream2 replaces the snapshot taken on stream1.
    c = Csan(mode)
    k1 = c.kernel(1, read_only=(1,))
    k2 = c.kernel(2, read_only=(2,))
    c.record(1, 1)
    c.record(1, 2)
    c.wait(1, 3)
    k3 = c.kernel(3, read_write=(tensor,))
    if racy:
        c.check(good=[k1, k2], bad={k3: 1})
        assert the_race(c, k3).accesses[0].seq == k1
    else:
        c.check(good=[k1, k2, k3])


@BOTH
@pytest.mark.parametrize("third_waits", [True, False])
def test_multiple_wait(mode, third_waits):
    # One record can be waited on by several streams.
    c = Csan(mode)
    k1 = c.kernel(1, read_write=(1,))
    c.record(1, 1)
    c.wait(1, 2)
    if third_waits:
        c.wait(1, 3)
    k2 = c.kernel(2, read_only=(1,))
    k3 = c.kernel(3, read_only=(1,))
    if third_waits:
        c.check(good=[k1, k2, k3])
    else:
        c.check(good=[k1, k2], bad={k3: 1})
        assert (the_race(c, k3).hazard, the_race(c, k3).accesses[0].seq) == ("RAW", k1)


# -- host synchronisation: eager only by nature ------------------------------------------


@pytest.mark.parametrize("synced", [True, False])
def test_device_synchronize(synced):
    c = Csan("eager", tensors=10)
    writes = [c.kernel(i, read_write=(i,)) for i in range(1, 10)]
    if synced:
        c.tb.device_sync()
    k = c.kernel(0, read_write=tuple(range(1, 10)))
    if synced:
        c.check(good=[*writes, k])
    else:
        c.check(good=writes, bad={k: 9})


def test_device_synchronize_expired():
    # A device synchronisation covers what was issued before it, not what comes after.
    c = Csan("eager")
    k1 = c.kernel(1, read_write=(1,))
    c.tb.device_sync()
    k2 = c.kernel(1, read_write=(1,))
    k3 = c.kernel(2, read_write=(1,))
    c.check(good=[k1, k2], bad={k3: 1})
    assert the_race(c, k3).accesses[0].seq == k2


@pytest.mark.parametrize("synced", [True, False])
def test_new_stream_synchronized(synced):
    # A stream created after a host synchronisation is ordered after what it synchronised.
    c = Csan("eager")
    k1 = c.kernel(1, read_write=(1,))
    if synced:
        c.tb.device_sync()
    k2 = c.kernel(2, read_write=(1,))  # stream2 is created here, after the sync
    if synced:
        c.check(good=[k1, k2])
    else:
        c.check(bad={k2: 1})


def test_stream_synchronize():
    # Synchronising stream0 orders everyone after stream0, not after stream1.
    c = Csan("eager")
    k0 = c.kernel(0, read_write=(1,))
    k1 = c.kernel(1, read_write=(2,))
    c.tb.stream_sync(c.stream(0))
    k2 = c.kernel(2, read_only=(1,))
    k3 = c.kernel(3, read_only=(1,))
    k4 = c.kernel(4, read_only=(2,))
    c.check(good=[k0, k1, k2, k3], bad={k4: 1})
    f = the_race(c, k4)
    assert (f.hazard, f.accesses[0].seq) == ("RAW", k1)


def test_event_synchronize():
    # Synchronising an event orders everyone after its record, not after later work of
    # the recording stream.
    c = Csan("eager")
    k1 = c.kernel(1, read_write=(1,))
    c.record(1, 1)
    k2 = c.kernel(1, read_write=(2,))
    c.tb.event_sync(c.event(1))
    k3 = c.kernel(2, read_write=(1,))
    k4 = c.kernel(2, read_write=(2,))
    c.check(good=[k1, k2, k3], bad={k4: 1})
    f = the_race(c, k4)
    assert (f.hazard, f.accesses[0].seq) == ("WAW", k2)


@pytest.mark.parametrize("sync", ["device", "stream", "event"])
def test_host_syncs_order_no_captured_work(sync):
    # Capture is not execution: a host synchronisation during a capture (illegal in CUDA,
    # ignored by streamrace) orders none of the captured work; the race stays.
    c = Csan("capture")
    k1 = c.kernel(1, read_write=(1,))
    c.record(1, 1)
    if sync == "device":
        c.tb.device_sync()
    elif sync == "stream":
        c.tb.stream_sync(c.stream(1))
    else:
        c.tb.event_sync(c.event(1))
    k2 = c.kernel(2, read_write=(1,))
    c.check(good=[k1], bad={k2: 1})


@pytest.mark.parametrize("captured", [True, False])
def test_capture_is_not_execution(captured):
    # CSAN treats capture as execution, so touching a graph's output after the capture,
    # without any replay, is a false positive there (ANCHORS.md). Captured work runs only at
    # replay: it is never compared with eager work. The eager twin is a real race.
    tb = TraceBuilder()
    s1, s2 = tb.stream("stream1"), tb.stream("stream2")
    out = tb.alloc(TENSOR_BYTES, s1, at="setup.py:1")
    if captured:
        with tb.capture(s1):
            tb.op("aten::fill_", s1, writes=[tb.span(out, TENSOR_BYTES)], at="csan.py:1")
    else:
        tb.op("aten::fill_", s1, writes=[tb.span(out, TENSOR_BYTES)], at="csan.py:1")
    read = tb.op("aten::sum", s2, reads=[tb.span(out, TENSOR_BYTES)], at="csan.py:2")
    result = analyze(tb.trace())
    assert [(f.kind, f.accesses[1].seq) for f in result.raw_findings] == ([] if captured else [(DATA_RACE, read)])
