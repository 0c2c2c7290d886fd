"""The ``streamrace`` command line (docs/cli.md).

Exit codes mean one thing each (``streamrace.outcome``): 0 no findings, 1 findings, 2 a usage
or input error, 3 the program ``run`` ran failed, 4 an internal error, 5 nothing recorded. A
user error is one line on stderr, ``streamrace: error: <what>``, never a traceback; argparse's
own errors go the same way. An internal error (a bug in streamrace) is one line too,
``streamrace: internal error: <what>``, with the traceback only under ``--debug`` or
``STREAMRACE_DEBUG=1``. Findings accepted by ``--suppressions`` or ``--baseline`` are listed
but do not count for the exit code.

A subcommand is a ``Command``: a name, a help line, a function that adds its arguments and a
function that runs it. ``COMMANDS`` is the one place they are registered.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from streamrace import __version__
from streamrace.errors import StreamraceError, UsageError
from streamrace.outcome import (
    DIFF_EXIT_CODES,
    ENV_EXIT_CODES,
    EXIT_CLEAN,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_RECORDED,
    EXIT_PROGRAM_FAILED,
    LIBRARY_FINDINGS,
    debug_wanted,
    nothing_recorded_exit,
    nothing_recorded_note,
    recorded_nothing,
)
from streamrace.report import DRAWN, REPORTERS, STACK_DEPTH
from streamrace.report.escape import for_terminal
from streamrace.trace.events import FORMAT_MINOR, FORMAT_VERSION

# Everything else is imported by the command that needs it, down to dataclasses and typing:
# `streamrace --help` and a bad command line cost little more than Python's own start-up
# (docs/performance.md, start-up).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from streamrace.report import TraceResult
    from streamrace.suppressions import Gate


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is a UsageError: one line, exit code 2, like any other."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


class Command:
    """A subcommand (a plain class: a dataclass would import dataclasses at start-up)."""

    def __init__(
        self,
        name: str,
        help: str,
        configure: Callable[[argparse.ArgumentParser], None],
        run: Callable[[argparse.Namespace], int],
        exit_codes: str = EXIT_CODES,
    ) -> None:
        self.name = name
        self.help = help
        self.configure = configure
        self.run = run
        self.exit_codes = exit_codes


# -- analyze ---------------------------------------------------------------------------------
FORMAT_HELP = (
    "text for people (default), json for machines (docs/json-report.md), sarif for code scanning, "
    "html (a timeline to open in a browser) or perfetto (for ui.perfetto.dev): docs/report.md"
)


def _stack_depth(value: str) -> int | None:
    if value == "all":
        return None
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise argparse.ArgumentTypeError(f"expected a number of frames (1 or more) or 'all', got {value!r}")


def _configure_report(parser: argparse.ArgumentParser) -> None:
    """The flags that shape the report and the gate, shared by analyze and run."""
    parser.add_argument(
        "--suppressions",
        metavar="FILE",
        help="accept the findings listed in FILE (TOML, each with a reason; docs/ci.md)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REPORT",
        help="accept the findings of an earlier JSON report: only new findings count (docs/ci.md)",
    )
    parser.add_argument(
        "--stack-depth",
        type=_stack_depth,
        default=STACK_DEPTH,
        metavar="N",
        help=f"text report: frames shown per stack, the source line included (default {STACK_DEPTH}; 'all')",
    )
    parser.add_argument(
        "--source-root",
        action="append",
        default=[],
        metavar="DIR",
        help="text report: read source lines only from files under DIR (repeatable; default: the current directory)",
    )
    parser.add_argument(
        "--library-findings",
        choices=LIBRARY_FINDINGS,
        default=LIBRARY_FINDINGS[0],
        help="findings about torch's own protocols (docs/library-protocols.md): hide them behind a note "
        "(default), show them apart, or count them as findings (exit code 1)",
    )
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help=f"exit 0 on findings and when nothing was recorded (exit codes {EXIT_FINDINGS} and "
        f"{EXIT_NOTHING_RECORDED}): for jobs that only report",
    )


def _configure_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace file (.jsonl or .jsonl.gz; - for standard input)"
    )
    parser.add_argument("--format", choices=list(REPORTERS), default="text", help=FORMAT_HELP)
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="analyse up to N traces at once, one process each (0: one per CPU; default 1); the report is the same",
    )
    _configure_report(parser)


def _jobs(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of processes (0 for one per CPU), got {value!r}")
    return int(value) or (os.cpu_count() or 1)


def _analyze_files(
    paths: Sequence[str],
    source_roots: Sequence[str] = (),
    observers: Sequence[Callable[[Iterator[dict[str, Any]]], Iterator[dict[str, Any]]]] = (),
    drawn: bool = False,
    jobs: int = 1,
) -> list[TraceResult]:
    """Each trace analysed, streaming; its fixes use the names of the source files it names,
    read as the text report reads them (the same roots and rules, streamrace/report/sources.py).
    ``observers[i]``, if given, sees the events of ``paths[i]`` on their way to the engine;
    ``drawn``: a visual report will draw them, so each trace's timeline is noted on the way.
    ``jobs``: traces analysed at once, one process each (not standard input, nor observed ones,
    which stay here); the results come back in the order given, so the report is the same."""
    from streamrace.trace.io import STDIN

    pooled = [i for i, path in enumerate(paths) if path != STDIN and i >= len(observers)] if jobs > 1 else []
    futures: dict[int, Any] = {}
    pool = None
    if len(pooled) > 1:
        import concurrent.futures
        import multiprocessing

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=min(jobs, len(pooled)), mp_context=multiprocessing.get_context(method), initializer=_worker
        )
        futures = {i: pool.submit(_analyze_one, paths[i], source_roots, None, drawn) for i in pooled}
    try:
        results = []
        for index, path in enumerate(paths):
            if index in futures:
                results.append(futures[index].result())  # a trace's error is raised here, in order
            else:
                observer = observers[index] if index < len(observers) else None
                results.append(_analyze_one(path, source_roots, observer, drawn))
        return results
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _worker() -> None:
    """A worker of ``--jobs``: it frees what its analyses made (it outlives each of them)."""
    from streamrace import short_lived

    short_lived.forget_retained()


def _analyze_one(
    path: str,
    source_roots: Sequence[str],
    observer: Callable[[Iterator[dict[str, Any]]], Iterator[dict[str, Any]]] | None,
    drawn: bool,
) -> TraceResult:
    from streamrace.analysis import analyze
    from streamrace.errors import TraceError, TraceLimitError
    from streamrace.progress import analysis_progress
    from streamrace.report.results import TraceResult, recorded_workdir
    from streamrace.report.sources import source_reader
    from streamrace.trace.io import display_name, iter_trace

    shown = display_name(path)
    # Streaming: the engine consumes events as they are read, never the whole trace.
    events: Iterator[dict[str, Any]] = iter_trace(path)
    header = next(events)
    if observer is not None:
        events = observer(events)
    builder = None
    if drawn:
        from streamrace.report.timeline import TimelineBuilder

        builder = TimelineBuilder()
        events = builder.observe(events)
    with analysis_progress(path, events) as feed:
        try:
            sources = source_reader(header, source_roots)
            result = analyze(header, feed.events, progress=feed.progress, sources=sources, keep_raw=False)
        except TraceLimitError as exc:  # the trace loads, but what it holds is not a recording
            raise TraceError(shown, None, str(exc)) from None
        timeline = builder.timeline() if builder is not None else None
        return TraceResult(shown, result, workdir=recorded_workdir(header), timeline=timeline)


def _gate(args: argparse.Namespace) -> Gate | None:
    """Suppressions and baseline are read before any trace: a bad file fails fast. None when
    there are neither (and then the module that reads them, TOML and all, is not imported)."""
    if not args.suppressions and not args.baseline:
        return None
    from streamrace.suppressions import load_gate

    return load_gate(args.suppressions, args.baseline)


def _apply_gate(gate: Gate | None, results: list[TraceResult], library: str = "hide") -> list[TraceResult]:
    """The findings that count: library protocols' too with ``--library-findings fail``, less
    what the suppressions and the baseline accept."""
    if library == "fail":
        results = [dataclasses.replace(item, result=item.result.library_counted()) for item in results]
    if not gate:
        return results
    from streamrace.run_program import warn
    from streamrace.suppressions import used_entries

    results = gate.apply(results)
    for message in gate.stale_messages(used_entries(results)):
        warn(message)
    return results


def _verdict(results: Sequence[TraceResult], args: argparse.Namespace, what: str) -> int:
    """Findings, clean, or nothing recorded at all (said on stderr); --exit-zero accepts all."""
    if any(item.result.findings for item in results):
        code = EXIT_FINDINGS
    elif all(recorded_nothing(item.result.summary) for item in results):
        _warn(nothing_recorded_note([item.result.summary for item in results], what, accepted=args.exit_zero))
        code = EXIT_NOTHING_RECORDED
    else:
        code = EXIT_CLEAN
    return EXIT_CLEAN if args.exit_zero else code


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _traces_named(count: int) -> str:
    return "the trace" if count == 1 else f"the {count} traces"


def _report(results: Sequence[TraceResult], format: str, output: str | None, args: argparse.Namespace) -> None:
    """Render and write; text to a terminal gets rich colour and the terminal's width."""
    from streamrace.report.options import ReportOptions

    options = ReportOptions(
        stack_depth=args.stack_depth, source_roots=tuple(args.source_root), library=args.library_findings
    )
    if format == "text" and output is None:
        from streamrace.report.text import terminal_style

        terminal = terminal_style(sys.stdout)
        if terminal is not None:
            options = dataclasses.replace(options, style=terminal[0], width=terminal[1])
    _emit(REPORTERS[format](results, options), output)


