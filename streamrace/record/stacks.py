"""Cheap user stacks: only the user's frames, interned into the trace's stack table.

Walking ``f_back`` costs a few hundred nanoseconds a frame; formatting happens once per
distinct stack, when it is first interned. Library frames (torch, streamrace, the standard
library) are skipped so the innermost frame is the line the user wrote. ``UserCode`` decides
which frames are the user's, once per code object, for this table and for the native
hooks' twin of it (csrc/recorder/user_stacks.h).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import weakref
from collections.abc import Callable
from types import CodeType, FrameType

# Frames of these packages are never "the user's line": the report points past them. The test
# runners' own frames (pytest, its plugins, xdist's worker loop) wrap every test; unittest and
# runpy are in the standard library, skipped with it.
_LIBRARIES = ("torch", "triton", "cupy", "cuda", "streamrace", "_pytest", "pytest", "pluggy", "xdist", "execnet")


def _library_dirs() -> tuple[str, ...]:
    dirs = set()
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.update(spec.submodule_search_locations)
    return tuple(_normal(p) for p in dirs)


def _normal(path: str) -> str:
    return os.path.normcase(os.path.abspath(path)) + os.sep


_LIBRARY_DIRS = _library_dirs()
_STDLIB = _normal(sysconfig.get_paths()["stdlib"])
# The standard library may hold site-packages (a system Python): those are not library frames.
_SITE = tuple({_normal(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")})


class UserCode:
    """Which code is the user's, and the path its frames show."""

    def __init__(self) -> None:
        self._cwd = os.getcwd()

    def shown_path(self, code: CodeType) -> str | None:
        """The path to show for a user frame's file (relative under the working directory, so
        traces travel with the code), or None for library code."""
        filename = code.co_filename
        path = os.path.normcase(os.path.abspath(filename))
        stdlib = path.startswith(_STDLIB) and not path.startswith(_SITE)
        if filename.startswith("<") or stdlib or path.startswith(_LIBRARY_DIRS):
            return None
        path = os.path.abspath(filename)
        return os.path.relpath(path, self._cwd) if path.startswith(self._cwd + os.sep) else filename


class StackTable:
    """Interns stacks; ``emit`` writes each new one as a ``stack`` event before its first use."""

    def __init__(
        self,
        emit: Callable[..., object],
        depth: int = 6,
        max_walk: int = 48,
        shown_path: Callable[[CodeType], str | None] | None = None,
    ) -> None:
        self._emit = emit
        self._depth = depth
        self._max_walk = max_walk  # frames looked at, user or not: deep framework stacks stop here
        self._ids: dict[tuple[tuple[str, int, str], ...], int] = {}
        # id(code) -> (a weak reference to it, the path to show or None for library code). Weak:
        # a strong one kept every compiled function's code alive, with what dynamo hangs on it
        # (its compiled graphs and their CUDA-graph pools' blocks), until recording stopped.
        self._shown: dict[int, tuple[weakref.ref[CodeType], str | None]] = {}
        self._shown_path = shown_path or UserCode().shown_path

    def capture(self, skip: int = 1) -> int | None:
        """The id of the calling user stack (innermost first), or None if there is no user frame."""
        frame: FrameType | None = sys._getframe(skip)
        frames: list[tuple[str, int, str]] = []
        shown_paths = self._shown
        walked = 0
        while frame is not None and len(frames) < self._depth and walked < self._max_walk:
            code = frame.f_code
            seen = shown_paths.get(id(code))
            if seen is not None and seen[0]() is code:
                shown = seen[1]
            else:  # never seen, or a new code object where a dead one was
                shown = self._shown_path(code)
                shown_paths[id(code)] = (weakref.ref(code), shown)
            if shown is not None:
                frames.append((shown, frame.f_lineno, code.co_name))
            frame = frame.f_back
            walked += 1
        if not frames:
            return None
        key = tuple(frames)
        stack_id = self._ids.get(key)
        if stack_id is None:
            stack_id = len(self._ids) + 1
            self._ids[key] = stack_id
            self._emit("stack", id=stack_id, frames=[list(f) for f in frames])
        return stack_id
