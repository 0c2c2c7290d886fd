"""Kernel names for people: C++ symbols (``_ZN2at4cuda...``) demangled for the visual reports.

A kernel the dispatcher never saw is named by its mangled symbol. The HTML and Perfetto reports
show it demangled; the JSON and SARIF reports keep the trace's raw name, which is what tools
match on. Demangling is the ``c++filt`` binary's, when it is on PATH: one process for all the
names of a report (names on stdin, one a line), never one per name. Without it, or if it fails,
a name is shown as it is.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

# A mangled name as c++filt reads it: one line, no space. Anything else (a hostile name with a
# newline in it) is left alone, so that the output's lines stay one per name.
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")
TIMEOUT_S = 10


def demangled(names: Iterable[str]) -> dict[str, str]:
    """Each mangled name of ``names`` -> its demangled form; names that are not mangled, or
    that could not be demangled, are not in the result."""
    mangled = sorted({name for name in names if _MANGLED.fullmatch(name)})
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    try:
        done = subprocess.run(
            [tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=TIMEOUT_S, check=True
        )
    except (OSError, subprocess.SubprocessError, UnicodeError):
        return {}
    lines = done.stdout.splitlines()
    if len(lines) != len(mangled):  # not one line per name: trust none of them
        return {}
    return {raw: text for raw, text in zip(mangled, lines, strict=True) if text and text != raw}
