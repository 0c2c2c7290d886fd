"""``pool-unsafe-free``: the program's own pool (``streamrace.annotate``: KV pages, table slots)
took back a range while another stream may still use it, so the pool can give it to the next
owner under that use (docs/findings.md; the rule is docs/analysis.md §8.8; HAZARDS.md M7).

The check (streamrace/analysis/app_pools.py) is a pass over the events; it reads nothing of
the engine's, so both engines give the same findings. It runs only for traces that hold pool
events (format 1.4 and later).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamrace.analysis.describe import OWNER, USER, Describer, at, join_code, op_name, what, where
from streamrace.analysis.detectors.detector import Detector, EngineResults, SarifRule, TracePass
from streamrace.analysis.findings import Access, Finding
from streamrace.analysis.lifetimes import Lifetime

if TYPE_CHECKING:
    from streamrace.analysis.event_order import EventWatch

KIND = "pool-unsafe-free"


@dataclass(eq=False)
class PoolUse:
    """One use of a pool's range: an eager op or kernel, or a replay of a graph that touches it
    (``replay``: then ``event`` is the replay)."""

    stream: int
    tick: int
    event: Mapping[str, Any]
    write: bool
    replay: Mapping[str, Any] | None = None


@dataclass(eq=False)
class PoolUnsafeFree:
    """``free`` took back the range ``alloc`` gave out while ``pending`` (on another stream)
    was not ordered before it; ``racer``: a later access on another stream, unordered with the
    pending use, once one came (``reused``: the pool_alloc that gave the bytes out again)."""

    alloc: Mapping[str, Any]
    free: Mapping[str, Any]
    pending: PoolUse
    device: int
    racer: PoolUse | None = None
    reused: Mapping[str, Any] | None = None


class AppPoolPass:
    """The application-pool check as a pass over the events."""

    def __init__(self) -> None:
        from streamrace.analysis.app_pools import AppPoolCheck  # loads only for traces that need it

        self.check = AppPoolCheck()
        self._pairs: set[tuple[int, int]] | None = None  # (pending use, racer) seqs of manifest ones

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        return self.check.observe(events)

    def watch(self) -> EventWatch:
        return self.check.watch()

    def detections(self, results: EngineResults) -> list[object]:
        return list(self.check.found)

    def explains(self, detection: object) -> bool:
        """The engine's data race between a pending use and the next owner's access: this
        pass's manifest finding says why (the pool's free), so it stands for both."""
        earlier, later = getattr(detection, "earlier", None), getattr(detection, "later", None)
        if earlier is None or later is None:
            return False
        if self._pairs is None:  # once the events are all seen
            self._pairs = {
                (f.pending.event["seq"], f.racer.event["seq"]) for f in self.check.found if f.racer is not None
            }
        return (_seq(earlier), _seq(later)) in self._pairs


class PoolUnsafeFreeDetector(Detector[PoolUnsafeFree]):
    kind = KIND
    severity = "error"
    docs_anchor = "pool-unsafe-free-error"
    records = (PoolUnsafeFree,)
    rule = SarifRule(
        name="PoolUnsafeFree",
        short="The program's own pool takes a range back while another stream may still use it",
        full=(
            "A range the program's pool gave out (streamrace.annotate: a KV page, a table slot) was used "
            "by a stream, and the pool took it back from another stream before that stream waited for the "
            "use. The pool can give the range to the next owner at once, whose work then overwrites bytes "
            "the earlier step is still reading: the caching allocator sees none of it."
        ),
        fix=(
            "Free the range only once the step that uses it is done: record an event after that step and "
            "make the free's stream wait on it (or synchronize it) before the pool takes the range back, or "
            "defer the free by one step."
        ),
    )

    def trace_pass(self, header: Mapping[str, Any]) -> TracePass | None:
        """Pool events are in format 1.4 traces; a recording of the captures alone has none of
        the eager steps that use the ranges; a recording that made no annotation says so
        (``app_pools: 0``), and then the check, which would cost a trace of eager work as much
        as the engine, is not run. A trace that does not say (made by hand) gets it."""
        if (header.get("minor") or 0) < 4 or header.get("recording") == "captures" or header.get("app_pools") == 0:
            return None
        return AppPoolPass()

    def describe(self, found: PoolUnsafeFree, describer: Describer) -> Finding:
        use = _use_access(describer, found.pending)
        free = _free_access(describer, found)
        name = found.alloc.get("name")
        pool = f"the pool `{name}`" if name else "the pool"
        site = describer.site(found.alloc)[1]
        message = (
            f"The range {pool} gave out{f' at {site}' if site else ''} is taken back on {free.stream_label}{at(free)} "
            f"while {what(use)} may still {'write' if found.pending.write else 'read'} it"
        )
        second = free
        if found.racer is not None:
            second = _use_access(describer, found.racer)
            message += f"; {what(second)} then {'writes' if found.racer.write else 'reads'} those bytes concurrently"
        else:
            message += f"; {pool} can give it to the next owner's work on {free.stream_label} at once"
        join = join_code(free, use)
        lifetime = Lifetime.of_events(found.alloc, found.free, found.device)
        reuse = None
        if found.racer is not None and found.reused is not None:
            reuse = (second, Lifetime.of_events(found.reused, device=found.device))
        return Finding(
            kind=KIND,
            hazard="WAW" if found.pending.write else "WAR",
            accesses=[use, second],
            message=message + ".",
            missing_edge=f"no happens-before edge from {what(use)} to the free{at(free)}",
            fix=(
                f"take the range back only after `{join}` (join, then free), or defer the free until the step "
                f"of {op_name(use)}{at(use)} is done (an event recorded after it, synchronized or waited on "
                "first)" + where((join,), (free, OWNER), (use, USER), describer=describer)
            ),
            fix_code=join,
            aliasing=found.racer is not None,
            graph=None,
            allocation=describer.allocation(lifetime, reuse),
        )


def _seq(rec: Any) -> int:
    """The seq a use is placed at: a replayed access's replay, else its own event."""
    replay = rec.replay
    return int(replay["seq"] if replay is not None else rec.event["seq"])


def _use_access(describer: Describer, use: PoolUse) -> Access:
    """A use as one side of the finding; a replay's is placed at the replay."""
    if use.replay is None:
        return describer.launch(use.event, "write" if use.write else "read")
    frames, location = describer.site(use.replay)
    site, code = describer.placement(frames)
    return Access(
        op=f"replay of graph {use.replay['graph']}",
        stream=use.stream,
        stream_label=describer.label(use.stream),
        access="write" if use.write else "read",
        seq=use.replay["seq"],
        location=location,
        stack=frames,
        site=site,
        stream_code=code,
    )


def _free_access(describer: Describer, found: PoolUnsafeFree) -> Access:
    frames, location = describer.site(found.free)
    site, code = describer.placement(frames)
    stream = found.free["stream"]
    return Access(
        op="free",
        stream=stream,
        stream_label=describer.label(stream),
        access="free",
        seq=found.free["seq"],
        location=location,
        stack=frames,
        range={"addr": found.alloc["addr"], "nbytes": found.alloc["size"]},
        site=site,
        stream_code=code,
    )


DETECTOR = PoolUnsafeFreeDetector()
