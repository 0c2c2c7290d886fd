"""The recorder's house (issue 25, item 4): the parts of ``streamrace/record/`` import no circle,
type-only imports included (each part is typed against the narrow seam it declares,
record/seams.py, not against the Recorder), and ``record/`` stands below the analysis and
the reporters: it imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

RECORD = Path(__file__).resolve().parents[1] / "streamrace" / "record"


def _imports(path: Path) -> set[str]:
    """Every streamrace module ``path`` imports, at run time or for type checking only."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "streamrace.record":
                found |= {f"streamrace.record.{alias.name}" for alias in node.names}
            elif node.module.startswith("streamrace"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("streamrace")}
    return found


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in RECORD.glob("*.py"):
        module = f"streamrace.record.{path.stem}"
        graph.add_node(module)
        for imported in _imports(path):
            graph.add_edge(module, imported)
    return graph


def test_the_recorder_s_parts_import_no_circle():
    record = _graph().subgraph(n for n in _graph() if n.startswith("streamrace.record."))
    assert list(nx.simple_cycles(record)) == []


def test_no_part_imports_the_recorder():
    """Each part is handed the recording as the protocol it declares; only what stands above the
    Recorder knows its class: the process-wide start (autostart.py) and the trace made from a
    finished recording (traces.py)."""
    graph = _graph()
    importers = {module for module, imported in graph.edges if imported == "streamrace.record.recorder"}
    assert importers == {"streamrace.record.autostart", "streamrace.record.traces"}


def test_record_imports_neither_the_analysis_nor_the_reporters():
    imported = {target for _, target in _graph().edges}
    assert not {m for m in imported if m.startswith(("streamrace.analysis", "streamrace.report"))}


def test_the_check_sees_a_circle(tmp_path):
    """The circle test reads type-only imports too: a part typed against the Recorder is one."""
    source = (RECORD / "replays.py").read_text(encoding="utf-8")
    assert "streamrace.record.recorder" not in _imports(RECORD / "replays.py")
    typed = tmp_path / "replays.py"
    typed.write_text(source + "\nif TYPE_CHECKING:\n    from streamrace.record.recorder import Recorder\n")
    assert "streamrace.record.recorder" in _imports(typed)
