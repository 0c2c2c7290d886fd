"""Static outputs read after the next replay rewrote them (docs/analysis.md §8.9, HAZARDS.md
M4), as a pass over the events of a format 1.5 trace.

A graph's replay writes its static outputs in place. Reading the static output tensor itself
after a replay is how a plain ``CUDAGraph`` is meant to be used, so bytes alone cannot tell
the bug from the idiom; the tensor read can. The recorder names, for memory captured ops
wrote, each eager view made of it (``view``: ``make_graphed_callables``' ``o.detach()`` per
call, a program's ``static_out[:n]``) and the tensor behind each eager read (an op's
``tensors``). A view made after replay N of a graph whose program writes its bytes is a
value **handed out** after replay N (a view of such a value inherits its hand-out); read after
a later replay of that graph it is the next step's data, not its own: a
``StaleStaticOutput``. A view made inside a capture or before the graph's first replay is the
static output as the program holds it, and reads of it are never flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamrace.analysis.clocks import EAGER
from streamrace.analysis.detectors.stale_static_output import StaleStaticOutput
from streamrace.analysis.event_order import PROGRAM_HANDLERS, ProgramCheck
from streamrace.analysis.ranges import normalize


@dataclass(eq=False)
class _Program:
    """What one capture of a graph writes, and its replays so far."""

    graph: int
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (device, lo, hi) of its writes
    replays: int = 0
    last: Mapping[str, Any] | None = None  # its latest replay
    # replay number -> that replay, for the numbers a hand-out waits for (the next after it)
    wanted: dict[int, Mapping[str, Any] | None] = field(default_factory=dict)

    def writes(self, device: int, lo: int, hi: int) -> bool:
        return any(d == device and a < hi and lo < b for d, a, b in self.spans)


@dataclass(eq=False)
class _HandOut:
    """A value of graph memory handed out: the view that made it, and per graph whose replay
    writes its bytes, the graph's program, replay count and latest replay then."""

    view: Mapping[str, Any]
    after: list[tuple[_Program, int, Mapping[str, Any]]]
    reported: bool = False  # its first stale read is the bug; later reads of it are the same one


class StaticOutputCheck(ProgramCheck[_Program]):
    """Fed every event in order; ``found`` holds the detections."""

    def __init__(self) -> None:
        super().__init__()
        # tensor identity -> (its hand-out, its bytes as its view event gave them); a read is
        # of that tensor only if it reads exactly those bytes: a TensorImpl address a dead
        # value left may be reused by a tensor no view op made (a later capture's output).
        self._handed: dict[int, tuple[_HandOut, Mapping[str, Any]]] = {}
        self.found: list[StaleStaticOutput] = []

    def _new_program(self, graph: int) -> _Program:
        return _Program(graph)

    def _replay(self, ev: Mapping[str, Any]) -> None:
        program = self._programs.get(ev["graph"])
        if program is None or self._hb.domain(ev["stream"]) is not EAGER:
            return
        program.replays += 1
        program.last = ev
        if program.replays in program.wanted:
            program.wanted[program.replays] = ev

    def _view(self, ev: Mapping[str, Any]) -> None:
        tensor = ev["tensor"]
        if tensor == ev.get("base"):
            return  # the op returned its input itself (flatten of a 1-D tensor): no new value
        self._handed.pop(tensor, None)  # an identity seen again is a new tensor
        if self._hb.domain(ev.get("stream", 0)) is not EAGER:
            return
        base = self._handed.get(ev.get("base") or 0)
        if not ev["ranges"]:
            return
        if base is not None:  # a view of a handed-out value: handed out when that was, and
            self._handed[tensor] = (base[0], ev["ranges"][0])  # named by its view: where the clone goes
            return
        device = self._devices.of(ev, ev.get("stream", 0))
        after = []
        for raw in ev["ranges"][:1]:
            rng = normalize(raw)
            if rng.empty:
                continue
            for program in self._programs.values():
                if program.last is not None and program.writes(device, rng.lo, rng.hi):
                    after.append((program, program.replays, program.last))
                    program.wanted.setdefault(program.replays + 1, None)
        if after:
            self._handed[tensor] = (_HandOut(ev, after), ev["ranges"][0])

    def _kernel(self, ev: Mapping[str, Any]) -> None:
        """A node no recorded launch made: a write of its graph's program (its accesses may
        come after the capture ended)."""
        program = self._program_of(ev["graph"])
        if program is not None:
            device = self._devices.of(ev, ev.get("stream"))
            for raw in ev["writes"]:
                rng = normalize(raw)
                if not rng.empty:
                    program.spans.append((device, rng.lo, rng.hi))

    def _op(self, ev: Mapping[str, Any]) -> None:
        stream = ev.get("stream")
        if stream is None:
            return
        domain = self._hb.domain(stream)
        if domain is not EAGER:
            program = self._capturing.get(domain)
            if program is not None:
                device = self._devices.of(ev, stream)
                for raw in ev["writes"]:
                    rng = normalize(raw)
                    if not rng.empty:
                        program.spans.append((device, rng.lo, rng.hi))
            return
        tensors = ev.get("tensors")
        if not tensors or not self._handed:
            return
        device = self._devices.of(ev, stream)
        for raw, tensor in zip(ev["reads"], tensors, strict=False):
            entry = self._handed.get(tensor) if tensor else None
            if entry is None or entry[0].reported or dict(raw) != dict(entry[1]):
                continue
            handed = entry[0]
            rng = normalize(raw)
            for program, replays, before in handed.after:
                live = self._programs.get(program.graph) is program
                if not live or program.replays <= replays or not program.writes(device, rng.lo, rng.hi):
                    continue
                rewrote = program.wanted.get(replays + 1)
                assert rewrote is not None and program.last is not None
                self.found.append(StaleStaticOutput(program.graph, handed.view, before, rewrote, ev, raw, device))
                handed.reported = True
                break


StaticOutputCheck.HANDLERS = {
    **PROGRAM_HANDLERS,
    "replay": StaticOutputCheck._replay,
    "view": StaticOutputCheck._view,
    "op": StaticOutputCheck._op,
    "kernel": StaticOutputCheck._kernel,
}
