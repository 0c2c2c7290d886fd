"""Deduplication: the same bug in every layer of every captured batch size is one finding."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from streamrace.analysis.findings import Finding


def deduplicate(raw: Iterable[Finding]) -> list[Finding]:
    """One finding per signature: the first occurrence, with ``count`` and the ``graphs`` seen.

    ``raw`` is in detection order (seq), so the result is ordered by first occurrence.
    """
    first: dict[str, Finding] = {}
    for finding in raw:
        key = finding.signature
        kept = first.get(key)
        if kept is None:
            kept = first[key] = dataclasses.replace(finding, count=0, graphs=[])
        kept.count += finding.count
        if finding.graph is not None and finding.graph not in kept.graphs:
            kept.graphs.append(finding.graph)
    return list(first.values())
