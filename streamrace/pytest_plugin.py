"""``pytest --streamrace``: every test's CUDA work recorded (its captures, replays and eager
ops; ``--streamrace-capture-only``: the captures alone) and analysed; a test with findings
fails, with the text report as its failure (docs/ci.md).

Markers::

    @pytest.mark.streamrace(expect=["unsafe-free"])  # these kinds must be found, and no others
    @pytest.mark.streamrace(skip=True)                # not recorded

Registered through the ``pytest11`` entry point, so it is always loaded; without
``--streamrace`` it only registers its options and marker and imports nothing but pytest:
no torch, not even the analysis. With it, a ``_StreamracePlugin`` joins the run and wraps
each test's call in a recording.

The recording is a hook, ``pytest_streamrace_recorder(item)``: it returns a context manager
whose value has ``.result`` (an ``AnalysisResult``) once the block has ended. The default is
``streamrace.watch()``; ``--streamrace-replay TRACE`` makes every test "record" a trace file
instead, and a conftest can pick a trace per test (``replay(path)``). That is how the plugin
is tested without a GPU, and how a project can check its gate on recorded traces.

Under pytest-xdist each worker records its own tests; what the summary needs travels on the
test reports (``report.streamrace``), which xdist sends to the controller, and the summary
is written there only.

A session in which no test recorded an op or a kernel fails with exit code 5
(``streamrace.outcome.EXIT_NOTHING_RECORDED``) and says so: a GPU job that lands on a machine
without CUDA, or whose GPU tests all skipped, must not go green.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from streamrace.analysis import AnalysisResult
    from streamrace.report import TraceResult
    from streamrace.suppressions import Gate
    from streamrace.trace import Trace

MARKER = "streamrace"
_OUTCOME = pytest.StashKey[dict[str, Any]]()


class RecorderSpec:
    """The hook that records one test (``pytest_addhooks`` registers it)."""

    @pytest.hookspec(firstresult=True)
    def pytest_streamrace_recorder(self, item: pytest.Item) -> AbstractContextManager[Any] | None:
        """Return a context manager that records ``item``'s call; its value must have
        ``.result`` (an ``AnalysisResult``, or None for nothing recorded) after the block.
        The first non-None answer wins; the plugin's own (``streamrace.watch()``, or
        ``--streamrace-replay``) comes last."""


class Replay:
    """A recording stand-in: the trace at ``path``, analysed when the block ends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.trace: Trace | None = None
        self.result: AnalysisResult | None = None


@contextmanager
def replay(path: str | os.PathLike[str]) -> Iterator[Replay]:
    """Pretend the block recorded the trace at ``path``: for tests of a CI gate without a GPU."""
    session = Replay(os.fspath(path))
    yield session
    from streamrace.analysis import analyze
    from streamrace.trace import load_trace

    session.trace = load_trace(session.path)
    from streamrace.report.sources import source_reader

    session.result = analyze(session.trace, sources=source_reader(session.trace.header))


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(RecorderSpec)


def pytest_addoption(parser: pytest.Parser) -> None:
    from streamrace.outcome import LIBRARY_FINDINGS

    group = parser.getgroup("streamrace", "streamrace: races between CUDA streams in captured graphs")
    group.addoption(
        "--streamrace",
        action="store_true",
        help="record every test's CUDA graph captures; fail tests with findings",
    )
    group.addoption(
        "--streamrace-replay",
        metavar="TRACE",
        help="instead of recording, every test 'records' TRACE (implies --streamrace; for checking a gate)",
    )
    group.addoption(
        "--streamrace-capture-only",
        action="store_true",
        help="record only each test's CUDA graph captures (no eager op, no replay)",
    )
    group.addoption(
        "--streamrace-html",
        metavar="DIR",
        help="write the HTML report (a timeline, docs/report.md) of every test with findings into DIR",
    )
    group.addoption(
        "--streamrace-traces",
        metavar="DIR",
        help="keep every recorded test's trace in DIR, as <test id>.jsonl.gz (for streamrace analyze)",
    )
    group.addoption(
        "--streamrace-library-findings",
        choices=LIBRARY_FINDINGS,
        default=LIBRARY_FINDINGS[0],
        help="findings about torch's own protocols (docs/library-protocols.md): hide (default), "
        "show them in the test's report, or fail the test on them",
    )
    group.addoption(
        "--streamrace-suppressions",
        metavar="FILE",
        help="accept the findings listed in FILE (TOML, as streamrace analyze --suppressions)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(expect=[kinds], skip=False): with --streamrace, expect exactly these finding "
        "kinds (the test fails if one is missing or another is found), or skip=True to not record",
    )
    replay_path = config.getoption("streamrace_replay")
    if not (config.getoption("streamrace") or replay_path):
        return
    from streamrace.errors import StreamraceError
    from streamrace.suppressions import load_gate

    try:
        gate = load_gate(config.getoption("streamrace_suppressions"))
    except StreamraceError as exc:
        raise pytest.UsageError(f"streamrace: {exc}") from None
    if replay_path is not None:
        replay_path = os.path.abspath(replay_path)
        if not os.path.isfile(replay_path):
            raise pytest.UsageError(f"streamrace: {replay_path}: no such trace file")
    plugin = _StreamracePlugin(config, gate, replay_path)
    if replay_path is None and not plugin.has_other_recorder() and not _torch_available():
        raise pytest.UsageError("streamrace: --streamrace records with torch, which is not installed here")
    config.pluginmanager.register(plugin, "streamrace-session")


