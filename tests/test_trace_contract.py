"""The trace contract is declared once (streamrace/trace/kinds.py) and everything made from it
agrees with it: the validator, the typed records, the C++ core's keys, the docs table, and
what the recorder really wrote into every committed trace (issue 25, item 1)."""

from __future__ import annotations

import ast
import gzip
import json
import re
import typing
from pathlib import Path

import pytest

from streamrace.trace import generate, records
from streamrace.trace.events import EVENT_FIELDS, EventInvalid, validate_event
from streamrace.trace.kinds import COMMON_FIELDS, EVENT_KINDS, NONNEG, EventKind, optional, required

REPO = Path(__file__).resolve().parents[1]
TRACES = sorted((REPO / "examples" / "traces").glob("*.jsonl*"))


def test_every_generated_file_is_what_the_declaration_makes():
    """`python -m streamrace.trace.generate --check`: records.py, trace_fields.h and the docs
    table are each exactly what kinds.py makes of them."""
    drifted = [path.name for path, text in generate.outputs().items() if path.read_text(encoding="utf-8") != text]
    assert drifted == [], "run python -m streamrace.trace.generate"
    assert generate.main(["--check"]) == 0


def test_the_check_sees_a_drifted_file(tmp_path, monkeypatch, capsys):
    drifted = tmp_path / "records.py"
    drifted.write_text(generate.records_module().replace("stream: int", "stream: str", 1))
    monkeypatch.setattr(generate, "outputs", lambda: {drifted: generate.records_module()})
    monkeypatch.setattr(generate, "REPO", tmp_path)
    assert generate.main(["--check"]) == 1
    assert "records.py differs from streamrace/trace/kinds.py" in capsys.readouterr().out
    assert generate.main([]) == 0 and drifted.read_text() == generate.records_module()


def test_a_new_kind_reaches_the_validator_the_records_and_the_docs(monkeypatch):
    """A declaration is all a new kind needs for the validator, the records, the C++ keys and
    the docs table."""
    kind = EventKind("host_copy", (required("addr", NONNEG), optional("nbytes", NONNEG)), "a worked example", "1.4")
    monkeypatch.setattr(generate, "EVENT_KINDS", (*EVENT_KINDS, kind))
    assert "| `host_copy` | `addr` int≥0 | `nbytes` int≥0 | 1.4: a worked example |" in generate.docs_table()
    assert 'class HostCopyEvent(_HostCopyEventRequired, total=False):\n    """``host_copy`` (since 1.4)."""' in (
        generate.records_module()
    )
    assert "X(host_copy)" in generate.cpp_header()


def test_the_records_have_each_kind_s_fields():
    for kind in EVENT_KINDS:
        record = records.KIND_RECORDS[kind.name]
        hints = typing.get_type_hints(record)
        assert set(hints) == {"seq", "ev", *(f.name for f in kind.fields)}
        assert record.__required_keys__ == {"seq", "ev", *(f.name for f in kind.fields if f.required)}
    assert set(records.KIND_RECORDS) == set(EVENT_FIELDS)


def test_the_core_reads_only_declared_fields():
    source = (REPO / "csrc" / "core.cpp").read_text()
    used = {name for line in source.splitlines() if "#define" not in line for name in re.findall(r"\bK\.(\w+)", line)}
    assert used and used <= set(generate.field_names())


def test_the_docs_table_is_the_declaration():
    text = (REPO / "docs" / "trace-format.md").read_text(encoding="utf-8")
    table = text[text.index(generate.DOCS_BEGIN) : text.index(generate.DOCS_END)]
    header, *documented = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    assert header == "ev" and documented == [kind.name for kind in EVENT_KINDS]


def _events(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        next(lines)
        for line in lines:
            yield json.loads(line)


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_a_committed_trace_carries_only_declared_fields(path):
    """The recorders write the contract as declared: no kind, and no field, the declaration lacks."""
    declared = {kind.name: {"seq", "ev", *(f.name for f in kind.fields), *COMMON_FIELDS} for kind in EVENT_KINDS}
    undeclared = set()
    for event in _events(path):
        fields = declared.get(event["ev"])
        if fields is None:
            undeclared.add(event["ev"])
            continue
        undeclared |= {f"{event['ev']}.{name}" for name in event if name not in fields}
    assert undeclared == set()


def test_an_optional_field_added_later_is_still_checked():
    """op's `index` (1.2) is declared with its version and validated like the rest."""
    [op] = [kind for kind in EVENT_KINDS if kind.name == "op"]
    assert {f.name: f.added for f in op.fields}["index"] == "1.2"
    with pytest.raises(EventInvalid, match="index"):
        validate_event({"seq": 0, "ev": "op", "op": "aten::x", "stream": 0, "reads": [], "writes": [], "index": 3})


_EMITTERS = {"emit", "_emit", "emit_detached"}  # EventLog's, the Python hooks', the builder's


def _written_events(tree: ast.AST) -> typing.Iterator[tuple[int, str, list[str]]]:
    """(line, kind, keys) of each event the code writes with its kind spelled out: an emitter's
    call ``emit("kind", field=...)`` or a dict ``{"seq": ..., "ev": "kind", ...}``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _EMITTERS and node.args and isinstance(node.args[0], ast.Constant):
                yield node.lineno, node.args[0].value, [k.arg for k in node.keywords if k.arg is not None]
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if "ev" in keys:
                kind = node.values[keys.index("ev")]
                if isinstance(kind, ast.Constant):
                    yield node.lineno, kind.value, keys


def test_every_python_emitter_writes_only_its_kind_s_fields():
    """The Python side of the contract, as the native hooks' STREAMRACE_FIELD holds the C++ one
    at compile time: every event streamrace writes with its kind spelled out carries only the
    fields the declaration gives that kind (those any event may carry, and the recorder's own
    '_' keys, aside)."""
    declared = {kind.name: {"seq", "ev", *(f.name for f in kind.fields), *COMMON_FIELDS} for kind in EVENT_KINDS}
    found, wrong = 0, []
    for path in sorted((REPO / "streamrace").rglob("*.py")):
        for line, kind, keys in _written_events(ast.parse(path.read_text(encoding="utf-8"))):
            found += 1
            where = f"{path.relative_to(REPO)}:{line}"
            if kind not in declared:
                wrong.append(f"{where}: kind {kind!r}")
            fields = declared.get(kind, set())
            wrong += [f"{where}: {kind}.{key}" for key in keys if key not in fields and not key.startswith("_")]
    assert found >= 40, found  # the scan still finds the emitters
    assert wrong == []


def test_the_emitter_scan_sees_an_undeclared_field():
    code = 'log.emit("replay", graph=1, stream=2, when=3)\nevent = {"seq": 0, "ev": "free", "addr": 1, "size": 8}\n'
    assert list(_written_events(ast.parse(code))) == [
        (1, "replay", ["graph", "stream", "when"]),
        (2, "free", ["seq", "ev", "addr", "size"]),
    ]
