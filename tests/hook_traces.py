"""Comparing the traces two sets of hooks recorded of one program, event for event."""

from __future__ import annotations

import json
from typing import Any


def canonical(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Addresses, stream and event handles differ between processes: number each by its
    first appearance, so that two recordings of one program compare equal. CUDA hands a
    destroyed event's handle out again: a created event is a new one. Likewise a tensor
    identity (its TensorImpl's address) is reused once the tensor died: a view event's tensor
    is a new one."""

    labels: dict[str, dict[int, Any]] = {"addr": {}, "stream": {}, "event": {}, "tensor": {}}
    labels["base"] = labels["tensor"]  # a view's base is a tensor identity too (format 1.5)
    tensors = labels["tensor"]
    # Numbered by a count of their own, not by the table's size: a reused identity relabelled
    # in place must not shift the numbers of the identities seen after it.
    counts = {id(table): 0 for table in labels.values()}
    created = made = 0

    def label(table: dict[int, Any], value: int) -> Any:
        if value not in table:
            table[value] = counts[id(table)]
            counts[id(table)] += 1
        return table[value]

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: label(labels[k], v)
                if k in labels and isinstance(v, int)
                else [label(tensors, t) if t else None for t in v]
                if k == "tensors"
                else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = []
    for event in events:
        if event["ev"] == "event_create":
            created += 1
            labels["event"][event["event"]] = f"event{created}"
        elif event["ev"] == "view" and isinstance(event.get("tensor"), int):
            made += 1
            tensors[event["tensor"]] = f"tensor{made}"
        out.append(walk(event))
    return out


def first_difference(native: list[dict[str, Any]], python: list[dict[str, Any]]) -> str | None:
    """Where two canonical traces part, or None where they are the same: as the trace writes
    them, so keys in another order part too."""
    for i, (got, want) in enumerate(zip(native, python, strict=False)):
        if got != want or json.dumps(got) != json.dumps(want):
            return f"event {i} differs:\n native {got}\n python {want}"
    if len(native) != len(python):
        return f"the native hooks recorded {len(native)} events, the Python hooks {len(python)}"
    return None
