"""``padded-scatter``: a captured op that writes through an index (``index_put_``,
``scatter_``, ``index_copy_``, ...) reads its index from a static input of the graph, and
before a replay the program refreshed only a prefix of it (``loc[:n].copy_(real)`` with a
captured batch larger than ``n``): the padded rows' stale indices point at live slots, and the
replay writes through them (docs/findings.md; the rule is docs/analysis.md §8.7; HAZARDS.md
H9). A warning: whether the stale rows hit live data depends on what they held.

The check (streamrace/analysis/padded_index.py) is a pass over the events; it reads nothing
of the engine's, so both engines give the same findings. It is imported only for traces that
can hold index operands (format 1.2 and later, with eager work recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer, at, what
from streamrace.analysis.detectors.detector import CheckPass, Detector, SarifRule, TracePass
from streamrace.analysis.findings import Access, Finding
from streamrace.analysis.lifetimes import Lifetime

KIND = "padded-scatter"


@dataclass(frozen=True, eq=False)
class PaddedScatter:
    """Before ``replay`` of ``graph``, only the first ``refreshed`` of the ``nbytes`` bytes of
    the index that ``use`` (a captured op, and ``more`` others after it) writes through were
    written since the graph's previous replay (or its capture); ``refresh`` wrote last."""

    graph: int
    use: Mapping[str, Any]  # the captured op event that writes through the index
    more: int  # other captured ops of the graph that write through the same index
    index: Mapping[str, Any]  # the index operand's range, as the trace has it
    replay: Mapping[str, Any]
    refresh: Mapping[str, Any]  # the last write into the refreshed prefix before the replay
    refreshed: int  # bytes
    nbytes: int
    rows: tuple[int, int] | None  # (rows refreshed, rows captured), when the index has rows
    alloc: Mapping[str, Any] | None  # the index block's alloc event, when the trace has it


class PaddedScatterDetector(Detector[PaddedScatter]):
    kind = KIND
    severity = "warning"
    docs_anchor = "padded-scatter-warning"
    records = (PaddedScatter,)
    pair_unordered = False
    rule = SarifRule(
        name="PaddedScatter",
        short="A captured scatter writes through an index the program refreshed only in part before a replay",
        full=(
            "A captured op that writes through an index (index_put_, scatter_, index_copy_) reads its index "
            "from a static input of the graph, and before a replay the program wrote only the first rows of "
            "it: the padding rows past the real batch keep indices from an earlier step, which point at live "
            "slots, and the replay writes the padded rows through them."
        ),
        fix=(
            "Refresh every row of the index before each replay: set the padding rows to a reserved slot "
            "(loc[n:].fill_(reserved)), or compute the index inside the graph from the real token count "
            "(torch.where(arange(bs) < n, loc, reserved))."
        ),
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """Index operands are in format 1.2 traces; a recording of the captures alone has no
        eager refreshes to check; a recording that saw no op write through an index says so
        (``index_ops: 0``), and then the check, which would cost a trace of eager work a pass
        over every event, is not run. A trace that does not say (made by hand) gets it."""
        if (header.get("minor") or 0) < 2 or header.get("recording") == "captures" or header.get("index_ops") == 0:
            return None
        from streamrace.analysis.padded_index import PaddedIndexCheck  # loads only for traces that need it

        return CheckPass(PaddedIndexCheck())

    def describe(self, found: PaddedScatter, describer: Describer) -> Finding:
        graph, use = found.graph, found.use
        refresh = describer.launch(found.refresh, "write")
        replay = _replay_access(describer, found)
        named = _index_variable(describer, found.alloc)
        tensor = _index_name(describer, found.alloc, named)
        if found.rows is not None:
            done, rows = found.rows
            prefix = f"its first {done} of {rows} rows ({found.refreshed} of {found.nbytes} bytes)"
            stale = f"the other {rows - done} rows"
        else:
            prefix = f"its first {found.refreshed} of {found.nbytes} bytes"
            stale = "the rest"
        others = f" (and {found.more} more of its captured ops)" if found.more else ""
        message = (
            f"Graph {graph}'s {use['op']}{others} writes "
            f"through {tensor}, a static input of the graph; before "
            f"its replay{at(replay)} the program refreshed only {prefix}, by {what(refresh)}, so {stale} still "
            "hold indices from before the previous replay, and the replay writes the padded rows through them "
            "into live slots"
        )
        # The example in the fix uses the program's own name and this replay's rows where known.
        index = named or "index"
        tail = f"{index}[{found.rows[0]}:]" if found.rows is not None else f"{index}[n:]"
        size = str(found.rows[1]) if found.rows is not None else "bs"
        fix = (
            f"refresh every row of the index before each replay: after the partial refresh{at(refresh)} set the "
            f"padding rows to a reserved slot that no request owns (`{tail}.fill_(reserved)` here), or compute "
            "the index inside the graph from the real row count, kept in a static tensor `n_real` refreshed "
            f"each step (`torch.where(torch.arange({size}, device={index}.device) < n_real, {index}, reserved)`), "
            "as serving engines guard their padded batches" + ("" if named else f"; `{index}` is {tensor}")
        )
        allocation = describer.allocation(Lifetime.of_events(found.alloc)) if found.alloc is not None else None
        return Finding(
            kind=KIND,
            hazard=None,
            accesses=[refresh, replay],
            message=message + ".",
            missing_edge=f"the padding rows of {tensor} are not written before the replay",
            fix=fix,
            graph=graph,
            allocation=allocation,
        )


def _replay_access(describer: Describer, found: PaddedScatter) -> Access:
    """The replay's read of the index, placed at the replay and naming the captured op (as
    the engines place a replay's access, Describer.access)."""
    captured = describer.launch(found.use, "read")
    frames, location = describer.site(found.replay)
    site, code = describer.placement(frames)
    stream = found.replay["stream"]
    return Access(
        op=captured.op,
        stream=stream,
        stream_label=describer.label(stream),
        access="read",
        seq=found.replay["seq"],
        location=location,
        stack=frames,
        range=dict(found.index),
        site=site,
        stream_code=code,
        captured={
            "graph": found.graph,
            "seq": captured.seq,
            "location": captured.location,
            "stack": captured.stack,
            "near": False,
        },
    )


def _index_variable(describer: Describer, alloc: Mapping[str, Any] | None) -> str | None:
    """The program's name of the index tensor, where its source line says it."""
    if alloc is None:
        return None
    named = describer.tensor(Lifetime.of_events(alloc))
    return named[0] if named is not None else None


def _index_name(describer: Describer, alloc: Mapping[str, Any] | None, named: str | None) -> str:
    """The index tensor as the message names it; ``named``: its variable (``_index_variable``)."""
    if alloc is None:
        return "its index tensor"
    site = describer.site(alloc)[1]
    where = f" allocated at {site}" if site else ""
    return f"the index tensor `{named}`{where}" if named is not None else f"the index tensor{where}"


DETECTOR = PaddedScatterDetector()
