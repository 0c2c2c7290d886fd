"""GPU tests: the recorder and every CUDA path, for real. Skipped cleanly without CUDA."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # helpers shared with the CPU tests (hook_traces.py)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    for item in items:
        if pathlib.Path(item.fspath).parent == pathlib.Path(__file__).parent:
            item.add_marker(pytest.mark.cuda)
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py (examples are scripts, not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True, scope="session")
def capture_stream_of_its_own():
    """``torch.cuda.graph`` captures on a stream it takes once from the pool that
    ``torch.cuda.Stream()`` draws from round-robin (32 normal-priority streams per device,
    c10/cuda/CUDAStream.cpp), so every 32nd side stream a test makes would be the capture
    stream itself, and its race only program order: which test drew it depended on the order
    and the ``-n`` split. The capture stream comes from the high-priority pool instead."""
    try:
        import torch
    except ImportError:
        yield
        return
    if not torch.cuda.is_available():
        yield
        return
    before = torch.cuda.graph.default_capture_stream
    torch.cuda.graph.default_capture_stream = torch.cuda.Stream(priority=-1)
    yield
    torch.cuda.graph.default_capture_stream = before
