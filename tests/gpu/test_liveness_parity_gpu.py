"""Parity with PyTorch 2.13's ``check_input_liveness`` (issue 26, item 5) on a real GPU.

torch 2.13 raises at ``g.replay()`` when a captured graph's external input is dead. Each of its
19 cases (and the extra ones of other versions of its file: tests/gpu/liveness_cases.py) runs
here as the same program on torch 2.11, without the kwarg, recorded by each hook set. Wanted:
a ``graph-input-freed`` finding exactly where torch raises, made at the free (its second access
is the ``del``/``set_``/``resize_`` line marked ``# FREE``, not the replay), naming the block's
next owner (``allocation.reused_by`` at the ``# OWNER`` line) where that allocation took the
block; none where torch accepts. Where the owner took the block, the replay after the free is
checked to read the owner's bytes (the danger, shown); where torch accepts, the results are
checked exact. The pinned case (#14) is found as graph-pinned-freed (issue 26, M3).

The module prints a table of every case at its end (and writes it as Markdown to the file
``STREAMRACE_LIVENESS_TABLE`` names, if set): docs/liveness-parity.md's H200 column.
"""

from __future__ import annotations

import gc
import os

import pytest
import torch
from liveness_cases import CASES, Case, Proof, Row

import streamrace
from streamrace.analysis.detectors import GRAPH_INPUT_FREED
from streamrace.record import graph_readback

HOOKS = ("native", "python")
FILE = "liveness_cases.py"
ROWS: list[Row] = []


def _params() -> list:
    # The pinned case (#14) is found as graph-pinned-freed now that pinned host memory is recorded.
    return [pytest.param(case) for case in CASES]


def _ids(case: Case) -> str:
    return f"{case.number}-{case.name}"


def _line(location: str | None) -> int | None:
    """The line of a location in the programs' file, else None."""
    if not location or f"{FILE}:" not in location:
        return None
    return int(location.rsplit(":", 1)[1])


def _fresh() -> None:
    """Every case starts from an empty cache, so that the next owner's allocation meets the
    freed block as it would in a fresh process."""
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()


@pytest.fixture(scope="module", autouse=True)
def table(request: pytest.FixtureRequest):
    yield
    lines = [
        "| # | case | hooks | torch 2.13 | streamrace (kind@line) | next owner named | on the GPU | agrees |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        torch_says = "raises" if row.case.torch_raises else "accepts"
        found = ", ".join(row.found) or "none"
        lines.append(
            f"| {row.case.number} | {row.case.name} | {row.hooks} | {torch_says} | {found} | {row.owner_named} "
            f"| {row.proof} | {row.verdict} |"
        )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_line("check_input_liveness parity (tests/gpu/test_liveness_parity_gpu.py):")
        for line in lines:
            reporter.write_line(line)
    path = os.environ.get("STREAMRACE_LIVENESS_TABLE")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("hooks", HOOKS)
@pytest.mark.parametrize("case", _params(), ids=_ids)
def test_streamrace_flags_at_the_free_exactly_where_torch_raises(case: Case, hooks: str) -> None:
    if hooks == "python" and case.other_thread_capture and not graph_readback.AVAILABLE:
        pytest.skip("the Python hooks see another thread's captured kernels only by reading the graph back")
    proof = Proof()
    _fresh()
    with streamrace.watch(hooks=hooks) as session:
        kept = case.program(proof)
    torch.cuda.synchronize()
    frees, owners, unsafe = case.lines("FREE"), case.lines("OWNER"), case.lines("UNSAFE")
    findings = session.findings
    row = Row(case, hooks, found=[f"{f.kind}@{_line(f.accesses[-1].location)}" for f in findings])
    ROWS.append(row)
    # Whose free: pinned host memory may come as a kind of its own once it is recorded.
    at_free = [f for f in findings if f.kind == GRAPH_INPUT_FREED or (case.host_memory and f.kind != "unsafe-free")]
    others = [f for f in findings if all(f is not g for g in at_free)]

    named = []  # (owner line, the finding names it there)
    for k, (freed, taken) in enumerate(proof.owners):
        if not taken:
            continue
        finding = next((f for f in at_free if f.allocation is not None and f.allocation.addr == freed), None)
        reuse = finding.allocation.reused_by if finding is not None and finding.allocation is not None else None
        named.append((owners[k], reuse is not None and _line(reuse.get("alloc_location")) == owners[k]))
    if named:
        row.owner_named = "yes" if all(ok for _, ok in named) else "NO"
    if proof.premise is False:
        row.proof = "block not taken by the owner"
    elif proof.premise:
        row.proof = "replay read the next owner's bytes" if proof.exact_all else "NOT SHOWN"
    elif proof.checks:
        row.proof = "exact" if proof.exact_all else "NOT EXACT"
    expected = sorted(frees) if case.torch_raises else []
    free_lines = [_line(f.accesses[1].location) for f in at_free]
    got = sorted({line for line in free_lines if line is not None})
    agrees = got == expected and None not in free_lines and [f.kind for f in others] == list(case.other_kinds)
    row.verdict = "NO" if not agrees else "yes" + "".join(f" (and {kind}: another hazard)" for kind in case.other_kinds)
    del kept

    assert not session.errors
    assert got == expected and None not in free_lines, [(f.kind, f.accesses[1].location, f.message) for f in at_free]
    assert all(f.accesses[1].access == "free" for f in at_free), "reported at the free, not at the replay"
    assert all("replayed after the free" in f.message for f in at_free), [f.message for f in at_free]
    assert [f.kind for f in others] == list(case.other_kinds), [(f.kind, f.message) for f in others]
    assert all(f.allocation is not None and _line(f.allocation.free_location) in unsafe for f in others)
    assert all(ok for _, ok in named), f"the next owner (lines {owners}) is not named: {named}"
    assert proof.exact_all, [what for what, held in proof.checks if not held]
