"""Capture-time allocations that escape their capture and are clobbered (docs/analysis.md
§8.10, HAZARDS.md M5), from the engine's stale reads and the lifetimes it marked as the
program's state (``Lifetime.kept``).

A block allocated while a graph was being captured comes from the graph's private pool, and
stays in it: a graph of that pool (the same one, or another sharing it) may have used the
block for its own temporaries, freed inside its capture, and its replay writes them there
again. A graph's static outputs live with that (the legal shared-pool pattern: consumed
before the next replay of a graph that reuses their bytes; when not, the engine's
``stale-read``, §8.4). A block the program uses as its **own persistent state** (a lazily
cached workspace, a semaphore: written by eager work or by another graph's program through
it) must not: when a replay writes it through another allocation and it is read afterwards,
the engine's stale read is this escape, and is reported as one (``EscapedAllocation``) at the
allocation site, naming the capture it escaped from and the graph that clobbers it.
"""

from __future__ import annotations

from typing import Any

from streamrace.analysis.clocks import EAGER
from streamrace.analysis.core import MIRRORS
from streamrace.analysis.detectors.capture_allocation_escaped import EscapedAllocation
from streamrace.analysis.engine import StaleRead


def escapes(detections: list[object]) -> list[EscapedAllocation]:
    """The engine's stale reads of a block the program kept its state in (its lifetime is
    ``kept``: allocated in a capture, written while live by an op of eager work or of another
    graph; both engines mark it as the op goes by), clobbered by a replay: each is an escape."""
    found = []
    for d in detections:
        if MIRRORS.get(type(d), type(d)) is not StaleRead:
            continue
        stale: Any = d
        read = stale.read_lifetime
        replay = stale.writer.replay
        if not read.kept or read.domain is EAGER or read.domain is None or replay is None:
            continue
        found.append(EscapedAllocation(stale, read.domain, replay["graph"]))
    return found
