"""A Ctrl-C held back while the recorder settles its events.

Settling takes the hooks' events out of them and then works on them in Python (collectives
moved onto their streams, allocations and kernels settled, the events kept). Python raises a
Ctrl-C's KeyboardInterrupt at whatever bytecode the signal finds, and one raised there dropped
the events already taken and not yet kept: a lost ``event_wait`` is a race the program does
not have. So, on the main thread (the only one Python runs handlers on), while SIGINT is
Python's own default handler at both levels, a stand-in notes a Ctrl-C during the settle, and
the KeyboardInterrupt is raised when the events are whole.

Only that case is touched. Python's table and the C-level ``sigaction`` (flags, mask, a
chained handler) are put back exactly as they were. A program's own SIGINT handler, other
signals' handlers and a C library's SIGINT handler are left alone: replacing them, even for a
moment, reset what ``signal.siginterrupt`` and ``faulthandler.register`` had set, and ran
handlers late against a state the program had changed since (docs/recording.md, "Signals").
Linux only (the ``sigaction`` copy); elsewhere nothing is held back.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_depth = 0  # nested settles hold the Ctrl-C back once, at the outermost
# Larger than any libc's struct sigaction (152 bytes on glibc x86-64 and aarch64); the
# handler is its first member on Linux.
_SIGACTION_BYTES = 512


def _libc_sigaction():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sigaction
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


_sigaction = _libc_sigaction()


def _read(signum: int) -> ctypes.Array[ctypes.c_char] | None:
    """The signal's C-level disposition, as opaque bytes."""
    assert _sigaction is not None
    buffer = ctypes.create_string_buffer(_SIGACTION_BYTES)
    return buffer if _sigaction(signum, None, buffer) == 0 else None


def _handler(action: ctypes.Array[ctypes.c_char]) -> bytes:
    return action.raw[: ctypes.sizeof(ctypes.c_void_p)]


def _disposition(signum: int) -> bytes | None:
    """What the kernel keeps of the signal's disposition: the handler, the mask of the 64
    signals and the flags (glibc's and musl's struct sigaction on 64-bit Linux; the rest of
    their 128-byte mask is not the kernel's, and its bytes are whatever libc left there)."""
    action = _read(signum)
    return None if action is None else action.raw[:16] + action.raw[136:140]


@contextlib.contextmanager
def deferred_ctrl_c() -> Iterator[None]:
    """Inside, a Ctrl-C waits; at the end it is raised, once, as KeyboardInterrupt."""
    global _depth
    if (
        _sigaction is None
        or _depth > 0
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    saved = _read(signal.SIGINT)
    if saved is None:
        yield
        return
    arrived: list[int] = []

    def stand_in(signum: int, frame: FrameType | None) -> None:
        arrived.append(signum)

    _depth += 1
    try:
        # From here on the finally puts both levels back, whatever comes.
        try:
            signal.signal(signal.SIGINT, stand_in)
            now = _read(signal.SIGINT)
            # Python's handler answered SIGINT before only if the C-level handler is the one
            # Python installs; else a C library's was there: leave it, and the settle as is.
            held = now is not None and _handler(now) == _handler(saved)
        except ValueError:  # not the main interpreter
            held = False
        if not held:
            _put_back(saved)  # a Ctrl-C the stand-in noted meanwhile is still raised below
        yield
    finally:
        _depth -= 1
        if signal.getsignal(signal.SIGINT) is stand_in:
            _put_back(saved)
        if arrived:
            raise KeyboardInterrupt


def _put_back(saved: ctypes.Array[ctypes.c_char]) -> None:
    """Python's default handler in its table, and the C-level disposition byte for byte."""
    assert _sigaction is not None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    finally:
        _sigaction(signal.SIGINT, saved, None)
