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


def _run_options() -> set[str]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    run = commands.choices["run"]  # type: ignore[attr-defined]
    hidden = {"--eager-ops", "--debug", "--help"}  # accepted, or on every command
    return {o for a in run._actions for o in a.option_strings if o.startswith("--")} - hidden


@pytest.mark.parametrize("name", ["docs/recording.md", "docs/cli.md"])
def test_the_run_synopsis_has_every_flag_and_exit_code(name: str) -> None:
    synopsis = re.search(r"```\nstreamrace run .*?```", _text(name), re.S)
    assert synopsis, name
    missing = {o for o in _run_options() if o not in synopsis.group(0)} - {"--output", "--source-root"}
    assert not missing, f"{name}'s run synopsis lacks {sorted(missing)}"
    if name == "docs/recording.md":
        assert "**5 when nothing was recorded**" in " ".join(_text(name).split())


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
