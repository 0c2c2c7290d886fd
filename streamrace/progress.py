"""A progress bar for long analyses: rich, on stderr, only when stderr is a terminal and the
trace is large, so pipes, files and CI logs never see it.

The bar's total is the trace's size as text (the file's size, or for gzip the uncompressed
size its trailer records). Where the C++ core reads the file itself (the direct reader), its
progress is how far the reader's stream is, asked at the analysis's progress calls; events
handed over one by one are counted instead, by the encoded size of one event in every
``SAMPLE``: cheap, and close enough for a bar.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from streamrace.analysis.engine import Progress

LARGE = 32 << 20  # bytes of trace text: below this an analysis takes a few seconds at most
SAMPLE = 256


def text_size(path: str) -> int | None:
    """The size of the trace's text: the file's, or the uncompressed size a gzip trailer
    records (modulo 4 GiB, so an implausible value means unknown). Unknown, too, for anything
    but a regular file: opening a pipe or FIFO again would take the reader's data."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
        with open(path, "rb") as raw:
            if raw.read(2) != b"\x1f\x8b":
                return size
            raw.seek(-4, os.SEEK_END)
            (isize,) = struct.unpack("<I", raw.read(4))
    except (OSError, struct.error):
        return None
    return isize if isize >= size else None


class Feed(NamedTuple):
    """What to hand the analysis: the events, and its progress callback (None: no bar)."""

    events: Iterator[dict[str, Any]]
    progress: Callable[[Progress], None] | None


@contextmanager
def analysis_progress(
    path: str, events: Iterator[dict[str, Any]], stream: IO[str] | None = None, threshold: int = LARGE
) -> Iterator[Feed]:
    """``events``, with a transient progress bar on ``stream`` (stderr) while they are
    analysed, when the stream is a terminal and the trace has at least ``threshold`` bytes of
    text. Events that can tell their reader's position (iter_trace's) are handed on unchanged
    and the bar moves at the analysis's progress calls; any others are counted on their way."""
    stream = stream if stream is not None else sys.stderr
    total = text_size(path) if stream.isatty() else None
    if total is None or total < threshold:
        yield Feed(events, None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("analysing {task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task(os.path.basename(path), total=total)
        position: Callable[[], int | None] | None = getattr(events, "position", None)
        if position is not None:

            def moved(_: object) -> None:
                read = position()
                if read is not None:
                    bar.update(task, completed=min(total, read))

            yield Feed(events, moved)
            bar.update(task, completed=total)
            return

        def counted() -> Iterator[dict[str, Any]]:
            for index, event in enumerate(events):
                if index % SAMPLE == 0:
                    estimate = SAMPLE * (len(json.dumps(event, separators=(",", ":"))) + 1)
                    bar.update(task, completed=min(total, bar.tasks[0].completed + estimate))
                yield event
            bar.update(task, completed=total)

        yield Feed(counted(), None)


__all__ = ["LARGE", "Feed", "analysis_progress", "text_size"]
