"""The native hooks (csrc/recorder/) on CPU tensors: the same ops and byte ranges as the Python
reference, stacks at the user's line, the callbacks' bookkeeping, failures kept in the trace.

On the GPU, tests/gpu/test_hooks_gpu.py records whole captures with both sets of hooks and
compares the traces."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

from op_engines import (  # noqa: E402
    cpu_hooks,
    native_events,
    native_module,
    native_ops,
    python_ops,
    record_trace_calls,
)
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from streamrace.record import native  # noqa: E402
from streamrace.record.stacks import StackTable  # noqa: E402

_PROFILES: list[list[str]] = []


def _profiled_kernel(x: torch.Tensor) -> torch.Tensor:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y = x.mul(2).add(1)
    _PROFILES.append(sorted(e.name for e in prof.events()))
    return y


class _Custom:
    """Custom ops, as serving engines register them: one composite, one with its own kernel."""

    lib = torch.library.Library("streamrace_test_hooks", "DEF")
    lib.define("fused_gelu(Tensor x) -> Tensor")
    lib.define("scale_(Tensor(a!) x, float factor) -> Tensor(a!)")
    lib.impl("fused_gelu", lambda x: torch.nn.functional.gelu(x) * 2, "CompositeImplicitAutograd")
    lib.impl("scale_", lambda x, factor: x.mul_(factor), "CPU")
    # A kernel that profiles its own work (what the profiler saw: _PROFILES).
    lib.define("profiled(Tensor x) -> Tensor")
    lib.impl("profiled", lambda x: _profiled_kernel(x), "CPU")
    # Called by one test alone: the hooks learn, process-wide, whether a kernel calls ops.
    lib.define("square_plus_(Tensor(a!) x) -> Tensor(a!)")
    lib.impl("square_plus_", lambda x: x.mul_(x).add_(1.0).abs_(), "CPU")


def _program(t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Many kinds of op: composites, views, in-place, out=, index writes, lists, modes."""
    a, w, b, idx = t["a"], t["w"], t["b"], t["idx"]
    out = [torch.nn.functional.linear(a, w, b)]
    out.append((a @ w.t()).softmax(-1))
    out.append(torch.cat([out[0], out[1]], 1))
    out[-1].add_(1)
    torch.add(a, a, out=t["out"])
    out.append(a.to(torch.float64).contiguous())
    out.append(torch.nn.functional.layer_norm(a, (a.shape[1],)))
    dest = torch.zeros(8, a.shape[1])
    dest.index_copy_(0, idx, a[: len(idx)])
    dest[idx] = 3.0  # index_put_
    out.append(dest.T.contiguous())
    out.extend(torch.split(a, 3))
    out.append(torch.where(a > 0, a, torch.zeros_like(a)).masked_fill_(a < -1, 0.5))
    out.append(torch.einsum("ij,kj->ik", a, w))
    out.append(torch.stack([a, a]).sum(0).cumsum(1))
    out.append(torch.ops.streamrace_test_hooks.fused_gelu(a))
    out.append(torch.ops.streamrace_test_hooks.scale_(a.clone(), 0.5))
    with torch.no_grad():
        out.append(torch.nn.functional.linear(a, w) * 2)
    with torch.inference_mode():
        out.append((a @ w.t()).softmax(-1))
    return out


