"""Which frame of a stack a fix should point at: the caller's, when the innermost user frame is
a shared helper.

``rms_norm(x)`` is called from a dozen lines; "record_stream after aten::mul.Tensor
(model.py:50)" points into it, where the tensor has another name and the fix cannot go. A
function that the trace's stacks show called from more than one line is a shared helper, and
the place to act on is the first frame out from it that is not one (the line that called the
helper with this tensor). The stack table holds every stack of the trace, so this needs no
source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any


class CallSites:
    """The call sites of every function, from a trace's stack table."""

    def __init__(self, stacks: Mapping[int, Sequence[Sequence[Any]]]) -> None:
        self._callers: dict[tuple[str, str], set[tuple[str, int]]] = {}
        for frames in stacks.values():
            for inner, outer in pairwise(frames):
                if len(inner) > 2 and len(outer) > 1:
                    self._callers.setdefault((str(inner[0]), str(inner[2])), set()).add((str(outer[0]), outer[1]))

    def shared(self, frame: Sequence[Any]) -> bool:
        """Is the frame's function called from more than one line in this trace?"""
        return len(frame) > 2 and len(self._callers.get((str(frame[0]), str(frame[2])), ())) > 1

    def actionable(self, frames: Sequence[Sequence[Any]]) -> int | None:
        """The index of the frame a fix should name: the first that is not in a shared helper
        (0 when the innermost is not), None for an empty stack or one of helpers only."""
        for index, frame in enumerate(frames):
            if not self.shared(frame):
                return index
        return None
