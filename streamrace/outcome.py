"""What a run of streamrace tells its caller: the exit codes, each meaning one thing, and the
test for "nothing was recorded", shared by the command line and the pytest plugin.

A CI gate that passes because nothing ran is a lie: a GPU job that lands on a CPU runner
records no capture and no op, and "no findings" would turn it green. So an analysis with
nothing in it has its own exit code, and ``--exit-zero`` is the one way to accept it (with
findings) for a job that only reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# What a front end does with findings about a library's own protocol (--library-findings,
# docs/library-protocols.md): a note only (the default), listed apart, or counted as findings.
LIBRARY_FINDINGS = ("hide", "show", "fail")

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2  # usage or input error: a wrong flag, a trace that does not load
EXIT_PROGRAM_FAILED = 3  # `run`: the program itself failed; the report covers what it recorded
EXIT_INTERNAL = 4  # a bug in streamrace: one line, the traceback only with --debug
EXIT_NOTHING_RECORDED = 5  # no op or kernel anywhere: no CUDA, no capture, or the hooks saw nothing
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

EXIT_CODES = f"""exit codes:
  {EXIT_CLEAN}  no findings (or only suppressed and baseline ones)
  {EXIT_FINDINGS}  findings
  {EXIT_ERROR}  usage or input error (one line on stderr)
  {EXIT_PROGRAM_FAILED}  (run) the program itself failed; the report covers what it recorded
  {EXIT_INTERNAL}  internal error: a bug in streamrace (one line; --debug shows the traceback)
  {EXIT_NOTHING_RECORDED}  nothing recorded: no op or kernel in any trace (no CUDA, or no capture)
--exit-zero turns {EXIT_FINDINGS} and {EXIT_NOTHING_RECORDED} into 0, for jobs that only report."""

DIFF_EXIT_CODES = f"""exit codes:
  {EXIT_CLEAN}  B has no finding that A lacks
  {EXIT_FINDINGS}  B has a finding that A lacks (a new finding fails)
  {EXIT_ERROR}  usage or input error (one line on stderr)
  {EXIT_INTERNAL}  internal error: a bug in streamrace (one line; --debug shows the traceback)
  {EXIT_NOTHING_RECORDED}  nothing recorded in A or B: there is nothing to compare"""

ENV_EXIT_CODES = f"""exit codes:
  {EXIT_CLEAN}  the exports were printed (the trace folder exists: it is made when missing)
  {EXIT_ERROR}  usage error (one line on stderr): a trace folder that cannot be made or written
  {EXIT_INTERNAL}  internal error: a bug in streamrace (one line; --debug shows the traceback)"""

DEBUG_ENV = "STREAMRACE_DEBUG"


def debug_wanted(flag: bool = False) -> bool:
    """``--debug`` or ``STREAMRACE_DEBUG=1``: show the traceback of an internal error."""
    return flag or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def recorded_nothing(summary: Mapping[str, int]) -> bool:
    """An analysis summary with no op and no access: there was nothing to check."""
    return not summary.get("ops") and not summary.get("accesses")


NOTHING_RECORDED = "nothing-recorded"  # the note's code in the JSON report and SARIF


def nothing_recorded_message(summaries: Sequence[Mapping[str, int]], what: str) -> str:
    """``nothing recorded: {what} had ...``: what was seen instead, and the likely causes."""
    graphs = sum(int(s.get("graphs", 0)) for s in summaries)
    if graphs:
        seen = f"{graphs} CUDA graph capture{'s' if graphs != 1 else ''} but no op or kernel in them"
    else:
        seen = "no CUDA graph capture and no op"
    return f"nothing recorded: {what} had {seen} (no CUDA on this machine, or the code did not capture a graph)"


def nothing_recorded_note(
    summaries: Sequence[Mapping[str, int]], what: str, exit_zero: bool = True, accepted: bool = False
) -> str:
    """The one line that says why the exit code is EXIT_NOTHING_RECORDED; ``what`` names the
    inputs ("the trace", "2 traces", "the program"); ``exit_zero``: the command has --exit-zero;
    ``accepted``: it was given, so the exit code is 0 and the line says so."""
    return f"streamrace: {nothing_recorded_message(summaries, what)}; {nothing_recorded_exit(exit_zero, accepted)}"


def nothing_recorded_exit(exit_zero: bool = True, accepted: bool = False) -> str:
    """The exit code a nothing-recorded line ends with: the one the command really gives."""
    if accepted:
        return f"exit code {EXIT_CLEAN} (--exit-zero; {EXIT_NOTHING_RECORDED} without it)"
    return f"exit code {EXIT_NOTHING_RECORDED}" + (" (--exit-zero accepts it)" if exit_zero else "")
