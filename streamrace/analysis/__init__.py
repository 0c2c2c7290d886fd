"""The analysis: trace events in, findings out (docs/analysis.md). Pure Python, no torch.

``analyze(trace)`` reads a whole ``Trace``; ``analyze(header, events)`` reads any iterable of
events in seq order, so a streaming reader (``iter_trace``) feeds it without holding the trace.
The engine is the C++ core when it is built, else the Python reference (``STREAMRACE_CORE``,
streamrace/analysis/core.py); both give the same findings. Whole-trace passes (the graph-truth
check) see the events on their way to the engine, then its results; each finding kind's
detector (streamrace/analysis/detectors/) describes the detections of its kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from streamrace import __version__, short_lived
from streamrace.analysis import detectors
from streamrace.analysis.core import CppEngine, new_engine
from streamrace.analysis.dedup import deduplicate
from streamrace.analysis.describe import Describer
from streamrace.analysis.engine import Progress
from streamrace.analysis.findings import Finding
from streamrace.analysis.generated_code import GeneratedCode
from streamrace.analysis.library_protocols import LibraryCalls, set_aside
from streamrace.analysis.source_names import SourceText
from streamrace.collector import collections_paused
from streamrace.trace.events import FORMAT_MINOR, FORMAT_VERSION
from streamrace.trace.io import SKIPPED_EVENTS, Trace, TraceEvents


@dataclass(frozen=True)
class Note:
    """A fact about the trace that limits what its analysis can say: the recorder failed,
    allocations are missing, or the allocator is one the lifetime model does not describe.
    Notes come from the header; they are not findings and do not change the exit code."""

    # "no-cuda", "recorder-errors", "allocations-dropped", "replays-unrecorded", "replays-unknown-graph",
    # "allocator-model", "unknown-events", "trace-incomplete"; the reporters add "nothing-recorded"
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def header_notes(header: Mapping[str, Any], unknown_replays: int = 0) -> list[Note]:
    """The notes a trace header calls for (docs/trace-format.md, header fields), and the
    engine's count of replay events naming graphs the trace never captured (``unknown_replays``)."""
    notes = []
    if header.get("incomplete") is True:
        notes.append(
            Note(
                "trace-incomplete",
                "the recording of this trace never finished (its process was killed, or left without "
                "running its exit handlers): the events after its last flush are missing, so findings may be missing",
            )
        )
    no_cuda = header.get("no_cuda")
    if isinstance(no_cuda, str) and no_cuda:  # a descriptive fact: only a string says anything
        notes.append(
            Note("no-cuda", f"no CUDA here ({no_cuda}): the recorder installed nothing, so nothing was recorded")
        )
    errors = header.get("recorder_errors") or []
    if errors:
        times = "once" if len(errors) == 1 else f"{len(errors)} times"
        notes.append(
            Note(
                "recorder-errors",
                f"the recorder failed {times} (first: {errors[0]}); what it missed was not analysed, "
                "so findings may be missing",
            )
        )
    dropped = header.get("allocations_dropped") or 0
    if dropped:
        notes.append(
            Note(
                "allocations-dropped",
                f"{dropped} allocation{'s were' if dropped != 1 else ' was'} left out of the trace "
                "(size unknown to the recorder); their lifetimes were not checked",
            )
        )
    # Replays of graphs whose capture the trace lacks, as the recorder counts them: it writes
    # no event for a replay of a graph it saw no capture of.
    unrecorded = header.get("replays_unrecorded") or 0
    if unrecorded:
        notes.append(
            Note(
                "replays-unrecorded",
                f"{unrecorded} replay{'s' if unrecorded != 1 else ''} of CUDA graphs captured before recording "
                f"started {'were' if unrecorded != 1 else 'was'} not analysed: what they read and write is not "
                "in the trace (start recording before the captures to see them)",
            )
        )
    # So a replay event naming a graph the trace never captured is one no recorder writes:
    # the engine skips it and counts it (docs/trace-format.md, replays and graph lifetimes).
    if unknown_replays:
        notes.append(
            Note(
                "replays-unknown-graph",
                f"{unknown_replays} replay event{'s name' if unknown_replays != 1 else ' names'} a CUDA graph this "
                f"trace never captured, which a recorder does not write (a hand-made or edited trace?): "
                f"{'they were' if unknown_replays != 1 else 'it was'} not analysed",
            )
        )
    allocator = header.get("allocator") or {}
    why = None
    if allocator.get("backend") == "cudaMallocAsync":
        why = "the allocator backend is cudaMallocAsync"
    elif allocator.get("caching") is False:
        why = "the caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING)"
    if why:
        notes.append(
            Note(
                "allocator-model",
                f"{why}: the block-reuse model (PyTorch's caching allocator, docs/analysis.md) does "
                "not apply, so unsafe-free findings and their absence say nothing about this run; "
                "races between accesses are still checked",
            )
        )
    skipped = header.get(SKIPPED_EVENTS) or {}
    if skipped:
        notes.append(Note("unknown-events", _unknown_events_message(skipped, header.get("minor") or 0)))
    return notes