def _check_source_roots(args: argparse.Namespace) -> None:
    for root in args.source_root:
        if not os.path.isdir(root):
            raise UsageError(f"--source-root {root}: not a directory")


def _check_inputs(traces: Sequence[str], output: str | None) -> None:
    """UsageError for standard input named twice (the second would read nothing) and for an
    output that is one of the traces (through any path to it): the report would replace it."""
    from streamrace.trace.io import STDIN, display_name

    if list(traces).count(STDIN) > 1:
        raise UsageError(f"standard input ({STDIN}) is named more than once: it can be read only once")
    if output is None or not os.path.exists(output):
        return
    target = os.stat(output)
    for trace in traces:
        try:  # standard input redirected from the file (`analyze - -o t.jsonl < t.jsonl`) too
            found = os.fstat(sys.stdin.fileno()) if trace == STDIN else os.stat(trace)
        except (OSError, ValueError):  # no such trace (its reading says so), or no stdin
            continue
        if os.path.samestat(found, target):
            raise UsageError(f"-o {output}: is the trace {display_name(trace)}; the report would overwrite its input")


def _check_gate_files(args: argparse.Namespace, outputs: Sequence[str | None]) -> None:
    """UsageError for an output that is the suppressions or the baseline file (through any
    path to it): the report would replace what the gate reads."""
    named = (("--suppressions", args.suppressions), ("--baseline", args.baseline))
    gate = [(flag, path) for flag, path in named if path]
    for output in outputs:
        if not output or not os.path.exists(output):
            continue
        target = os.stat(output)
        for flag, path in gate:
            try:
                found = os.stat(path)
            except OSError:  # no such file: reading it says so
                continue
            if os.path.samestat(found, target):
                raise UsageError(f"{output}: is the {flag} file {path}; the report would overwrite it")


