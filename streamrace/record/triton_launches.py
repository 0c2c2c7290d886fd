"""Triton launches: seen at the launch, with exact read/write direction from the kernel's IR.

The dispatcher never sees a Triton kernel. Wrapping ``JITFunction.run`` (``TritonLaunches``,
installed at the first capture of a program that imported Triton: importing it here would cost
the program a second) gives the launch its place in program order, its stream, the user's
line, and its tensor arguments; the kernel's Triton IR says which pointer arguments are stored
through (``tt.store``, atomics, descriptor stores), so the others are only read. Kernels
launched some other way (inductor's compiled launchers) are still found as graph nodes with no
event, with inferred accesses (unseen_launches.py).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any, Protocol

from streamrace.record import installation
from streamrace.record.op_accesses import Range, tensor_range
from streamrace.record.seams import RecordingSeam

if TYPE_CHECKING:
    from streamrace.record.captures import CaptureLifecycle


class TritonSeam(RecordingSeam, Protocol):
    """What the Triton part uses of the recording (seams.py)."""

    @property
    def captures(self) -> CaptureLifecycle: ...


_SIGNATURE = re.compile(r"tt\.func\s+(?:public\s+|private\s+)?@[\w$.]+\((.*?)\)\s*(?:attributes|\{)", re.S)
_ARG = re.compile(r"(%[\w#]+)\s*:\s*(!tt\.ptr<[^>]*>|[^,{]+)")
_DEF = re.compile(r"^\s*(%[\w#]+)(?::\d+)?\s*=\s*([\w.]+)(.*)$")
_BIND = re.compile(r"(%[\w#]+)\s*=\s*(%[\w#]+)")  # loop iter_args and block arguments
_VALUE = re.compile(r"%[\w#]+")
_STORES = ("tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_store", "tt.descriptor_scatter")


def stored_pointer_args(ttir: str) -> list[bool] | None:
    """For each pointer argument of the kernel, in order: is memory written through it?

    None when the IR cannot be read (then every pointer is treated as written, inferred).
    """
    signature = _SIGNATURE.search(ttir)
    if signature is None:
        return None
    args = [(name, kind) for name, kind in _ARG.findall(signature.group(1))]
    pointers = [name for name, kind in args if kind.startswith("!tt.ptr")]
    operands: dict[str, list[str]] = {}
    loaded: set[str] = set()
    store_targets: list[str] = []
    for line in ttir.splitlines():
        code = line.split(" loc(", 1)[0]
        for bound, source in _BIND.findall(code):
            operands.setdefault(bound, []).append(source)
        match = _DEF.match(code)
        if match:
            name, op, rest = match.groups()
            if op == "tt.load" or op.startswith("tt.descriptor_load"):
                loaded.add(name)  # loaded data is not where a pointer comes from
            operands.setdefault(name, []).extend(_VALUE.findall(rest))
            if op in _STORES:
                store_targets.extend(_VALUE.findall(rest)[:1])
            continue
        stripped = code.strip()
        for op in _STORES:
            if stripped.startswith(op):
                store_targets.extend(_VALUE.findall(stripped)[:1])
    written: set[str] = set()
    for target in store_targets:
        stack, seen = [target], set()
        while stack:
            value = stack.pop()
            if value in seen or value in loaded:
                continue
            seen.add(value)
            if value in pointers:
                written.add(value)
            stack.extend(operands.get(value, ()))
    return [name in written for name in pointers]


_DIRECTIONS: dict[Any, list[bool] | None] = {}


def pointer_directions(kernel: Any) -> list[bool] | None:
    """Cached per compiled kernel: which pointer arguments it writes through."""
    key = id(kernel)
    if key not in _DIRECTIONS:
        try:
            _DIRECTIONS[key] = stored_pointer_args(kernel.asm["ttir"])
        except (AttributeError, KeyError, TypeError):
            _DIRECTIONS[key] = None
    return _DIRECTIONS[key]


def tensor_arguments(jit_function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], is_tensor: Any) -> list[Any]:
    """The launch's tensor arguments in signature order (Triton passes each as a pointer)."""
    values = dict(zip(jit_function.arg_names, args, strict=False))
    values.update((k, v) for k, v in kwargs.items() if k in jit_function.arg_names)
    return [values[name] for name in jit_function.arg_names if name in values and is_tensor(values[name])]


class TritonLaunches:
    """The recorder's part that records Triton launches inside captures."""

    def __init__(self, recorder: TritonSeam) -> None:
        self._rec = recorder

    @staticmethod
    def install() -> None:
        """Wrap ``JITFunction.run`` until the recording ends, if the program uses Triton."""
        jit = sys.modules.get("triton.runtime.jit")
        if jit is None or installation.patched(jit.JITFunction, "run"):
            return
        installation.patch(installation.MethodPatch(jit.JITFunction, "run", _wrap_run))

    def on_launch(
        self, jit_function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kernel: Any, mark: tuple[int, Any, int]
    ) -> None:
        """After a launch the hooks bracketed (``mark``: their begin_launch)."""
        rec = self._rec
        runtime = rec.runtime
        stack, graph, before = mark
        capture = rec.captures.get(graph)
        if capture is None or capture.nodes is None:
            return
        tensors = tensor_arguments(jit_function, args, kwargs, runtime.is_recorded_tensor)
        written = pointer_directions(kernel)
        if written is not None and len(written) != len(tensors):
            written = None  # the IR's pointers are not the tensors: each counts as written
        inferred = written is None
        reads: list[Range] = []
        writes: list[Range] = []
        for i, tensor in enumerate(tensors):
            rng = tensor_range(tensor)
            if rng is not None:
                (writes if written is None or written[i] else reads).append(rng)
        device = runtime.tensor_device(tensors[0]) if tensors else runtime.current_device()
        stream = rec.current_stream(device)
        event = rec.log.emit(
            "kernel",
            graph=capture.graph,
            node=capture.nodes.base,  # its first node, set when the capture ends (CaptureNodes.snapshot)
            name=f"triton:{getattr(jit_function, '__name__', None) or jit_function.fn.__name__}",
            stream=stream,
            device=device,
            reads=reads,
            writes=writes,
            inferred=inferred,
            stack=None if stack < 0 else stack,
        )
        frontier = runtime.graphs.capture_state(stream)[1]
        state = rec.started_hooks.state
        if frontier and frontier[-1] != before:
            state.claim(capture.graph, event["seq"], frontier[-1], True)
            capture.nodes.launches[event["seq"]] = event
        state.refresh_frontiers(capture.graph)


def _wrap_run(run: Any) -> Any:
    def triton_run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        rec = installation.active()
        if rec is None or warmup or not rec.hooks.state.open_graphs():
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        state = rec.hooks.state
        mark = None
        try:
            mark = state.begin_launch()
        except Exception as exc:
            rec.log.fail("triton launch", exc)
        try:
            kernel = run(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            state.end_launch()
        if mark is not None:
            try:
                rec.triton.on_launch(self, args, kwargs, kernel, mark)
            except Exception as exc:
                rec.log.fail("triton launch", exc)
        return kernel

    return triton_run