def _unknown_events_message(skipped: Mapping[str, int], minor: int) -> str:
    """The reader skipped events of kinds it does not know (iter_trace's ``skipped_events``)."""
    total = sum(skipped.values())
    kinds = ", ".join(f"{kind} ({count})" for kind, count in sorted(skipped.items()))
    ours = f"{FORMAT_VERSION}.{FORMAT_MINOR}"
    if minor > FORMAT_MINOR:
        why = f"the trace is format {FORMAT_VERSION}.{minor}, this streamrace reads {ours}: upgrade it to analyse them"
    else:
        why = f"they are not in trace format {ours} (a misspelt kind, or a recorder newer than its header says)"
    return (
        f"{total} event{'s' if total != 1 else ''} of {'a kind' if len(skipped) == 1 else 'kinds'} this streamrace "
        f"does not know {'were' if total != 1 else 'was'} skipped, and what they record was not analysed: "
        f"{kinds}; {why}"
    )


@dataclass
class AnalysisResult:
    findings: list[Finding]  # deduplicated, by first occurrence
    raw_findings: list[Finding]  # one per detected instance, in detection order (analyze keep_raw)
    summary: dict[str, int] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)  # from the trace header, in a fixed order
    # Findings about a library's own protocol (library_protocols.py), apart from ``findings``:
    # each has ``protocol`` set; they fail nothing unless a front end is asked to.
    library_findings: list[Finding] = field(default_factory=list)

    def library_counted(self) -> AnalysisResult:
        """This result with the library protocols' findings counted among the program's
        (``--library-findings fail``): each still names its ``protocol``."""
        if not self.library_findings:
            return self
        findings = [*self.findings, *self.library_findings]
        summary = {**self.summary, "findings": len(findings)}
        summary.pop("library_findings", None)
        return dataclasses.replace(self, findings=findings, summary=summary, library_findings=[])

    def to_dict(self, streamrace_version: str = __version__) -> dict[str, Any]:
        return {
            "streamrace": streamrace_version,
            "trace_format": FORMAT_VERSION,
            "findings": [f.to_dict() for f in self.findings],
            "summary": dict(self.summary),
            "notes": [n.to_dict() for n in self.notes],
            "library_findings": [f.to_dict() for f in self.library_findings],
        }


