"""``trace_forwarding.h``: a c10 PyInterpreterVTable that the native hooks put in front of
torch's own while recording, generated from the torch headers the build compiles against.

Every allocation, free and CUDA event torch reports goes to ``c10::impl::GPUTrace``'s
interpreter. Torch's own (Python's) imports ``torch.cuda._gpu_trace``, looks a registry up and
calls its ``fire_callbacks`` for each one, about 2 us a call, three an op in a decode step.
The native hooks instead put an interpreter of their own there (csrc/recorder/
trace_interposer.h): its ``trace_gpu_*`` methods call the hooks in C++ and hand the call on
to torch's interpreter only when a registry has Python callbacks of someone else's; every
other method hands straight on (nothing but the ``trace_gpu_*`` ones is called through
GPUTrace, but a vtable must have them all).

The vtable is abstract with some 40 methods, and torch adds and changes them between
releases, so the class is written from the header of the torch being built against, not by
hand: each pure virtual method becomes a forwarding override, and each ``trace_gpu_*`` method
of the table below whose parameters are (device type, then the hook's integers) an
interposed one. A header this cannot read, or a generated class that does not compile
(streamrace/record/native.py builds again without it), gives a build without the interposer
(``STREAMRACE_NO_INTERPOSER``, which says why); the recorder then attaches the hooks to
torch's Python registries as before.
"""

from __future__ import annotations

import pathlib
import re

from streamrace.record.hook_tables import GPU_TRACE_HOOKS

HEADER = pathlib.Path("c10", "core", "impl", "PyInterpreter.h")

# torch's trace_gpu_* method -> the native hook it calls, and how many integer arguments
# follow the device type (the hooks' table says).
INTERPOSED = {h.trace_method: (h.hook, h.arity) for h in GPU_TRACE_HOOKS}

_PURE_VIRTUAL = re.compile(
    r"virtual\s+(?P<ret>[^;{}()]*?)\s*\b(?P<name>\w+)\s*\((?P<params>[^;{}()]*)\)\s*const\s*=\s*0\s*;"
)
_NAMED = re.compile(r"^(?P<type>.*[\s*&])(?P<name>[A-Za-z_]\w*)$")
# Words a type ends with that are no parameter's name ("long double" is a type, unnamed).
_TYPE_WORDS = {"const", "volatile", "unsigned", "signed", "long", "short", "int", "char", "bool", "float", "double"}


class UnreadableHeader(ValueError):
    """The header's vtable is not in the shape this generator reads."""


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _struct_body(text: str, name: str) -> str:
    start = re.search(rf"struct\s+(?:\w+\s+)?{name}\s*\{{", text)
    if start is None:
        raise UnreadableHeader(f"no struct {name}")
    depth, i = 1, start.end()
    while depth and i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    if depth:
        raise UnreadableHeader(f"struct {name} does not end")
    return text[start.end() : i - 1]


def _split_params(params: str) -> list[str]:
    out, depth, current = [], 0, ""
    for ch in params:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current.strip())
    return [" ".join(p.split()) for p in out]


def _named(params: list[str]) -> list[tuple[str, str]]:
    """(type, name) of each parameter, naming the unnamed ones (with a prefix of ours, so that
    no name is taken twice)."""
    out = []
    for i, param in enumerate(params):
        if any(c in param for c in "=()[]") or "..." in param or param == "void":
            raise UnreadableHeader(f"parameter {param!r}")
        match = _NAMED.match(param)
        if match is not None and match["type"].strip() and match["name"] not in _TYPE_WORDS:
            type_words = set(match["type"].replace("*", " ").replace("&", " ").split())
            if type_words and not type_words <= {"const", "volatile"}:
                out.append((match["type"].strip(), match["name"]))
                continue
        out.append((param, f"streamrace_arg{i}"))
    return out


