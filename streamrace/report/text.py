"""The text report: findings for a person at a terminal.

Per trace, the header's notes (recorder failures, allocators outside the model), then the
findings grouped by the graph they occur in (eager work has its own group). Each finding
shows its kind, severity, hazard and aliasing, the two accesses (op, stream and user source
line, with the line's text when the file is readable, and the innermost callers), the
allocation's story (size, pool, where it was allocated, freed and reused), the missing edge,
the fix and, where the finding's structure says where, the fix as a line of code. Findings a
CI gate accepted (suppressions, a baseline) are listed after, one line each.

All layout is in ``_Report``; every piece of text passes through one ``Style`` function with
a role name ("error", "op", "stream", ...). ``plain`` ignores the role, so colour is a
different ``Style`` (``terminal_style``, through rich) and nothing else.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from functools import partial
from typing import IO, TYPE_CHECKING, Any

from streamrace.analysis.describe import Suggestion
from streamrace.analysis.detectors import suggestion
from streamrace.analysis.findings import Access, Allocation, Finding
from streamrace.analysis.library_protocols import by_id
from streamrace.report.escape import shown
from streamrace.report.options import DEFAULT, ReportOptions, Style
from streamrace.report.sources import SourceLines

if TYPE_CHECKING:
    from streamrace.report import TraceResult
    from streamrace.suppressions import Suppressed

INDENT = "  "
LABEL_WIDTH = 14  # the body of a finding is two columns: a label ("missing edge") and its text
MIN_WIDTH = 60  # a narrow terminal still gets readable prose; code lines and paths never wrap

# rich style for each role on a terminal (``terminal_style``)
THEME = {
    "heading": "bold",
    "error": "bold red",
    "warning": "bold yellow",
    "kind": "bold",
    "hazard": "magenta",
    "op": "cyan",
    "stream": "green",
    "location": "blue",
    "label": "bold",
    "fix": "green",
    "code": "bold green",
    "dim": "dim",
    "note": "yellow",
}


def terminal_style(stream: IO[str]) -> tuple[Style, int] | None:
    """A rich-coloured ``Style`` and the width for ``stream`` when it is a terminal that takes
    colour (rich honours NO_COLOR, FORCE_COLOR and TERM=dumb), else None."""
    if not _may_be_terminal(stream):
        return None  # without importing rich (40 ms of start-up) for a pipe or a file
    from rich.color import ColorSystem
    from rich.console import Console
    from rich.style import Style as RichStyle

    console = Console(file=stream)
    if not console.is_terminal or console.color_system is None:
        return None
    system = {
        "standard": ColorSystem.STANDARD,
        "256": ColorSystem.EIGHT_BIT,
        "truecolor": ColorSystem.TRUECOLOR,
        "windows": ColorSystem.WINDOWS,
    }[console.color_system]
    styles = {role: RichStyle.parse(spec) for role, spec in THEME.items()}
    if console.no_color:  # NO_COLOR: bold and dim stay, colours go
        styles = {role: rich_style.without_color for role, rich_style in styles.items()}

    def style(text: str, role: str) -> str:
        rich_style = styles.get(role)
        return rich_style.render(text, color_system=system) if rich_style and text else text

    return style, max(MIN_WIDTH, min(console.width, 140))


MAX_STACK_DEPTH = 1000  # frames shown of one stack, whatever --stack-depth says


def _may_be_terminal(stream: IO[str]) -> bool:
    """False only where rich's Console would find no terminal either: not a tty, and neither
    TTY_COMPATIBLE=1 nor a non-empty FORCE_COLOR says to colour anyway."""
    if os.environ.get("TTY_COMPATIBLE", "") == "1" or os.environ.get("FORCE_COLOR"):
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file: rich says no terminal
        return False


def _code_spans(line: str, in_code: bool) -> tuple[list[tuple[str, bool]], bool]:
    """Split a line of prose at backticks into (text, is code) pieces; a code span may go on
    over a line break, so the state carries over."""
    pieces: list[tuple[str, bool]] = []
    current = ""
    for char in line:
        if char == "`" and not in_code:
            if current:
                pieces.append((current, False))
            current, in_code = char, True
        elif char == "`":
            pieces.append((current + char, True))
            current, in_code = "", False
        else:
            current += char
    if current:
        pieces.append((current, in_code))
    return pieces, in_code


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


def by_graph(findings: Sequence[Finding]) -> dict[int | None, list[Finding]]:
    """Findings grouped by the graph they occur in (None: eager), groups and members in order
    of first occurrence, as findings come: the report's order, which numbers them from 1."""
    groups: dict[int | None, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(finding.graph, []).append(finding)
    return groups


def split_location(location: str) -> tuple[str, int] | None:
    path, _, line = location.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else None


class _Styled(str):
    """Text the style has rendered (it may hold the style's own ANSI codes): not escaped again.
    It keeps its plain text and role, so that a line too long can be broken and styled again."""

    plain: str
    role: str

    def __new__(cls, rendered: str, plain: str, role: str) -> _Styled:
        styled = super().__new__(cls, rendered)
        styled.plain, styled.role = plain, role
        return styled


class _Report:
    """Every string from a trace (paths, names, ops, messages, notes, source text) reaches the
    lines escaped (``for_terminal``): ``style`` escapes what it styles, ``add`` what it was
    given unstyled, and prose is escaped before it is wrapped, so widths count what is shown."""

    def __init__(self, options: ReportOptions) -> None:
        self._style = options.style
        self.width = max(MIN_WIDTH, options.width)
        # Even `all` stops somewhere: a hostile trace's stack may hold millions of frames.
        self.stack_depth = min(options.stack_depth or MAX_STACK_DEPTH, MAX_STACK_DEPTH)
        self.sources = SourceLines(options.source_roots)
        self.library = options.library
        self.workdir: str | None = None  # the trace being reported: where its relative paths start
        self.lines: list[str] = []
        self.callers_shown: set[int] = set()  # call chains printed in this finding, by their ids
        # A call chain (a frame and all its callers) by its id: the frame and its callers' id. A
        # chain as a tuple of its frames made a stack of n frames cost n**2 / 2 of them.
        self.chain_ids: dict[tuple[tuple[str, int, str], int], int] = {}
        self.stack_frames: dict[int, tuple[list[list[Any]], list[tuple[str, int, str]], list[int]]] = {}

    def style(self, text: str, role: str) -> str:
        plain = shown(text)
        return _Styled(self._style(plain, role), plain, role)

    def source(self, path: str, lineno: int) -> str | None:
        return self.sources.get(path, lineno, self.workdir)

    def add(self, depth: int, *pieces: str, hang: int = len(INDENT)) -> None:
        """One line, or several when it is wider than the report: broken at spaces, each further
        line indented ``hang`` columns more; the text of a source line is cut instead (``…``),
        since a code line broken in two reads as two. Only one word wider than a whole line
        (a long path) goes past the width."""
        segments = [(p.plain, p.role) if isinstance(p, _Styled) else (shown(p), None) for p in pieces]
        prefix = INDENT * depth
        if len(prefix) + sum(len(text) for text, _ in segments) <= self.width:
            self.lines.append(prefix + "".join(self._render(text, role) for text, role in segments))
            return
        if any(role == "source" for _, role in segments):
            room = self.width - len(prefix) - sum(len(text) for text, role in segments if role != "source")
            cut = [(text if role != "source" else text[: max(room - 1, 20)] + "…", role) for text, role in segments]
            self.lines.append(prefix + "".join(self._render(text, role) for text, role in cut))
            return
        words: list[tuple[str, str | None]] = []  # words and the spaces before them, with roles
        for text, role in segments:
            for index, part in enumerate(text.split(" ")):
                if index:
                    words.append((" ", None))
                if part:
                    words.append((part, role))
        lines: list[list[tuple[str, str | None]]] = [[]]
        used = len(prefix)
        for word, role in words:
            if word == " " or used + len(word) <= self.width or used <= len(prefix) + hang:
                lines[-1].append((word, role))
                used += len(word)
                continue
            while lines[-1] and lines[-1][-1][0] == " ":
                lines[-1].pop()
            carried = [lines[-1].pop()] if len(lines[-1]) > 1 and lines[-1][-1][0].endswith("(") else []
            while lines[-1] and lines[-1][-1][0] == " ":
                lines[-1].pop()
            lines.append([(" " * hang, None), *carried, (word, role)])  # "(" stays with what it opens
            used = len(prefix) + hang + sum(len(text) for text, _ in carried) + len(word)
        for line in lines:
            self.lines.append(prefix + "".join(self._render(text, role) for text, role in line))

    def _render(self, text: str, role: str | None) -> str:
        return self._style(text, role) if role is not None and text.strip() else text

    def labelled(self, depth: int, label: str, *pieces: str) -> None:
        """One line of a finding's body: the label in the first column, the text in the second."""
        self.add(depth, self.style(label, "label"), " " * (LABEL_WIDTH - len(label)), *pieces, hang=LABEL_WIDTH + 2)

    def prose(self, depth: int, label: str, text: str, role: str) -> None:
        """A sentence in the second column, wrapped to the report's width; `code` in it is
        styled as code."""
        lines = textwrap.wrap(shown(text), self.width - len(INDENT) * depth - LABEL_WIDTH) or [""]
        in_code = False
        for index, line in enumerate(lines):
            pieces, in_code = _code_spans(line, in_code)
            styled = [self.style(piece, "code" if code else role) for piece, code in pieces]
            if index == 0:
                self.labelled(depth, label, *styled)
            else:
                self.continued(depth, *styled)

    def continued(self, depth: int, *pieces: str) -> None:
        """A further line in the second column, under the text of the line above."""
        self.add(depth, " " * LABEL_WIDTH, *pieces, hang=LABEL_WIDTH + 2)

    def stream(self, label: str, handle: int) -> str:
        # Recorded names ("main", "indexer") are what people recognise; the handle tells apart
        # two streams that share a name.
        text = f"{label} ({handle:#x})" if label and label != f"{handle:#x}" else f"{handle:#x}"
        return self.style(text, "stream")

    # -- source locations -----------------------------------------------------------------
    def where(
        self, depth: int, location: str | None, stack: list[list[Any]], label: str | None = None, near: bool = False
    ) -> None:
        """The user line, its text, and the frames that called it; under ``label`` if given.

        Stacks are innermost first (docs/trace-format.md) and ``location`` is the innermost
        user frame, so it is normally ``stack[0]``.
        """
        frames, chains = self._frames(stack)
        if location is None and frames:
            location = f"{frames[0][0]}:{frames[0][1]}"
        first = partial(self.continued, depth) if label is None else partial(self.labelled, depth, label)
        if location is None:
            first(self.style("no user source line recorded", "dim"))
            return
        parsed = split_location(location)
        func = next((fn for file, line, fn in frames if parsed == (file, line)), None)
        # near: the line is only the next recorded event's (a kernel the dispatcher never saw)
        first(
            "" if label else "near " if near else "at ", self.style(location, "location"), f" in {func}" if func else ""
        )
        if parsed is not None:
            text = self.source(*parsed)
            if text is not None:
                self.continued(depth, self.style(f"{parsed[1]:>6} | ", "dim"), self.style(text, "source"))
        shown = 1  # the source line itself
        for index, (file, line, fn) in enumerate(frames):
            if (file, line) == parsed:
                continue
            # A frame with the same callers all the way out is the same call chain.
            chain = chains[index]
            seen = chain in self.callers_shown
            if not seen and shown >= self.stack_depth:
                rest = sum((f[0], f[1]) != parsed for f in frames[index:])
                self.continued(depth, self.style(f"({_plural(rest, 'more frame')})", "dim"))
                break
            shown += 1
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

    def _frames(self, stack: list[list[Any]]) -> tuple[list[tuple[str, int, str]], list[int]]:
        """The stack's frames, and the id of each one's call chain (it and its callers); once
        per stack, as many accesses share one (the stack is kept, so its id stays its own)."""
        known = self.stack_frames.get(id(stack))
        if known is not None and known[0] is stack:
            return known[1], known[2]
        frames = [(str(f[0]), int(f[1]), str(f[2])) for f in stack]
        ids = [0] * len(frames)
        outer = -1  # no callers
        for index in range(len(frames) - 1, -1, -1):
            outer = ids[index] = self.chain_ids.setdefault((frames[index], outer), len(self.chain_ids))
        self.stack_frames[id(stack)] = (stack, frames, ids)
        return frames, ids

    # -- one finding ----------------------------------------------------------------------
    def access(self, depth: int, access: Access) -> None:
        notes = []
        if access.inferred:
            notes.append("direction inferred: treated as a write")
        if access.range and access.range.get("approximate"):
            notes.append("overlap assumed: the view is too irregular to decide exactly")
        # A free or a record_stream is its own op: "free  on stream main" says it all.
        op = [] if access.op == access.access else [self.style(access.op, "op"), " "]
        captured = access.captured
        if captured is not None:  # a replay's access: at the replay, then the captured op's line
            op.append(f"in graph {captured.get('graph')}'s replay ")
        self.labelled(depth, access.access, *op, "on stream ", self.stream(access.stream_label, access.stream))
        self.where(depth, access.location, access.stack, near=access.near)
        if captured is not None:
            location = captured.get("location")
            stack = captured.get("stack") or []
            self.where(depth, location, stack, label="captured at", near=bool(captured.get("near")))
        for note in notes:
            self.continued(depth, self.style(f"({note})", "dim"))

    def allocation(self, depth: int, alloc: Allocation) -> None:
        facts = [f"{_size(alloc.size)} at {alloc.addr:#x}, stream ", self.stream(alloc.stream_label, alloc.stream)]
        pool = _pool(alloc.pool)
        if pool:
            facts.append(f", {pool}")
        self.labelled(depth, "allocation", *facts)
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
        spaced = [piece for item in head for piece in (" ", item)]
        self.add(depth, self.style(f"[{number}]", "heading"), *spaced)
        self.callers_shown.clear()
        body = depth + 2
        for line in textwrap.wrap(shown(finding.message), self.width - len(INDENT) * body):
            self.add(body, line)
        for access in finding.accesses:
            self.access(body, access)
        if finding.allocation is not None:
            self.allocation(body, finding.allocation)
        if finding.missing_edge:
            self.prose(body, "missing edge", finding.missing_edge, "text")
        if finding.fix:
            self.prose(body, "fix", finding.fix, "fix")
        protocol = by_id(finding.protocol) if finding.protocol else None
        if protocol is not None:
            self.prose(body, "library", f"{protocol.id}: inside {protocol.where}: {protocol.reason}", "text")
        hint = suggestion(finding)
        if hint is not None:
            self.suggestion(body, hint)
        self.labelled(body, "signature", self.style(finding.signature, "dim"))

    def suggestion(self, depth: int, hint: Suggestion) -> None:
        """The fix as code: the line to add, then the source line it goes before (when the
        finding says exactly where it goes)."""
        where = " (" if hint.exact else " (it dies at "
        self.labelled(depth, "suggestion", hint.why, where, self.style(hint.before, "location"), "):")
        self.continued(depth, self.style(f"{'+':>6} | ", "dim"), self.style(hint.code, "code"))
        parsed = split_location(hint.before)
        text = self.source(*parsed) if parsed is not None and hint.exact else None
        if text is not None and parsed is not None:
            self.continued(depth, self.style(f"{parsed[1]:>6} | ", "dim"), self.style(text, "source"))

    # -- one trace, several traces --------------------------------------------------------
    def trace(self, item: TraceResult) -> None:
        findings: list[Finding] = list(item.result.findings)
        summary = item.result.summary
        self.workdir = item.workdir
        self.add(0, self.style(item.path, "heading"))
        for note in item.result.notes:
            lines = textwrap.wrap(shown(note.message), self.width - len(INDENT) - len("note: ")) or [""]
            self.add(1, self.style("note: ", "note"), lines[0])
            for line in lines[1:]:
                self.add(1, " " * len("note: "), line)
        number = 0
        for graph, members in by_graph(findings).items():
            name = "eager (outside any capture)" if graph is None else f"graph {graph}"
            self.add(1, self.style(name, "heading"), f": {_plural(len(members), 'finding')} ({_severities(members)})")
            for finding in members:
                number += 1
                self.finding(2, number, finding)
                self.lines.append("")
        library = item.result.library_findings
        if library and self.library == "show":
            self.add(
                1,
                self.style("library protocols", "heading"),
                f": {_plural(len(library), 'finding')}, not the program's",
            )
            for finding in library:
                number += 1
                self.finding(2, number, finding)
                self.lines.append("")
        elif library:
            ids = ", ".join(sorted({f.protocol for f in library if f.protocol}))
            self.add(
                1,
                self.style("note: ", "note"),
                f"{_plural(len(library), 'finding')} about a library's own protocol ({ids}) set aside, "
                "not the program's: --library-findings show lists them (docs/library-protocols.md)",
            )
        if item.suppressed:
            self.accepted(1, item.suppressed)
        analysed = (
            f"analysed {_plural(summary['graphs'], 'graph')}, "
            + (f"{_plural(summary['replays'], 'replay')}, " if summary.get("replays") else "")
            + f"{_plural(summary['ops'], 'op')}, "
            f"{_plural(summary['accesses'], 'access', 'accesses')}"
        )
        verdict = _verdict(findings) + _accepted_counts(item.suppressed)
        self.add(1, self.style("summary: ", "heading"), f"{verdict}; {analysed}")

    def accepted(self, depth: int, suppressed: Sequence[Suppressed]) -> None:
        """Findings a suppression or the baseline accepted: one line each, with the reason."""
        for item in suppressed:
            finding = item.finding
            where = next((a.location for a in reversed(finding.accesses) if a.location), None)
            how = "known" if item.entry is None else "suppressed"
            self.add(
                depth,
                self.style(f"{how}: ", "dim"),
                self.style(finding.kind, "kind"),
                f" {finding.hazard}" if finding.hazard else "",
                f" at {where}" if where else "",
                " ",
                self.style(finding.signature, "dim"),
                f" ({_accepted_by(item)})",
            )

    def total(self, traces: Sequence[TraceResult]) -> None:
        findings = [f for item in traces for f in item.result.findings]
        with_findings = sum(bool(item.result.findings) for item in traces)
        suppressed = [s for item in traces for s in item.suppressed]
        self.lines.append("")
        self.add(
            0,
            self.style("total: ", "heading"),
            f"{_verdict(findings)}{_accepted_counts(suppressed)} {_traces_with(with_findings, len(traces))}",
        )


def _traces_with(with_findings: int, analysed: int) -> str:
    """Where a total's findings are: ``in 1 of 2 traces analysed``, ``in all 2 traces analysed``
    (not "in 2 traces of 2 traces"), or ``in 2 traces analysed`` when none has any."""
    if with_findings == 0:
        return f"in {_plural(analysed, 'trace')} analysed"
    if with_findings == analysed:
        return f"in all {analysed} traces analysed"
    return f"in {with_findings} of {analysed} traces analysed"


def _accepted_by(item: Suppressed) -> str:
    if item.entry is None:
        return item.reason
    return f"suppression {item.entry} by {item.by}: {item.reason}"


def _accepted_counts(suppressed: Sequence[Suppressed]) -> str:
    """The counts of accepted findings for a summary line (", 2 suppressed"), or nothing."""
    by_entry = sum(s.entry is not None for s in suppressed)
    known = len(suppressed) - by_entry
    parts = [f"{by_entry} suppressed"] if by_entry else []
    parts += [f"{known} known from the baseline"] if known else []
    return "".join(f", {part}" for part in parts)


def finding_text(finding: Finding, number: int, options: ReportOptions = DEFAULT, workdir: str | None = None) -> str:
    """One finding as the text report shows it, numbered ``number``, with its source lines:
    what the visual reports show when a finding is clicked."""
    report = _Report(options)
    report.workdir = workdir
    report.finding(0, number, finding)
    return "\n".join(report.lines) + "\n"


def render(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> str:
    """The text report for one or more analysed traces."""
    report = _Report(options)
    for index, item in enumerate(traces):
        if index:
            report.lines.append("")
        report.trace(item)
    if len(traces) > 1:
        report.total(traces)
    return "\n".join(report.lines) + "\n"
