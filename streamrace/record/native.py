"""The native hooks (csrc/recorder/): built on first use against the torch the program runs.

A torch extension must match its torch exactly (C++ ABI, headers), and pip cannot know which
torch a recording process will import, so the hooks are compiled the first time they are
needed (``torch.utils.cpp_extension``: a C++17 compiler and ninja; no CUDA toolkit, since
nothing here includes a CUDA header) into a cache directory keyed by the torch and Python
versions and the sources. Later processes load the cached build in milliseconds. The tables
both sets of hooks keep (hook_tables.py) are written into the build as ``hook_tables.h``.

``STREAMRACE_HOOKS`` picks the hooks: ``auto`` (the default: native, or the Python hooks with
a warning when they cannot be built), ``native`` (an error when they cannot), ``python``.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import sys
from types import ModuleType

ENV_HOOKS = "STREAMRACE_HOOKS"
ENV_BUILD_DIR = "STREAMRACE_BUILD_DIR"
CHOICES = ("auto", "native", "python")
# NDEBUG as torch itself is built: RecordFunction's layout depends on it. Hidden visibility,
# as pybind11 asks of a module (its types are hidden; ours hold them). -Wall -Wextra: the
# build has no warnings of ours (torch's and Python's headers are system headers to it).
CFLAGS = ("-O2", "-std=c++17", "-DNDEBUG", "-fvisibility=hidden", "-Wall", "-Wextra")


class NativeUnavailable(RuntimeError):
    """The native hooks could not be built or loaded here; the message says why."""


def hooks_choice() -> str:
    choice = os.environ.get(ENV_HOOKS, "auto") or "auto"
    if choice not in CHOICES:
        raise NativeUnavailable(f"{ENV_HOOKS}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


def source_dir() -> pathlib.Path:
    """Where the C++ sources are: inside the installed package, or csrc/ of a checkout."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "_native_src", here.parents[1] / "csrc" / "recorder"):
        if (candidate / "recorder.cpp").is_file():
            return candidate
    raise NativeUnavailable("the native recorder's sources are not installed")


def _build_dir(torch_version: str, sources: pathlib.Path, tables: str) -> pathlib.Path:
    root = os.environ.get(ENV_BUILD_DIR)
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(cache, "streamrace", "native")
    digest = hashlib.sha256()
    for path in sorted(sources.iterdir()):
        if path.suffix in (".cpp", ".h"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(tables.encode())
    digest.update(" ".join(CFLAGS).encode())
    tag = f"torch{torch_version}-{sys.implementation.cache_tag}-{digest.hexdigest()[:12]}".replace("+", "_")
    return pathlib.Path(root) / tag


_MODULE: ModuleType | None = None
_FAILURE: str | None = None


def load() -> ModuleType:
    """The compiled hooks module (built here the first time); NativeUnavailable otherwise."""
    global _MODULE, _FAILURE
    if _MODULE is not None:
        return _MODULE
    if _FAILURE is not None:
        raise NativeUnavailable(_FAILURE)
    try:
        _MODULE = _build_and_import()
    except NativeUnavailable as exc:
        _FAILURE = str(exc)
        raise
    except Exception as exc:  # a compiler error, a missing tool: one line, then the fallback
        _FAILURE = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        raise NativeUnavailable(_FAILURE) from exc
    return _MODULE


def _build_and_import() -> ModuleType:
    import torch
    from torch.utils import cpp_extension

    from streamrace.record.hook_tables import cpp_header

    sources = source_dir()
    tables = cpp_header()
    build_dir = _build_dir(torch.__version__, sources, tables)
    generated = build_dir / "include"
    generated.mkdir(parents=True, exist_ok=True)
    header = generated / "hook_tables.h"
    if not header.is_file() or header.read_text() != tables:
        header.write_text(tables)
    name = "streamrace_native_hooks"
    built = (build_dir / f"{name}.so").exists()
    if not built:
        print(
            f"streamrace: building the native recorder for torch {torch.__version__} (once; about a minute)",
            file=sys.stderr,
        )
    return cpp_extension.load(
        name=name,
        sources=[str(sources / "recorder.cpp")],
        extra_cflags=list(CFLAGS),
        extra_include_paths=[str(sources), str(generated)],
        build_directory=str(build_dir),
        with_cuda=False,
        verbose=False,
    )
