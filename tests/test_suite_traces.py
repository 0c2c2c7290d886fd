"""PyTorch's own CUDA-graph tests, recorded on an H200 under ``pytest --streamrace``
(benchmarks/peer_suites.py; docs/peer-suites.md): the outside measure of false positives,
analysed on every run with the engine CI selects. The two tests that corrupt by design
give error findings; every other gives none, and what torch's own protocols do is set aside
by the shipped library protocols, each under its id."""

from __future__ import annotations

import pathlib

import pytest

from streamrace.analysis import analyze
from streamrace.trace import load_trace

TRACES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "traces"
SUITE = sorted(TRACES.glob("suite_*.jsonl.gz"))

# Graphs sharing one pool replayed concurrently, and replayed out of capture order: both
# corrupt by design (the test checks it does not crash, not the values).
CORRUPTING = {"test_graph_concurrent_replay": {"data-race"}, "test_graph_three_successive": {"stale-read"}}
# Torch's own work, set aside: test name -> the protocols its findings are about.
LIBRARY = {
    "test_graph_checkpoint_preserve_rng_state": {"torch-graph-rng-state"},
    "test_graphsafe_set_get_rng_state": {"torch-graph-rng-state"},
    "test_memory_stats_of_multiple_generators_and_graphs": {"torch-graph-rng-state"},
    "test_cached_forward_backward": {"torch-graph-rng-state"},
    "test_empty_storage": {"torch-graph-rng-state"},
    "test_forward_backward": {"torch-graph-rng-state"},
    "test_multinomial": {"torch-graph-rng-state"},
    "test_cudagraph_uneven_forward_backward": {"torch-graph-rng-state"},
    "test_cudagraphs_aot_eager_compat_equal": {"torch-graph-rng-state"},
    "test_graph_partition_cudagraphs_aot_eager_compat_equal": {"torch-graph-rng-state"},
    "test_fallback_to_eager_if_recompiling_too_many_times": {"inductor-cudagraph-trees-inputs"},
    "test_fallback_to_eager_if_recompiling_too_many_times_warn_only_once": {"inductor-cudagraph-trees-inputs"},
}


def _test_name(path: pathlib.Path) -> str:
    return path.name.removeprefix("suite_").removesuffix(".jsonl.gz")


def test_the_committed_set_has_every_kind_of_case():
    names = {_test_name(p) for p in SUITE}
    assert set(CORRUPTING) <= names and set(LIBRARY) <= names
    clean = names - set(CORRUPTING) - set(LIBRARY)
    assert len(clean) >= 6, "at least six clean tests"


@pytest.mark.parametrize("path", SUITE, ids=_test_name)
def test_a_suite_trace_gives_errors_only_where_the_test_corrupts(path):
    name = _test_name(path)
    result = analyze(load_trace(str(path)))
    errors = {f.kind for f in result.findings if f.severity == "error"}
    assert errors == CORRUPTING.get(name, set())
    assert {f.protocol for f in result.library_findings} == LIBRARY.get(name, set())
    assert result.summary["graphs"] >= 1, "the test captured graphs"


def test_the_library_findings_fail_when_asked(tmp_path):
    """--library-findings: hidden behind a note by default, counted (exit 1) with fail."""
    from streamrace.cli import main

    trace = str(TRACES / "suite_test_graphsafe_set_get_rng_state.jsonl.gz")
    assert main(["analyze", trace, "-o", str(tmp_path / "hide.txt")]) == 0
    assert "torch-graph-rng-state" in (tmp_path / "hide.txt").read_text()
    assert main(["analyze", trace, "--library-findings", "show", "-o", str(tmp_path / "show.txt")]) == 0
    assert "library protocols: 1 finding" in (tmp_path / "show.txt").read_text()
    assert main(["analyze", trace, "--library-findings", "fail", "-o", str(tmp_path / "fail.txt")]) == 1
