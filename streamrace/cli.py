"""The ``streamrace`` command line (docs/cli.md).

Exit codes mean one thing each: 0 no findings, 1 findings, 2 a usage or input error. A user
error is one line on stderr, ``streamrace: error: <what>``, never a traceback; argparse's own
errors go the same way. Findings accepted by ``--suppressions`` or ``--baseline`` are listed
but do not count for the exit code.

A subcommand is a ``Command``: a name, a help line, a function that adds its arguments and a
function that runs it. ``COMMANDS`` is the one place they are registered.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from streamrace import __version__
from streamrace.errors import StreamraceError, UsageError
from streamrace.report import REPORTERS, STACK_DEPTH
from streamrace.trace.events import FORMAT_MINOR, FORMAT_VERSION

# Everything else is imported by the command that needs it, down to dataclasses and typing:
# `streamrace --help` and a bad command line cost little more than Python's own start-up
# (docs/performance.md, start-up).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from streamrace.report import TraceResult
    from streamrace.suppressions import Gate

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

EXIT_CODES = """exit codes:
  0  no findings (or only suppressed and baseline ones)
  1  findings
  2  usage or input error (one line on stderr)
  3  (run) the program itself failed; the report covers what it recorded"""


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
    ) -> None:
        self.name = name
        self.help = help
        self.configure = configure
        self.run = run


# -- analyze ---------------------------------------------------------------------------------
FORMAT_HELP = "text for people (default), json for machines (docs/json-report.md), sarif for code scanning"


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


def _configure_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace file (.jsonl or .jsonl.gz)")
    parser.add_argument("--format", choices=list(REPORTERS), default="text", help=FORMAT_HELP)
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    _configure_report(parser)


def _analyze_files(paths: Sequence[str], shown_as: Sequence[str] | None = None) -> list[TraceResult]:
    from streamrace.analysis import analyze
    from streamrace.progress import analysis_progress
    from streamrace.report import TraceResult
    from streamrace.trace.io import display_name, iter_trace

    results = []
    for path, shown in zip(paths, shown_as or [display_name(p) for p in paths], strict=True):
        # Streaming: the engine consumes events as they are read, never the whole trace.
        events = iter_trace(path)
        header = next(events)
        with analysis_progress(path, events) as counted:
            results.append(TraceResult(shown, analyze(header, counted)))
    return results


def _gate(args: argparse.Namespace) -> Gate | None:
    """Suppressions and baseline are read before any trace: a bad file fails fast. None when
    there are neither (and then the module that reads them, TOML and all, is not imported)."""
    if not args.suppressions and not args.baseline:
        return None
    from streamrace.suppressions import load_gate

    return load_gate(args.suppressions, args.baseline)


def _apply_gate(gate: Gate | None, results: list[TraceResult]) -> list[TraceResult]:
    if not gate:
        return results
    from streamrace.run_program import warn
    from streamrace.suppressions import used_entries

    results = gate.apply(results)
    for message in gate.stale_messages(used_entries(results)):
        warn(message)
    return results


def _verdict(results: Sequence[TraceResult]) -> int:
    return EXIT_FINDINGS if any(item.result.findings for item in results) else EXIT_CLEAN


def _report(results: Sequence[TraceResult], format: str, output: str | None, stack_depth: int | None) -> None:
    """Render and write; text to a terminal gets rich colour and the terminal's width."""
    from streamrace.report.options import ReportOptions

    options = ReportOptions(stack_depth=stack_depth)
    if format == "text" and output is None:
        from streamrace.report.text import terminal_style

        terminal = terminal_style(sys.stdout)
        if terminal is not None:
            options = ReportOptions(style=terminal[0], width=terminal[1], stack_depth=stack_depth)
    _emit(REPORTERS[format](results, options), output)


def _run_analyze(args: argparse.Namespace) -> int:
    gate = _gate(args)
    results = _apply_gate(gate, _analyze_files(args.traces))
    _report(results, args.format, args.output, args.stack_depth)
    return _verdict(results)


# -- run -------------------------------------------------------------------------------------
def _configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", metavar="TRACE", help="keep the trace here (several processes: TRACE with each pid inserted)"
    )
    parser.add_argument("--format", choices=list(REPORTERS), default="text", help=f"on stdout: {FORMAT_HELP}")
    parser.add_argument("--json", metavar="FILE", help="also write the JSON report to FILE")
    parser.add_argument("--sarif", metavar="FILE", help="also write the SARIF report to FILE")
    parser.add_argument("--eager-ops", action="store_true", help="also record ops outside captures")
    _configure_report(parser)
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the program to run")


def _run_run(args: argparse.Namespace) -> int:
    import shutil

    from streamrace.run_program import EXIT_PROGRAM_FAILED, keep_traces, program_failed_note, record_program, warn

    command = args.program[1:] if args.program[:1] == ["--"] else args.program
    gate = _gate(args)
    returncode, trace_dir, traces = record_program(command, args.eager_ops)
    try:
        shown = [os.path.basename(t) for t in traces]
        if args.output and traces:
            shown = keep_traces(traces, args.output)
            traces = shown
        results = _apply_gate(gate, _analyze_files(traces, shown))
        if traces:
            _report(results, args.format, None, args.stack_depth)
        else:
            warn("streamrace: no process of the program recorded anything (no torch import, or no capture)")
        for format, path in (("json", args.json), ("sarif", args.sarif)):
            if path:
                _report(results, format, path, args.stack_depth)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    if returncode != 0:
        warn(program_failed_note(returncode))
        return EXIT_PROGRAM_FAILED
    return _verdict(results)


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


# -- env -------------------------------------------------------------------------------------
def _configure_env(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-dir", default=".", metavar="DIR", help="where each process writes its trace")
    parser.add_argument("--eager-ops", action="store_true", help="also record ops outside captures")


def _run_env(args: argparse.Namespace) -> int:
    """Shell exports that make every Python process record itself: for programs started by
    a launcher that ``streamrace run`` cannot wrap (``eval "$(streamrace env)"``)."""
    import shlex

    from streamrace.record.autostart import ENV_DIR, ENV_EAGER, ENV_ENABLE
    from streamrace.run_program import child_environment

    env = child_environment(os.path.abspath(args.trace_dir), args.eager_ops)
    names = [ENV_ENABLE, ENV_DIR, "PYTHONPATH"] + ([ENV_EAGER] if args.eager_ops else [])
    _emit("".join(f"export {name}={shlex.quote(env[name])}\n" for name in names), None)
    return EXIT_CLEAN


COMMANDS: tuple[Command, ...] = (
    Command("analyze", "Find races and unsafe frees in recorded traces.", _configure_analyze, _run_analyze),
    Command("run", "Run a program with every CUDA graph capture recorded, then analyse.", _configure_run, _run_run),
    Command("env", "Print shell exports that record every Python process started later.", _configure_env, _run_env),
)


# -- the program -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="streamrace",
        description="Find races and memory aliasing between CUDA streams inside captured CUDA graphs.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__} (trace format {FORMAT_VERSION}.{FORMAT_MINOR})"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version print, then "exit" 0
            return exc.code if isinstance(exc.code, int) else EXIT_CLEAN
        return args.run(args)
    except StreamraceError as exc:
        print(f"streamrace: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