def _check_run_outputs(args: argparse.Namespace) -> None:
    """UsageError for two of run's outputs that are one file (through any path to it): the
    report written last would replace the kept trace (``-o t.jsonl.gz --json t.jsonl.gz``),
    which the command it prints then cannot read, or another report."""
    named = [("-o", args.output), *((f"--{fmt}", getattr(args, fmt)) for fmt in ("json", "sarif", "html", "perfetto"))]
    seen: dict[object, tuple[str, str]] = {}
    for flag, path in named:
        if not path:
            continue
        try:  # an existing file by its inode (a link, ./), one still to be made by its path
            found = os.stat(path)
            key: object = (found.st_dev, found.st_ino)
        except OSError:
            key = os.path.realpath(path)
        if key in seen:
            first_flag, first = seen[key]
            if first_flag == "-o":
                raise UsageError(f"{flag} {path}: is the trace kept at -o {first}; the report would overwrite it")
            raise UsageError(f"{flag} {path}: is the {first_flag} report's file {first}; one would overwrite the other")
        seen[key] = (flag, path)


def _run_analyze(args: argparse.Namespace) -> int:
    _check_inputs(args.traces, args.output)
    _check_gate_files(args, [args.output])
    _check_source_roots(args)
    gate = _gate(args)
    analysed = _analyze_files(args.traces, args.source_root, drawn=args.format in DRAWN, jobs=args.jobs)
    results = _apply_gate(gate, analysed, args.library_findings)
    _report(results, args.format, args.output, args)
    return _verdict(results, args, _traces_named(len(results)))


