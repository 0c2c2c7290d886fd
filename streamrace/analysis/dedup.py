"""Deduplication: the same bug in every layer of every captured batch size is one finding."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from streamrace.analysis.findings import Finding


def deduplicate(raw: Iterable[Finding]) -> list[Finding]:
    """One finding per signature: the first occurrence, with ``count`` and the ``graphs`` seen.

    ``raw`` is in detection order (seq), so the result is ordered by first occurrence.
    """
    return deduplicate_in_graphs((finding, finding.graph) for finding in raw)


def deduplicate_in_graphs(raw: Iterable[tuple[Finding, int | None]]) -> list[Finding]:
    """``deduplicate`` of findings given with the graph each was found in: one finding object
    may stand for many detections in other graphs (a bug repeated in every captured batch
    size), its signature computed once. The first occurrence of a signature is kept as found
    there."""
    first: dict[str, Finding] = {}
    signatures: dict[int, str] = {}  # id(finding) -> its signature: the findings live in raw
    for finding, graph in raw:
        key = signatures.get(id(finding))
        if key is None:
            key = signatures[id(finding)] = finding.signature
        kept = first.get(key)
        if kept is None:
            kept = first[key] = dataclasses.replace(finding, graph=graph, count=0, graphs=[])
        kept.count += finding.count
        if graph is not None and graph not in kept.graphs:
            kept.graphs.append(graph)
    return list(first.values())
