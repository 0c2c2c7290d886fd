"""The text report: findings for a person at a terminal.

Per trace, findings are grouped by the graph they occur in (eager work has its own group).
Each finding shows its kind, severity, hazard and aliasing, the two accesses (op, stream and
user source line, with the line's text when the file is readable), the allocation's story
(size, pool, where it was allocated, freed and reused), the missing edge and the fix.

All layout is in ``_Report``; every piece of text passes through one ``Style`` function with
a role name ("error", "op", "stream", ...). ``plain`` ignores the role, so colour is a
different ``Style`` and nothing else.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from streamrace.analysis.findings import Access, Allocation, Finding

if TYPE_CHECKING:
    from streamrace.report import TraceResult

Style = Callable[[str, str], str]
"""``style(text, role) -> text``. Roles: heading, error, warning, kind, hazard, op, stream,
location, source, label, text, fix, dim."""

INDENT = "  "
LABEL_WIDTH = 14  # the body of a finding is two columns: a label ("missing edge") and its text
WIDTH = 100  # prose (messages, fixes) wraps here; code lines and paths never do


def plain(text: str, role: str) -> str:
    """No styling: the text as it is, whatever its role."""
    return text


class SourceLines:
    """User source lines for the report, each file read once.

    Relative paths are taken from the current directory, as Python's tracebacks do; a file
    that cannot be read simply shows no text.
    """

    def __init__(self) -> None:
        self._files: dict[str, list[str] | None] = {}

    def get(self, path: str, lineno: int) -> str | None:
        if path not in self._files:
            try:
                with open(path, encoding="utf-8", errors="replace") as src:
                    self._files[path] = src.read().splitlines()
            except OSError:
                self._files[path] = None
        lines = self._files[path]
        if lines is None or not 1 <= lineno <= len(lines):
            return None
        return lines[lineno - 1].strip() or None


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def _severities(findings: Sequence[Finding]) -> str:
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    parts = [_plural(errors, "error")] if errors else []
    parts += [_plural(warnings, "warning")] if warnings else []
    return ", ".join(parts)


def _verdict(findings: Sequence[Finding]) -> str:
    if not findings:
        return "no findings"
    return f"{_plural(len(findings), 'finding')} ({_severities(findings)})"


def _size(nbytes: int) -> str:
    text = _plural(nbytes, "byte")
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{text} ({nbytes / scale:.1f} {unit})"
    return text


def _pool(pool: list[int] | None) -> str | None:
    """PyTorch's MempoolId: (id, 0) a graph's own pool, (0, id) a user pool, (0, 0) the default."""
    if not pool:
        return None
    if pool == [0, 0]:
        return "default pool"
    kind = "graph pool" if pool[1] == 0 else "user pool"
    return f"{kind} ({pool[0]}, {pool[1]})"


def _split_location(location: str) -> tuple[str, int] | None:
    path, _, line = location.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else None


class _Report:
    def __init__(self, style: Style) -> None:
        self.style = style
        self.sources = SourceLines()
        self.lines: list[str] = []
        self.callers_shown: set[tuple[tuple[str, int, str], ...]] = set()  # call chains printed in this finding

    def add(self, depth: int, *pieces: str) -> None:
        self.lines.append(INDENT * depth + "".join(pieces))

    def labelled(self, depth: int, label: str, *pieces: str) -> None:
        """One line of a finding's body: the label in the first column, the text in the second."""
        self.add(depth, self.style(label, "label"), " " * (LABEL_WIDTH - len(label)), *pieces)

    def prose(self, depth: int, label: str, text: str, role: str) -> None:
        """A sentence in the second column, wrapped to the report's width."""
        lines = textwrap.wrap(text, WIDTH - len(INDENT) * depth - LABEL_WIDTH) or [""]
        self.labelled(depth, label, self.style(lines[0], role))
        for line in lines[1:]:
            self.continued(depth, self.style(line, role))

    def continued(self, depth: int, *pieces: str) -> None:
        """A further line in the second column, under the text of the line above."""
        self.add(depth, " " * LABEL_WIDTH, *pieces)

    def stream(self, label: str, handle: int) -> str:
        # Recorded names ("main", "indexer") are what people recognise; the handle tells apart
        # two streams that share a name.
        text = f"{label} ({handle:#x})" if label and label != f"{handle:#x}" else f"{handle:#x}"
        return self.style(text, "stream")

    # -- source locations -----------------------------------------------------------------
    def where(self, depth: int, location: str | None, stack: list[list[Any]], label: str | None = None) -> None:
        """The user line, its text, and the frames that called it; under ``label`` if given.

        Stacks are innermost first (docs/trace-format.md) and ``location`` is the innermost
        user frame, so it is normally ``stack[0]``.
        """
        frames = [(str(f[0]), int(f[1]), str(f[2])) for f in stack]
        if location is None and frames:
            location = f"{frames[0][0]}:{frames[0][1]}"
        first = partial(self.continued, depth) if label is None else partial(self.labelled, depth, label)
        if location is None:
            first(self.style("no user source line recorded", "dim"))
            return
        parsed = _split_location(location)
        func = next((fn for file, line, fn in frames if parsed == (file, line)), None)
        first("" if label else "at ", self.style(location, "location"), f" in {func}" if func else "")
        if parsed is not None:
            text = self.sources.get(*parsed)
            if text is not None:
                self.continued(depth, self.style(f"{parsed[1]:>6} | ", "dim"), self.style(text, "source"))
        for index, (file, line, fn) in enumerate(frames):
            if (file, line) == parsed:
                continue
            # A frame with the same callers all the way out is the same call chain.
            chain = tuple(frames[index:])
            seen = chain in self.callers_shown
            self.callers_shown.add(chain)
            self.continued(
                depth,
                "called from ",
                self.style(f"{file}:{line}", "location"),
                f" in {fn}",
                self.style(", as above", "dim") if seen else "",
            )
            if seen:  # one finding's stacks share their outer frames: print them once
                break

    # -- one finding ----------------------------------------------------------------------
    def access(self, depth: int, access: Access) -> None:
        notes = []
        if access.inferred:
            notes.append("direction inferred: treated as a write")
        if access.range and access.range.get("approximate"):
            notes.append("overlap assumed: the view is too irregular to decide exactly")
        # A free or a record_stream is its own op: "free  on stream main" says it all.
        op = [] if access.op == access.access else [self.style(access.op, "op"), " "]
        self.labelled(depth, access.access, *op, "on stream ", self.stream(access.stream_label, access.stream))
        self.where(depth, access.location, access.stack)
        for note in notes:
            self.continued(depth, self.style(f"({note})", "dim"))

    def allocation(self, depth: int, alloc: Allocation) -> None:
        facts = [f"{_size(alloc.size)} at {alloc.addr:#x}", f"stream {self.stream(alloc.stream_label, alloc.stream)}"]
        pool = _pool(alloc.pool)
        if pool:
            facts.append(pool)
        self.labelled(depth, "allocation", ", ".join(facts))
        self.where(depth, alloc.alloc_location, alloc.alloc_stack, label="allocated at")
        if alloc.free_seq is None and not alloc.free_location and not alloc.free_stack:
            self.labelled(depth, "freed", self.style("not in this trace", "dim"))
        else:
            self.where(depth, alloc.free_location, alloc.free_stack, label="freed at")
        reuse = alloc.reused_by
        if reuse:
            # The reusing op is normally the finding's second access, shown in full above.
            op = self.style(str(reuse.get("op", "?")), "op")
            stream = self.stream(str(reuse.get("stream_label", "")), int(reuse.get("stream", 0)))
            at = [" at ", self.style(reuse["location"], "location")] if reuse.get("location") else []
            self.labelled(depth, "reused by", op, " on stream ", stream, *at)
            if reuse.get("alloc_location") not in (None, reuse.get("location")):
                self.continued(depth, "which allocated it at ", self.style(reuse["alloc_location"], "location"))

    def finding(self, depth: int, number: int, finding: Finding) -> None:
        head = [self.style(finding.severity, finding.severity), self.style(finding.kind, "kind")]
        if finding.hazard:
            head.append(self.style(finding.hazard, "hazard"))
        if finding.aliasing:
            head.append(self.style("aliasing", "hazard"))
        seen = [f"seen {finding.count} times"] if finding.count > 1 else []
        if len(finding.graphs) > 1:
            seen.append("in graphs " + ", ".join(map(str, finding.graphs)))
        if seen:
            head.append(f"({', '.join(seen)})")
        self.add(depth, self.style(f"[{number}]", "heading"), " ", " ".join(head))
        self.callers_shown.clear()
        body = depth + 2
        for line in textwrap.wrap(finding.message, WIDTH - len(INDENT) * body):
            self.add(body, line)
        for access in finding.accesses:
            self.access(body, access)
        if finding.allocation is not None:
            self.allocation(body, finding.allocation)
        if finding.missing_edge:
            self.prose(body, "missing edge", finding.missing_edge, "text")
        if finding.fix:
            self.prose(body, "fix", finding.fix, "fix")
        self.labelled(body, "signature", self.style(finding.signature, "dim"))

    # -- one trace, several traces --------------------------------------------------------
    def trace(self, item: TraceResult) -> None:
        findings: list[Finding] = list(item.result.findings)
        summary = item.result.summary
        self.add(0, self.style(item.path, "heading"))
        groups: dict[int | None, list[Finding]] = {}
        for finding in findings:  # findings come in order of first occurrence; groups keep it
            groups.setdefault(finding.graph, []).append(finding)
        number = 0
        for graph, members in groups.items():
            name = "eager (outside any capture)" if graph is None else f"graph {graph}"
            self.add(1, self.style(name, "heading"), f": {_plural(len(members), 'finding')} ({_severities(members)})")
            for finding in members:
                number += 1
                self.finding(2, number, finding)
                self.lines.append("")
        analysed = (
            f"analysed {_plural(summary['graphs'], 'graph')}, {_plural(summary['ops'], 'op')}, "
            f"{_plural(summary['accesses'], 'access', 'accesses')}"
        )
        self.add(1, self.style("summary: ", "heading"), f"{_verdict(findings)}; {analysed}")

    def total(self, traces: Sequence[TraceResult]) -> None:
        findings = [f for item in traces for f in item.result.findings]
        with_findings = sum(bool(item.result.findings) for item in traces)
        self.lines.append("")
        self.add(
            0,
            self.style("total: ", "heading"),
            f"{_verdict(findings)} in {_plural(with_findings, 'trace')} of {_plural(len(traces), 'trace')} analysed",
        )


def render(traces: Sequence[TraceResult], style: Style = plain) -> str:
    """The text report for one or more analysed traces."""
    report = _Report(style)
    for index, item in enumerate(traces):
        if index:
            report.lines.append("")
        report.trace(item)
    if len(traces) > 1:
        report.total(traces)
    return "\n".join(report.lines) + "\n"
