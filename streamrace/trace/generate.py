"""What is made from the event-kind declaration (kinds.py), and the command that writes it.

    python -m streamrace.trace.generate          # write the three
    python -m streamrace.trace.generate --check  # exit 1, naming each, if any drifted

* ``streamrace/trace/records.py``: a TypedDict per kind, for code that wants the fields typed;
* ``csrc/trace_fields.h``: the field names and kinds, as X-macros for the C++ core's keys;
* the events table of ``docs/trace-format.md``, between its two ``generated`` markers.

``tests/test_trace_contract.py`` runs the check, so none of them can drift from the declaration.
"""

from __future__ import annotations

import sys
from pathlib import Path

from streamrace.trace.kinds import (
    BOOL,
    COMMON_FIELDS,
    EDGES,
    EVENT_KINDS,
    FRAMES,
    INT,
    INTS,
    NODE_FIELDS,
    NODES,
    NONNEG,
    POOL,
    POS,
    RANGE_FIELDS,
    RANGES,
    STR,
    EventKind,
    Field,
)

REPO = Path(__file__).resolve().parents[2]
RECORDS = REPO / "streamrace" / "trace" / "records.py"
CPP_HEADER = REPO / "csrc" / "trace_fields.h"
DOCS = REPO / "docs" / "trace-format.md"
DOCS_BEGIN = "<!-- generated from streamrace/trace/kinds.py by python -m streamrace.trace.generate: edit that -->"
DOCS_END = "<!-- end of the generated table -->"

# How the docs name each field type.
_DOC_TYPES = {
    INT: "int",
    NONNEG: "int≥0",
    POS: "int>0",
    STR: "str",
    BOOL: "bool",
    POOL: "pool",
    RANGES: "ranges",
    INTS: "ints",
    FRAMES: "list of `[file, line, function]`",
    NODES: "list of `{id, type}` objects",
    EDGES: "list of `[from, to]` or `[from, to, type]`",
}

# The Python type of each field type.
_PY_TYPES = {
    INT: "int",
    NONNEG: "int",
    POS: "int",
    STR: "str",
    BOOL: "bool",
    POOL: "list[int]",
    RANGES: "list[ByteRange]",
    INTS: "list[int]",
    FRAMES: "list[list[Any]]",
    NODES: "list[dict[str, Any]]",
    EDGES: "list[list[Any]]",
}


def _doc_fields(fields: list[Field]) -> str:
    return ", ".join(f"`{f.name}` {_DOC_TYPES[f.type]}" for f in fields)


def docs_table() -> str:
    """The events table of docs/trace-format.md, markers included."""
    rows = [DOCS_BEGIN, "| `ev` | required fields | optional fields | what happened |", "|---|---|---|---|"]
    for kind in EVENT_KINDS:
        required = [f for f in kind.fields if f.required]
        optional = [f for f in kind.fields if not f.required]
        doc = kind.doc if kind.added == "1.0" else f"{kind.added}: {kind.doc}"
        row = f"| `{kind.name}` | {_doc_fields(required)} | {_doc_fields(optional)} | {doc} |"
        rows.append(row.replace("|  |", "| |"))  # an empty cell is one space, as people write it
    rows.append(DOCS_END)
    return "\n".join(rows)


def _class_name(kind: EventKind) -> str:
    return "".join(part.capitalize() for part in kind.name.split("_")) + "Event"


