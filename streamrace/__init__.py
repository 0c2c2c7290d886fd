"""streamrace: cross-stream races and graph-pool aliasing inside captured CUDA graphs.

``import streamrace`` stays light: the recorder (and torch) load only when ``watch``,
``Session`` or ``name_stream`` is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the type checker sees what __getattr__ loads on first use
    from streamrace.record.capture_nodes import kernel_access as kernel_access
    from streamrace.record.recorder import name_stream as name_stream
    from streamrace.session import Session as Session
    from streamrace.session import watch as watch

__version__ = "0.1.0"
__all__ = ["Session", "__version__", "kernel_access", "name_stream", "watch"]

_RECORDER_API = {
    "watch": "streamrace.session",
    "Session": "streamrace.session",
    "name_stream": "streamrace.record.recorder",
    "kernel_access": "streamrace.record.capture_nodes",
}


def __getattr__(name: str) -> object:
    module = _RECORDER_API.get(name)
    if module is None:
        raise AttributeError(f"module 'streamrace' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
