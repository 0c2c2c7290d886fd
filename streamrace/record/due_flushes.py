"""A flush point for programs that reach none of the recorder's own (trace_output.py).

The recorder flushes its trace after a replay, a capture's end or a reset. A program of eager
work alone reaches none of them: every event it made stayed in memory until its stop, and was
drained and written then. Here a watcher thread looks, every ``period`` seconds, whether more
than ``flush_events`` events are unwritten; if so it asks the main thread to flush at its next
safe point: a pending call (``Py_AddPendingCall``), which the interpreter runs between two
bytecodes of the main thread, as it runs a signal handler. The watcher itself never touches
the recording.

The flush is put off while the recorder's own code is on the main thread's stack (its state
may be half changed: an op's hook of the Python hooks, a capture's begin) and, as every flush,
while a capture is open; the watcher asks again later. A main thread blocked in C (joining the
threads that do the work) runs no pending call: that program's events are written at its end,
as before.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import sys
import threading
from types import FrameType
from typing import Protocol

PERIOD = 0.1  # seconds between the watcher's looks: a GIL hand-over each, about 10 us

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The recorder's code: its parts, the annotations that emit events, the watch() session.
_RECORDER_CODE = tuple(os.path.join(_PACKAGE, name) for name in (f"record{os.sep}", "annotate.py", "session.py"))


class FlushTarget(Protocol):
    """What the watcher asks of the trace output."""

    def unwritten(self) -> int: ...  # events numbered and not yet in the file
    def due_flush(self) -> None: ...  # flush now (the main thread, at a safe point)

    @property
    def flush_events(self) -> int: ...


def recorder_on_stack(frame: FrameType | None) -> bool:
    """Whether the recorder's own code is running in ``frame`` or below it."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_RECORDER_CODE):
            return True
        frame = frame.f_back
    return False


_PENDING_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_add_pending_call = ctypes.pythonapi.Py_AddPendingCall
_add_pending_call.argtypes = [_PENDING_CALL, ctypes.c_void_p]
_add_pending_call.restype = ctypes.c_int

_watching: DueFlushes | None = None  # the watcher whose pending call is queued, if any


@_PENDING_CALL
def _run_pending(_argument: int | None) -> int:
    """The pending call, in the main thread: module-level, so that it outlives any watcher
    (the interpreter may run it after the recording that asked for it has ended)."""
    watcher = _watching
    if watcher is not None:
        watcher.run_due(sys._getframe(1))
    return 0  # never an error: the program goes on whatever happened here


class DueFlushes:
    """The watcher thread of one recording's trace output, from ``start`` to ``stop``."""

    def __init__(self, output: FlushTarget, period: float | None = None) -> None:
        self._output = output
        self.period = PERIOD if period is None else period
        self._stopped = threading.Event()
        self._queued = False  # a pending call is asked for and has not run yet
        self._thread: threading.Thread | None = None
        self.deferred = 0  # pending calls that found the recorder's code running

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="streamrace-due-flushes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        global _watching
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        if _watching is self:
            _watching = None

    def _watch(self) -> None:
        global _watching
        while not self._stopped.wait(self.period):
            if self._queued or self._output.unwritten() <= self._output.flush_events:
                continue
            self._queued = True
            _watching = self
            if _add_pending_call(_run_pending, None) != 0:  # the interpreter's queue is full
                self._queued = False

    def run_due(self, frame: FrameType | None) -> None:
        """The main thread at a safe point: flush unless the recorder's code is running in
        ``frame`` (the frame the interpreter was in) or below it."""
        self._queued = False
        if self._stopped.is_set():
            return
        if recorder_on_stack(frame):
            self.deferred += 1
            return
        try:
            self._output.due_flush()
        except KeyboardInterrupt:
            _thread.interrupt_main()  # a pending call cannot raise it: the program gets it next
        except BaseException:  # a pending call cannot raise into the program; due_flush reports
            pass  # its own failures (TraceOutput.flush: the header's recorder_errors)
