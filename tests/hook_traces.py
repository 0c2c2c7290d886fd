"""Comparing the traces two sets of hooks recorded of one program, event for event."""

from __future__ import annotations

from typing import Any


def canonical(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Addresses, stream and event handles differ between processes: number each by its
    first appearance, so that two recordings of one program compare equal. CUDA hands a
    destroyed event's handle out again: a created event is a new one."""
    labels: dict[str, dict[int, Any]] = {"addr": {}, "stream": {}, "event": {}, "tensor": {}}
    labels["base"] = labels["tensor"]  # a view's base is a tensor identity too (format 1.5)
    tensors = labels["tensor"]
    created = 0

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: labels[k].setdefault(v, len(labels[k]))
                if k in labels and isinstance(v, int)
                else [tensors.setdefault(t, len(tensors)) if t else None for t in v]
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
        out.append(walk(event))
    return out


def first_difference(native: list[dict[str, Any]], python: list[dict[str, Any]]) -> str | None:
    """Where two canonical traces part, or None where they are the same."""
    for i, (got, want) in enumerate(zip(native, python, strict=False)):
        if got != want:
            return f"event {i} differs:\n native {got}\n python {want}"
    if len(native) != len(python):
        return f"the native hooks recorded {len(native)} events, the Python hooks {len(python)}"
    return None
