"""The program's Ctrl-C is the program's: a KeyboardInterrupt that arrives while a hook runs
Python (the fake's current stream here; a stack's shown path or a pinned storage's part on a
GPU) reaches the program, never the recorder's errors."""

from __future__ import annotations

import os
import signal

import pytest

torch = pytest.importorskip("torch")

from fake_cuda import FakeCuda  # noqa: E402
from op_engines import native_module  # noqa: E402

from streamrace.record.recorder import Recorder  # noqa: E402


@pytest.mark.parametrize("hooks", ["native", "python"])
def test_a_ctrl_c_inside_an_op_s_hook_reaches_the_program(hooks):
    if hooks == "native":
        native_module()
    fake = FakeCuda()
    armed = [False]
    asked = fake.current_stream

    def current_stream(device: int) -> int:
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt  # what Python's SIGINT handler raises, at a bytecode here
        return asked(device)

    fake.current_stream = fake.native_current_stream = current_stream
    recorder = Recorder(hooks=hooks, runtime=fake)
    recorder.start()
    interrupted = 0
    try:
        with fake.on(0x1000):
            a, b = fake.alloc(), fake.alloc()
            armed[0] = True
            try:
                b.add_(a)
                for _ in range(1000):  # bytecodes: the interrupt comes at one of them
                    pass
            except KeyboardInterrupt:
                interrupted += 1
            b.add_(a)  # and the recording goes on
    finally:
        recorder.stop()
    assert interrupted == 1 and not armed[0]
    assert not [e for e in recorder.errors if "KeyboardInterrupt" in e]
    assert sum(e["ev"] == "op" for e in recorder.events) >= 1


def _recorded_adds(hooks: str, adds: int) -> Recorder:
    if hooks == "native":
        native_module()
    fake = FakeCuda()
    recorder = Recorder(hooks=hooks, runtime=fake)
    recorder.start()
    with fake.on(0x1000):
        a, b = fake.alloc(), fake.alloc()
        for _ in range(adds):
            b.add_(a)
    return recorder


def _signal_at_first(recorder: Recorder, signum: int) -> None:
    """A settler that sends the process ``signum`` at the first op it settles: the program's
    handler would run at a bytecode of the settle loop that follows."""
    sent = [False]

    def settle(event):
        if not sent[0]:
            sent[0] = True
            os.kill(os.getpid(), signum)
        return event

    recorder.log.settle("op", settle)


# A known defect, kept in view: the events a settle took from the hooks and had not kept yet
# are lost to a signal handler's exception (a Ctrl-C) raised in between. Holding Python's
# handlers back while settling was tried and withdrawn (docs/recording.md, "Signals"); the fix
# is an ingest that keeps what it took whatever is raised.
@pytest.mark.xfail(strict=True, reason="a Ctrl-C inside a settle loses the events it took (docs/recording.md)")
@pytest.mark.parametrize("hooks", ["native", "python"])
def test_a_ctrl_c_while_events_are_settled_reaches_the_program_and_loses_none(hooks):
    recorder = _recorded_adds(hooks, 50)
    _signal_at_first(recorder, signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            recorder.settle()
        recorder.settle()
    finally:
        recorder.stop()
    assert sum(e["ev"] == "op" for e in recorder.events) == 50
    seqs = sorted(e["seq"] for e in recorder.events)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # none lost in between
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
