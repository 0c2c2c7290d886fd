"""What a recording installs into the process while it runs, and takes out at its end.

One recording at a time: the active Recorder, how its hooks hear torch's GPU-trace calls
(``GpuTraceRoute``: straight from torch's C++, or as ``torch.cuda._gpu_trace`` callbacks),
and the library methods the Recorder's parts wrap (``MethodPatch``: CUDAGraph's capture in
captures.py, its replay, reset and capture end again in replays.py, Triton's launch in
triton_launches.py). A part that watches another library method adds a MethodPatch of its
own; the wrapper finds the recording through ``active()``. Two parts may wrap one method: the
later wraps the earlier's wrapper, and they come off in the reverse order.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamrace.record.hook_tables import GPU_TRACE_HOOKS

_ACTIVE: Any = None  # the Recorder running in this process
_LATEST: Callable[[], Any] = type(None)  # the Recorder that ran last, as a weak reference
_LOCK = threading.Lock()
_PATCHED: list[MethodPatch] = []


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class GpuTraceRoute:
    """How a set of hooks hears torch's GPU-trace calls, registry by registry: served in C++
    straight from torch (``interposed``, until ``stop_interposing``), else through a
    ``fire_callbacks`` that replaces the registry's own (``overrides``), else as a callback
    that joins the registry's list (``callbacks``)."""

    callbacks: dict[str, Callable[..., None]]  # registry -> the hook's callback
    interposed: tuple[str, ...] = ()
    overrides: dict[str, Callable[..., None]] = field(default_factory=dict)
    stop_interposing: Callable[[], None] = _nothing


_GPU_TRACE: list[tuple[Any, GpuTraceRoute]] = []  # (the registries, how the hooks hear them)


def active() -> Any:
    """The Recorder running in this process, or None."""
    return _ACTIVE


def latest() -> Any:
    """The Recorder running in this process, else the one that ran last (while it is alive)."""
    return _ACTIVE if _ACTIVE is not None else _LATEST()


class MethodPatch:
    """One library method replaced by a wrapper of it while recording."""

    def __init__(self, owner: type, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.owner, self.name, self._wrap = owner, name, wrap
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        self._original = getattr(self.owner, self.name)
        setattr(self.owner, self.name, self._wrap(self._original))

    def uninstall(self) -> None:
        setattr(self.owner, self.name, self._original)
        self._original = None


def patched(owner: type, name: str) -> bool:
    """Whether the recording wraps this method already."""
    return any(m.owner is owner and m.name == name for m in _PATCHED)


def patch(method: MethodPatch) -> None:
    """Wrap a method until the recording ends (a part may do so after it began)."""
    method.install()
    _PATCHED.append(method)


def activate(recorder: Any, hooks: Any, runtime: Any, patches: list[MethodPatch]) -> None:
    """Make ``recorder`` the process's recording: its hooks join the gpu-trace registries
    and its patches are installed. Refused while another one runs."""
    global _ACTIVE, _LATEST
    with _LOCK:
        if _ACTIVE is not None:
            raise RuntimeError("a streamrace recorder is already active in this process")
        _LATEST = weakref.ref(recorder)
        recorder.hooks = hooks
        registries = runtime.gpu_trace()
        route = hooks.gpu_trace_route(registries)
        # Kept from the first step on, so that a failure halfway takes out what went in.
        _GPU_TRACE.append((registries, route))
        try:
            for hook in GPU_TRACE_HOOKS:
                target = getattr(registries, hook.registry)
                if hook.registry in route.interposed:
                    continue
                if hook.registry in route.overrides:
                    target.fire_callbacks = route.overrides[hook.registry]
                else:
                    target.add_callback(route.callbacks[hook.registry])
            for method in patches:
                patch(method)
        except BaseException:
            _take_out()
            raise
        _ACTIVE = recorder


def deactivate() -> None:
    """Put the program back as it was (gpu-trace activation itself is one-way in torch)."""
    global _ACTIVE
    with _LOCK:
        _ACTIVE = None
        _take_out()


def _take_out() -> None:
    """Everything activate put in, whatever part of it did go in (the lock held)."""
    while _GPU_TRACE:
        registries, route = _GPU_TRACE.pop()
        route.stop_interposing()
        for hook in GPU_TRACE_HOOKS:
            target = getattr(registries, hook.registry)
            if hook.registry in route.interposed:
                continue
            if hook.registry in route.overrides:
                if vars(target).get("fire_callbacks") is route.overrides[hook.registry]:
                    del target.fire_callbacks  # the class's own again
            elif route.callbacks[hook.registry] in target.callback_list:
                target.callback_list.remove(route.callbacks[hook.registry])
    while _PATCHED:  # last in, first out: a wrapper of a wrapper comes off first
        _PATCHED.pop().uninstall()
