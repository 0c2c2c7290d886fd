"""Allocations and frees as the trace needs them: sizes, streams, pools, lifetimes.

The hooks see an allocation's address, not its size, and a free's address, not the block's
stream. Each allocation's facts (the size asked for, the stream that owns the block, the
private pool it came from) come, exactly, from the first of these that has them:

* the caching allocator's trace tracker (the native hooks, where they were built with CUDA
  headers: csrc/recorder/allocator_facts.h): the hook's event arrives with its facts;
* the first allocation the recording sees, when CUDA was not initialized at its start: its
  block as the allocator has it at that moment (the facts are turned on right then);
* the allocator's own memory history (CPU only; ``source`` says which), on from that moment,
  read at every ``resolve`` and restarted, so that it stays bounded however long the program
  runs. Allocations at one address follow each other in the same order in the history as in
  the hooks' events (the block is freed between two of them), so the k-th allocation the hooks
  saw at an address is the k-th history allocation there: no lookahead, and no confusion by
  allocations of other threads in between;
* the allocator's live block at the address, only while the allocation is still live as the
  hooks saw it (not freed, no later allocation there): then that block is this allocation.

An allocation nothing gives facts for is left out of the trace (``unknown``), since it cannot
take part in lifetime checks; a fact is never borrowed from another allocation at the same
address. Every lifetime, with the blocks live before recording began, is also what kernel
parameter words are resolved against (``live_blocks``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from streamrace.record.cuda_runtime import AllocationFact, CudaRuntime
from streamrace.record.event_log import Event
from streamrace.record.kernel_params import LiveBlocks

# Where allocation facts came from (the trace header's allocator.facts).
TRACKER = "allocator trace tracker"
HISTORY = "allocator history"
LIVE_ONLY = "live blocks"  # the history is the program's own (on before recording): not ours to read


class AllocatorHistory:
    """The recording's allocations, each with its exact facts or listed unknown."""

    def __init__(self, runtime: CudaRuntime) -> None:
        self._runtime = runtime
        self._block_owner: dict[int, Event] = {}  # addr -> the recorded alloc live there
        self._allocs: list[Event] = []
        self._pending: list[Event] = []  # allocs still waiting for their facts
        self._frees: dict[int, Event] = {}  # alloc seq -> its free event
        self._free_seq: dict[int, int] = {}  # alloc seq -> free seq
        self.unknown: set[int] = set()  # seqs of allocs whose facts nothing recorded
        self.dropped = 0  # how many there were in all (``forget`` lets old seqs go)
        self.source: str | None = None  # TRACKER, HISTORY or LIVE_ONLY, once facts are on
        self.tracker_unavailable: str | None = None  # why the tracker gave no facts
        self.history_on = False  # the allocator's history is on, and ours
        self._facts_from = 0  # allocs from this seq on are in the history (or come exact)
        self._unmatched: dict[int, deque[AllocationFact]] = {}  # history allocations no event took yet
        self._first: tuple[int, int, AllocationFact] | None = None  # (addr, seq bound, its live fact)

    @property
    def facts_on(self) -> bool:
        return self.source is not None

    # -- settling the hooks' events (EventLog.settle) ------------------------------------------
    def settle_alloc(self, event: Event) -> Event:
        exact = event.pop("_exact", False)
        self._block_owner[event["addr"]] = event
        self._allocs.append(event)
        first = self._first
        if exact:
            return event
        if first is not None and first[0] == event["addr"] and event["seq"] < first[1]:
            self._first = None
            self._apply(event, first[2])
            return event
        self._pending.append(event)
        return event

    def settle_free(self, event: Event) -> Event:
        """A free of a recorded block, on the block's stream; others stay as they came."""
        alloc = self._block_owner.pop(event["addr"], None)
        if alloc is None:
            return event
        self._free_seq[alloc["seq"]] = event["seq"]
        free = {"seq": event["seq"], "ev": "free", "addr": event["addr"], "stream": alloc["stream"]}
        free["device"] = alloc["device"]
        if "stack" in event:
            free["stack"] = event["stack"]
        self._frees[alloc["seq"]] = free
        return free

    # -- turning the facts on ------------------------------------------------------------------
    def turn_on(self, from_seq: int, tracker: str) -> None:
        """Allocations from seq ``from_seq`` on come with their facts: from the tracker
        (``tracker`` is "" when it runs, else why not), else from the allocator's history."""
        if self.facts_on:
            return
        self._facts_from = from_seq
        if not tracker:
            self.source = TRACKER
            return
        self.tracker_unavailable = tracker
        if self._runtime.history_enabled():
            self.source = LIVE_ONLY  # the program records its own history: not ours to restart
            return
        self._runtime.record_history(True)
        self.history_on = True
        self.source = HISTORY

    def first_allocation(self, addr: int, seq_bound: int, fact: AllocationFact | None) -> None:
        """The block at ``addr`` as the allocator had it just after the recording's first
        allocation, whose event is the latest at ``addr`` below seq ``seq_bound``."""
        if fact is not None:
            self._first = (addr, seq_bound, fact)

    def stop_history(self) -> None:
        if self.history_on:
            self._runtime.record_history(False)
            self.history_on = False

    # -- resolving -------------------------------------------------------------------------------
    def resolve(self, see_stream: Callable[[int, int], None]) -> bool:
        """Give every alloc settled so far its facts, or list it unknown (the hooks' events
        must have been settled). Whether there were any (``see_stream``, the hooks', may then
        have new events)."""
        from_history = self.history_on and self._read_history()
        if not self._pending:
            return False
        live: dict[int, AllocationFact] | None = None
        for event in self._pending:
            fact = None
            if from_history and event["seq"] >= self._facts_from:
                queue = self._unmatched.get(event["addr"])
                if queue:
                    fact = queue.popleft()
                    if not queue:
                        del self._unmatched[event["addr"]]
            if fact is None and self._block_owner.get(event["addr"]) is event:
                live = self._runtime.live_blocks() if live is None else live
                fact = live.get(event["addr"])
            if fact is None:
                self.unknown.add(event["seq"])
                self.dropped += 1
                continue
            self._apply(event, fact)
            see_stream(event["stream"], event.get("device", 0))
        self._pending = []
        return True

    def _read_history(self) -> bool:
        """The history's new allocations, by address; False where it wrapped since the last
        read (entries were lost, so counting at an address would pair allocations with the
        wrong entries: the allocations waiting now are given live facts only)."""
        entries, complete = self._runtime.take_history()
        if not complete:
            self._unmatched.clear()
            return False
        for entry in entries:
            self._unmatched.setdefault(entry["addr"], deque()).append(history_fact(entry))
        return True

    def _apply(self, event: Event, fact: AllocationFact) -> None:
        event["size"], event["stream"], pool = fact
        if pool is not None and "pool" not in event:
            event["pool"] = list(pool)
        free = self._frees.pop(event["seq"], None)
        if free is not None:
            free["stream"] = event["stream"]

    def forget(self, before: int) -> None:
        """Let go of the allocations before seq ``before`` that are freed and have their facts:
        once their events are written out nothing asks for them again, so a long run's
        memory stays bounded by what is live."""
        pending = {event["seq"] for event in self._pending}
        kept = []
        for event in self._allocs:
            seq = event["seq"]
            if seq < before and seq in self._free_seq and seq not in pending:
                del self._free_seq[seq]
                self._frees.pop(seq, None)
            else:
                kept.append(event)
        self._allocs = kept
        self.unknown = {seq for seq in self.unknown if seq >= before}

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
        blocks += [(addr, fact[0], -1, None) for addr, fact in before_recording if addr not in recorded]
        return LiveBlocks(blocks)


def history_fact(entry: dict[str, Any]) -> AllocationFact:
    """A history entry's facts: size, stream, and pool where it names a private one."""
    pool = entry.get("pool_id")
    return entry["size"], entry["stream"], tuple(pool) if pool and any(pool) else None