def _file_name(nodeid: str) -> str:
    """A test id as a file name: the same in every directory, safe on every file system."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_.")[:200]  # no hidden file


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass(frozen=True)
class _Marker:
    expect: frozenset[str] = frozenset()
    skip: bool = False


def _marker(item: pytest.Item) -> _Marker:
    """The test's ``streamrace`` marker, checked: a wrong one fails the test, saying why."""
    from streamrace.analysis.detectors import KINDS

    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return _Marker()
    where = f"@pytest.mark.{MARKER}"
    unknown = sorted(set(mark.kwargs) - {"expect", "skip"})
    if mark.args or unknown:
        pytest.fail(f"{where} takes only expect=[kinds] and skip=True", pytrace=False)
    expect = mark.kwargs.get("expect", ())
    expect = [expect] if isinstance(expect, str) else list(expect)
    wrong = sorted(set(expect) - set(KINDS))
    if wrong:
        pytest.fail(f"{where}: unknown finding kind {wrong[0]!r}; kinds are {', '.join(KINDS)}", pytrace=False)
    return _Marker(frozenset(expect), bool(mark.kwargs.get("skip", False)))


@dataclass
class _Tally:
    """What the summary line counts, from the reports (so it adds up under xdist too)."""

    recorded: int = 0
    captured: int = 0
    with_work: int = 0  # recorded an op or a kernel: not "nothing recorded"
    with_findings: int = 0
    suppressed: int = 0
    with_library: int = 0  # tests with findings about a library's own protocol, set aside
    used_entries: set[int] = field(default_factory=set)


