"""The committed traces' stack frames still point at the lines they name (issue 27, item 10).

A trace records ``[file, line, function]`` per frame; the report shows that line's text and
places fixes there, so a trace recorded before its source moved sends the reader to the wrong
line. Each frame of a file in this repository must name a line inside a function of that name
(``<module>``: the module's top level) that is code, not a blank line or a comment. The cure
for a failure is to re-record the trace on the GPU machine (CONTRIBUTING.md, fixtures).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from streamrace.trace import load_trace

REPO = Path(__file__).resolve().parents[1]
TRACES = sorted((REPO / "examples" / "traces").glob("*.jsonl*"))

_CODE_OBJECTS: dict[type, str] = {
    ast.Lambda: "<lambda>",
    ast.GeneratorExp: "<genexpr>",
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
}


@functools.cache
def _spans(path: Path) -> tuple[list[str], dict[str, list[tuple[int, int]]]]:
    """The file's lines, and each function name's (first, last) line spans."""
    source = path.read_text(encoding="utf-8")
    spans: dict[str, list[tuple[int, int]]] = {"<module>": [(1, len(source.splitlines()))]}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.setdefault(node.name, []).append((first, node.end_lineno or node.lineno))
        elif type(node) in _CODE_OBJECTS:  # a lambda or comprehension: a frame of its own
            spans.setdefault(_CODE_OBJECTS[type(node)], []).append((node.lineno, node.end_lineno or node.lineno))
    return source.splitlines(), spans


def _resolve(name: str) -> Path | None:
    """A frame's file in this repository (paths relative to its root or to examples/), or None."""
    for base in (REPO, REPO / "examples"):
        path = (base / name).resolve()
        if path.is_file() and REPO in path.parents and path.suffix == ".py":
            return path
    return None


def stale_frames(trace: Path) -> list[str]:
    return bad_frames(frame for frames in load_trace(trace).stacks.values() for frame in frames)


def bad_frames(frames: Iterable[list[object]]) -> list[str]:
    """``file:line in function: text`` of each frame of a repository file that does not name
    a code line of its function."""
    found = set()
    for frame in frames:
        name, line, function = str(frame[0]), int(str(frame[1])), str(frame[2])
        path = _resolve(name)
        if path is None:
            continue
        lines, spans = _spans(path)
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        inside = any(first <= line <= last for first, last in spans.get(function, []))
        if not inside or not text or text.startswith("#"):
            found.add(f"{name}:{line} in {function}: {text!r}")
    return sorted(found)


@pytest.mark.parametrize("trace", TRACES, ids=[t.name for t in TRACES])
def test_every_frame_points_at_a_line_of_its_function(trace: Path) -> None:
    assert stale_frames(trace) == []


def test_the_check_sees_a_moved_line() -> None:
    """A frame into a blank line, a comment, another function or past the end is caught; the
    frames of a trace recorded from today's source are not."""
    example = "examples/execution_gallery.py"
    lines, spans = _spans(_resolve(example))  # type: ignore[arg-type]
    function = next(name for name in spans if not name.startswith("<"))
    first, last = spans[function][0]
    code = next(n for n in range(first, last + 1) if lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"))
    assert bad_frames([[example, code, function]]) == []
    blank = lines.index("") + 1
    assert bad_frames([[example, blank, "<module>"]]), "a blank line"
    assert bad_frames([[example, code, "no_such_function"]]), "another function"
    assert bad_frames([[example, len(lines) + 5, "<module>"]]), "past the end"
    assert bad_frames([["examples/no_such_file.py", 1, "f"], ["/usr/lib/x.py", 3, "g"]]) == [], "not ours"