# -- diff ------------------------------------------------------------------------------------
def _configure_diff(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the baseline trace (.jsonl or .jsonl.gz; - for standard input)")
    parser.add_argument("b", metavar="B", help="the new trace: a finding A lacks fails (exit 1)")
    parser.add_argument(
        "--format", choices=["text", "json"], default="text", help="text for people (default), json for machines"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the diff to FILE instead of stdout")


def _run_diff(args: argparse.Namespace) -> int:
    """Both traces analysed as ``analyze`` does, their findings matched by signature; 1 when
    B has a finding A lacks. A trace that recorded nothing compares with nothing: exit 5."""
    from streamrace.diff import Side, compare
    from streamrace.diff.blocks import AllocationTable
    from streamrace.diff.render import render_json, render_text

    if "-" in (args.a, args.b) and args.a == args.b:
        raise UsageError("A and B cannot both be standard input")
    _check_inputs([args.a, args.b], args.output)
    tables = (AllocationTable(), AllocationTable())
    results = _analyze_files([args.a, args.b], observers=[table.observe for table in tables])
    empty = [item for item in results if recorded_nothing(item.result.summary)]
    if empty:
        summaries = [item.result.summary for item in empty]
        _warn(nothing_recorded_note(summaries, f"the trace {empty[0].path}", exit_zero=False))
        return EXIT_NOTHING_RECORDED
    a, b = (Side(item.path, item.result.findings, table) for item, table in zip(results, tables, strict=True))
    entries = compare(a, b)
    notes = {"A": results[0].result.notes, "B": results[1].result.notes}
    render = render_json if args.format == "json" else render_text
    _emit(render(a.path, b.path, entries, notes), args.output)
    return EXIT_FINDINGS if any(entry.change == "appeared" for entry in entries) else EXIT_CLEAN


# -- run -------------------------------------------------------------------------------------
def _configure_recording(parser: argparse.ArgumentParser) -> None:
    """What is recorded, shared by run and env."""
    parser.add_argument(
        "--capture-only",
        action="store_true",
        help="record only CUDA graph captures (no eager op, no replay); by default the whole program is recorded",
    )
    parser.add_argument(
        "--eager-ops",
        action="store_true",
        help="no effect: ops outside captures are recorded by default (accepted so that older scripts run)",
    )


def _configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", metavar="TRACE", help="keep the trace here (several processes: TRACE with each pid inserted)"
    )
    parser.add_argument("--format", choices=list(REPORTERS), default="text", help=f"on stdout: {FORMAT_HELP}")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON report to FILE")
    parser.add_argument("--sarif", metavar="FILE", help="also write the SARIF report to FILE")
    parser.add_argument("--html", metavar="FILE", help="also write the HTML report (a timeline) to FILE")
    parser.add_argument("--perfetto", metavar="FILE", help="also write the Perfetto report to FILE")
    _configure_recording(parser)
    _configure_report(parser)
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the program to run")


def _run_run(args: argparse.Namespace) -> int:
    """Record, then analyse as ``analyze`` would; the traces stay (in a fresh temporary
    directory, or at ``-o``) and the ``analyze`` command that reads them again is printed."""
    import shlex

    from streamrace.run_program import keep_traces, program_failed_note, record_program

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    _check_source_roots(args)
    gate = _gate(args)
    # A typo in a report's or the trace's path must not cost the run of a long program.
    for path in (args.output, args.json, args.sarif, args.html, args.perfetto):
        if path:
            _check_writable(path)
    _check_gate_files(args, [args.output, args.json, args.sarif, args.html, args.perfetto])
    _check_run_outputs(args)
    returncode, traces = record_program(command, args.capture_only)
    if args.output and traces:
        traces = keep_traces(traces, args.output)
    extra = {"json": args.json, "sarif": args.sarif, "html": args.html, "perfetto": args.perfetto}
    drawn = args.format in DRAWN or any(extra[format] for format in DRAWN)
    results = _apply_gate(gate, _analyze_files(traces, args.source_root, drawn=drawn), args.library_findings)
    if traces:
        _report(results, args.format, None, args)
    for format, path in extra.items():
        if path:
            _report(results, format, path, args)
    if traces:
        again = " ".join(shlex.quote(t) for t in traces)
        _warn(f"streamrace: trace{'s' if len(traces) > 1 else ''} kept; analyse again with: streamrace analyze {again}")
    if returncode != 0:
        _warn(program_failed_note(returncode))
        return EXIT_PROGRAM_FAILED
    if not traces:
        _warn(
            "streamrace: nothing recorded: no process of the program recorded a trace (it never imported "
            f"torch); {nothing_recorded_exit(accepted=args.exit_zero)}"
        )
        return EXIT_CLEAN if args.exit_zero else EXIT_NOTHING_RECORDED
    return _verdict(results, args, "the program")


def _emit(report: str, output: str | None) -> None:
    if output is None:
        try:
            sys.stdout.write(report)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`streamrace analyze t.jsonl | head`): not an error, and the
            # exit code still tells about the findings. Point stdout at /dev/null so that the
            # interpreter's last flush does not complain.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    try:
        with open(output, "w", encoding="utf-8") as out:
            out.write(report)
    except OSError as exc:
        raise UsageError(f"{output}: cannot write the report: {exc.strerror or exc}") from None