class _StreamracePlugin:
    """The plugin while ``--streamrace`` is on: records, judges, and counts."""

    def __init__(self, config: pytest.Config, gate: Gate, replay_path: str | None) -> None:
        self.config = config
        self.gate = gate
        self.replay_path = replay_path
        self.tally = _Tally()

    def has_other_recorder(self) -> bool:
        """A conftest (or another plugin) that records: then torch is its business."""
        impls = self.config.pluginmanager.hook.pytest_streamrace_recorder.get_hookimpls()
        return any(impl.plugin is not self for impl in impls)

    @pytest.hookimpl(trylast=True)
    def pytest_streamrace_recorder(self, item: pytest.Item) -> AbstractContextManager[Any]:
        if self.replay_path is not None:
            return replay(self.replay_path)
        import streamrace

        directory = self.config.getoption("streamrace_traces")
        trace = None
        if directory:
            os.makedirs(directory, exist_ok=True)
            trace = os.path.join(directory, _file_name(item.nodeid) + ".jsonl.gz")
        return streamrace.watch(trace, capture_only=self.config.getoption("streamrace_capture_only"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        marker = _marker(item)
        recorder = None if marker.skip else item.ihook.pytest_streamrace_recorder(item=item)
        if recorder is None:
            return (yield)
        from streamrace.errors import StreamraceError

        test_error: BaseException | None = None
        try:
            with recorder as session:
                try:
                    value = yield
                except BaseException as exc:  # the test's own failure: reported after the recording ends
                    test_error = exc
        except StreamraceError as exc:
            if test_error is not None:
                raise test_error from None
            pytest.fail(f"streamrace: {exc}", pytrace=False)
        if test_error is not None:
            self._judge(item, marker, session, test_failed=True)
            raise test_error
        failure = self._judge(item, marker, session, test_failed=False)
        if failure:
            pytest.fail(failure, pytrace=False)
        return value

    def _judge(self, item: pytest.Item, marker: _Marker, session: Any, test_failed: bool) -> str:
        """Record the outcome on the item and return the failure message ('' for a pass)."""
        from streamrace.report import TraceResult, text

        result: AnalysisResult | None = session.result
        if result is None:
            return ""
        library = self.config.getoption("streamrace_library_findings")
        if library == "fail":
            result = result.library_counted()
        traces = (
            self.gate.apply([TraceResult(item.nodeid, result)]) if self.gate else [TraceResult(item.nodeid, result)]
        )
        kept = traces[0].result.findings
        found = {f.kind for f in kept}
        item.stash[_OUTCOME] = {
            "findings": len(kept),
            "kinds": sorted(found),
            "graphs": int(result.summary.get("graphs", 0)),
            "ops": int(result.summary.get("ops", 0)),
            "accesses": int(result.summary.get("accesses", 0)),
            "suppressed": len(traces[0].suppressed),
            "library": len(result.library_findings),
            "entries": sorted({s.entry for s in traces[0].suppressed if s.entry is not None}),
        }
        from streamrace.report.options import ReportOptions

        report = text.render(traces, ReportOptions(library=library))
        if kept and self.config.getoption("streamrace_html"):
            report += self._write_html(item, traces[0], getattr(session, "trace", None))
        if test_failed or found == marker.expect:
            if kept or traces[0].suppressed or result.notes or result.library_findings:  # worth a look
                item.add_report_section("call", "streamrace", report)
            return ""
        missing, unexpected = sorted(set(marker.expect) - found), sorted(found - set(marker.expect))
        problems = [f"expected {', '.join(missing)}, not found"] if missing else []
        if unexpected:
            count = sum(f.kind in unexpected for f in kept)
            problems.append(f"{count} finding{'s' if count != 1 else ''} ({', '.join(unexpected)})")
        return f"streamrace: {'; '.join(problems)} in this test's CUDA graph captures\n\n{report}"

    def _write_html(self, item: pytest.Item, traced: TraceResult, trace: Trace | None) -> str:
        """The test's HTML report in --streamrace-html's directory; the line that says where."""
        import dataclasses

        from streamrace.report import html
        from streamrace.report.timeline import build_timeline

        if trace is None:
            return "\nstreamrace: no HTML report: the recording kept no trace to draw\n"
        directory = self.config.getoption("streamrace_html")
        path = os.path.join(directory, _file_name(item.nodeid) + ".html")
        timeline = build_timeline(trace.events, trace.stacks)
        os.makedirs(directory, exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(html.render([dataclasses.replace(traced, timeline=timeline)]))
        return f"\nstreamrace: HTML report: {path}\n"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "call" and _OUTCOME in item.stash:
            # plain data: xdist sends it to the controller; reports take plugin data as attributes
            report.streamrace = item.stash[_OUTCOME]  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = getattr(report, "streamrace", None)
        if report.when != "call" or not isinstance(outcome, dict):
            return
        self.tally.recorded += 1
        self.tally.captured += outcome.get("graphs", 0) > 0
        self.tally.with_work += outcome.get("ops", 0) > 0 or outcome.get("accesses", 0) > 0
        self.tally.with_findings += outcome.get("findings", 0) > 0
        self.tally.suppressed += outcome.get("suppressed", 0)
        self.tally.with_library += outcome.get("library", 0) > 0
        self.tally.used_entries.update(outcome.get("entries", ()))

    def nothing_recorded(self) -> bool:
        return self.tally.with_work == 0

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.nothing_recorded():
            return
        from streamrace.outcome import EXIT_NOTHING_RECORDED

        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_NOTHING_RECORDED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        tally = self.tally
        tests = f"{tally.recorded} test{'s' if tally.recorded != 1 else ''}"
        parts = [
            f"{tests} recorded",
            f"{tally.captured} with CUDA graph captures",
            f"{tally.with_findings} with findings",
        ]
        if tally.suppressed:
            parts.append(f"{tally.suppressed} finding{'s' if tally.suppressed != 1 else ''} suppressed")
        if tally.with_library:
            parts.append(f"{tally.with_library} with library-protocol findings set aside")
        terminalreporter.write_sep("-", "streamrace")
        terminalreporter.write_line(f"streamrace: {', '.join(parts)}")
        for message in self.gate.stale_messages(tally.used_entries):
            terminalreporter.write_line(message.removeprefix("streamrace: "), yellow=True)
        if self.nothing_recorded():
            from streamrace.outcome import EXIT_NOTHING_RECORDED

            terminalreporter.write_line(
                f"streamrace: nothing recorded: no test ran an op or a kernel under --streamrace (no CUDA on "
                f"this machine, the GPU tests skipped, or nothing captured a graph); the session fails with "
                f"exit code {EXIT_NOTHING_RECORDED}",
                red=True,
                bold=True,
            )
