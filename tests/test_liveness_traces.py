"""The check_input_liveness traces recorded on the H200 (tests/gpu/record_liveness_fixtures.py,
committed as examples/traces/liveness_<case>.jsonl.gz), analysed on both engines: where torch
2.13 raises at the replay, one ``graph-input-freed`` per free, at the program's ``# FREE`` line,
naming the next owner (its ``# OWNER`` line) where the trace shows that allocation took the
block; where torch accepts, nothing. Which cases raise, and the marked lines, are read from
tests/gpu/liveness_cases.py itself (without importing it: it needs CUDA to run)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from streamrace.analysis import analyze
from streamrace.analysis.detectors import GRAPH_INPUT_FREED
from streamrace.trace import load_trace

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "gpu" / "liveness_cases.py"
TRACES = sorted((ROOT / "examples" / "traces").glob("liveness_*.jsonl.gz"))
pytestmark = pytest.mark.usefixtures("engine")


def _cases() -> dict[str, tuple[bool, list[int], list[int]]]:
    """Each program's name -> (torch raises, its # FREE lines, its # OWNER lines)."""
    source = PROGRAMS.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    spans = {
        node.name: (node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }
    cases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Case":
            program, raises = node.args[1], node.args[2]
            assert isinstance(program, ast.Name) and isinstance(raises, ast.Constant)
            first, last = spans[program.id]

            def marked(tag: str, first: int = first, last: int = last) -> list[int]:
                return [n for n in range(first, last + 1) if lines[n - 1].rstrip().endswith(f"# {tag}")]

            cases[program.id] = (bool(raises.value), marked("FREE"), marked("OWNER"))
    return cases


CASES = _cases()


def _line(location: str | None) -> int | None:
    if not location or "liveness_cases.py:" not in location:
        return None
    return int(location.rsplit(":", 1)[1])


def test_the_programs_are_read() -> None:
    assert len(CASES) >= 30
    raises, frees, owners = CASES["dead_input_tensor"]
    assert raises and len(frees) == 1 and len(owners) == 1 and owners[0] == frees[0] + 1
    assert CASES["nothing_dead_ok"] == (False, [], [])


@pytest.mark.skipif(not TRACES, reason="no liveness traces committed yet (tests/gpu/record_liveness_fixtures.py)")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_a_recorded_case_is_reported_exactly_where_torch_raises(path: pathlib.Path) -> None:
    name = path.name.removeprefix("liveness_").removesuffix(".jsonl.gz")
    raises, frees, owners = CASES[name]
    trace = load_trace(path)
    findings = analyze(trace).findings
    assert all(f.kind == GRAPH_INPUT_FREED for f in findings), [(f.kind, f.message) for f in findings]
    assert sorted({_line(f.accesses[1].location) for f in findings}) == (frees if raises else [])
    assert all(f.accesses[1].access == "free" and "replayed after the free" in f.message for f in findings)
    # Where the trace shows the owner's allocation at the freed block, the finding names it.
    stacks = trace.stacks
    owner_at = {
        ev["addr"]: _line(f"{frames[0][0]}:{frames[0][1]}")
        for ev in trace.events
        if ev["ev"] == "alloc"
        and (frames := stacks.get(ev.get("stack"), []))
        and _line(f"{frames[0][0]}:{frames[0][1]}") in owners
    }
    for f in findings:
        assert f.allocation is not None
        if f.allocation.addr in owner_at:
            reuse = f.allocation.reused_by
            assert reuse is not None and _line(reuse["alloc_location"]) == owner_at[f.allocation.addr], f.message
