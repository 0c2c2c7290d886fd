"""Choosing the analysis engine inside a test, for tests that compare the two on one input
(a hypothesis example cannot take a function-scoped fixture such as monkeypatch)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from streamrace.analysis.core import CORE_ENV


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
