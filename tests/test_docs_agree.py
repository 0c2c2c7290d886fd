"""The docs say what the code does (issue 27, items 15-20): the kinds of finding every list
names, the one capture-cost figure, versions, the `run` synopsis, and no path that exists on
one machine only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamrace.analysis.detectors import KINDS
from streamrace.cli import build_parser
from streamrace.trace import FORMAT_MINOR, FORMAT_VERSION

REPO = Path(__file__).resolve().parents[1]


def _text(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def _kinds_in(text: str) -> set[str]:
    return {kind for kind in KINDS if f"`{kind}`" in text}


# Each list of every kind, found by the words around it (the line or paragraph holding it).
KIND_LISTS = [
    ("README.md", r"\* \*\*Findings\*\*.*?(?=\n\n|\n```)"),
    ("docs/ci.md", r"\| `kind` \| no \|[^\n]*"),
    ("docs/cli.md", r"one \*\*rule\*\* per finding kind.*?\), each with"),
    ("docs/findings.md", r"\| kind \|[^\n]*"),
]


@pytest.mark.parametrize(("name", "pattern"), KIND_LISTS, ids=[name for name, _ in KIND_LISTS])
def test_every_list_of_kinds_names_every_detector(name: str, pattern: str) -> None:
    found = re.search(pattern, _text(name), re.S)
    assert found, f"{name}: the list of kinds moved; update this test"
    assert _kinds_in(found.group(0)) == set(KINDS), f"{name} lists {sorted(_kinds_in(found.group(0)))}"


def test_findings_md_has_a_section_per_kind() -> None:
    headings = re.findall(r"^## `([a-z-]+)`", _text("docs/findings.md"), re.M)
    assert set(headings) == set(KINDS)


def test_one_capture_cost_figure_everywhere() -> None:
    """docs/performance.md is the source: the README and recording.md cite its figure."""
    (figure,) = re.findall(r"\*\*Capture costs ([0-9.]+)x plain", _text("docs/performance.md"))
    for name in ("README.md", "docs/recording.md"):
        cited = re.findall(r"([0-9.]+)x plain capture", " ".join(_text(name).split()))
        assert cited and set(cited) == {figure}, f"{name} cites {cited}, performance.md {figure}"


def test_versions_are_the_ones_the_code_writes() -> None:
    version = f"{FORMAT_VERSION}.{FORMAT_MINOR}"
    assert _text("docs/trace-format.md").startswith(f"# Trace format, version {version}\n")
    assert f"trace format version {version}" in _text("README.md")
    assert re.findall(r"\(trace format ([0-9.]+);", _text("docs/cli.md")) == [version]


def _options(command: str) -> list[list[str]]:
    """Each option of ``streamrace COMMAND --help`` as its spellings (``["-o", "--output"]``)."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    sub = commands.choices[command]  # type: ignore[attr-defined]
    hidden = {"--eager-ops", "--debug", "--help"}  # accepted, or on every command
    return [a.option_strings for a in sub._actions if a.option_strings and not hidden & set(a.option_strings)]


@pytest.mark.parametrize(
    ("name", "command"),
    [("docs/recording.md", "run"), *[("docs/cli.md", command) for command in ("run", "analyze", "diff", "env")]],
)
def test_each_synopsis_has_every_flag_of_its_help(name: str, command: str) -> None:
    """Every option of ``COMMAND --help``, in one of its spellings, is in the doc's synopsis."""
    synopsis = re.search(rf"```\n(?:eval \"\$\()?streamrace {command} .*?```", _text(name), re.S)
    assert synopsis, name
    shown = set(re.findall(r"\[(-[-\w]+)", synopsis.group(0)))
    missing = [spellings[-1] for spellings in _options(command) if not shown & set(spellings)]
    assert _options(command) and not missing, f"{name}'s {command} synopsis lacks {missing}"


def test_recording_tells_runs_own_exit_codes() -> None:
    text = " ".join(_text("docs/recording.md").split())
    assert "**5 when nothing was recorded**" in text and "**3 when the program itself failed**" in text


def test_stack_paths_are_described_as_the_recorder_writes_them() -> None:
    text = " ".join(_text("docs/trace-format.md").split())
    assert "usually absolute, for hand-built" not in text
    assert "relative to the directory the program ran in" in text


def test_the_repository_stands_alone() -> None:
    """No doc, test or source cites a path that exists only on one machine."""
    cited = []
    for path in [
        *REPO.glob("*.md"),
        *REPO.glob("docs/*.md"),
        *REPO.glob("tests/*.py"),
        *REPO.glob("streamrace/**/*.py"),
    ]:
        if path.name == Path(__file__).name:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"/work/shared|/work/main\b", line):
                cited.append(f"{path.relative_to(REPO)}:{number}")
    assert not cited


def test_the_ci_timing_comment_is_current() -> None:
    check = _text(".ci/check")
    assert "374 s" not in check and "about 18 minutes" in check


def _hazardless_kinds() -> set[str]:
    """The kinds whose detector's module makes its findings with ``hazard=None``."""
    import ast
    import inspect

    from streamrace.analysis.detectors import DETECTORS

    kinds = set()
    for detector in DETECTORS:
        tree = ast.parse(inspect.getsource(inspect.getmodule(type(detector))))  # type: ignore[arg-type]
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
        if any(
            k.arg == "hazard" and isinstance(k.value, ast.Constant) and k.value.value is None
            for call in calls
            for k in call.keywords
        ):
            kinds.add(detector.kind)
    return kinds


def test_findings_md_names_the_kinds_without_a_hazard() -> None:
    """findings.md's list of the kinds with no hazard missed graph-input-freed (issue 27, 17)."""
    row = re.search(r"^\| hazard \|.*?none for (.*?)(?:;|\|)", _text("docs/findings.md"), re.M)
    assert row, "docs/findings.md: the hazard row moved; update this test"
    assert _kinds_in(row.group(1)) == _hazardless_kinds() != set()
