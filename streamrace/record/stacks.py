"""Cheap user stacks: only the user's frames, interned into the trace's stack table.

Walking ``f_back`` costs a few hundred nanoseconds a frame; formatting happens once per
distinct stack, when it is first interned. Library frames (torch, streamrace, the standard
library) are skipped so the innermost frame is the line the user wrote.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from collections.abc import Callable
from types import FrameType

# Frames of these packages are never "the user's line": the report points past them.
_LIBRARIES = ("torch", "triton", "cupy", "cuda", "streamrace", "_pytest", "pluggy")


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


class StackTable:
    """Interns stacks; ``emit`` writes each new one as a ``stack`` event before its first use."""

    def __init__(self, emit: Callable[..., object], depth: int = 8) -> None:
        self._emit = emit
        self._depth = depth
        self._ids: dict[tuple[tuple[str, int, str], ...], int] = {}
        self._is_user: dict[str, bool] = {}
        self._shown: dict[str, str] = {}
        self._cwd = os.getcwd()

    def _user_file(self, filename: str) -> bool:
        known = self._is_user.get(filename)
        if known is None:
            path = os.path.normcase(os.path.abspath(filename))
            stdlib = path.startswith(_STDLIB) and not path.startswith(_SITE)
            known = not (filename.startswith("<") or stdlib or path.startswith(_LIBRARY_DIRS))
            self._is_user[filename] = known
        return known

    def _display_path(self, filename: str) -> str:
        """Paths under the working directory are kept relative, so traces travel with the code."""
        shown = self._shown.get(filename)
        if shown is None:
            path = os.path.abspath(filename)
            shown = os.path.relpath(path, self._cwd) if path.startswith(self._cwd + os.sep) else filename
            self._shown[filename] = shown
        return shown

    def capture(self, skip: int = 1) -> int | None:
        """The id of the calling user stack (innermost first), or None if there is no user frame."""
        frame: FrameType | None = sys._getframe(skip)
        frames: list[tuple[str, int, str]] = []
        while frame is not None and len(frames) < self._depth:
            code = frame.f_code
            if self._user_file(code.co_filename):
                frames.append((self._display_path(code.co_filename), frame.f_lineno, code.co_name))
            frame = frame.f_back
        if not frames:
            return None
        key = tuple(frames)
        stack_id = self._ids.get(key)
        if stack_id is None:
            stack_id = len(self._ids) + 1
            self._ids[key] = stack_id
            self._emit("stack", id=stack_id, frames=[list(f) for f in frames])
        return stack_id
