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
  (``empty*``: no kernel touches it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

_FACTORY = re.compile(r"(new_.*|.*_like)$")
_ALLOCATE_ONLY = re.compile(r"(new_)?empty(_like|_strided|_permuted)?$")
# Ops with a write annotation that launch no kernel: record_stream only tells the allocator,
# set_ rebinds storage. Metadata-only in-place views (resize_, as_strided_) carry a tag.
_NO_ACCESS = {"record_stream", "set_"}

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


def _bind(schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """Pairs (schema argument, value) for what the caller passed."""
    for i, argument in enumerate(schema.arguments):
        if i < len(args) and not argument.kwarg_only:
            yield argument, args[i]
        elif argument.name in kwargs:
            yield argument, kwargs[argument.name]


def op_accesses(
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    outputs: Any,
    is_tensor: Callable[[Any], bool],
) -> tuple[list[Range], list[Range]]:
    """(reads, writes) of one dispatched op; ``is_tensor`` selects the tensors to track."""
    schema = func._schema
    base_name = schema.name.split("::", 1)[-1]
    if base_name in _NO_ACCESS or torch.Tag.inplace_view in func.tags:
        return [], []
    is_factory = bool(_FACTORY.match(base_name))
    reads: list[Range] = []
    writes: list[Range] = []
    for argument, value in _bind(schema, args, kwargs):
        alias = argument.alias_info
        is_write = alias is not None and alias.is_write
        if not is_write and (is_factory or alias is not None):
            continue
        target = writes if is_write else reads
        for t in _tensors(value, is_tensor):
            rng = tensor_range(t)
            if rng is not None:
                target.append(rng)
    if not _ALLOCATE_ONLY.match(base_name):
        results = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
        returns = schema.returns
        for i, value in enumerate(results):
            # A list return (split, unbind) has one schema return for all its items.
            ret = returns[min(i, len(returns) - 1)] if returns else None
            if ret is not None and ret.alias_info is not None:
                continue  # a view or the in-place argument itself: counted above, or no bytes
            for t in _tensors(value, is_tensor):
                rng = tensor_range(t)
                if rng is not None and rng not in writes:
                    writes.append(rng)
    # An in-place op reads and writes self: the write covers it for race checking.
    reads = [r for r in reads if r not in writes]
    return reads, writes