def analyze(
    trace: Trace | Mapping[str, Any],
    events: Iterable[Mapping[str, Any]] | None = None,
    *,
    progress: Callable[[Progress], None] | None = None,
    sources: SourceText | None = None,
    keep_raw: bool = True,
) -> AnalysisResult:
    """Analyse a ``Trace``, or a header and its events (validated, in seq order).

    ``progress``, if given, is called with a ``Progress`` (events, ops, accesses, graphs so
    far) every few thousand events and once when the events run out. ``sources``, if given,
    reads the user's source files (``sources(path)``: its lines, or None), so that fixes use
    the names the code does (streamrace/analysis/source_names.py); the analysis itself never
    opens a file. ``keep_raw=False`` leaves ``raw_findings`` empty and describes only what the
    deduplicated findings need (the command line's way: the findings are the same). Each
    event is read when it is handed over and must not change afterwards (the C++ core keeps
    copies of captured ops' events streamed to it: docs/analysis.md section 7).
    """
    header: Mapping[str, Any]
    stacks = None
    if isinstance(trace, Trace):
        stacks, events, header = trace.stacks, trace.events, trace.header
    else:
        header = trace
    # A sequence keeps every event alive for the whole analysis anyway: the C++ core then holds
    # captured events as they are, where a copy would only cost.
    engine = new_engine(stacks, events_kept=isinstance(events, Sequence))
    events = events or ()
    passes = detectors.trace_passes(header)
    # Where the C++ core can read a trace's lines itself, a pass that can take the events one
    # at a time watches them (only what it reads is made into Python objects); any other
    # observes them on their way to the engine.
    direct = isinstance(engine, CppEngine) and isinstance(events, TraceEvents) and events.can_hand_over()
    watches = []
    for trace_pass in passes:
        watch = trace_pass.watch() if direct else None
        if watch is None:
            events = trace_pass.observe(events)
        else:
            watches.append(watch)
    # The C++ core holds the trace's events (its records name them), millions of objects on a
    # long trace, and makes no reference cycle: a collection while it holds them would walk
    # every one, once per generation, to find none (0.3-0.4 s of a 2.4 s analysis of
    # benchmarks/synthetic.py's capture set, the first when its run ended, the next while the
    # detections were described). So the collector waits until the engine, and with it the
    # events, is gone; reference counting frees meanwhile as before. The Python engine's
    # records may make cycles: it runs with the collector as it was.
    paused = collections_paused() if isinstance(engine, CppEngine) else nullcontext()
    with paused:
        if watches:
            assert isinstance(engine, CppEngine)
            engine.run(events, progress, watches)
        else:
            engine.run(events, progress)
        found: list[object] = list(engine.detections)
        results = detectors.engine_results(found)
        for trace_pass in passes:
            found += trace_pass.detections(results)
        if passes:  # what a pass reports with its cause is not the engine's finding as well
            found = [d for d in found if not any(p.explains(d) for p in passes)]
        describer = Describer(engine, sources, GeneratedCode(header.get("generated_code") or ()))
        if keep_raw:
            raw = detectors.describe(found, describer)
            findings = deduplicate(raw)
        else:
            raw = []
            findings = detectors.deduplicated(found, describer)
        calls = LibraryCalls(engine.library_calls)
        findings, library_findings = set_aside(findings, calls)
        if library_findings:
            raw = set_aside(raw, calls)[0]
        summary = {
            "findings": 0,
            "graphs": engine.graphs,
            "replays": engine.replays,
            "ops": engine.ops,
            "accesses": engine.accesses,
        }
        summary["findings"] = len(findings)
        if library_findings:
            summary["library_findings"] = len(library_findings)
        notes = header_notes(header, engine.unknown_replays)
        # The command line ends right after: it leaves the engine to the process's exit
        # (streamrace/short_lived.py) instead of freeing it object by object.
        short_lived.retain(engine, found, results)
        del engine, found, results, passes, describer
        # Before the collector is back: its first collection would walk every object the
        # retained engine holds, all of them still in the youngest generation.
        short_lived.freeze_retained()
    return AnalysisResult(
        findings=findings, raw_findings=raw, summary=summary, notes=notes, library_findings=library_findings
    )


__all__ = ["AnalysisResult", "Finding", "Note", "Progress", "analyze", "header_notes"]
