"""The two analysis engines in tests: ``ENGINES`` to run a test on each, and ``core(name)`` to
choose one inside a test that compares the two on one input (a hypothesis example cannot
take a function-scoped fixture such as monkeypatch)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from streamrace.analysis.core import CORE_ENV, cpp_available

# Both engines as pytest parameters: the C++ core skips, with its reason, where it is not built.
ENGINES = [
    "python",
    pytest.param("cpp", marks=pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")),
]


@contextlib.contextmanager
def core(name: str) -> Iterator[None]:
    """Analyse with the engine ``name`` ("python" or "cpp") inside the block."""
    old = os.environ.get(CORE_ENV)
    os.environ[CORE_ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[CORE_ENV]
        else:
            os.environ[CORE_ENV] = old
