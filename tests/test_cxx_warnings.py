"""Both C++ builds compile without a warning of ours under -Wall -Wextra (their flags).

The builds themselves warn rather than fail (a newer compiler's new warning must not stop a
user's recording or install); this holds CI to no warnings. Torch's and Python's headers are
system headers to both builds, and pybind11's are here (setup.py includes them with -I; they
do not warn today): their warnings are not ours.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMPILER = shutil.which("c++")

pytestmark = [
    pytest.mark.skipif(COMPILER is None, reason="no C++ compiler"),
    # What the compiler says does not depend on the analysis engine: CI runs the suite once
    # with each, and these once.
    pytest.mark.skipif(os.environ.get("STREAMRACE_CORE") == "python", reason="once is enough: not the engine's"),
]


def _warnings(source: pathlib.Path, flags: list[str], includes: list[str], system: list[str]) -> str:
    command = [COMPILER, "-fsyntax-only", "-Werror", *flags, str(source)]
    command += [f"-I{path}" for path in includes]
    command += [arg for path in system for arg in ("-isystem", path)]
    result = subprocess.run(command, capture_output=True, text=True)
    return result.stderr if result.returncode else ""


@pytest.mark.parametrize("variant", ["default", "hook timers", "no interposer"])
def test_the_native_hooks_compile_without_warnings(tmp_path, variant):
    pytest.importorskip("torch")
    from torch.utils import cpp_extension

    from streamrace.record import native, trace_forwarding

    for name, text in native.generated_headers().items():
        (tmp_path / name).write_text(text)
    if variant == "no interposer":  # a torch whose PyInterpreter.h the generator cannot read
        (tmp_path / "trace_forwarding.h").write_text(trace_forwarding.cpp_header(""))
    defines = ["-DTORCH_EXTENSION_NAME=streamrace_native_hooks", "-DTORCH_API_INCLUDE_EXTENSION_H", "-fPIC"]
    if variant == "hook timers":
        defines.append("-DSTREAMRACE_HOOK_TIMES")
    system = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    sources = ROOT / "csrc" / "recorder"
    assert "-Wall" in native.CFLAGS and "-Wextra" in native.CFLAGS
    errors = _warnings(sources / "recorder.cpp", [*defines, *native.CFLAGS], [str(sources), str(tmp_path)], system)
    assert errors == "", errors


def test_the_allocator_trace_tracker_compiles_without_warnings(tmp_path):
    """The part built only where CUDA headers are found (STREAMRACE_ALLOCATOR_TRACKER), against
    this torch's c10 headers; a CPU wheel lacks c10's generated CUDA macros header, which says
    only how c10_cuda was linked, so a stand-in is given."""
    pytest.importorskip("torch")
    from torch.utils import cpp_extension

    from streamrace.record import native

    cuda = native.cuda_include_dir()
    if cuda is None:
        pytest.skip("no CUDA headers here")
    for name, text in native.generated_headers().items():
        (tmp_path / name).write_text(text)
    system = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], str(cuda)]
    if not any((pathlib.Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").is_file() for p in system):
        stand_in = tmp_path / "stand_in" / "c10" / "cuda" / "impl"
        stand_in.mkdir(parents=True)
        (stand_in / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        system.append(str(tmp_path / "stand_in"))
    defines = ["-DTORCH_EXTENSION_NAME=streamrace_native_hooks", "-DTORCH_API_INCLUDE_EXTENSION_H", "-fPIC"]
    defines.append("-DSTREAMRACE_ALLOCATOR_TRACKER")
    sources = ROOT / "csrc" / "recorder"
    errors = _warnings(sources / "recorder.cpp", [*defines, *native.CFLAGS], [str(sources), str(tmp_path)], system)
    assert errors == "", errors


def test_the_analysis_core_compiles_without_warnings():
    pybind11 = pytest.importorskip("pybind11")
    assert '"-Wall", "-Wextra"' in (ROOT / "setup.py").read_text(), "the flags setup.py builds _core with"
    flags = ["-std=c++17", "-fvisibility=hidden", "-fPIC", "-O2", "-Wall", "-Wextra"]
    system = [pybind11.get_include(), sysconfig.get_paths()["include"]]
    errors = _warnings(ROOT / "csrc" / "core.cpp", flags, [str(ROOT / "csrc")], system)
    assert errors == "", errors


def _compile_key(tmp_path, expression: str) -> str:
    """The errors of a file of the native hooks' that returns one key `expression`."""
    pytest.importorskip("torch")
    from torch.utils import cpp_extension

    from streamrace.record import native

    for name, text in native.generated_headers().items():
        (tmp_path / name).write_text(text)
    source = tmp_path / "key.cpp"
    source.write_text(f'#include "event_dict.h"\nPyObject* key() {{ return {expression}; }}\n')
    system = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    includes = [str(ROOT / "csrc" / "recorder"), str(tmp_path)]
    return _warnings(source, [*native.CFLAGS, "-fPIC"], includes, system)


@pytest.mark.parametrize(("key", "declared"), [("addr", True), ("_exact", True), ("adrr", False)])
def test_a_recorder_key_the_trace_does_not_declare_fails_the_build(tmp_path, key, declared):
    """The native hooks' keys (STREAMRACE_KEY) are held at compile time to the field names
    streamrace/trace/kinds.py declares (trace_fields.h), the recorder's own '_' keys aside."""
    errors = _compile_key(tmp_path, f'STREAMRACE_KEY("{key}")')
    if declared:
        assert errors == "", errors
    else:
        assert "not a field of the trace format" in errors


@pytest.mark.parametrize(
    ("key", "kinds", "declared"),
    [
        ("addr", '"alloc"', True),
        ("stack", '"free"', True),  # a field any event may carry
        ("_graph", '"alloc"', True),  # the recorder's own, taken off before writing
        ("event", '"event_create", "event_delete", "event_sync"', True),
        ("size", '"free"', False),  # alloc's, not free's
        ("event", '"event_record", "stream_sync"', False),  # one of two kinds lacks it
        ("stream", '"stream_snyc"', False),  # no such kind, though any event may carry a stream
    ],
)
def test_an_emitter_writes_only_its_kind_s_fields(tmp_path, key, kinds, declared):
    """Each case of the native drain (STREAMRACE_FIELD) names the kinds it writes: a key the
    declaration does not give every one of them fails the build."""
    errors = _compile_key(tmp_path, f'STREAMRACE_FIELD("{key}", {kinds})')
    if declared:
        assert errors == "", errors
    else:
        assert "not a field of these kinds" in errors
