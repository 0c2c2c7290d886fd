"""The SARIF 2.1.0 report: findings for code-scanning tools (GitHub code scanning, IDEs).

One run for all traces; one result per finding. ``ruleId`` is the finding kind, with rule
metadata and help from the kind's detector, in the words of docs/findings.md (a test keeps the
two in step). A result's
primary location is the user source line of the later access (for a lint, the call); the
earlier access and the allocation's alloc, free and reuse sites are related locations, and
each access's stack is a SARIF stack. ``partialFingerprints`` carries the finding's
signature, so a code-scanning service tracks one alert across runs. Findings a CI gate
accepted are results too: a suppression is a SARIF ``suppressions`` entry with its reason,
a baseline match has ``baselineState: "unchanged"``. Trace notes (recorder failures,
allocators outside the model) are tool execution notifications.

Paths are as recorded (relative to the directory the program ran in, normally the
repository root), so a relative path becomes a relative URI against ``%SRCROOT%``, once
normalized; one that climbs out of the root (``../``) has no artifact location, and an
absolute path is a ``file://`` URI, never a relative one.

Trace strings reach messages escaped: control characters as ``\x1b`` and, in plain text,
``[`` and ``]`` backslash-escaped (SARIF §3.11.6), so no embedded link can be forged; the
result message's ``markdown`` escapes every character markdown or HTML gives a meaning
(``<img>`` shows as text), keeping only the fix's own code spans. Messages, function names and
properties are cut as the text report cuts them (``escape.shown``: a word of more than 500
characters, a text of more than 20,000), since viewers show them to people: a trace's 4 MB
stream name made a 452 MB log, repeated in every message, location and property. The JSON
report keeps every string whole. Output is deterministic, like the JSON report.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from streamrace import __version__
from streamrace.analysis.detectors import DETECTORS, KINDS, Detector
from streamrace.analysis.findings import Access, Finding
from streamrace.analysis.library_protocols import by_id
from streamrace.outcome import NOTHING_RECORDED
from streamrace.report.escape import for_markdown, for_terminal, printable_strings, shown
from streamrace.report.json_report import to_json
from streamrace.report.options import DEFAULT, ReportOptions

if TYPE_CHECKING:
    from streamrace.report import TraceResult
    from streamrace.suppressions import Suppressed

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
FINGERPRINT = "streamraceSignature/v1"
SRCROOT = "%SRCROOT%"

_LEVEL = {"error": "error", "warning": "warning"}


def _rule(detector: Detector[Any]) -> dict[str, Any]:
    kind, rule = detector.kind, detector.rule
    plain_help = f"{rule.full}\n\nFix: {rule.fix}\n\nSee docs/findings.md, section `{kind}`."
    return {
        "id": kind,
        "name": rule.name,
        "shortDescription": {"text": rule.short},
        "fullDescription": {"text": rule.full},
        "help": {
            "text": plain_help,
            "markdown": f"{rule.full}\n\n**Fix:** {rule.fix}\n\nSee `docs/findings.md`, section `{kind}`.",
        },
        "defaultConfiguration": {"level": _LEVEL[detector.severity]},
        "properties": {"tags": ["concurrency", "cuda", "cuda-graphs"], "precision": "high"},
    }


# A whole run of backslashes (from its first, so a long run is scanned once, not from each of
# its backslashes: that was quadratic, 70 s for 80,000 backslashes) that a bracket follows.
_BACKSLASHES_BEFORE_BRACKET = re.compile(r"(?<!\\)\\+(?=[\[\]])")


def _text(text: str) -> str:
    """A plain-text SARIF message: printable, and literal brackets (with the backslashes
    before them) escaped, so that ``[text](target)`` in a trace string is no embedded link.
    The brackets are replaced at C speed: a 4 MB name of ``ESC [`` took 2.4 s a message
    through a callback a bracket."""
    text = for_terminal(text)
    if "[" not in text and "]" not in text:
        return text
    text = _BACKSLASHES_BEFORE_BRACKET.sub(lambda m: m.group() * 2, text)
    return text.replace("[", "\\[").replace("]", "\\]")


def _markdown(text: str) -> str:
    """The message as markdown: its `code` spans kept (streamrace writes them, from Python
    identifiers), everything else escaped."""
    pieces = text.split("`")
    if len(pieces) % 2 == 0:  # an unpaired backtick: no code spans at all
        return for_markdown(text)
    return "".join(f"`{for_terminal(p)}`" if index % 2 else for_markdown(p) for index, p in enumerate(pieces))


def _uri(path: str) -> dict[str, str] | None:
    """The artifact location of a recorded path; None for a relative path that leaves the
    source root once normalized (``../x.py``, ``a/../../x.py``)."""
    normal = posixpath.normpath(path)
    # surrogatepass: a lone surrogate in a trace string still gets its (WTF-8) percent-escape
    if posixpath.isabs(normal):
        return {"uri": "file://" + quote("/" + normal.lstrip("/"), safe="/", errors="surrogatepass")}
    if normal == ".." or normal.startswith("../") or normal == ".":
        return None
    return {"uri": quote(normal, safe="/", errors="surrogatepass"), "uriBaseId": SRCROOT}


def _location(
    where: str | None, stack: Sequence[Sequence[Any]] = (), message: str | None = None
) -> dict[str, Any] | None:
    """A SARIF location for ``file:line``, with the function from the stack when it is there."""
    if not where:
        return None
    path, _, line = where.rpartition(":")
    if not path or not line.isdigit() or int(line) < 1:
        return None
    artifact = _uri(path)
    if artifact is None:
        return None
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": int(line)}}}
    function = next((str(f[2]) for f in stack if len(f) > 2 and f"{f[0]}:{f[1]}" == where), None)
    if function:
        location["logicalLocations"] = [{"name": shown(function), "kind": "function"}]
    if message:
        location["message"] = {"text": _text(shown(message))}
    return location


# Frames of one SARIF stack: the text report's bound (a trace may hold million-frame stacks,
# and every frame is an object of a few hundred bytes here).
MAX_STACK_FRAMES = 1000


def _stack(frames: Sequence[Sequence[Any]], message: str) -> dict[str, Any] | None:
    """A SARIF stack, innermost frame first, as the trace records it, up to MAX_STACK_FRAMES."""
    kept = frames[:MAX_STACK_FRAMES]
    located = [_location(f"{f[0]}:{f[1]}", [f]) for f in kept if len(f) >= 2]
    out = [{"location": loc} for loc in located if loc is not None]
    if len(frames) > len(kept):
        message += f" ({len(frames) - len(kept):,} more frames)"
    return {"message": {"text": _text(shown(message))}, "frames": out} if out else None


def _what(access: Access) -> str:
    if access.access in ("free", "record_stream"):
        return f"{access.access} on stream {access.stream_label}"
    return f"{access.access} by {access.op} on stream {access.stream_label}"


def _message(finding: Finding) -> str:
    parts = [finding.message]
    if finding.missing_edge:
        parts.append(f"Missing edge: {finding.missing_edge}.")
    if finding.fix:
        parts.append(f"Fix: {finding.fix}.")
    return " ".join(parts)


def _result(finding: Finding, trace: str, accepted: Suppressed | None) -> dict[str, Any]:
    later = finding.accesses[-1] if finding.accesses else None
    earlier = finding.accesses[0] if len(finding.accesses) > 1 else None
    primary = _location(later.location, later.stack) if later is not None else None
    candidates: list[dict[str, Any] | None] = []
    if earlier is not None:
        candidates.append(_location(earlier.location, earlier.stack, _what(earlier)))
        if primary is None:  # no line for the later access: the earlier one stands in
            primary = _location(earlier.location, earlier.stack)
    alloc = finding.allocation
    if alloc is not None:
        candidates.append(
            _location(alloc.alloc_location, alloc.alloc_stack, f"allocated on stream {alloc.stream_label}")
        )
        candidates.append(_location(alloc.free_location, alloc.free_stack, f"freed on stream {alloc.stream_label}"))
        reuse = alloc.reused_by or {}
        if reuse.get("alloc_location") and (later is None or reuse["alloc_location"] != later.location):
            text = f"block allocated again on stream {reuse.get('stream_label')}"
            candidates.append(_location(reuse["alloc_location"], (), text))
    related = [{"id": number, **loc} for number, loc in enumerate((r for r in candidates if r is not None), start=1)]
    stacks = [_stack(a.stack, _what(a)) for a in finding.accesses]
    if alloc is not None:
        stacks.append(_stack(alloc.alloc_stack, f"allocated on stream {alloc.stream_label}"))
        stacks.append(_stack(alloc.free_stack, f"freed on stream {alloc.stream_label}"))
    result: dict[str, Any] = {
        "ruleId": finding.kind,
        "ruleIndex": KINDS.index(finding.kind),
        "kind": "fail",
        "level": _LEVEL[finding.severity],
        "message": {"text": _text(shown(_message(finding))), "markdown": _markdown(shown(_message(finding)))},
        "locations": [primary] if primary is not None else [],
        "relatedLocations": related,
        "stacks": [s for s in stacks if s is not None],
        "partialFingerprints": {FINGERPRINT: finding.signature},
        # Viewers show properties as they are: their trace strings are escaped and cut as
        # messages are (the trace's path and the signature are kept whole).
        "properties": {
            "trace": for_terminal(trace),
            **printable_strings(
                {
                    "hazard": finding.hazard,
                    "aliasing": finding.aliasing,
                    "count": finding.count,
                    "graphs": finding.graphs or ([finding.graph] if finding.graph is not None else []),
                    "missingEdge": finding.missing_edge,
                    "fix": finding.fix,
                },
                cut=True,
            ),
            "signature": for_terminal(finding.signature),
        },
    }
    if accepted is not None and accepted.entry is None:
        result["baselineState"] = "unchanged"
    elif accepted is not None:
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": accepted.reason}]
    return result


def _library_result(finding: Finding, trace: str) -> dict[str, Any]:
    """A finding about a library's own protocol: a result suppressed outside the code, with the
    protocol's reason (``--library-findings fail`` moves it into the findings instead)."""
    result = _result(finding, trace, None)
    result["properties"]["protocol"] = finding.protocol
    protocol = by_id(finding.protocol) if finding.protocol else None
    reason = f"{protocol.id}: {protocol.reason}" if protocol is not None else str(finding.protocol)
    result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": _text(shown(reason))}]
    return result


def document(traces: Sequence[TraceResult]) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict."""
    results = []
    notifications = []
    for item in traces:
        results += [_result(finding, item.path, None) for finding in item.result.findings]
        results += [_result(accepted.finding, item.path, accepted) for accepted in item.suppressed]
        results += [_library_result(finding, item.path) for finding in item.result.library_findings]
        notifications += [
            {
                "level": "error" if note.code == NOTHING_RECORDED else "warning",
                "message": {"text": _text(shown(f"{item.path}: {note.message}"))},
                "descriptor": {"id": note.code},
            }
            for note in item.machine_notes()
        ]
    # Nothing recorded is not a clean run: with --exit-zero an upload of zero results would
    # look like one, so the invocation says the analysis did not happen.
    nothing = bool(traces) and all(item.recorded_nothing for item in traces)
    invocation: dict[str, Any] = {"executionSuccessful": not nothing}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "streamrace",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [_rule(detector) for detector in DETECTORS],
                    }
                },
                "invocations": [invocation],
                "results": results,
            }
        ],
    }


def render(traces: Sequence[TraceResult], options: ReportOptions = DEFAULT) -> str:
    """The SARIF log; ``options`` are for people's formats and change nothing here."""
    return to_json(document(traces))
