"""The recorder: turns what a PyTorch program does on its CUDA streams into trace events.

It is made of parts, one job each, over one event log (host program order):

* the hooks (hooks.py: native C++ ones, or the Python reference): each op's read and write
  byte ranges and its stream; allocations, frees, CUDA event create, record, wait and delete,
  and synchronizations (``torch.cuda._gpu_trace``); they draw every seq;
* the event log (event_log.py): the events in order, the hooks' drained and settled;
* the allocations (allocations.py): each block's exact size, stream and pool (the allocator's
  trace tracker, else its history), lifetimes;
* the capture lifecycle (captures.py): capture boundaries, pools, the graph read back;
* replays (replays.py): each CUDAGraph's replays, reset and destruction;
* the trace output (trace_output.py): settled events written to the trace file as it goes;
* catching up (unseen_launches.py): kernel events for launches the dispatcher never saw;
* Triton (triton_launches.py): Triton's launches, with directions from their IR;
* library calls (library_calls.py): the work done inside torch's own entry points
  (CUDAGraph.capture_begin's and replay's generator-state prologues);
* the program's own pools (app_pools.py): ``streamrace.annotate``'s logical allocs and frees.

Everything CUDA is asked goes through one ``CudaRuntime`` (cuda_runtime.py), and what the
recording installs into the process is in installation.py. Each part is handed this Recorder
typed as the narrow protocol it declares (seams.py): what it may use, and no import of this
module.

Non-perturbation is the first rule: hooks keep integers only (no tensor references past an
op), never allocate CUDA memory, launch work or synchronize, and swallow their own failures
into ``recorder_error`` events so the user's capture always completes.
"""

from __future__ import annotations

import weakref
from typing import Any

from streamrace.collector import collections_paused
from streamrace.record import installation
from streamrace.record.allocations import TRACKER, AllocatorHistory
from streamrace.record.app_pools import AppPools
from streamrace.record.capture_nodes import KernelStats
from streamrace.record.captures import CaptureLifecycle
from streamrace.record.cuda_runtime import CudaRuntime
from streamrace.record.event_log import Event, EventLog, name_stream
from streamrace.record.hooks import HookOptions, Hooks, make_hooks
from streamrace.record.host_memory import HostMemory
from streamrace.record.library_calls import LibraryCalls
from streamrace.record.native import hooks_choice
from streamrace.record.replays import GraphReplays
from streamrace.record.stacks import UserCode
from streamrace.record.trace_output import FLUSH_EVENTS, TraceOutput
from streamrace.record.triton_launches import TritonLaunches
from streamrace.record.unseen_launches import UnseenLaunches

__all__ = ["Recorder", "name_stream"]

_MAX_WALK = 128  # frames a stack walk looks at, user or not: deep framework stacks stop there