def _check_writable(path: str) -> None:
    """UsageError unless a file can be written at ``path`` (its folder exists and takes files),
    checked before anything runs; ``_emit`` still says why if the write fails later."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory, not a file to write")
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: no such directory: {folder}")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{path}: cannot write in {folder}")


# -- env -------------------------------------------------------------------------------------
def _configure_env(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-dir", default=".", metavar="DIR", help="where each process writes its trace")
    _configure_recording(parser)


def _run_env(args: argparse.Namespace) -> int:
    """Shell exports that make every Python process record itself: for programs started by
    a launcher that ``streamrace run`` cannot wrap (``eval "$(streamrace env)"``)."""
    import shlex

    from streamrace.record.autostart import ENV_CAPTURE_ONLY, ENV_DIR, ENV_ENABLE
    from streamrace.run_program import child_environment

    trace_dir = os.path.abspath(args.trace_dir)
    _make_trace_dir(trace_dir)
    env = child_environment(trace_dir, args.capture_only)
    names = [ENV_ENABLE, ENV_DIR, "PYTHONPATH"] + ([ENV_CAPTURE_ONLY] if args.capture_only else [])
    _emit("".join(f"export {name}={shlex.quote(env[name])}\n" for name in names), None)
    return EXIT_CLEAN


def _make_trace_dir(path: str) -> None:
    """The folder every recorded process will write its trace in, made now if missing: else
    each process would fail later, one "recorder not started" line each, long after the
    exports were printed. One that cannot be made or written is a usage error."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"--trace-dir {path}: not a directory") from None
    except OSError as exc:
        raise UsageError(f"--trace-dir {path}: cannot make the folder: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--trace-dir {path}: cannot write in it")


