"""The diff as text for people and JSON for machines (schema in docs/json-report.md, "The diff
report"). Both say the same: every entry, its change, and for an aliasing finding that came,
went or flipped, the allocator's decisions in each run in the same sentences."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from streamrace import __version__
from streamrace.analysis import Note
from streamrace.diff import ABSENT, APPEARED, DISAPPEARED, MANIFEST, PERSISTED, DiffEntry
from streamrace.report.escape import shown
from streamrace.report.json_report import to_json
from streamrace.report.options import WIDTH
from streamrace.report.text import _pool as pool_name

CHANGES = (APPEARED, DISAPPEARED, PERSISTED)


def block_sentences(block: Mapping[str, Any]) -> list[str]:
    """What the allocator did with the freed block in each run, one sentence per run."""
    freed = block["freed"]
    where = f"allocated at {freed['alloc_location'] or '?'}, freed at {freed['free_location'] or '?'}"
    pool = pool_name(freed["graph_pool"])
    stream = f"stream {freed['stream_label']}" + (f", {pool}" if pool else "")
    sentences = [f"the freed block: {_size(freed)}; {stream}; {where}"]
    for name in ("a", "b"):
        sentences.append(_side_sentence(name.upper(), block[name], freed))
    return sentences


def _size(alloc: Mapping[str, Any]) -> str:
    return f"{alloc['requested']:,} bytes requested, {alloc['rounded']:,} rounded, {alloc['pool']} pool"


def _side_sentence(run: str, side: Mapping[str, Any], freed: Mapping[str, Any]) -> str:
    taker, mine = side["reused_by"], side["allocation"]
    if side["hazard"] == MANIFEST and taker is not None:
        return (
            f"in {run} the block was reused by the allocation at {taker['location'] or '?'} ({_size(taker)}) "
            f"before the join: the hazard is manifest in {run}"
        )
    if side["hazard"] == ABSENT:
        got = f"; the allocation at {mine['location'] or '?'} got {_size(mine)}" if mine else ""
        return f"in {run} there is no such finding{got}"
    if mine is None:
        return f"in {run} no allocation took the block before the join: the hazard is latent in {run}"
    if mine["same_block"]:
        how = "took the block only after the join"
    elif mine["pool"] != freed["pool"]:
        how = f"came from the {mine['pool']} pool"
    else:
        how = f"came from another block of the {mine['pool']} pool"
    return f"in {run} the allocation at {mine['location'] or '?'} ({_size(mine)}) {how}: the hazard is latent in {run}"


def _headline(entry: DiffEntry) -> str:
    finding = entry.finding
    what = " ".join(part for part in (finding.severity, finding.kind, finding.hazard) if part)
    if entry.change == PERSISTED and entry.flipped:
        aliased = "A" if entry.a is not None and entry.a.aliasing else "B"
        what += f", aliasing in {aliased} only"
    elif finding.aliasing:
        what += " aliasing"
    return f"{entry.change}: {what}"


def _signatures(entry: DiffEntry) -> str:
    a, b = (f.signature if f else None for f in (entry.a, entry.b))
    if a and b and a != b:
        return f"A {a}, B {b}"
    return f"{a or b}"


def render_text(a: str, b: str, entries: Sequence[DiffEntry], notes: Mapping[str, Sequence[Note]]) -> str:
    """The diff for people: plain text wrapped at WIDTH columns as the text report is, each
    line's continuation indented under its text (a single word wider than a line goes past)."""
    out = _wrapped(f"streamrace diff: A {a} (baseline), B {b} (new)", "", "  ")
    for run, found in notes.items():
        for note in found:
            out += _wrapped(f"note ({run}): {note.message}", "  ", "        ")
    for change in CHANGES:
        for entry in (e for e in entries if e.change == change):
            finding = entry.finding
            out += _wrapped(_headline(entry), "  ", "      ")
            out += _wrapped(finding.message, "      ", "      ")
            out += _wrapped(f"signature  {_signatures(entry)}", "      ", "                 ")
            if entry.block is not None:
                for sentence in block_sentences(entry.block):
                    out += _wrapped(sentence, "      ", "        ")
    out += _wrapped(f"summary: {_summary_line(entries)}", "", "  ")
    return "".join(line + "\n" for line in out)


def _wrapped(text: str, indent: str, hang: str) -> list[str]:
    """``text`` escaped (before wrapping: an escape widens it) and long words and texts cut
    as the analysis reports cut them (``shown``), then wrapped at WIDTH at spaces."""
    return textwrap.wrap(
        shown(text),
        WIDTH,
        initial_indent=indent,
        subsequent_indent=hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def summary(entries: Sequence[DiffEntry]) -> dict[str, int]:
    counts = {change: sum(e.change == change for e in entries) for change in CHANGES}
    counts["flipped"] = sum(e.flipped for e in entries)
    return counts


def _summary_line(entries: Sequence[DiffEntry]) -> str:
    counts = summary(entries)
    line = f"{counts[APPEARED]} appeared, {counts[DISAPPEARED]} disappeared, {counts[PERSISTED]} persisted"
    if counts["flipped"]:
        line += f" ({counts['flipped']} with its aliasing flipped)"
    verdict = "B has a finding A lacks" if counts[APPEARED] else "no finding in B that A lacks"
    return f"{line}; {verdict}"


def render_json(a: str, b: str, entries: Sequence[DiffEntry], notes: Mapping[str, Sequence[Note]]) -> str:
    def entry_dict(entry: DiffEntry) -> dict[str, Any]:
        data = entry.to_dict()
        if entry.block is not None:
            data["block"] = {**entry.block, "explanation": block_sentences(entry.block)}
        return data

    document = {
        "streamrace": __version__,
        "a": a,
        "b": b,
        **{change: [entry_dict(e) for e in entries if e.change == change] for change in CHANGES},
        "summary": summary(entries),
        "notes": [{**note.to_dict(), "trace": run} for run, found in notes.items() for note in found],
    }
    return to_json(document)
