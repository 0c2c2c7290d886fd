"""Which device an event is on: its own ``device``, else its stream's, else device 0.

A stream's device comes from its ``stream`` declaration, or from the first capture begun on it
(a trace that declares no streams). The engine and the padded-index pass read devices by this
one rule, so an address is looked up on the same device by both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class StreamDevices:
    def __init__(self) -> None:
        self._of: dict[int, int] = {}  # stream -> device

    def declare(self, ev: Mapping[str, Any]) -> None:
        """A ``stream`` event: its device, when it says."""
        if ev.get("device") is not None:
            self._of[ev["stream"]] = ev["device"]

    def capture_begin(self, ev: Mapping[str, Any]) -> None:
        """A ``capture_begin``: its stream's device, unless the stream was declared."""
        if ev.get("device") is not None:
            self._of.setdefault(ev["stream"], ev["device"])

    def of(self, ev: Mapping[str, Any], stream: int | None) -> int:
        """The device of ``ev``, on ``stream`` (None: an event of no stream)."""
        device = ev.get("device")
        if device is None:
            device = self._of.get(stream, 0) if stream is not None else 0
        return device
