"""Fixtures every CPU test module may use."""

from __future__ import annotations

import pytest
from analysis_engines import ENGINES

from streamrace.analysis.core import CORE_ENV


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs once on each analysis engine ("python", "cpp"), chosen for analyze()."""
    monkeypatch.setenv(CORE_ENV, request.param)
    return str(request.param)
