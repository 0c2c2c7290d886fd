"""Names as the source writes them (streamrace/analysis/source_names.py) and the frame a fix
points at (streamrace/analysis/call_sites.py)."""

from __future__ import annotations

import textwrap

from streamrace.analysis.call_sites import CallSites
from streamrace.analysis.source_names import SourceNames

MODEL = textwrap.dedent(
    """\
    import torch


    def norm(x):
        return x * x.mean()


    class Layer:
        def forward(self, x, s):
            main = torch.cuda.current_stream()
            qkv = x @ self.w
            with torch.cuda.stream(s.kv):
                y = norm(qkv)
            del qkv
            tmp = (x @ self.w) + 1
            a, b = x.chunk(2)
            with torch.cuda.stream(streams[0]):
                z = norm(x)
            out = x + 1
            alias = out
            del alias
            return y, z, tmp, a, b

        def other(self, x):
            with torch.cuda.stream(self.side):
                pass
            return norm(x)
    """
)


def _names(files: dict[str, str] | None = None) -> SourceNames:
    files = {"model.py": MODEL} if files is None else files

    def text(path: str) -> list[str] | None:
        return files[path].splitlines() if path in files else None

    return SourceNames(text)


def _line(needle: str) -> int:
    return next(n for n, line in enumerate(MODEL.splitlines(), start=1) if needle in line)


def frame(needle: str, function: str = "forward") -> list:
    return ["model.py", _line(needle), function]


def test_the_tensor_is_the_name_the_allocation_binds_or_the_del_frees() -> None:
    names = _names()
    assert names.tensor([frame("qkv = x @")], [frame("del qkv")]) == ("qkv", ("model.py", "forward"))
    # freed where its function returned: the binding is the name
    assert names.tensor([frame("qkv = x @")], [["main.py", 3, "run"]]) == ("qkv", ("model.py", "forward"))
    # a temporary, freed on its own line; a tuple target; two names for one block: no name
    assert names.tensor([frame("tmp = (x")], [frame("tmp = (x")]) is None
    assert names.tensor([frame("a, b = x.chunk")], [frame("return y")]) is None
    assert names.tensor([frame("out = x + 1")], [frame("del alias")]) is None
    # no source, no stack, a frame in no function of the file: no name
    assert _names({}).tensor([frame("qkv = x @")], [frame("del qkv")]) is None
    assert names.tensor([], []) is None
    assert names.tensor([["model.py", _line("qkv = x @"), "missing"]], []) is None


def test_the_stream_is_the_innermost_with_stream_block_around_the_access() -> None:
    names = _names()
    inner = ["model.py", _line("return x * x.mean()"), "norm"]
    # the helper has no block of its own: its caller's `with torch.cuda.stream(s.kv)` is in effect
    assert names.stream([inner, frame("y = norm(qkv)")]) == ("s.kv", ("model.py", "forward"))
    # outside any block, and blocks whose stream is no plain name: no expression
    assert names.stream([frame("del qkv")]) is None
    assert names.stream([inner, frame("z = norm(x)")]) is None
    # a block of another function does not count, nor one that ended before the line
    assert names.stream([frame("return norm(x)", "other")]) is None
    assert _names({"model.py": "def f(:\n"}).stream([["model.py", 1, "f"]]) is None


def test_a_shared_helper_points_the_fix_at_its_caller() -> None:
    helper = ["model.py", _line("return x * x.mean()"), "norm"]
    stacks = {
        1: [helper, frame("y = norm(qkv)"), ["run.py", 5, "main"]],
        2: [helper, frame("z = norm(x)"), ["run.py", 5, "main"]],
        3: [frame("qkv = x @"), ["run.py", 5, "main"]],
    }
    sites = CallSites(stacks)
    assert sites.shared(helper) and not sites.shared(frame("qkv = x @"))
    assert sites.actionable(stacks[1]) == 1, "the caller's line, not the helper's"
    assert sites.actionable(stacks[3]) == 0
    assert sites.actionable([]) is None
    assert CallSites({1: stacks[1]}).actionable(stacks[1]) == 0, "called from one line: not shared"
