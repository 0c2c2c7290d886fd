"""Cheap user stacks: only the user's frames, interned into the trace's stack table.

Walking ``f_back`` costs a few hundred nanoseconds a frame; formatting happens once per
distinct stack, when it is first interned. Library frames (torch, streamrace, the standard
library) are skipped so the innermost frame is the line the user wrote.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from types import FrameType

import torch

_LIBRARY_DIRS = tuple(
    os.path.normcase(os.path.abspath(p)) + os.sep
    for p in {
        os.path.dirname(torch.__file__),
        os.path.dirname(os.path.dirname(__file__)),  # streamrace/
        sysconfig.get_paths()["stdlib"],
    }
)


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
            known = not (filename.startswith("<") or path.startswith(_LIBRARY_DIRS))
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
