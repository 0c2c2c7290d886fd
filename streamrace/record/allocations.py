"""Allocations and frees as the trace needs them: sizes, streams, lifetimes.

The hooks see an allocation's address, not its size, and a free's address, not the block's
stream: the caching allocator's own history (enabled at the first capture, read once at the
end, CPU only) gives each allocation its size and stream, in order and by address, and the
live blocks give the rest. An allocation nothing gives a size for (allocated and freed before
the history was on) is left out of the trace, since it cannot take part in lifetime checks.
Every lifetime, with the blocks live before recording began, is also what kernel parameter
words are resolved against (``live_blocks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamrace.record.cuda_runtime import CudaRuntime
from streamrace.record.event_log import Event
from streamrace.record.kernel_params import LiveBlocks

_HISTORY_LOOKAHEAD = 64  # history entries an allocation's address is looked for among


class AllocatorHistory:
    """The recording's allocations, settled against the allocator's history."""

    def __init__(self, runtime: CudaRuntime) -> None:
        self._runtime = runtime
        self._block_owner: dict[int, tuple[int, int, int]] = {}  # addr -> (stream, device, alloc seq)
        self._allocs: list[Event] = []
        self._resolved = 0  # self._allocs[:_resolved] have their size and stream
        self.unknown: set[int] = set()  # seqs of allocs whose size nothing recorded
        self.history_on = False
        self._history_start = 0  # allocs from here on are in the history
        self._history_pos = 0
        self._free_seq: dict[int, int] = {}  # alloc seq -> free seq

    # -- settling the hooks' events (EventLog.settle) ------------------------------------------
    def settle_alloc(self, event: Event) -> Event:
        self._block_owner[event["addr"]] = (event["stream"], event["device"], event["seq"])
        self._allocs.append(event)
        return event

    def settle_free(self, event: Event) -> Event:
        """A free of a recorded block, on the block's stream; others stay as they came."""
        owner = self._block_owner.pop(event["addr"], None)
        if owner is None:
            return event
        stream, device, alloc_seq = owner
        self._free_seq[alloc_seq] = event["seq"]
        free = {"seq": event["seq"], "ev": "free", "addr": event["addr"], "stream": stream, "device": device}
        if "stack" in event:
            free["stack"] = event["stack"]
        return free

    # -- the allocator's history ------------------------------------------------------------
    def start_history(self) -> None:
        """From now on, allocations are in the allocator's history (the hooks' events up to
        now must have been settled)."""
        self._runtime.record_history(True)
        self.history_on = True
        self._history_start = len(self._allocs)

    def stop_history(self) -> None:
        if self.history_on:
            self._runtime.record_history(False)
            self.history_on = False

    def resolve(self, see_stream: Callable[[int, int], None]) -> bool:
        """Give each new alloc event its size and stream from the allocator's history entries
        (same order, same address), or from the live blocks; the rest stay unknown. Whether
        there were new ones (``see_stream``, the hooks', may then have new events)."""
        end = len(self._allocs)
        if self._resolved == end:
            return False
        entries: list[dict[str, Any]] = self._runtime.allocation_history() if self.history_on else []
        live = self._runtime.live_blocks()
        for i in range(self._resolved, end):
            event = self._allocs[i]
            fact = None
            if i >= self._history_start:
                for k in range(self._history_pos, min(self._history_pos + _HISTORY_LOOKAHEAD, len(entries))):
                    if entries[k]["addr"] == event["addr"]:
                        fact = (entries[k]["size"], entries[k]["stream"])
                        self._history_pos = k + 1
                        break
            fact = fact or live.get(event["addr"])
            if fact is None:
                self.unknown.add(event["seq"])
                continue
            event["size"], event["stream"] = fact
            see_stream(event["stream"], event.get("device", 0))
        self._resolved = end
        return True

    def live_blocks(self) -> LiveBlocks:
        """Every recorded lifetime, plus the blocks that were live before recording began
        (the allocations must have been resolved)."""
        blocks = [
            (a["addr"], a["size"], a["seq"], self._free_seq.get(a["seq"]))
            for a in self._allocs
            if a["seq"] not in self.unknown
        ]
        recorded = {a["addr"] for a in self._allocs}
        before_recording = self._runtime.live_blocks().items()
        blocks += [(addr, size, -1, None) for addr, (size, _stream) in before_recording if addr not in recorded]
        return LiveBlocks(blocks)
