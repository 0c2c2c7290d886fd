"""The order part of a check that is a pass over the events (detectors' ``TracePass``): each
stream's device, the capture membership of streams, the event records and waits and each
graph's own event nodes, kept as the engines keep them (``HappensBefore``, ``StreamDevices``),
so that the check's own handlers see the same order and domains the engines do; and, for the
checks that run captured work again at replays, each graph's program (``ProgramCheck``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MethodType
from typing import Any, ClassVar, Generic, TypeVar

from streamrace.analysis.clocks import HappensBefore
from streamrace.analysis.stream_devices import StreamDevices

Handler = Callable[[Any, Mapping[str, Any]], None]
Program = TypeVar("Program")


@dataclass(frozen=True)
class EventWatch:
    """The events a check reads, taken one at a time (the direct reader's way: the C++ core
    makes only these into Python objects): ``reads``, kind -> None (every event of it) or the
    fields without which an event of that kind is nothing to the check (one of them must be
    there and true); ``see``, called with each such event, in order."""

    reads: Mapping[str, tuple[str, ...] | None]
    see: Callable[[Mapping[str, Any]], None]
    # kind -> what ``see`` calls for it, where the check has one: called directly, a call less.
    handlers: Mapping[str, Callable[[Mapping[str, Any]], None]] = field(default_factory=dict)


def seen(events: Iterable[Mapping[str, Any]], see: Callable[[Mapping[str, Any]], None]) -> Iterator[Mapping[str, Any]]:
    """Every event passed through, ``see`` called with each on the way."""
    for ev in events:
        see(ev)
        yield ev


class EventOrderCheck:
    """Fed every event in order (``observe``, or ``see`` one at a time); a subclass sets
    ``HANDLERS``, event kind -> its method, starting from ``ORDER_HANDLERS``, and in
    ``NEEDS``, for a kind whose handler ignores most of its events, the fields one of which
    an event needs for the handler to read it (``EventWatch.reads``)."""

    HANDLERS: ClassVar[dict[str, Handler]] = {}
    NEEDS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self) -> None:
        self._hb = HappensBefore()
        self._devices = StreamDevices()

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        return seen(events, self.see)

    def see(self, ev: Mapping[str, Any]) -> None:
        handler = self.HANDLERS.get(ev["ev"])
        if handler is not None:
            handler(self, ev)

    def watch(self) -> EventWatch:
        handlers = {kind: MethodType(handler, self) for kind, handler in self.HANDLERS.items()}
        return EventWatch({kind: self.NEEDS.get(kind) for kind in self.HANDLERS}, self.see, handlers)

    def _stream(self, ev: Mapping[str, Any]) -> None:
        self._devices.declare(ev)

    def _capture_begin(self, ev: Mapping[str, Any]) -> None:
        self._devices.capture_begin(ev)
        self._hb.capture_begin(ev["graph"], ev["stream"])

    def _capture_end(self, ev: Mapping[str, Any]) -> None:
        self._hb.capture_end(ev["graph"])

    def _record(self, ev: Mapping[str, Any]) -> None:
        self._hb.record(ev["event"], ev["stream"])

    def _wait(self, ev: Mapping[str, Any]) -> None:
        self._hb.wait(ev["event"], ev["stream"])

    def _graph(self, ev: Mapping[str, Any]) -> None:
        self._hb.graph_read(ev["graph"], ev["nodes"])

    def _forget(self, ev: Mapping[str, Any]) -> None:
        self._hb.forget(ev["event"])


# Capture handlers through the instance: a subclass's own (ProgramCheck's) is the one called.
ORDER_HANDLERS: dict[str, Handler] = {
    "stream": EventOrderCheck._stream,
    "capture_begin": lambda check, ev: check._capture_begin(ev),
    "capture_end": lambda check, ev: check._capture_end(ev),
    "event_record": EventOrderCheck._record,
    "event_wait": EventOrderCheck._wait,
    "graph": EventOrderCheck._graph,
    "event_create": EventOrderCheck._forget,
    "event_delete": EventOrderCheck._forget,
}


class ProgramCheck(EventOrderCheck, Generic[Program]):
    """An order check that keeps, per captured graph, what the check needs of its capture (its
    *program*, docs/analysis.md §8.1): made at ``capture_begin``, kept at a ``capture_end``
    that did not abort, gone at ``graph_reset``, ``graph_destroy``, an aborted end or a new
    capture of the same id. A subclass makes programs (``_new_program``) and may act when
    one is kept (``_kept``) or goes (``_dropped``)."""

    def __init__(self) -> None:
        super().__init__()
        self._capturing: dict[int, Program] = {}  # graph -> its program while captured
        self._programs: dict[int, Program] = {}  # graph -> its program once its capture ended

    def _new_program(self, graph: int) -> Program:
        raise NotImplementedError

    def _kept(self, graph: int, program: Program) -> None:
        """The capture of ``graph`` ended: ``program`` is what its replays run."""

    def _dropped(self, graph: int, program: Program) -> None:
        """``program`` of ``graph`` is gone (the graph, or its capture)."""

    def _program_of(self, graph: int) -> Program | None:
        """The program being captured for ``graph``, else the one its replays run."""
        return self._capturing[graph] if graph in self._capturing else self._programs.get(graph)

    def _capture_begin(self, ev: Mapping[str, Any]) -> None:
        super()._capture_begin(ev)
        graph = ev["graph"]
        self._drop(graph)
        self._capturing[graph] = self._new_program(graph)

    def _capture_end(self, ev: Mapping[str, Any]) -> None:
        super()._capture_end(ev)
        graph = ev["graph"]
        program = self._capturing.pop(graph, None)
        if program is None:
            return
        if ev.get("aborted"):
            self._dropped(graph, program)  # a failed capture has no graph to replay
            return
        self._programs[graph] = program
        self._kept(graph, program)

    def _gone(self, ev: Mapping[str, Any]) -> None:
        self._drop(ev["graph"])

    def _drop(self, graph: int) -> None:
        for program in (self._capturing.pop(graph, None), self._programs.pop(graph, None)):
            if program is not None:
                self._dropped(graph, program)


# Through the instance, so that a subclass's own _gone is the one called.
PROGRAM_HANDLERS: dict[str, Handler] = {
    **ORDER_HANDLERS,
    "graph_reset": lambda check, ev: check._gone(ev),
    "graph_destroy": lambda check, ev: check._gone(ev),
}
