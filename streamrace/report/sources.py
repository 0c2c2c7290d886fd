"""User source lines for the text report, read safely.

A trace names files in its stacks, and the report shows the text of the lines it points at.
The trace is input, so it may name anything: ``/proc/self/environ`` (the environment's
secrets), ``/etc/passwd``, ``/dev/zero`` (endless), a FIFO (a read that never returns) or
``../../`` out of the project. So a line is read only from

* a regular file (``os.stat``; a FIFO, a device or a directory is skipped without opening
  it for reading, and the opened file is checked again, so a swap in between changes nothing);
* under a **source root** once every symbolic link is resolved: the directories given with
  ``--source-root``, else the current directory. A relative path is looked up in the
  directory the program was recorded in (the header's ``process.cwd``), when that directory
  is under a source root, then in each source root;
* never under ``/proc``, ``/dev`` or ``/sys``, whatever the roots;
* of at most ``MAX_FILE_BYTES``, and ``MAX_TOTAL_BYTES`` in all for one report.

Anything else shows no text, silently: the report is complete without it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence

# The longest frame path looked up (Linux's PATH_MAX): a trace's megabyte path of a million
# parts would cost a stat for each part, in realpath, before failing.
MAX_PATH_CHARS = 4096
MAX_FILE_BYTES = 4 << 20  # a source file larger than this is not a source file
MAX_TOTAL_BYTES = 64 << 20  # all files of one report: a trace naming thousands reads no more
MAX_LINE_CHARS = 400  # the text shown of one line
_SYSTEM = ("/proc", "/dev", "/sys")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class SourceLines:
    """Source lines by ``(path, line)``, each file opened at most once per report."""

    def __init__(self, roots: Sequence[str] = ()) -> None:
        if not roots:
            try:
                roots = (os.getcwd(),)
            except OSError:  # the current directory is gone: no root, no source text
                roots = ()
        self._roots = tuple(os.path.realpath(root) for root in roots)
        self._files: dict[str, list[str] | None] = {}
        self._budget = MAX_TOTAL_BYTES  # what one report may read in all

    def _trusted(self, path: str) -> bool:
        if any(_inside(path, system) for system in _SYSTEM):
            return False
        return any(_inside(path, root) for root in self._roots)

    def _candidates(self, path: str, workdir: str | None) -> list[str]:
        if os.path.isabs(path):
            return [path]
        bases = [workdir] if workdir and os.path.isabs(workdir) else []
        return [os.path.join(base, path) for base in (*bases, *self._roots)]

    def _open(self, path: str, workdir: str | None) -> list[str] | None:
        if len(path) > MAX_PATH_CHARS:  # no file system takes it; resolving it costs a stat a part
            return None
        for candidate in self._candidates(path, workdir):
            try:  # ValueError: a name the file system cannot take (a lone surrogate, a NUL)
                real = os.path.realpath(candidate)
                if not self._trusted(real):
                    continue
                info = os.stat(real)
            except (OSError, ValueError):
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                continue
            if self._budget < info.st_size:
                return None
            lines = _read_lines(real)
            if lines is not None:
                self._budget -= info.st_size
                return lines
        return None

    def file(self, path: str, workdir: str | None = None) -> list[str] | None:
        """Every line of ``path``, or None when it cannot (or may not) be read."""
        key = f"{workdir}\0{path}" if not os.path.isabs(path) else path
        if key not in self._files:
            self._files[key] = self._open(path, workdir)
        return self._files[key]

    def get(self, path: str, lineno: int, workdir: str | None = None) -> str | None:
        """The text of line ``lineno`` of ``path`` (stripped), or None when it cannot be shown."""
        if lineno < 1:
            return None
        lines = self.file(path, workdir)
        if lines is None or lineno > len(lines):
            return None
        return lines[lineno - 1].strip()[:MAX_LINE_CHARS] or None


def source_reader(header: Mapping[str, object], roots: Sequence[str] = ()) -> Callable[[str], list[str] | None]:
    """``analyze(..., sources=...)`` for a trace with this header: its files, read safely."""
    from streamrace.report.results import recorded_workdir

    lines, workdir = SourceLines(roots), recorded_workdir(header)
    return lambda path: lines.file(path, workdir)


def _read_lines(path: str) -> list[str] | None:
    """The lines of the regular file at ``path``, or None. O_NONBLOCK: should the file have
    become a FIFO since the stat, opening it still returns at once and fstat refuses it."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as raw:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                return None
            data = raw.read(MAX_FILE_BYTES + 1)
        except OSError:
            return None
    if len(data) > MAX_FILE_BYTES:  # it grew since the stat
        return None
    return data.decode("utf-8", errors="replace").splitlines()
