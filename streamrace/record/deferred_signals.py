"""The program's signal handlers held back while the recorder settles its events.

Settling takes the hooks' events out of them and then works on them in Python (collectives
moved onto their streams, allocations and kernels settled, the events kept). A Python signal
handler runs at whatever bytecode the signal finds, and one that raises (Ctrl-C's
KeyboardInterrupt, a SIGALRM timeout) there dropped the events already taken and not yet kept:
a lost ``event_wait`` is a race the program does not have. So, on the main thread (the only
one Python runs handlers on), each signal whose handler is Python's is answered by a stand-in
that notes it; when settling is done the program's handlers are put back and run, in the
order the signals came, so a Ctrl-C still reaches the program, only after the events are
whole. Signals whose handler is not Python's (ignored, the default) and faults are left as
they are.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_depth = 0  # nested settles hold the handlers back once, at the outermost

# The asynchronous signals programs handle in Python (asking all 62 costs 70 us a settle);
# faults (SIGSEGV, SIGFPE, ...) are never held back.
_ASYNCHRONOUS = tuple(
    getattr(signal, name)
    for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGVTALRM", "SIGPROF",
        "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGWINCH", "SIGXCPU",
    )
    if hasattr(signal, name)
)  # fmt: skip


def _python_handled() -> dict[int, Any]:
    """The signals whose handlers are Python callables now."""
    handlers = {}
    for signum in _ASYNCHRONOUS:
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler):
            handlers[signum] = handler
    return handlers


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Inside, the program's Python signal handlers wait; at the end they run, in order."""
    global _depth
    if _depth > 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[tuple[int, FrameType | None]] = []

    def stand_in(signum: int, frame: FrameType | None) -> None:
        arrived.append((signum, frame))

    held: dict[int, Any] = {}
    _depth += 1
    try:
        for signum, handler in _python_handled().items():
            try:
                signal.signal(signum, stand_in)
            except (OSError, ValueError, RuntimeError):
                continue
            held[signum] = handler
        yield
    finally:
        _depth -= 1
        for signum, handler in held.items():
            signal.signal(signum, handler)
        for k, (signum, frame) in enumerate(arrived):
            try:
                held[signum](signum, frame)
            except BaseException:
                # The rest come again, to their own handlers, as Python runs them after one
                # that raised: at a later bytecode.
                for later, _ in arrived[k + 1 :]:
                    signal.raise_signal(later)
                raise
