"""Frames in code a compiler wrote (inductor's output modules): the user acts at the line that
called into it, not in it.

A kernel launched by ``torch.compile``'d code has, as its innermost user-looking frame, a line
of the module inductor generated in its cache directory (``/tmp/torchinductor_<user>/ab/cab…py``,
or ``TORCHINDUCTOR_CACHE_DIR``, which the recorder writes into the header's ``generated_code``;
inductor's way of naming its modules is recognised wherever they are).
That file is rewritten on every recompile and nobody edits it; the frame dynamo compiled (the
user's function and line) is further out. So a finding names that frame first and the
generated one second, then the rest in order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

# inductor's default cache directory is <tempdir>/torchinductor_<user>; it writes modules under it.
_INDUCTOR_CACHE = re.compile(r"(?:^|[\\/])torchinductor_[^\\/]*[\\/]")
# Wherever its cache is (tests point it at a fresh temporary directory), inductor names an output
# module c<hash>.py in a folder named after the hash's first two characters.
_INDUCTOR_MODULE = re.compile(r"[\\/]([a-z0-9]{2})[\\/]c\1[a-z0-9]{30,}\.py$")


class GeneratedCode:
    """Which frames are in generated code: inductor's default cache, and the header's dirs."""

    def __init__(self, dirs: Iterable[str] = ()) -> None:
        self._dirs = tuple(os.path.join(d, "") for d in dirs if d)

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        return bool(_INDUCTOR_CACHE.search(path) or _INDUCTOR_MODULE.search(path)) or path.startswith(self._dirs)

    def user_first(self, frames: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """The frames (innermost first) with the innermost frame outside generated code moved
        in front of the generated frames inside it; as they were when there is none, or when
        the innermost frame is not generated."""
        out = [list(frame) for frame in frames]
        if not out or out[0][0] not in self:
            return out
        for index, frame in enumerate(out):
            if frame[0] not in self:
                return [frame, *out[:index], *out[index + 1 :]]
        return out
