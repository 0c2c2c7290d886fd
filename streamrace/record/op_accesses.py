"""Which bytes an aten op reads and writes, from its schema.

The rules follow the op schema, as PyTorch's CUDA sanitizer does, but keyed on storage bytes
(base + storage_offset * itemsize, with shape and strides) instead of ``data_ptr()``:

* an argument whose alias annotation is a write (``Tensor(a!)``: in-place, ``out=``, lists) is
  written; the whole destination view counts, which is what an index-driven write
  (``index_put_``, ``scatter_``, ``index_copy_``) may touch as far as we can know;
* an argument with a non-write alias (``Tensor(a)``: the input of a view) is metadata only;
* every argument of a factory (``*_like``, ``new_*``) is metadata only;
* every other tensor argument is read;
* a returned tensor that does not alias an input is written, unless the op only allocates
  (``empty*``: no kernel touches it) or the tensor is made over an input's memory without
  owning it, which the schema does not say (``_unsafe_view``, a custom op's non-owning view
  such as vLLM's ``weak_ref_tensor``): a view of that memory is neither a write nor new memory;
* a c10d collective writes the arguments ``COLLECTIVE_OUTPUTS`` lists and reads its other
  tensors (hook_tables.py: its schema does not say); where it runs is collectives.py's part.

Of an op that writes through an index (``hook_tables.INDEX_WRITE_OPS``), the tensors of its
``index``/``indices`` arguments are reads that also pick where it writes: ``index_operands``
gives their bytes, the trace's ``index`` (docs/trace-format.md), for the padded-scatter check.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from streamrace.record.hook_tables import (
    ALLOCATE_ONLY_OPS,
    COLLECTIVE_OUTPUTS,
    FACTORY_PREFIX,
    FACTORY_SUFFIX,
    HOST_RESULT_TYPES,
    INDEX_ARGUMENTS,
    INDEX_WRITE_OPS,
    NO_ACCESS_OPS,
    TRUSTED_NAMESPACES,
)

Range = dict[str, Any]


def tensor_range(t: Any) -> Range | None:
    """The bytes of one tensor view, or None when it touches none (empty, meta, no storage)."""
    if t.numel() == 0 or t.is_meta:
        return None
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested, functional wrappers
        return None
    base = storage.data_ptr()
    if t.layout is not torch.strided:
        return {"addr": base, "nbytes": storage.nbytes()}
    itemsize = t.element_size()
    return {
        "addr": base + t.storage_offset() * itemsize,
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "itemsize": itemsize,
    }


def _tensors(value: Any, is_tensor: Callable[[Any], bool]) -> Iterator[Any]:
    if is_tensor(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, is_tensor)


_SKIP, _READ, _WRITE = 0, 1, 2


class _Plan:
    """What the schema says about each argument and return of one op, worked out once."""

    __slots__ = ("args", "host_result", "index_args", "returns", "touches", "view_of")

    def __init__(self, func: Any) -> None:
        schema = func._schema
        base_name = schema.name.split("::", 1)[-1]
        # Metadata-only in-place views (resize_, as_strided_) carry a tag.
        self.touches = not (base_name in NO_ACCESS_OPS or torch.Tag.inplace_view in func.tags)
        is_factory = base_name.startswith(FACTORY_PREFIX) or base_name.endswith(FACTORY_SUFFIX)
        collective_outputs = COLLECTIVE_OUTPUTS.get(schema.name)
        self.args: list[tuple[int, str, bool, int]] = []  # (position, name, kwarg only, role)
        writes_through_index = base_name.removesuffix("_") in INDEX_WRITE_OPS
        self.index_args: list[tuple[int, str, bool]] = []  # (position, name, kwarg only) of the index operands
        for i, argument in enumerate(schema.arguments):
            alias = argument.alias_info
            if collective_outputs is not None:
                role = _WRITE if argument.name in collective_outputs else _READ
            elif alias is not None and alias.is_write:
                role = _WRITE
            elif is_factory or alias is not None:
                role = _SKIP  # metadata only: a view's input, a factory's template
            else:
                role = _READ
            self.args.append((i, argument.name, argument.kwarg_only, role))
            if writes_through_index and role == _READ and argument.name in INDEX_ARGUMENTS:
                self.index_args.append((i, argument.name, argument.kwarg_only))
        # A returned tensor that aliases nothing is written, unless the op only allocates.
        fresh = base_name.removeprefix(FACTORY_PREFIX) not in ALLOCATE_ONLY_OPS and collective_outputs is None
        self.returns = [fresh and ret.alias_info is None for ret in schema.returns]
        # hook_tables.HOST_RESULT_TYPES: in a capture, such an op touched nothing.
        self.host_result = (
            schema.name.startswith(TRUSTED_NAMESPACES)
            and bool(schema.returns)
            and all(str(ret.type) in HOST_RESULT_TYPES for ret in schema.returns)
            and all(role != _WRITE for *_, role in self.args)
        )
        # A view op (detach, slice, alias): a return aliases an argument without writing it;
        # ``view_of`` is that argument's (position, name, kwarg only), else None.
        self.view_of: tuple[int, str, bool] | None = None
        if any(ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns):
            for i, argument in enumerate(schema.arguments):
                if argument.alias_info is not None and not argument.alias_info.is_write:
                    self.view_of = (i, argument.name, argument.kwarg_only)
                    break


_PLANS: dict[Any, _Plan] = {}


def _plan(func: Any) -> _Plan:
    plan = _PLANS.get(func)
    if plan is None:
        plan = _PLANS[func] = _Plan(func)
    return plan


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, kwarg_only: bool) -> Any:
    if position < len(args) and not kwarg_only:
        return args[position]
    return kwargs.get(name)


class _InputStorages:
    """The [start, end) of an op's input storages, sorted by start with each end raised to the
    largest so far (storages may nest): a foreach op's thousand outputs cost a binary search
    each, not a scan of its thousand inputs."""

    __slots__ = ("ends", "starts")

    def __init__(self, value: Any, is_tensor: Callable[[Any], bool]) -> None:
        spans = []
        for t in _tensors(value, is_tensor):
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            start = storage.data_ptr()
            if start:
                spans.append((start, start + storage.nbytes()))
        spans.sort()
        self.starts = [start for start, _ in spans]
        self.ends = list(itertools.accumulate((end for _, end in spans), max))

    def hold(self, t: Any) -> bool:
        """Whether a returned tensor's memory lies in an input's storage: a view the schema does
        not declare, not memory the op allocated and wrote."""
        if not self.starts:
            return False
        try:
            start = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return False
        i = bisect.bisect_right(self.starts, start)
        return i > 0 and start < self.ends[i - 1]


def op_accesses(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    outputs: Any,
    is_tensor: Callable[[Any], bool],
    tensors: tuple[list[Any], list[Any]] | None = None,
) -> tuple[list[Range], list[Range]]:
    """(reads, writes) of one dispatched op; ``is_tensor`` selects the tensors to track.
    ``tensors``: two lists that get the tensor behind each read and each write, in order (for
    the static-output check, record/graph_memory.py)."""
    plan = _plan(func)
    if not plan.touches:
        return [], []
    reads: list[Range] = []
    writes: list[Range] = []
    read_tensors: list[Any] = []
    write_tensors: list[Any] = []
    for position, name, kwarg_only, role in plan.args:
        if role == _SKIP:
            continue
        value = _argument(args, kwargs, position, name, kwarg_only)
        if value is None:
            continue
        target, behind = (writes, write_tensors) if role == _WRITE else (reads, read_tensors)
        for t in _tensors(value, is_tensor):
            rng = tensor_range(t)
            if rng is not None:
                target.append(rng)
                behind.append(t)
    if any(plan.returns):
        results = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
        returns = plan.returns
        inputs = _InputStorages((args, tuple(kwargs.values())), is_tensor)
        returned, only_views = False, True  # of its tensors returned fresh by the schema
        for i, value in enumerate(results):
            # A list return (split, unbind) has one schema return for all its items.
            if not returns[min(i, len(returns) - 1)]:
                continue
            for t in _tensors(value, is_tensor):
                returned = True
                if inputs.hold(t):
                    continue
                only_views = False
                rng = tensor_range(t)
                if rng is not None and rng not in writes:
                    writes.append(rng)
                    write_tensors.append(t)
        if returned and only_views and not writes:
            # Only views of its inputs, nothing written: it launches nothing, its reads are not real.
            return [], []
    if writes and reads:
        # An in-place op reads and writes self: the write covers it for race checking.
        kept = [i for i, r in enumerate(reads) if r not in writes]
        reads = [reads[i] for i in kept]
        read_tensors = [read_tensors[i] for i in kept]
    if tensors is not None:
        tensors[0].extend(read_tensors)
        tensors[1].extend(write_tensors)
    return reads, writes


def returns_to_host(func: Any) -> bool:
    """Whether the op is one of PyTorch's own that only hands values to the host
    (hook_tables.HOST_RESULT_TYPES): captured, it touched nothing."""
    return _plan(func).host_result


def index_operands(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], is_tensor: Callable[[Any], bool]
) -> list[Range]:
    """The bytes of the index operands of an op that writes through an index (none otherwise):
    reads of the op that pick where it writes."""
    plan = _plan(func)
    if not plan.index_args or not plan.touches:
        return []
    index: list[Range] = []
    for position, name, kwarg_only in plan.index_args:
        for t in _tensors(_argument(args, kwargs, position, name, kwarg_only), is_tensor):
            rng = tensor_range(t)
            if rng is not None:
                index.append(rng)
    return index


def view_base(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], is_tensor: Callable[[Any], bool]) -> Any:
    """The tensor a view op (``detach``, ``slice``, ``alias``) makes its result a view of, or
    None when ``func`` is no view op."""
    plan = _plan(func)
    if plan.view_of is None or not plan.touches:
        return None
    value = _argument(args, kwargs, *plan.view_of)
    return value if is_tensor(value) else None
