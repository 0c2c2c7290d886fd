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

_MARKDOWN_CHARS = "\\`*_{}[]()<>#+-.!|~&"  # what markdown or inline HTML gives a meaning


def _escape_char(char: str) -> str:
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


_ASCII_ESCAPES = [(chr(code), f"\\x{code:02x}") for code in [*range(0x20), 0x7F]]


class _Escapes(dict[int, str]):
    """``str.translate``'s table: a code point's escape, worked out the first time it is met.
    One Python call per distinct character, not per character: a 4 MB name of newlines took
    6 s a pass through ``re.sub`` with a callback, and a report makes a dozen passes."""

    def __missing__(self, code: int) -> str:
        self[code] = escaped = _escape_char(chr(code))
        return escaped


def for_terminal(text: str) -> str:
    """``text`` with every character that ``str.isprintable`` rejects (control characters,
    ANSI escapes, line breaks, bidirectional overrides, zero-width and unassigned characters,
    lone surrogates) written as a Python escape (``\\x1b``, ``\\u202e``). Idempotent: its
    output is all printable."""
    if text.isprintable():
        return text
    if text.isascii():  # the 33 control characters, each replaced at C speed
        for char, escaped in _ASCII_ESCAPES:
            if char in text:
                text = text.replace(char, escaped)
        return text
    # A few distinct characters to escape (the usual case, however long the text): each
    # replaced at C speed. str.translate looks every character up through Python's mapping
    # protocol: 1.3 s a pass over a 4 MB name of bidirectional overrides.
    unprintable = [char for char in set(text) if not char.isprintable()]
    if len(unprintable) <= _FEW:
        for char in unprintable:
            text = text.replace(char, _escape_char(char))
        return text
    return text.translate(_Escapes())


_FEW = 64  # distinct characters to escape, past which one translate pass is cheaper


def for_markdown(text: str) -> str:
    """``text`` escaped for GitHub-flavoured markdown (SARIF ``message.markdown``): every
    character markdown or inline HTML gives a meaning is backslash-escaped, so a trace string
    shows as itself and never becomes a link, an image, a tag or a heading."""
    text = for_terminal(text)
    for char in _MARKDOWN_CHARS:  # the backslash first: the others' escapes add backslashes
        if char in text:
            text = text.replace(char, "\\" + char)
    return text


# A word (no space) longer than this is cut in the reports for people (text, HTML), which say
# how much is left out: wrapping a name of millions of characters cost time quadratic in it.
MAX_WORD = 500
# From a word's first character only: tried at each character of a word of up to MAX_WORD, it
# scanned to the word's end (a 4 MB name of 500-character words: 1 s a text holding it).
_LONG_WORD = re.compile(rf"(?<![^ ])[^ ]{{{MAX_WORD + 1},}}")


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
    """``text`` as a report for people shows it: escaped (``for_terminal``), then ``cut``."""
    return cut(for_terminal(text))


def cut(text: str) -> str:
    """Each word of more than MAX_WORD characters cut to that many, ``…`` and the count of the
    rest after it, and the whole cut likewise past MAX_TEXT characters."""
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
