"""The native hooks (csrc/recorder/): built on first use against the torch the program runs.

A torch extension must match its torch exactly (C++ ABI, headers), and pip cannot know which
torch a recording process will import, so the hooks are compiled the first time they are
needed (``torch.utils.cpp_extension``: a C++17 compiler and ninja; no CUDA toolkit) into a
cache directory keyed by the torch and Python versions and the sources. Later processes load
the cached build in milliseconds. The tables both sets of hooks keep (hook_tables.py) are
written into the build as ``hook_tables.h``.

The allocator trace tracker (csrc/recorder/allocator_facts.h: each allocation's exact size,
stream and pool) includes c10's CUDA allocator header, which needs the CUDA runtime's headers:
it is built (``-DSTREAMRACE_ALLOCATOR_TRACKER``, linked to ``libc10_cuda``) where torch is a
CUDA build and those headers are found (``CUDA_HOME``/``CUDA_PATH``, /usr/local/cuda, or the
``nvidia`` wheels a CUDA torch depends on: ``nvidia/cu13/include``, ``nvidia/cuda_runtime/
include``); elsewhere, or when that build fails, the hooks are built without it and the
recorder takes allocation facts from the allocator's history (``tracker_unavailable`` says why).

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
ENV_HOOK_TIMES = "STREAMRACE_HOOK_TIMES"
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


def _build_dir(torch_version: str, sources: pathlib.Path, tables: str, flags: list[str]) -> pathlib.Path:
    root = os.environ.get(ENV_BUILD_DIR)
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(cache, "streamrace", "native")
    digest = hashlib.sha256()
    for path in sorted(sources.iterdir()):
        if path.suffix in (".cpp", ".h"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(tables.encode())
    digest.update(" ".join([*CFLAGS, *flags]).encode())
    tag = f"torch{torch_version}-{sys.implementation.cache_tag}-{digest.hexdigest()[:12]}".replace("+", "_")
    return pathlib.Path(root) / tag


def cuda_include_dir() -> pathlib.Path | None:
    """Where ``cuda_runtime_api.h`` is: a CUDA toolkit's, or the nvidia wheels' own."""
    candidates = [pathlib.Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(pathlib.Path("/usr/local/cuda/include"))
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        candidates += [pathlib.Path(root) / sub / "include" for sub in ("cu13", "cu12", "cuda_runtime")]
    return next((c for c in candidates if (c / "cuda_runtime_api.h").is_file()), None)


def tracker_build() -> tuple[list[str], list[str], list[str]] | str:
    """(cflags, include dirs, ldflags) that build the allocator trace tracker, or why it is not."""
    import torch

    if torch.version.cuda is None:
        return "torch is not a CUDA build"
    torch_lib = pathlib.Path(torch.__file__).resolve().parent / "lib"
    if not any(torch_lib.glob("libc10_cuda.*")):
        return "torch has no libc10_cuda"
    include = cuda_include_dir()
    if include is None:
        return "no CUDA headers (cuda_runtime_api.h) found"
    return ["-DSTREAMRACE_ALLOCATOR_TRACKER"], [str(include)], ["-lc10_cuda"]


_MODULE: ModuleType | None = None
_FAILURE: str | None = None
tracker_unavailable: str | None = None  # why the loaded hooks have no allocator trace tracker


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
    global tracker_unavailable
    tracker = tracker_build()
    if isinstance(tracker, str):
        tracker_unavailable = tracker
        return _build_either(None)
    # A build of the tracker that failed once is not tried again in every process.
    failed = _build_dir_for(tracker, None) / "tracker_failed.txt"
    if failed.is_file():
        tracker_unavailable = failed.read_text().strip()
        return _build_either(None)
    try:
        return _build_either(tracker)
    except Exception as exc:  # a torch whose allocator header differs: the hooks without it
        tracker_unavailable = f"the allocator trace tracker did not build ({_last_line(exc)})"
        print(f"streamrace: {tracker_unavailable}; allocation facts come from the allocator's history", file=sys.stderr)
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(tracker_unavailable + "\n")
        return _build_either(None)


def _last_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__


def _build_either(tracker: Tracker | None) -> ModuleType:
    """The hooks with the GPU-trace interposer, else, where its vtable (generated from this
    torch's header) did not compile, without it; a failure is not tried again."""
    failed = _build_dir_for(tracker, None) / "interposer_failed.txt"
    if failed.is_file():
        return _build(tracker, failed.read_text().strip())
    try:
        return _build(tracker, None)
    except Exception as exc:
        why = f"the GPU-trace interposer did not build ({_last_line(exc)})"
        print(f"streamrace: {why}; building the native hooks without it", file=sys.stderr)
        failed.parent.mkdir(parents=True, exist_ok=True)
        failed.write_text(why + "\n")
        return _build(tracker, why)


Tracker = tuple[list[str], list[str], list[str]]  # tracker_build's (cflags, include dirs, ldflags)


def generated_headers(without_interposer: str | None = None) -> dict[str, str]:
    """The headers the build writes: the hook tables, the trace's field names (the same
    csrc/trace_fields.h the analysis core includes), and the GPU-trace forwarding vtable
    written from this torch's own header (trace_forwarding.py), or, with
    ``without_interposer`` (why not), none."""
    from torch.utils import cpp_extension

    from streamrace.record import hook_tables, trace_forwarding
    from streamrace.trace import generate

    forwarding = (
        trace_forwarding.without_interposer(without_interposer)
        if without_interposer is not None
        else trace_forwarding.generate(cpp_extension.include_paths())
    )
    # The trace's field names (the recorder's keys are held to them at compile time).
    fields = generate.cpp_header()
    return {"hook_tables.h": hook_tables.cpp_header(), "trace_forwarding.h": forwarding, "trace_fields.h": fields}


def _build_dir_for(tracker: Tracker | None, without_interposer: str | None) -> pathlib.Path:
    import torch

    cflags, includes, ldflags = tracker if tracker is not None else ([], [], [])
    headers = "".join(generated_headers(without_interposer).values())
    return _build_dir(torch.__version__, source_dir(), headers, [*cflags, *includes, *ldflags, *_extra_cflags()])


def _extra_cflags() -> list[str]:
    # Hook timers (hook_timers.h) for benchmarks/capture_overhead.py --hook-times: a build of
    # its own, never the default one.
    return ["-DSTREAMRACE_HOOK_TIMES"] if os.environ.get(ENV_HOOK_TIMES) == "1" else []


def _build(tracker: Tracker | None, without_interposer: str | None) -> ModuleType:
    import torch
    from torch.utils import cpp_extension

    cflags, includes, ldflags = tracker if tracker is not None else ([], [], [])
    sources = source_dir()
    build_dir = _build_dir_for(tracker, without_interposer)
    generated = build_dir / "include"
    generated.mkdir(parents=True, exist_ok=True)
    for name, text in generated_headers(without_interposer).items():
        header = generated / name
        if not header.is_file() or header.read_text() != text:
            header.write_text(text)
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
        extra_cflags=[*CFLAGS, *cflags, *_extra_cflags(), *(f"-isystem{path}" for path in includes)],
        extra_ldflags=ldflags,
        extra_include_paths=[str(sources), str(generated)],
        build_directory=str(build_dir),
        with_cuda=False,
        verbose=False,
    )
