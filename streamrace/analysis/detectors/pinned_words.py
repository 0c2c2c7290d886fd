"""What the pinned-memory findings (pinned-write-during-copy, pinned-read-before-copy,
graph-pinned-freed) share: the host as one side of a finding, a copy's use of host bytes as
the other, and the pinned block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamrace.analysis.describe import Describer, at, what
from streamrace.analysis.findings import Access, Allocation, Finding

HOST_STREAM = -1  # the host is no stream: its accesses carry this, labelled "the host"
HOST_LABEL = "the host"


def host_access(describer: Describer, event: Mapping[str, Any], op: str, access: str) -> Access:
    """A host event (a host_op, host_free, host_alloc, replay call) as one side of a finding."""
    frames, location = describer.site(event)
    site, _ = describer.placement(frames)
    return Access(
        op=op,
        stream=HOST_STREAM,
        stream_label=HOST_LABEL,
        access=access,
        seq=event["seq"],
        location=location,
        stack=frames,
        site=site,
    )


def use_access(describer: Describer, use: Any) -> Access:
    """A copy's use of host bytes; a replay's is placed at the replay and names the captured op."""
    kind = "write" if use.write else "read"
    if use.replay is None:
        return describer.launch(use.event, kind)
    frames, location = describer.site(use.replay)
    site, code = describer.placement(frames)
    captured_frames, captured_location = describer.site(use.event)
    return Access(
        op=use.event.get("op", "copy"),
        stream=use.stream,
        stream_label=describer.label(use.stream),
        access=kind,
        seq=use.replay["seq"],
        location=location,
        stack=frames,
        site=site,
        stream_code=code,
        captured={
            "graph": use.replay["graph"],
            "seq": use.event["seq"],
            "location": captured_location,
            "stack": captured_frames,
        },
    )


def host_allocation(
    describer: Describer,
    block: Mapping[str, Any] | None,
    free: Mapping[str, Any] | None = None,
    reused: Mapping[str, Any] | None = None,
) -> Allocation | None:
    """The pinned block a finding is about (None when it was allocated before the recording)."""
    if block is None:
        return None
    alloc_frames, alloc_location = describer.site(block)
    free_frames, free_location = describer.site(free)
    reused_by = None
    if reused is not None:
        reused_by = {
            "op": "host_alloc",
            "stream": HOST_STREAM,
            "stream_label": HOST_LABEL,
            "seq": reused["seq"],
            "location": describer.site(reused)[1],
            "alloc_seq": reused["seq"],
            "alloc_location": describer.site(reused)[1],
        }
    return Allocation(
        addr=block["addr"],
        size=block["size"],
        stream=block["stream"],
        stream_label=describer.label(block["stream"]),
        device=block.get("device") or 0,
        alloc_seq=block["seq"],
        alloc_location=alloc_location,
        alloc_stack=alloc_frames,
        free_seq=free["seq"] if free is not None else None,
        free_location=free_location,
        free_stack=free_frames,
        reused_by=reused_by,
    )


def describe_host_race(kind: str, found: Any, describer: Describer) -> Finding:
    """A host access against a copy not yet done: M1 (the copy reads what the host writes) or M2
    (the copy writes what the host reads or writes)."""
    use = use_access(describer, found.use)
    host = host_access(describer, found.host, found.host["op"], "write" if found.host_write else "read")
    replayed = found.use.replay is not None
    copy_words = what(use)
    if replayed:
        copy_words = f"the replay{at(use)} of graph {found.use.replay['graph']}'s {use.op}"
    if found.use.write:
        message = (
            f"The host {'writes' if found.host_write else 'reads'} pinned memory with {host.op}{at(host)} "
            f"that {copy_words} has not yet written: nothing made the host wait for the copy"
        )
        hazard = "WAW" if found.host_write else "RAW"
        fix = (
            f"record an event after the copy{at(use)} on {use.stream_label} (`done = torch.cuda.Event(); "
            f"done.record()`) and call `done.synchronize()` before the host "
            f"{'writes' if found.host_write else 'reads'} the buffer{at(host)}; or "
            "`torch.cuda.current_stream().synchronize()` there"
        )
        code = "done.synchronize()"
    else:
        message = (
            f"The host writes pinned memory with {host.op}{at(host)} that {copy_words} still reads: the "
            "copy may run after the write and carry the new bytes to the device"
        )
        hazard = "WAR"
        fix = (
            f"double-buffer the staging tensor (fill the other buffer while the copy{at(use)} reads this one), "
            f"or record an event after the copy (`done.record()` on {use.stream_label}) and call "
            f"`done.synchronize()` before the host writes the buffer again{at(host)}"
        )
        code = "done.synchronize()"
    return Finding(
        kind=kind,
        hazard=hazard,
        accesses=[use, host],
        message=message + ".",
        missing_edge=f"no host synchronization between {what(use)} and the host's {host.op}{at(host)}",
        fix=fix,
        fix_code=code,
        aliasing=False,
        graph=None,
        allocation=host_allocation(describer, found.block),
        count=found.count,
    )
