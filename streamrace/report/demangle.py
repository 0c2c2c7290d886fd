"""Kernel names for people: C++ symbols (``_ZN2at4cuda...``) demangled for the visual reports.

A kernel the dispatcher never saw is named by its mangled symbol. The HTML and Perfetto reports
show it demangled; the JSON and SARIF reports keep the trace's raw name, which is what tools
match on. Demangling is the ``c++filt`` binary's, when it is on PATH: one process for all the
names of a report (names on stdin, one a line), never one per name. Without it, or if it fails,
a name is shown as it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable
from typing import IO

# A mangled name as c++filt reads it: one line, no space. Anything else (a hostile name with a
# newline in it) is left alone, so that the output's lines stay one per name.
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")
TIMEOUT_S = 10
# The longest demangled name shown. Back-references let a few hundred mangled characters stand
# for a gigabyte of demangled text (a 255-character name demangles to 1.1 GB): c++filt's output
# is read up to this much a name and no further, and a longer name is shown as it is.
MAX_DEMANGLED = 4096


def demangled(names: Iterable[str]) -> dict[str, str]:
    """Each mangled name of ``names`` -> its demangled form; names that are not mangled, or
    that could not be demangled, are not in the result."""
    mangled = sorted({name for name in names if _MANGLED.fullmatch(name)})
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    out = _bounded_output(tool, "\n".join(mangled) + "\n", len(mangled) * (MAX_DEMANGLED + 1), TIMEOUT_S)
    if out is None:
        return {}
    lines = out.splitlines()
    if len(lines) != len(mangled):  # not one line per name: trust none of them
        return {}
    return {
        raw: text
        for raw, text in zip(mangled, lines, strict=True)
        if text and text != raw and len(text) <= MAX_DEMANGLED
    }


def _bounded_output(tool: str, text: str, limit: int, timeout: float) -> str | None:
    """``tool``'s standard output for ``text`` on its input; None when it fails, takes longer
    than ``timeout`` seconds or writes more than ``limit`` bytes (it is stopped then)."""
    try:
        proc = subprocess.Popen([tool], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    assert proc.stdin is not None and proc.stdout is not None
    # Fed from a thread: a tool that writes as it reads could fill its output pipe while we
    # are still writing its input.
    feeder = threading.Thread(target=_feed, args=(proc.stdin, text.encode()), daemon=True)
    feeder.start()
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
            if proc.wait(timeout=max(0.1, deadline - time.monotonic())) != 0:
                return None
            return b"".join(chunks).decode("utf-8")
        except (OSError, subprocess.SubprocessError, UnicodeError):
            return None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except OSError:  # the tool stopped reading (it was stopped)
        pass
    finally:
        with contextlib.suppress(OSError):
            pipe.close()
