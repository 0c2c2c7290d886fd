"""Trace strings made safe for where they are shown.

A trace is input: its file names, function names, op names, stream names and recorder
messages are whatever its writer put there, escape sequences included. Printed raw, an
``ESC [`` sequence rewrites the terminal (or a CI log), a newline forges a report line, a
bidirectional override reorders what a reviewer reads, and a lone surrogate cannot be
encoded at all. SARIF viewers render messages as text or markdown, so markup in a trace
string must not become a link or HTML there.
"""

from __future__ import annotations

import re
from typing import Any

_UNPRINTABLE = re.compile(r"[^ -~]")  # everything but printable ASCII goes to the slow path
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~&])")


def _escape_char(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def for_terminal(text: str) -> str:
    """``text`` with every character that ``str.isprintable`` rejects (control characters,
    ANSI escapes, line breaks, bidirectional overrides, zero-width and unassigned characters,
    lone surrogates) written as a Python escape (``\\x1b``, ``\\u202e``). Idempotent: its
    output is all printable."""
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: _escape_char(m.group()), text)


def for_markdown(text: str) -> str:
    """``text`` escaped for GitHub-flavoured markdown (SARIF ``message.markdown``): every
    character markdown or inline HTML gives a meaning is backslash-escaped, so a trace string
    shows as itself and never becomes a link, an image, a tag or a heading."""
    return _MARKDOWN.sub(r"\\\1", for_terminal(text))


# A word (no space) longer than this is cut in the reports for people (text, HTML), which say
# how much is left out: wrapping a name of millions of characters cost time quadratic in it.
MAX_WORD = 500
_LONG_WORD = re.compile(rf"[^ ]{{{MAX_WORD + 1},}}")


def _cut_to(text: str, limit: int) -> str:
    """``text``'s first ``limit`` characters, ``…`` and how many more there are."""
    kept = text[:limit]
    # A backtick cut off would leave a code span open to the end of the paragraph.
    closing = "`" if kept.count("`") % 2 else ""
    return f"{kept}…{closing} ({len(text) - limit:,} more characters)"


def _cut(match: re.Match[str]) -> str:
    return _cut_to(match.group(), MAX_WORD)


# A whole text (a message, a fix, a name with spaces in it) longer than this is cut as well: a
# trace's 4 MB name of short words would otherwise be wrapped and drawn whole.
MAX_TEXT = 20_000


def shown(text: str) -> str:
    """``text`` as a report for people shows it: escaped (``for_terminal``), each word of
    more than MAX_WORD characters cut to that many, ``…`` and the count of the rest after it,
    and the whole cut likewise past MAX_TEXT characters."""
    text = for_terminal(text)
    if len(text) <= MAX_WORD:
        return text
    text = _LONG_WORD.sub(_cut, text)
    return _cut_to(text, MAX_TEXT) if len(text) > MAX_TEXT else text


def printable_strings(data: Any, keep: frozenset[str] = frozenset(), cut: bool = False) -> Any:
    """``data`` (JSON-ready: dicts, lists, strings, numbers) with every string passed through
    ``for_terminal``, except the values of the keys in ``keep`` (text already made safe, with
    its own line breaks). A page or a trace viewer draws a bidirectional override or a
    control character as the trace's writer wanted: a name that reads as another. ``cut``:
    long words are cut as ``shown`` cuts them (a report for people)."""
    if isinstance(data, str):
        return shown(data) if cut else for_terminal(data)
    if isinstance(data, dict):
        return {k: v if k in keep else printable_strings(v, keep, cut) for k, v in data.items()}
    if isinstance(data, list):
        return [printable_strings(v, keep, cut) for v in data]
    return data