def _training_step(t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Autograd: the forward ops, the backward's, the gradient's accumulation."""
    leaf = t["w"].clone().requires_grad_()
    for _ in range(2):
        (t["a"] @ leaf.t()).relu().sum().backward()
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.LayerNorm(8))
    torch.manual_seed(0)
    model(t["a"]).square().mean().backward()
    return [leaf.grad, *(p.grad for p in model.parameters())]


def _inputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(6, 16, generator=gen),
        "w": torch.randn(32, 16, generator=gen),
        "b": torch.randn(32, generator=gen),
        "idx": torch.tensor([0, 2, 5]),
        "out": torch.empty(0),
    }


def _shape_of(ops: list[tuple[str, list, list]]) -> list[tuple]:
    """What two runs have in common: op names and the shapes of what each touched."""

    def shapes(ranges: list[dict]) -> list[tuple]:
        return [(r.get("shape"), r.get("stride"), r.get("itemsize")) for r in ranges]

    return [(name, shapes(reads), shapes(writes)) for name, reads, writes in ops]


def test_native_and_python_hooks_record_the_same_ops():
    native_module()
    inputs = _inputs()
    outputs = {}
    # One execution seen by both at once: the same tensors, so the same addresses.
    events = native_events(lambda: outputs.setdefault("both", python_ops(lambda: outputs.update(r=_program(inputs)))))
    native_ops = [(e["op"], e["reads"], e["writes"]) for e in events if e["ev"] == "op"]
    reference = outputs["both"]
    assert len(native_ops) >= 25
    assert [op[0] for op in native_ops] == [op[0] for op in reference]
    assert native_ops == reference
    names = {op[0] for op in native_ops}
    assert {"aten::addmm", "aten::mm", "aten::index_put_", "streamrace_test_hooks::scale_"} <= names
    assert "aten::linear" not in names or "aten::matmul" in names, "composites only where autograd is off"
    assert "streamrace_test_hooks::fused_gelu" not in names, "a composite custom op is seen in parts"

    # Alone, the native hooks see the same ops, and the program computes the same values.
    alone, fresh = {}, _inputs()
    events = native_events(lambda: alone.update(r=_program(fresh)))
    assert _shape_of([(e["op"], e["reads"], e["writes"]) for e in events if e["ev"] == "op"]) == _shape_of(reference)
    plain = _program(_inputs())
    assert all(torch.equal(x, y) for x, y in zip(plain, alone["r"], strict=True))


def test_a_long_recording_keeps_every_range_across_the_logs_chunks():
    """Thousands of ops on strided views of one to five dimensions: more records, ranges and
    shape-and-stride runs than one of the log's chunks holds (csrc/recorder/chunked.h), a run
    never split between two. Every op's ranges are the Python hooks', seen at once."""
    native_module()
    base = torch.arange(4 * 6 * 5 * 3 * 2, dtype=torch.float32)
    shapes = [(720,), (24, 30), (6, 10, 12), (4, 6, 5, 6), (4, 3, 2, 5, 6)]

    def program():
        for i in range(2500):
            view = base.view(shapes[i % 5])
            view = view.transpose(0, -1) if view.dim() > 1 else view[:: 1 + i % 3]
            torch.mul(view, 2.0)

    for _ in range(2):  # the second recording writes into the chunks the first gave back
        outputs = {}
        events = native_events(lambda outputs=outputs: outputs.setdefault("both", python_ops(program)))
        native_ops = [(e["op"], e["reads"], e["writes"]) for e in events if e["ev"] == "op"]
        assert len(native_ops) == 2500
        assert native_ops == outputs["both"]
        assert {len(op[1][0].get("shape", ())) for op in native_ops} == {1, 2, 3, 4, 5}


def test_a_tensor_of_thousands_of_dimensions_is_recorded_whole():
    """A strided range's shape and stride are kept in one run; 5,000 dimensions make a run
    longer than one of the log's chunks (an allocation of its own, not a recorder error)."""
    native_module()
    strided = torch.ones([3] + [1] * 5000)[::2]
    outputs = {}
    events = native_events(lambda: outputs.setdefault("both", python_ops(lambda: torch.mul(strided, 2.0))))
    assert not [e for e in events if e["ev"] == "recorder_error"]
    native_ops = [(e["op"], e["reads"], e["writes"]) for e in events if e["ev"] == "op"]
    assert native_ops == outputs["both"] and len(native_ops[0][1][0]["shape"]) == 5001


def test_native_and_python_hooks_record_the_same_training_step():
    # Separate runs: under a TorchDispatchMode, autograd's TLS snapshot changes what nests in
    # what, so the two cannot watch one autograd execution together; shapes must agree.
    native_module()
    first, second = _inputs(), _inputs()
    reference = python_ops(lambda: _training_step(first))
    result = {}
    events = native_events(lambda: result.update(grads=_training_step(second)))
    ops = [(e["op"], e["reads"], e["writes"]) for e in events if e["ev"] == "op"]
    assert _shape_of(ops) == _shape_of(reference)
    assert {"aten::threshold_backward", "aten::add_.Tensor", "aten::native_layer_norm_backward"} <= {o[0] for o in ops}
    assert all(torch.equal(x, y) for x, y in zip(_training_step(_inputs()), result["grads"], strict=True))


def test_op_stacks_point_at_the_users_line():
    a = torch.ones(4)

    def user_code():
        torch.add(a, a)
        torch.add(a, a)
        return torch.mul(a, a)

    first = inspect.getsourcelines(user_code)[1] + 1
    events = native_events(lambda: (user_code(), user_code()))
    stacks = {e["id"]: e for e in events if e["ev"] == "stack"}
    ops = [e for e in events if e["ev"] == "op"]
    assert [stacks[op["stack"]]["frames"][0][1] for op in ops] == [first, first + 1, first + 2] * 2
    assert all(stacks[op["stack"]]["seq"] < op["seq"] for op in ops), "a stack is defined before its use"
    assert len(stacks) == 3, "one entry per distinct stack"
    top = stacks[ops[0]["stack"]]["frames"][0]
    assert top == ["tests/test_native_hooks.py", first, "user_code"]
    assert not any("torch" in f[0] or "streamrace/" in f[0] for s in stacks.values() for f in s["frames"])


def _recorded_with_walks(fn, shown_path=None) -> tuple[list[dict], tuple[int, int]]:
    """``fn`` recorded by the native hooks on the CPU: its records, and of its ops' stack
    walks, how many were found without the GIL and how many took it back."""
    hooks = cpu_hooks(shown_path)
    hooks.start()
    try:
        fn()
    finally:
        hooks.stop()
        events, walks = hooks.state.drain(), hooks.state.op_stack_walks()
        hooks.release_python()
    return events, walks


def test_op_stacks_are_the_python_walks_through_every_kind_of_frame():
    """Generators, a coroutine, comprehensions (inlined since 3.12), a lambda, recursion deeper
    than the depth kept, another thread: each op's stack is what the Python hooks' walk gives
    at that line (StackTable, the reference), on the first round, when the stack is new, and on
    the next two, when it is found again without the GIL."""
    a = torch.ones(4)
    reference: dict[int, list] = {}
    table = StackTable(lambda kind, id, frames: reference.__setitem__(id, frames), depth=6, max_walk=48)
    expected: list[int] = []

    def leaf():
        return table.capture(skip=1), torch.add(a, a)  # one line: the walk and the op see it alike

    def generator():
        for _ in range(2):
            yield leaf()

    def deep(n):
        return deep(n - 1) if n else leaf()

    async def coroutine():
        return leaf()

    def one_round():
        expected.append(leaf()[0])
        expected.extend(pair[0] for pair in generator())
        expected.extend([leaf()[0] for _ in range(2)])
        expected.append(deep(10)[0])
        running = coroutine()
        with pytest.raises(StopIteration) as done:
            running.send(None)
        expected.append(done.value.value[0])
        expected.append((lambda: leaf()[0])())
        worker = threading.Thread(target=lambda: expected.append(leaf()[0]))
        worker.start()
        worker.join()

    events, (found, took) = _recorded_with_walks(lambda: [one_round() for _ in range(3)])
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    ops = [e for e in events if e["ev"] == "op"]
    assert len(ops) == len(expected) == 3 * 9
    assert [stacks[op["stack"]] for op in ops] == [reference[i] for i in expected]
    assert any(len(reference[i]) == 6 for i in expected), "the recursion is deeper than the depth kept"
    assert found + took == len(ops)
    if native_module().frames_without_gil:
        assert took <= 9 and found >= 2 * 9, "after the first round every stack is found without the GIL"
    else:
        assert found == 0


def test_a_code_object_at_a_dead_ones_address_gets_its_own_lines():
    """Code compiled and run over and over dies each time, and the next one may take its
    address: an op's line comes from its own code, whether its stack is walked with the GIL
    or found without it."""
    a = torch.ones(4)
    blank_lines = [3, 1, 4, 1, 5, 9, 2, 6] * 4

    def run_each():
        for blanks in blank_lines:
            exec(compile("\n" * blanks + "torch.add(a, a)", "generated_user_code.py", "exec"), {"torch": torch, "a": a})

    def shown_path(code):
        return code.co_filename if code.co_filename == "generated_user_code.py" else None

    events, _ = _recorded_with_walks(run_each, shown_path)
    stacks = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    tops = [stacks[e["stack"]][0] for e in events if e["ev"] == "op"]
    assert tops == [["generated_user_code.py", blanks + 1, "<module>"] for blanks in blank_lines]


def test_a_stack_is_defined_before_any_thread_uses_it():
    """Threads meet the same new lines at once: one walks each new stack with the GIL while the
    others, without it, may already find it. Every op names its own line, and no op names a
    stack before its definition (a stress test: the window it guards, between a stack's
    publication and its definition, is a few instructions wide, closed by construction in
    UserStacks.capture)."""
    a = torch.ones(4)
    lines = "\n".join("    torch.add(a, a)" for _ in range(300))
    namespace = {"torch": torch, "a": a}
    exec(compile(f"def many_lines():\n{lines}\n", "generated_user_code.py", "exec"), namespace)
    start = threading.Barrier(4)

    def worker():
        start.wait()
        namespace["many_lines"]()

    def run():
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def shown_path(code):
        return code.co_filename if code.co_filename == "generated_user_code.py" else None

    events, _ = _recorded_with_walks(run, shown_path)
    defined = {e["id"]: e["seq"] for e in events if e["ev"] == "stack"}
    ops = [e for e in events if e["ev"] == "op"]
    assert len(ops) == 4 * 300 and len(defined) == 300
    frames = {e["id"]: e["frames"] for e in events if e["ev"] == "stack"}
    tops = sorted(frames[op["stack"]][0][1] for op in ops)
    assert tops == sorted(list(range(2, 302)) * 4)
    late = [op["seq"] for op in ops if not defined[op["stack"]] < op["seq"]]
    assert not late, f"{len(late)} ops name a stack defined after them"


def _in_a_process_of_its_own(script: str) -> subprocess.CompletedProcess:
    """A script run by this interpreter (a crash or a hang there fails the test, not the run)."""
    native_module()  # built here first, so the child only loads it
    prelude = (
        "import threading, time, torch\n"
        "from streamrace.record import native\n"
        "from streamrace.record.hooks import HookOptions, NativeHooks\n"
        "from streamrace.record.stacks import UserCode\n"
        "a = torch.ones(4)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )


def test_a_recording_stopped_while_a_new_stack_is_walked_goes_on_safely():
    """A new stack asks shown_path, which runs Python and may let the GIL go; the program stops
    the recording meanwhile (stop, drain, release_python, as Recorder.stop does). The walk
    gives that stack up and the program goes on (it crashed, reading the cleared table)."""
    run = _in_a_process_of_its_own(
        """
        user = UserCode().shown_path
        asking = threading.Event()
        def shown_path(code):
            if code.co_name == "worker_inner":
                asking.set()
                time.sleep(0.3)  # Python that lets the GIL go: a slow lookup, an import
            return user(code)
        def worker_inner():
            return torch.add(a, a)
        results = []
        hooks = NativeHooks(native.load(), HookOptions(True, 6, 48, shown_path), device_type=0)
        hooks.start()
        worker = threading.Thread(target=lambda: results.append(worker_inner()))
        worker.start()
        asking.wait()
        hooks.stop()
        hooks.state.drain()
        hooks.release_python()
        worker.join()
        print("went on", bool(torch.equal(results[0], a * 2)))
        """
    )
    assert run.returncode == 0 and run.stdout.split() == ["went", "on", "True"], run.stderr[-2000:]


def test_release_python_lets_finalizers_record_ops():
    """What release_python drops may run Python that records an op (a finalizer of the object
    behind shown_path): the table is not locked while it runs (it hung, waiting on itself)."""
    run = _in_a_process_of_its_own(
        """
        class Paths:
            def shown_path(self, code):
                return UserCode().shown_path(code)
            def __del__(self):
                torch.add(a, a)
        paths = Paths()
        bound = paths.shown_path
        del paths  # the bound method holds the last reference
        hooks = NativeHooks(native.load(), HookOptions(True, 6, 48, bound), device_type=0)
        del bound
        hooks.start()
        torch.add(a, a)
        hooks.release_python()  # while recording: the finalizer's op reaches the hooks
        hooks.stop()
        print("released")
        """
    )
    assert run.returncode == 0 and run.stdout.split() == ["released"], run.stderr[-2000:]


def test_code_evaluated_every_step_leaves_the_other_stacks_found_without_the_gil():
    """A program that evals code each step makes a new code object each time, often at a dead
    one's address: only stacks through that address are forgotten, not every stack."""
    a = torch.ones(4)

    def step():
        torch.add(a, a)  # the same stack every step
        eval("torch.mul(a, a)", {"torch": torch, "a": a})  # library code to the walk, new each step

    _, (found, took) = _recorded_with_walks(lambda: [step() for _ in range(300)])
    assert found + took == 600
    if native_module().frames_without_gil:
        assert found >= 299, "the add's stack is found without the GIL after its first step"


def _calls_and_ops(fn, times: int = 5) -> tuple[list[int], list[list[str]]]:
    """``fn`` run ``times`` times while the native hooks record: the ops the hooks heard start
    on this thread each time, and the ops recorded each time (a marker op between runs)."""
    module = native_module()
    heard: list[int] = []
    marker = torch.zeros(1)

    def runs():
        for _ in range(times):
            before = module.thread_op_calls()
            fn()
            heard.append(module.thread_op_calls() - before)
            marker.neg_()

    hooks = cpu_hooks()
    hooks.start()
    try:
        runs()
    finally:
        hooks.stop()
        events = hooks.state.drain()
        hooks.release_python()
    runs_ops: list[list[str]] = [[]]
    for event in events:
        if event["ev"] == "op":
            if event["op"] == "aten::neg_":
                runs_ops.append([])
            else:
                runs_ops[-1].append(event["op"])
    assert runs_ops[-1] == [] and len(runs_ops) == times + 1
    return heard, runs_ops[:-1]


def test_an_aten_kernels_own_calls_are_not_heard_once_it_is_known_to_make_them():
    """index_select's kernel calls other ops: its first call is heard whole (which teaches the
    hooks that it does), the later ones as the one op they are. What is recorded is the op
    alone, every time."""
    a, index = torch.randn(4, 8), torch.tensor([0, 2])
    heard, ops = _calls_and_ops(lambda: a.index_select(0, index))
    assert heard[0] > 1 and heard[1:] == [1] * 4
    assert ops == [["aten::index_select"]] * 5


def test_a_custom_ops_kernel_is_heard_whole_every_time():
    """A custom op's kernel may run Python that starts a profiler or a thread: the three ops it
    calls are always heard (and, as always, not recorded); what their own kernels call is not,
    once known."""
    x = torch.ones(4)
    heard, ops = _calls_and_ops(lambda: torch.ops.streamrace_test_hooks.square_plus_(x))
    assert heard[1:] == [1 + 3] * 4
    assert ops == [["streamrace_test_hooks::square_plus_"]] * 5


def test_functionalize_records_what_the_python_hooks_do_every_time():
    """Under functionalize a composite is dispatched with autograd excluded, and a kernel below
    it lifts the exclusion and takes it apart: composites are never silenced, so every call of
    every recording records its parts, as a TorchDispatchMode sees them."""
    torch.manual_seed(0)
    norm, x = torch.nn.LayerNorm(16), torch.randn(5, 16)
    functional = torch.func.functionalize(lambda x: norm(x))

    def program():
        for _ in range(3):
            functional(x)

    first, second = native_ops(program), native_ops(program)
    reference = python_ops(program)
    assert [op[0] for op in reference] == ["aten::native_layer_norm"] * 3
    assert [op[0] for op in first] == [op[0] for op in second] == [op[0] for op in reference]


def test_a_profiler_started_inside_a_custom_kernel_hears_its_calls():
    """A custom op's Python kernel profiles its own work while a recording runs: the profile is
    the one it makes without the recording."""
    x = torch.ones(4)
    del _PROFILES[:]
    torch.ops.streamrace_test_hooks.profiled(x)  # plain, not recording
    hooks = cpu_hooks()
    hooks.start()
    try:
        torch.ops.streamrace_test_hooks.profiled(x)  # its kernel is known to call ops from here on
        torch.ops.streamrace_test_hooks.profiled(x)
    finally:
        hooks.stop()
        hooks.release_python()
    assert len(_PROFILES) == 3 and "aten::mul" in _PROFILES[0] and _PROFILES[1] == _PROFILES[2] == _PROFILES[0]


def test_a_profiler_inside_a_dispatch_mode_hears_an_aten_kernels_calls():
    """An aten op under a TorchDispatchMode: the mode's __torch_dispatch__ is Python below the
    op, and a profiler it starts sees what it sees without the recording."""
    a, index = torch.randn(4, 8), torch.tensor([0, 2])
    seen: list[list[str]] = []

    class Profiling(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                out = func(*args, **(kwargs or {}))
            seen.append(sorted({e.name for e in prof.events()}))
            return out

    with Profiling():
        a.index_select(0, index)
    hooks = cpu_hooks()
    hooks.start()
    try:
        a.index_select(0, index)  # known to call ops from here on
        with Profiling():
            a.index_select(0, index)
    finally:
        hooks.stop()
        hooks.release_python()
    assert "aten::index_select" in seen[0] and seen[1] == seen[0]


def test_nothing_is_silenced_for_a_recording_that_began_beside_another_callback():
    """Another RecordFunction callback there when recording began (a profiler, or an observer
    whose sampling cannot be asked without drawing its samples): every call is heard for the
    whole recording, also once it is gone."""
    a, index = torch.randn(4, 8), torch.tensor([0, 2])
    _calls_and_ops(lambda: a.index_select(0, index))  # index_select is known to call ops
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        hooks = cpu_hooks()
        hooks.start()
    try:
        module = native_module()
        before = module.thread_op_calls()
        a.index_select(0, index)
        heard = module.thread_op_calls() - before
    finally:
        hooks.stop()
        hooks.release_python()
    assert heard > 1


def test_a_profiler_hears_every_call_while_recording():
    """With another RecordFunction callback in the process (the profiler), nothing is silenced:
    the profile lists the kernel's own calls as it does without the recording."""

    def profiled() -> list[str]:
        x = torch.ones(4)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                torch.ops.streamrace_test_hooks.scale_(x, 1.0)
        return sorted(e.name for e in prof.events())

    alone = profiled()
    assert alone.count("aten::mul_") == 3, "the custom op's kernel calls mul_"
    hooks = cpu_hooks()
    hooks.start()
    try:
        torch.ops.streamrace_test_hooks.scale_(torch.ones(4), 1.0)  # its kernel is known to call ops
        recorded = profiled()
    finally:
        hooks.stop()
        hooks.release_python()
    assert recorded == alone


def test_ops_on_every_thread_are_recorded():
    a = torch.ones(4)
    hooks = cpu_hooks()
    hooks.start()
    try:
        worker = threading.Thread(target=lambda: torch.add(a, a))
        worker.start()
        worker.join()
    finally:
        hooks.stop()
    [op] = [e for e in hooks.state.drain() if e["ev"] == "op"]
    assert op["op"] == "aten::add.Tensor" and "stack" in op, "the thread's own Python stack"


def test_callbacks_keep_the_capture_bookkeeping():
    module = native_module()
    record_trace_calls(cpu_hooks(), lambda hook, *args: getattr(module, hook)(*args))


def test_a_failing_hook_is_recorded_and_the_program_goes_on():
    def broken(code):
        raise RuntimeError("simulated recorder bug")

    a, b = torch.ones(4), torch.full((4,), 2.0)
    results = []
    events = native_events(lambda: results.extend(torch.add(a, b) for _ in range(150)), shown_path=broken)
    assert all(torch.equal(r, torch.full((4,), 3.0)) for r in results) and len(results) == 150
    errors = [e for e in events if e["ev"] == "recorder_error"]
    assert errors[0]["where"] == "op" and errors[0]["message"] == "RuntimeError: simulated recorder bug"
    assert len(errors) == 100, "a broken recorder reports, and stops reporting"


def test_one_recording_at_a_time():
    first, second = cpu_hooks(), cpu_hooks()
    first.start()
    try:
        with pytest.raises(RuntimeError, match="already recording"):
            second.start()
    finally:
        first.stop()
    second.start()  # the first one's stop freed the slot
    second.stop()


def test_the_hooks_choice_is_checked(monkeypatch):
    monkeypatch.setenv(native.ENV_HOOKS, "fast")
    with pytest.raises(native.NativeUnavailable, match="STREAMRACE_HOOKS='fast': expected one of auto, native, python"):
        native.hooks_choice()
    monkeypatch.setenv(native.ENV_HOOKS, "python")
    assert native.hooks_choice() == "python"


def test_a_direct_fire_function_still_runs_the_registrys_other_callbacks():
    module = native_module()
    others, seen = [], []
    fire = module.fire_function("on_alloc", others)
    hooks = cpu_hooks()
    hooks.start()
    try:
        fire(0x1000)
        others.append(seen.append)  # a tool that registers after recording began
        fire(0x2000)
    finally:
        hooks.stop()
    assert [e["addr"] for e in hooks.state.drain() if e["ev"] == "alloc"] == [0x1000, 0x2000]
    assert seen == [0x2000]
    with pytest.raises(ValueError, match="no direct fire function"):
        module.fire_function("on_device_sync", [])
