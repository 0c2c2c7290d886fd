"""``stale-static-output``: a value a graph's static output handed out after one replay (a
``make_graphed_callables`` output, a slice of ``static_out``) is read after a later replay of
the graph rewrote its bytes, with no copy taken in between: it reads the next step's data
(docs/findings.md; the rule is docs/analysis.md §8.9; HAZARDS.md M4).

The check (streamrace/analysis/static_outputs.py) is a pass over the events; it reads nothing
of the engine's, so both engines give the same findings. It runs on traces of format 1.5 and
later that recorded the whole program.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrace.analysis.describe import Describer, at
from streamrace.analysis.detectors.detector import CheckPass, Detector, SarifRule, TracePass
from streamrace.analysis.findings import Access, Finding

KIND = "stale-static-output"


@dataclass(eq=False)
class StaleStaticOutput:
    """``read`` (an eager op, its range ``raw``) read a value ``view`` made of graph ``graph``'s
    static output after replay ``handed`` of it; replay ``rewrote`` of the graph, after the
    view and before the read, wrote those bytes again."""

    graph: int
    view: Mapping[str, Any]
    handed: Mapping[str, Any]
    rewrote: Mapping[str, Any]
    read: Mapping[str, Any]
    raw: Mapping[str, Any]
    device: int


class StaleStaticOutputDetector(Detector[StaleStaticOutput]):
    kind = KIND
    severity = "error"
    docs_anchor = "stale-static-output-error"
    records = (StaleStaticOutput,)
    pair_unordered = False  # the replays are ordered before the read: its bug is what it reads
    rule = SarifRule(
        name="StaleStaticOutput",
        short="A value of a graph's static output is read after the next replay rewrote it",
        full=(
            "A graph's replay writes its static outputs in place. A value the program took of them after one "
            "replay (a make_graphed_callables output, a slice of the static output) was kept without a copy "
            "and read after a later replay of the graph had written those bytes again: it reads the later "
            "step's data, not its own."
        ),
        fix=(
            "Clone the value before the next replay (out = graphed(x).clone(), static_out[:n].clone()), or "
            "consume it before the next replay."
        ),
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """View events and read identities are in format 1.5 traces of the whole program; a
        recording that made no view event says so (``views: 0``), and then the check, which
        would cost a trace of eager work a pass over every event, is not run. A trace that does
        not say (made by hand) gets it."""
        if (header.get("minor") or 0) < 5 or header.get("recording") == "captures" or header.get("views") == 0:
            return None
        from streamrace.analysis.static_outputs import StaticOutputCheck  # loads only for traces that need it

        return CheckPass(StaticOutputCheck())

    def describe(self, found: StaleStaticOutput, describer: Describer) -> Finding:
        graph = found.graph
        view = _event_access(describer, found.view, "view", found.view["op"])
        rewrote = _event_access(describer, found.rewrote, "write", f"replay of graph {graph}")
        read = describer.launch(found.read, "read")
        read.range = dict(found.raw)
        handed = describer.site(found.handed)[1]
        message = (
            f"{read.op}{at(read)} reads the value `{found.view['op']}` made{at(view)} of graph {graph}'s static "
            f"output after its replay{f' at {handed}' if handed else ''}, but graph {graph}'s replay{at(rewrote)} "
            "rewrote those bytes before the read: it gets the later step's data, not the value it was handed"
        )
        return Finding(
            kind=KIND,
            hazard="RAW",
            accesses=[view, rewrote, read],
            message=message + ".",
            missing_edge=f"no copy of the value between its making{at(view)} and the next replay{at(rewrote)}",
            fix=(
                f"clone the value where it is made{at(view)} (`.clone()`), or consume it before graph {graph}'s "
                f"next replay{at(rewrote)}"
            ),
            graph=None,
        )


def _event_access(describer: Describer, ev: Mapping[str, Any], access: str, op: str) -> Access:
    frames, location = describer.site(ev)
    site, code = describer.placement(frames)
    stream = ev.get("stream", 0)
    rng = ev.get("ranges")
    return Access(
        op=op,
        stream=stream,
        stream_label=describer.label(stream),
        access=access,
        seq=ev["seq"],
        location=location,
        stack=frames,
        range=dict(rng[0]) if rng else None,
        site=site,
        stream_code=code,
    )


DETECTOR = StaleStaticOutputDetector()
