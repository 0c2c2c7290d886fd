"""What a reporter is given: one analysed trace, with the path the user named it by."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/performance.md, start-up)
if TYPE_CHECKING:
    from streamrace.analysis import AnalysisResult, Note
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

    @property
    def recorded_nothing(self) -> bool:
        """No op and no access: nothing was checked (exit code 5 when every trace is so)."""
        from streamrace.outcome import recorded_nothing

        return recorded_nothing(self.result.summary)

    def machine_notes(self) -> list[Note]:
        """The trace's notes, and ``nothing-recorded`` when it has no op or access: the text
        report's reader sees that on stderr, a JSON or SARIF consumer only in the document."""
        from streamrace.analysis import Note
        from streamrace.outcome import NOTHING_RECORDED, nothing_recorded_message

        notes = list(self.result.notes)
        if self.recorded_nothing:
            notes.append(Note(NOTHING_RECORDED, nothing_recorded_message([self.result.summary], "the trace")))
        return notes


def recorded_workdir(header: Mapping[str, object]) -> str | None:
    """The header's ``process.cwd`` when it is an absolute path, else None."""
    process = header.get("process")
    cwd = process.get("cwd") if isinstance(process, Mapping) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) and "\0" not in cwd else None
