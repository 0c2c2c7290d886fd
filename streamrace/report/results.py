"""What a reporter is given: one analysed trace, with the path the user named it by."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/performance.md, start-up)
if TYPE_CHECKING:
    from streamrace.analysis import AnalysisResult
    from streamrace.report.timeline import Timeline
    from streamrace.suppressions import Suppressed


@dataclass(frozen=True)
class TraceResult:
    """The analysis of one trace file, with the path the user named it by.

    ``suppressed``: findings a CI gate accepted (suppressions, a baseline); they are no
    longer in ``result.findings`` (``streamrace.suppressions.Gate.apply``). ``workdir``: the
    directory the program was recorded in (the header's ``process.cwd``), where the trace's
    relative paths start. ``timeline``: the trace's lanes and columns, for the visual reports
    (html, perfetto); built only when one of them is asked for (streamrace/report/timeline.py).
    """

    path: str
    result: AnalysisResult
    suppressed: tuple[Suppressed, ...] = ()
    workdir: str | None = None
    timeline: Timeline | None = None


def recorded_workdir(header: Mapping[str, object]) -> str | None:
    """The header's ``process.cwd`` when it is an absolute path, else None."""
    process = header.get("process")
    cwd = process.get("cwd") if isinstance(process, Mapping) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) and "\0" not in cwd else None
