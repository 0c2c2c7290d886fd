"""The recorder: turns what a PyTorch program does on its CUDA streams into trace events.

It is made of parts, one job each, over one event log (host program order):

* the hooks (hooks.py: native C++ ones, or the Python reference): each op's read and write
  byte ranges and its stream; allocations, frees, CUDA event create, record, wait and delete,
  and synchronizations (``torch.cuda._gpu_trace``); they draw every seq;
* the event log (event_log.py): the events in order, the hooks' drained and settled;
* the allocator history (allocations.py): each block's size and stream, lifetimes;
* the capture lifecycle (captures.py): capture boundaries, pools, the graph read back;
* catching up (unseen_launches.py): kernel events for launches the dispatcher never saw;
* Triton (triton_launches.py): Triton's launches, with directions from their IR.

Everything CUDA is asked goes through one ``CudaRuntime`` (cuda_runtime.py), and what the
recording installs into the process is in installation.py.

Non-perturbation is the first rule: hooks keep integers only (no tensor references past an
op), never allocate CUDA memory, launch work or synchronize, and swallow their own failures
into ``recorder_error`` events so the user's capture always completes.
"""

from __future__ import annotations

from streamrace.record import installation
from streamrace.record.allocations import AllocatorHistory
from streamrace.record.capture_nodes import KernelStats
from streamrace.record.captures import CaptureLifecycle
from streamrace.record.cuda_runtime import CudaRuntime
from streamrace.record.event_log import Event, EventLog, name_stream
from streamrace.record.hooks import HookOptions, Hooks, make_hooks
from streamrace.record.native import hooks_choice
from streamrace.record.stacks import UserCode
from streamrace.record.triton_launches import TritonLaunches
from streamrace.record.unseen_launches import UnseenLaunches

__all__ = ["Recorder", "name_stream"]

_MAX_WALK = 48  # frames a stack walk looks at, user or not: deep framework stacks stop there


class Recorder:
    """Collects trace events in memory; ``start``/``stop`` install and remove the hooks.

    ``eager_ops``: also record ops outside captures (the eager domain); by default only
    captured ops are recorded, which is what graph races need and what keeps eager runs fast.
    ``hooks``: "native", "python" or "auto" (default: ``STREAMRACE_HOOKS``, else auto).
    ``runtime``: what CUDA is asked through (tests pass a fake).
    """

    def __init__(
        self,
        *,
        eager_ops: bool = False,
        stack_depth: int = 6,
        read_graphs: bool = True,
        hooks: str | None = None,
        runtime: CudaRuntime | None = None,
    ) -> None:
        self.runtime = runtime if runtime is not None else CudaRuntime()
        self.eager_ops = eager_ops
        self.read_graphs = read_graphs and self.runtime.reads_graphs
        self.stack_depth = stack_depth
        self.hooks_choice = hooks or hooks_choice()
        self.hooks: Hooks | None = None
        self.native_unavailable: str | None = None  # why the native hooks were not used
        self.log = EventLog()
        self.allocations = AllocatorHistory(self.runtime)
        self.captures = CaptureLifecycle(self)
        self.unseen = UnseenLaunches(self)
        self.triton = TritonLaunches(self)
        self.log.settle("alloc", self.allocations.settle_alloc)
        self.log.settle("alloc", self.captures.settle_alloc)
        self.log.settle("free", self.allocations.settle_free)

    @property
    def events(self) -> list[Event]:
        return self.log.events

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
        return len(self.allocations.unknown)

    def position(self) -> int:
        """The seq the next event will have: a session started now sees from here."""
        return self.log.position()

    def current_stream(self, device: int) -> int:
        """The device's current stream, which the hooks then know."""
        stream = self.runtime.current_stream(device)
        self.started_hooks.see_stream(stream, device)
        return stream

    # -- lifecycle ---------------------------------------------------------------------------
    @staticmethod
    def active() -> Recorder | None:
        """The recorder running in this process, if any (``STREAMRACE=1`` starts one)."""
        return installation.active()

    def start(self) -> None:
        shown_path = UserCode().shown_path
        options = HookOptions(
            self.eager_ops, self.stack_depth, _MAX_WALK, shown_path, self.unseen.guarded_catch_up, self.runtime
        )
        hooks, self.native_unavailable = make_hooks(self.hooks_choice, options)
        self.log.hooks = hooks
        installation.activate(self, hooks, self.runtime, self.captures.patches())
        if self.runtime.initialized():
            self.enable_history()
        hooks.start()

    def stop(self) -> None:
        hooks = self.started_hooks
        self.captures.abort_running()
        hooks.stop()
        installation.deactivate()
        try:
            self.log.ingest()
            self.resolve_allocations()
            self.unseen.finish()
        except Exception as exc:
            self.log.fail("finalize", exc)
        hooks.release_python()
        self.allocations.stop_history()

    def before_capture_begin(self) -> None:
        """Before the first capture: the allocator's history on; Triton's launches wrapped."""
        self.enable_history()
        self.triton.install()

    def enable_history(self) -> None:
        """Size and stream of every block come from the allocator's own history (CPU only)."""
        if self.allocations.history_on:
            return
        self.log.ingest()
        self.allocations.start_history()

    def resolve_allocations(self) -> None:
        if self.allocations.resolve(self.started_hooks.see_stream):
            self.log.ingest()  # the streams seen only now

    def trace_events(self, since: int = 0) -> list[Event]:
        """The events from seq ``since`` on, ready for a trace: stacks and streams defined
        earlier are kept, and allocations of unknown size (allocated and freed before the
        history was on) are left out, since they cannot take part in lifetime checks."""
        self.log.ingest()
        self.resolve_allocations()
        self.unseen.finish()
        return self.log.in_order(since, self.allocations.unknown)
