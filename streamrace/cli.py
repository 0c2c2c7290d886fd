"""The ``streamrace`` command line (docs/cli.md).

Exit codes mean one thing each: 0 no findings, 1 findings, 2 a usage or input error. A user
error is one line on stderr, ``streamrace: error: <what>``, never a traceback; argparse's own
errors go the same way.

A subcommand is a ``Command``: a name, a help line, a function that adds its arguments and a
function that runs it. ``COMMANDS`` is the one place they are registered.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from streamrace import __version__
from streamrace.analysis import analyze
from streamrace.errors import StreamraceError, UsageError
from streamrace.report import REPORTERS, TraceResult
from streamrace.trace import FORMAT_VERSION, iter_trace

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

EXIT_CODES = """exit codes:
  0  no findings
  1  findings
  2  usage or input error (one line on stderr)"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is a UsageError: one line, exit code 2, like any other."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- analyze ---------------------------------------------------------------------------------
def _configure_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace file (.jsonl or .jsonl.gz)")
    parser.add_argument(
        "--format",
        choices=list(REPORTERS),
        default="text",
        help="text for people (default), json for machines (docs/json-report.md)",
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")


def _run_analyze(args: argparse.Namespace) -> int:
    results = []
    for path in args.traces:
        # Streaming: the engine consumes events as they are read, never the whole trace.
        events = iter_trace(path)
        header = next(events)
        results.append(TraceResult(path, analyze(header, events)))
    report = REPORTERS[args.format](results)
    _emit(report, args.output)
    return EXIT_FINDINGS if any(item.result.findings for item in results) else EXIT_CLEAN


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


COMMANDS: tuple[Command, ...] = (
    Command("analyze", "Find races and unsafe frees in recorded traces.", _configure_analyze, _run_analyze),
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
        "--version", action="version", version=f"%(prog)s {__version__} (trace format {FORMAT_VERSION})"
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