class Recorder:
    """Collects trace events; ``start``/``stop`` install and remove the hooks.

    By default the whole program is recorded: ops outside captures (the eager domain), every
    replay of a graph captured while recording, resets and destructions, besides the captures.
    ``capture_only``: record the captures alone (no eager op, no replay), as streamrace did
    before it recorded the whole program. ``eager_ops`` is accepted and ignored: eager ops are
    recorded unless ``capture_only``. ``trace``: the trace file, written as the program runs
    (the settled events, whenever ``flush_events`` more have come: trace_output.py) and
    finished by ``traces.finish_trace``; without one the events stay in memory. ``hooks``:
    "native", "python" or "auto" (default: ``STREAMRACE_HOOKS``, else auto). ``runtime``: what
    CUDA is asked through (tests pass a fake). ``host_memory``: record pinned host memory
    (host_memory.py), on by default; off, the trace says it was not looked at.
    """

    def __init__(
        self,
        *,
        capture_only: bool = False,
        eager_ops: bool | None = None,
        stack_depth: int = 6,
        read_graphs: bool = True,
        hooks: str | None = None,
        runtime: CudaRuntime | None = None,
        trace: str | None = None,
        flush_events: int = FLUSH_EVENTS,
        host_memory: bool = True,
    ) -> None:
        del eager_ops  # it asked for eager ops, which are now recorded unless capture_only
        self.runtime = runtime if runtime is not None else CudaRuntime()
        self.capture_only = capture_only
        self.read_graphs = read_graphs and self.runtime.reads_graphs
        self.stack_depth = stack_depth
        self.hooks_choice = hooks or hooks_choice()
        self.hooks: Hooks | None = None
        self.native_unavailable: str | None = None  # why the native hooks were not used
        self.no_cuda: str | None = None  # why nothing is recorded: no hooks were built or installed
        self.log = EventLog()
        self.allocations = AllocatorHistory(self.runtime)
        # The parts reach the recording through a weak proxy: a part holding the Recorder
        # would make a reference cycle, and every event of a finished recording (a test's
        # hundreds of thousands) would then wait, alive, for a full collection of the cyclic
        # GC, which the program pays for later (seconds, in PyTorch's optimizer tests).
        seam = weakref.proxy(self)
        self.captures = CaptureLifecycle(seam)
        self.replays = GraphReplays(seam)
        self.output = TraceOutput(seam, trace, flush_events)
        self.unseen = UnseenLaunches(seam)
        self.triton = TritonLaunches(seam)
        self.library_calls = LibraryCalls(self.log, self.runtime, capture_only)
        self.app_pools = AppPools(seam)
        # Pinned host memory: recorded with the whole program, by either set of hooks; None
        # when not recorded (the header's host_memory).
        self.host_memory: HostMemory | None = None
        self.record_host_memory = host_memory
        self.log.settle("alloc", self.allocations.settle_alloc)
        self.log.settle("alloc", self.captures.settle_alloc)
        self.log.settle("free", self.allocations.settle_free)
        self.log.settle("kernel", self.captures.settle_kernel)

    @property
    def events(self) -> list[Event]:
        """The events in memory: all of them, or, when the trace is written as the program
        runs, those not flushed yet (and the stack and stream definitions)."""
        return self.log.events

    @property
    def recording(self) -> str:
        """What is recorded, as the trace header says: "program" or "captures"."""
        return "captures" if self.capture_only else "program"

    @property
    def errors(self) -> list[str]:
        """The recorder's own failures (the user's program was not affected)."""
        return self.log.errors

    @property
    def kernel_stats(self) -> KernelStats:
        return self.unseen.stats

    @property
    def hooks_kind(self) -> str | None:
        """ "native" or "python": the hooks this recording runs on."""
        return self.hooks.kind if self.hooks is not None else None

    @property
    def started_hooks(self) -> Hooks:
        """The hooks, for the parts that run only once recording has started (which sets them)."""
        assert self.hooks is not None, "the recorder has not started"
        return self.hooks

    @property
    def dropped_allocations(self) -> int:
        return self.allocations.dropped

    def position(self) -> int:
        """The seq the next event will have: a session started now sees from here."""
        return self.log.position()

    def pinned_blocks(self) -> list[tuple[int, int]]:
        """(start, bytes) of the live pinned storages seen; none when pinned memory is not
        recorded (a kernel pointing into one may poll it: captures.py)."""
        return self.host_memory.live_blocks() if self.host_memory is not None else []

    def current_stream(self, device: int) -> int:
        """The device's current stream, which the hooks then know."""
        stream = self.runtime.current_stream(device)
        self.started_hooks.state.see_stream(stream, device)
        return stream

    # -- lifecycle ---------------------------------------------------------------------------
    @staticmethod
    def active() -> Recorder | None:
        """The recorder running in this process, if any (``STREAMRACE=1`` starts one)."""
        return installation.active()

    def start(self) -> None:
        from streamrace import __version__
        from streamrace.trace.io import make_header

        # The trace file first: a path that cannot be written fails before anything is installed.
        self.output.open(make_header(streamrace=__version__, recording=self.recording, incomplete=True))
        # Without CUDA every hook would fail (one recorder error per op), and the native hooks
        # would be compiled (a minute) for nothing: the trace says so once instead. An explicit
        # choice of hooks still records, for the hooks' own tests on a CPU.
        if self.hooks_choice == "auto":
            self.no_cuda = self.runtime.missing()
        if self.no_cuda is not None:
            return
        shown_path = UserCode().shown_path
        host = HostMemory(weakref.proxy(self)) if self.record_host_memory and not self.capture_only else None
        options = HookOptions(
            not self.capture_only, self.stack_depth, _MAX_WALK, shown_path, self.runtime, host, catch_up=self.unseen
        )
        hooks, self.native_unavailable = make_hooks(self.hooks_choice, options)
        self.host_memory = host
        self.log.hooks = hooks.state
        # The library calls' first: innermost, so a call's range holds what the call itself did
        # (not the capture_begin or replay events the other parts' wrappers add around it).
        patches = self.library_calls.patches() + self.captures.patches()
        patches += self.replays.patches(replays=not self.capture_only)
        installation.activate(self, hooks, self.runtime, patches)
        self.library_calls.install_later()  # inductor, where the program imported it already
        try:
            hooks.start()
        except BaseException:
            installation.deactivate()  # nothing of a recording that did not start stays in
            raise
        if self.runtime.initialized():
            self.enable_allocation_facts()
        else:  # a fresh process: the facts go on at its first allocation
            self._first_alloc_callbacks = self.runtime.gpu_trace().MemoryAllocationCallbacks
            self._first_alloc_callbacks.add_callback(self._first_allocation)

    def stop(self) -> None:
        if self.no_cuda is not None:
            return  # nothing was installed
        hooks = self.started_hooks
        self.captures.abort_running()
        if self.host_memory is not None:
            self.host_memory.stop()  # before the hooks: a storage dying now records nothing
        hooks.stop()
        installation.deactivate()
        self.replays.stop()
        try:
            self.settle()
        except Exception as exc:
            self.log.fail("finalize", exc)
        hooks.release_python()
        self.allocations.stop_history()
        self._forget_first_allocation()

    def settle(self, lines: bool = False) -> None:
        """Every event so far settled: the hooks' drained, allocations resolved, the kernel
        events of captures read back completed. With ``lines`` (a flush to the trace file),
        the events written as the hooks made them may come as trace lines (EventLog.ingest),
        but not while a capture's read-back waits to complete its ops (unseen_launches.py)."""
        if self.no_cuda is not None:
            return
        # No cyclic collection while the drained events are made (as in a flush): at the end
        # of a recording that never flushed, a collection every few hundred of them walked
        # the rest, most of a stop's time (2.6 s of 300,000 eager ops' events).
        with collections_paused():
            self.log.ingest(lines=lines and not self.unseen.waiting)
            self.resolve_allocations()
            self.unseen.finish()

    def flush(self) -> bool:
        """Write the settled events to the trace file now (trace_output.py); False where it
        has to wait (no trace path, or a capture is open)."""
        return self.output.flush()

    def before_capture_begin(self) -> None:
        """Before the first capture: allocation facts on (CUDA is initialized by now);
        Triton's launches and the library calls of modules imported by now wrapped."""
        self.enable_allocation_facts()
        if self.allocations.facts_on:
            self._forget_first_allocation()
        self.triton.install()
        self.library_calls.install_later()

    def enable_allocation_facts(self) -> None:
        """From now on every allocation comes with its exact size, stream and pool: from the
        allocator's trace tracker (native hooks built with CUDA headers), else from the
        allocator's own history (CPU only)."""
        if self.allocations.facts_on:
            return
        hooks = self.started_hooks
        why_not = hooks.use_allocator_facts()
        self.allocations.turn_on(hooks.state.peek_seq(), why_not)

    def _first_allocation(self, addr: int) -> None:
        """The recording's first allocation, in a process whose CUDA was not initialized when
        recording began (a ``torch.cuda._gpu_trace`` callback, after the hooks' own): the
        facts go on now, and this block's are the allocator's live block right now."""
        if self.allocations.facts_on:
            return
        try:
            bound = self.position()  # the hooks' event for this allocation is just before
            fact = self.runtime.live_blocks().get(addr)
            self.enable_allocation_facts()
            self.allocations.first_allocation(addr, bound, fact)
        except Exception as exc:  # the program must go on
            self.log.fail("allocation facts", exc)

    _first_alloc_callbacks: Any = None  # the registry _first_allocation is in, until it is taken out

    def _forget_first_allocation(self) -> None:
        # Not from inside the callback: the registry may be iterating its list then.
        registry, self._first_alloc_callbacks = self._first_alloc_callbacks, None
        if registry is not None and self._first_allocation in registry.callback_list:
            registry.callback_list.remove(self._first_allocation)

    @property
    def allocation_facts(self) -> dict[str, Any]:
        """Where allocation facts came from, for the trace header."""
        facts: dict[str, Any] = {"source": self.allocations.source}
        if self.allocations.source != TRACKER and self.allocations.tracker_unavailable:
            facts["tracker_unavailable"] = self.allocations.tracker_unavailable
        return facts

    def resolve_allocations(self) -> None:
        """After it returns, every allocation recorded so far has its exact size, stream and
        pool, or is listed unknown (``allocations.unknown``, left out of the trace)."""
        if self.allocations.facts_on:
            self._forget_first_allocation()
        self.log.ingest()
        if self.allocations.resolve(self.started_hooks.state.see_stream):
            self.log.ingest()  # the streams seen only now

    def trace_events(self, since: int = 0) -> list[Event]:
        """The events from seq ``since`` on, ready for a trace: stacks and streams defined
        earlier are kept, and allocations of unknown size are left out, since they cannot
        take part in lifetime checks."""
        self.settle()
        return self.log.in_order(since, self.allocations.unknown)