COMMANDS: tuple[Command, ...] = (
    Command("analyze", "Find races and unsafe frees in recorded traces.", _configure_analyze, _run_analyze),
    Command(
        "diff",
        "Compare the findings of two traces: which appear, disappear and persist, and why the block was reused.",
        _configure_diff,
        _run_diff,
        DIFF_EXIT_CODES,
    ),
    Command("run", "Run a program with its CUDA work recorded, then analyse.", _configure_run, _run_run),
    Command(
        "env",
        "Print shell exports that record every Python process started later.",
        _configure_env,
        _run_env,
        ENV_EXIT_CODES,
    ),
)


# -- the program -----------------------------------------------------------------------------
class _Version(argparse.Action):
    """``--version``: streamrace's, the trace format's, and which analysis engine runs, worked
    out only when asked (it imports the engine, which the parser must not at start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"{parser.prog} {__version__} (trace format {FORMAT_VERSION}.{FORMAT_MINOR}; {engine_words()})")
        parser.exit()


def engine_words() -> str:
    """``analysis engine: C++ core`` or ``analysis engine: Python (why)``, as STREAMRACE_CORE
    and the build decide."""
    from streamrace.analysis.core import CORE_ENV, cpp_available, selected_core

    if selected_core() == "cpp":
        return "analysis engine: C++ core"
    why = f"{CORE_ENV}=python" if cpp_available() else "the C++ core is not built"
    return f"analysis engine: Python ({why})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="streamrace",
        description="Find races and memory aliasing between CUDA streams inside captured CUDA graphs.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_Version, help="print the version, the trace format and the analysis engine"
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog=command.exit_codes,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # SUPPRESS: `streamrace --debug analyze` is not undone by the subcommand's default
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


DEBUG_HELP = "show the traceback of an internal error (also STREAMRACE_DEBUG=1)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version print, then "exit" 0
            return exc.code if isinstance(exc.code, int) else EXIT_CLEAN
        return args.run(args)
    except StreamraceError as exc:
        print(f"streamrace: error: {for_terminal(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug in streamrace: never exit 1, which means findings
        return _internal_error(exc, debug_wanted(bool(getattr(args, "debug", False))))


def console() -> None:
    """The console script (and ``python -m streamrace``): ``main``, then the process ends
    without freeing what its analyses kept (streamrace/short_lived.py): ``os._exit`` once the
    output is flushed, where no other thread still runs; else an ordinary exit."""
    import os
    import threading

    from streamrace import short_lived

    short_lived.retain_until_exit()
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: what an ordinary exit would meet too
        sys.exit(code)
    if threading.active_count() == 1:
        os._exit(code)
    sys.exit(code)


def _internal_error(exc: Exception, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    hint = "" if debug else "; --debug (or STREAMRACE_DEBUG=1) shows the traceback"
    print(
        f"streamrace: internal error: {for_terminal(what)[:500]} (a bug in streamrace: please report it with the "
        f"trace{hint})",
        file=sys.stderr,
    )
    return EXIT_INTERNAL
