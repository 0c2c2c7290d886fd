"""The order part of a check that is a pass over the events (detectors' ``TracePass``): each
stream's device, the capture membership of streams and the event records and waits, kept as
the engines keep them (``HappensBefore``, ``StreamDevices``), so that the check's own handlers
see the same order and domains the engines do."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from streamrace.analysis.clocks import HappensBefore
from streamrace.analysis.stream_devices import StreamDevices

Handler = Callable[[Any, Mapping[str, Any]], None]


class EventOrderCheck:
    """Fed every event in order (``observe``); a subclass sets ``HANDLERS``, event kind ->
    its method, starting from ``ORDER_HANDLERS``."""

    HANDLERS: ClassVar[dict[str, Handler]] = {}

    def __init__(self) -> None:
        self._hb = HappensBefore()
        self._devices = StreamDevices()

    def observe(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        handlers = self.HANDLERS
        for ev in events:
            handler = handlers.get(ev["ev"])
            if handler is not None:
                handler(self, ev)
            yield ev

    def _stream(self, ev: Mapping[str, Any]) -> None:
        self._devices.declare(ev)

    def _record(self, ev: Mapping[str, Any]) -> None:
        self._hb.record(ev["event"], ev["stream"])

    def _wait(self, ev: Mapping[str, Any]) -> None:
        self._hb.wait(ev["event"], ev["stream"])

    def _graph(self, ev: Mapping[str, Any]) -> None:
        self._hb.graph_read(ev["graph"], ev["nodes"])

    def _forget(self, ev: Mapping[str, Any]) -> None:
        self._hb.forget(ev["event"])


ORDER_HANDLERS: dict[str, Handler] = {
    "stream": EventOrderCheck._stream,
    "event_record": EventOrderCheck._record,
    "event_wait": EventOrderCheck._wait,
    "graph": EventOrderCheck._graph,
    "event_create": EventOrderCheck._forget,
    "event_delete": EventOrderCheck._forget,
}