def records_module() -> str:
    """``streamrace/trace/records.py``."""
    out = [
        '"""Typed records of the trace\'s events, one TypedDict per kind.',
        "",
        "Generated from streamrace/trace/kinds.py by ``python -m streamrace.trace.generate``: edit that.",
        "Events stay plain dicts; these say which keys each kind has and their types. An optional",
        "field may be absent or None; a field a kind does not list may be there too (COMMON_FIELDS).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal, TypedDict",
        "",
        "",
        "class ByteRange(TypedDict, total=False):",
        '    """Contiguous ``{addr, nbytes}`` or strided ``{addr, shape, stride, itemsize}``."""',
        "",
        "    addr: int",
        "    nbytes: int",
        "    shape: list[int]",
        "    stride: list[int]",
        "    itemsize: int",
    ]
    assert set(RANGE_FIELDS) == {"addr", "nbytes", "shape", "stride", "itemsize"}
    names = []
    for kind in EVENT_KINDS:
        name = _class_name(kind)
        names.append(name)
        out += ["", "", f"class _{name}Required(TypedDict):", "    seq: int", f'    ev: Literal["{kind.name}"]']
        out += [f"    {f.name}: {_PY_TYPES[f.type]}" for f in kind.fields if f.required]
        out += ["", "", f"class {name}(_{name}Required, total=False):"]
        since = f" (since {kind.added})" if kind.added != "1.0" else ""
        out.append(f'    """``{kind.name}``{since}."""')
        optional = [f for f in kind.fields if not f.required]
        if optional:
            out.append("")
        for f in optional:
            since = f"  # since {f.added}" if f.added != "1.0" else ""
            out.append(f"    {f.name}: {_PY_TYPES[f.type]} | None{since}")
    out += ["", "", "Event = (", f"    {names[0]}"]
    out += [f"    | {name}" for name in names[1:]]
    out += [")", ""]
    out += ["KIND_RECORDS: dict[str, type] = {"]
    out += [f'    "{kind.name}": {_class_name(kind)},' for kind in EVENT_KINDS]
    out += ["}", ""]
    return "\n".join(out)


def field_names() -> list[str]:
    """Every field name an event, a byte range or a graph's node may carry, ``seq`` and ``ev``
    first."""
    names = ["seq", "ev"]
    for kind in EVENT_KINDS:
        names += [f.name for f in kind.fields if f.name not in names]
    names += [name for name in RANGE_FIELDS if name not in names]
    names += [name for name in NODE_FIELDS if name not in names]
    return names


def cpp_header() -> str:
    """``csrc/trace_fields.h``."""
    fields = " \\\n".join(f"    X({name})" for name in field_names())
    kinds = " \\\n".join(f"    X({kind.name})" for kind in EVENT_KINDS)
    kind_fields = " \\\n".join(f"    X({kind.name}, {f.name})" for kind in EVENT_KINDS for f in kind.fields)
    common = " \\\n".join(f"    X({name})" for name in ("seq", "ev", *COMMON_FIELDS))
    return f"""\
// Generated from streamrace/trace/kinds.py by python -m streamrace.trace.generate: edit that.
#pragma once

// X(name) for every field name a trace event, byte range or graph node may carry, seq and ev first.
#define STREAMRACE_TRACE_FIELDS(X) \\
{fields}

// X(kind) for every event kind, in the declaration's order.
#define STREAMRACE_EVENT_KINDS(X) \\
{kinds}

// X(kind, field) for every field the declaration gives a kind.
#define STREAMRACE_KIND_FIELDS(X) \\
{kind_fields}

// X(field) for the fields any event may carry besides its kind's own.
#define STREAMRACE_COMMON_FIELDS(X) \\
{common}
"""


def _docs_with_table(text: str) -> str:
    begin, end = text.find(DOCS_BEGIN), text.find(DOCS_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{DOCS.name} has lost its generated-table markers")
    return text[:begin] + docs_table() + text[end + len(DOCS_END) :]


def outputs() -> dict[Path, str]:
    """Each generated file and the text it must hold."""
    return {
        RECORDS: records_module(),
        CPP_HEADER: cpp_header(),
        DOCS: _docs_with_table(DOCS.read_text(encoding="utf-8")),
    }


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python -m streamrace.trace.generate [--check]", file=sys.stderr)
        return 2
    drifted = []
    for path, text in outputs().items():
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if check:
            drifted.append(path)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    for path in drifted:
        name = path.relative_to(REPO)
        print(f"{name} differs from streamrace/trace/kinds.py: run python -m streamrace.trace.generate")
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