def methods(header_text: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(return type, name, [(type, name)]) of each pure virtual method of PyInterpreterVTable."""
    body = _struct_body(_strip_comments(header_text), "PyInterpreterVTable")
    if "#" in body:  # a conditional member: which branch the compiler takes is not ours to guess
        raise UnreadableHeader("a preprocessor line inside the vtable")
    found = [
        (" ".join(m["ret"].split()), m["name"], _named(_split_params(m["params"])))
        for m in _PURE_VIRTUAL.finditer(body)
    ]
    declared = len(re.findall(r"\bvirtual\b", body)) - len(re.findall(r"virtual\s+~", body))
    if not found or len(found) != declared:
        raise UnreadableHeader(f"read {len(found)} of {declared} virtual methods")
    return found


def _method(ret: str, name: str, params: list[tuple[str, str]]) -> tuple[str, str | None]:
    """One override, and the hook it interposes (None: it only forwards)."""
    signature = f"{ret} {name}({', '.join(f'{t} {n}' for t, n in params)}) const override"
    # Each argument as it came (a by-value or && parameter moved on, a reference as itself).
    forward = f"(*Sink::inner())->{name}({', '.join(f'std::forward<decltype({n})>({n})' for _, n in params)})"
    hook = INTERPOSED.get(name)
    if hook is not None and ret == "void" and params and params[0][0].endswith("DeviceType"):
        hook_name, arity = hook
        if len(params) == 1 + arity and all(t == "uintptr_t" for t, _ in params[1:]):
            args = "".join(f", static_cast<int64_t>({n})" for _, n in params[1:])
            call = f"Sink::{hook_name}({params[0][1]}{args})"
            return f"    {signature} {{\n        if ({call}) {forward};\n    }}", hook_name
    return f"    {signature} {{ return {forward}; }}", None


def without_interposer(why: str) -> str:
    """The header of a build without the interposer, which says why."""
    text = " ".join(why.split()).replace("\\", "/").replace('"', "'")
    return (
        "// Generated by streamrace/record/trace_forwarding.py: no interposer for this torch.\n"
        f'#pragma once\n#define STREAMRACE_NO_INTERPOSER "{text}"\n'
    )


def cpp_header(header_text: str) -> str:
    """The generated header: ``ForwardingVTable<Sink>`` and the hooks it interposes, or, for a
    header this cannot read, ``STREAMRACE_NO_INTERPOSER`` and why."""
    try:
        found = methods(header_text)
    except UnreadableHeader as exc:
        return without_interposer(f"torch's PyInterpreterVTable was not read ({exc})")
    bodies, interposed = [], []
    for ret, name, params in found:
        body, hook = _method(ret, name, params)
        bodies.append(body)
        if hook is not None:
            interposed.append(hook)
    if not interposed:
        return without_interposer(
            "torch's PyInterpreterVTable was not read (no trace_gpu_* method in the expected shape)"
        )
    names = ", ".join(f'"{h}"' for h in interposed)
    joined = "\n".join(bodies)
    return f"""\
// Generated by streamrace/record/trace_forwarding.py from torch's {HEADER.as_posix()}: edit that.
#pragma once

#include <c10/core/impl/PyInterpreter.h>

#include <cstdint>
#include <utility>

// Inside c10::impl, so that the header's own unqualified names (TensorImpl, DispatchKey) mean
// here what they mean there.
namespace c10::impl::streamrace_generated {{

// The hooks whose trace_gpu_* method the vtable below interposes.
inline constexpr const char* kInterposedHooks[] = {{{names}}};
inline constexpr int kInterposedCount = {len(interposed)};

// Sink::inner(): the interpreter every call is handed on to. Sink::<hook>(device type,
// integers...): runs the native hook when the call is for the recorded device, and says
// whether torch's own interpreter must still be called (others' Python callbacks).
template <typename Sink>
struct ForwardingVTable final : PyInterpreterVTable {{
{joined}
}};

}}  // namespace c10::impl::streamrace_generated
"""


def generate(include_dirs: list[str]) -> str:
    """The header for the torch whose include directories these are."""
    for root in include_dirs:
        path = pathlib.Path(root) / HEADER
        if path.is_file():
            return cpp_header(path.read_text(errors="replace"))
    return cpp_header("")
