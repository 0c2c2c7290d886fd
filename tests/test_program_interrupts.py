"""The program's Ctrl-C is the program's: a KeyboardInterrupt that arrives while a hook runs
Python (the fake's current stream here; a stack's shown path or a pinned storage's part on a
GPU) reaches the program, never the recorder's errors."""

from __future__ import annotations

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
