"""Names as the user's source writes them, for fixes a person can paste.

A trace knows a stream by its handle and recorded name (``kv``) and a tensor by its block;
the code says ``s.kv`` and ``qkv``. When the source can be read (the caller passes a reader:
the report's safe one, streamrace/report/sources.py), these find

* the **tensor**: the name the allocating statement binds (``qkv = x @ self.w_qkv``), or the
  one a ``del`` frees; not a temporary (freed on the line that made it), never a guess between
  two names;
* the **stream**: the expression of the innermost ``with torch.cuda.stream(EXPR):`` block
  around the access, walking out from its frame through its callers (``s.kv``); only a name
  or a chain of attributes.

Each answer comes with the function it was found in: a fix uses it only where the code goes
in that same function, where the name is in scope. Anything unreadable, unparsable or
unexpected answers None, and the fix keeps the recorded name or a placeholder.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

SourceText = Callable[[str], Sequence[str] | None]
"""``text(path)``: the lines of a source file, or None when it cannot (or may not) be read."""

Function = tuple[str, str]  # (file, function name) as the trace's frames give them


def _plain_expression(node: ast.expr) -> str | None:
    """``name`` or ``a.b.c``: an expression a fix can repeat safely, else None."""
    probe = node
    while isinstance(probe, ast.Attribute):
        probe = probe.value
    return ast.unparse(node) if isinstance(probe, ast.Name) else None


def _is_stream_context(call: ast.expr) -> ast.expr | None:
    """The stream of ``torch.cuda.stream(EXPR)`` (any ``*.stream(EXPR)`` or ``stream(EXPR)``)."""
    if not isinstance(call, ast.Call) or len(call.args) != 1 or call.keywords:
        return None
    func = call.func
    named = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return call.args[0] if named == "stream" else None


class _File:
    """One parsed source file: its functions by name, and the statements of each."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).append(node)

    def scope(self, function: str, line: int) -> ast.AST | None:
        """The function named ``function`` whose lines hold ``line`` (the module for ``<module>``)."""
        if function == "<module>":
            return self.tree
        holding = [f for f in self.functions.get(function, ()) if f.lineno <= line <= (f.end_lineno or f.lineno)]
        return min(holding, key=lambda f: (f.end_lineno or f.lineno) - f.lineno) if holding else None

    @staticmethod
    def own_nodes(scope: ast.AST) -> list[ast.AST]:
        """The nodes of ``scope`` itself, not of functions, classes or lambdas inside it."""
        found: list[ast.AST] = []
        todo = list(ast.iter_child_nodes(scope))
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            found.append(node)
            todo.extend(ast.iter_child_nodes(node))
        return found


class SourceNames:
    """Tensor names and stream expressions from the source, each file parsed once."""

    def __init__(self, text: SourceText | None) -> None:
        self._text = text
        self._files: dict[str, _File | None] = {}

    def _file(self, path: str) -> _File | None:
        if path not in self._files:
            lines = self._text(path) if self._text is not None else None
            parsed = None
            if lines is not None:
                try:
                    parsed = _File(ast.parse("\n".join(lines)))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    parsed = None
            self._files[path] = parsed
        return self._files[path]

    def _statement(self, frame: Sequence[Any]) -> tuple[ast.stmt, Function] | None:
        """The innermost statement of the frame's function that holds the frame's line."""
        if len(frame) < 3:
            return None
        path, line, function = str(frame[0]), frame[1], str(frame[2])
        source = self._file(path)
        scope = source.scope(function, line) if source is not None and isinstance(line, int) else None
        if scope is None:
            return None
        holding = [
            node
            for node in _File.own_nodes(scope)
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
        ]
        if not holding:
            return None
        return min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno), (path, function)

    def tensor(
        self, alloc_frames: Sequence[Sequence[Any]], free_frames: Sequence[Sequence[Any]]
    ) -> tuple[str, Function] | None:
        """The tensor's name and the function that binds it (see the module docstring)."""
        if not alloc_frames:
            return None
        made = self._statement(alloc_frames[0])
        freed = self._statement(free_frames[0]) if free_frames else None
        bound = None
        if made is not None:
            statement = made[0]
            targets = statement.targets if isinstance(statement, ast.Assign) else []
            if isinstance(statement, ast.AnnAssign):
                targets = [statement.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                bound = targets[0].id
        deleted = None
        if freed is not None and isinstance(freed[0], ast.Delete) and len(freed[0].targets) == 1:
            target = freed[0].targets[0]
            deleted = target.id if isinstance(target, ast.Name) else None
        if deleted is not None and freed is not None:
            if bound not in (None, deleted) or (made is not None and made[1] != freed[1]):
                return None  # two names, or bound in another function: no guess
            return deleted, freed[1]
        if bound is None or made is None:
            return None
        same_line = free_frames and list(free_frames[0][:2]) == list(alloc_frames[0][:2])
        return None if same_line else (bound, made[1])

    def stream(self, frames: Sequence[Sequence[Any]]) -> tuple[str, Function] | None:
        """The stream expression in effect for the access (see the module docstring)."""
        for frame in frames:
            if len(frame) < 3 or not isinstance(frame[1], int):
                continue
            path, line, function = str(frame[0]), frame[1], str(frame[2])
            source = self._file(path)
            scope = source.scope(function, line) if source is not None else None
            if scope is None:
                continue
            blocks = [
                (node, stream)
                for node in _File.own_nodes(scope)
                if isinstance(node, (ast.With, ast.AsyncWith))
                and node.body[0].lineno <= line <= (node.end_lineno or node.lineno)
                for item in node.items
                if (stream := _is_stream_context(item.context_expr)) is not None
            ]
            if blocks:
                _, stream = max(blocks, key=lambda b: b[0].lineno)  # the innermost block
                expression = _plain_expression(stream)
                return (expression, (path, function)) if expression else None
        return None
