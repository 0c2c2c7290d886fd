"""``unsafe-free``: a block freed while another stream may still use it, so the allocator can
hand it out again under that use (docs/findings.md; the rule is docs/analysis.md §5). The
engines detect it as an ``UnsafeFree``, folded with the access that reused the block when
there is one."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from streamrace.analysis.clocks import Domain
from streamrace.analysis.describe import (
    OWNER,
    USER,
    Describer,
    Suggestion,
    access_key,
    at,
    function_of,
    join_code,
    op_name,
    stream_code,
    tensor_code,
    verb,
    what,
    where,
)
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.engine import UnsafeFree
from streamrace.analysis.findings import Access, Finding

KIND = "unsafe-free"


class UnsafeFreeDetector(Detector[UnsafeFree]):
    kind = KIND
    severity = "error"
    docs_anchor = "unsafe-free-error"
    records = (UnsafeFree,)
    rule = SarifRule(
        name="UnsafeFree",
        short="A tensor is freed while another stream may still use its block",
        full=(
            "A tensor allocated on stream A was used by stream B, and its last reference died on A "
            "before A waited for B. PyTorch's caching allocator gives the freed block back to the "
            "next allocation on A right away; inside a CUDA graph all of these come from the graph's "
            "private pool, so at replay the new owner's kernels and B's still-running kernel touch the "
            "same bytes at once."
        ),
        fix=(
            "Keep the reference alive until after the join: `main.wait_stream(side)` first, then let "
            "the tensor go (this is what SGLang #36547 does). Or `t.record_stream(side)` after the side "
            "stream's use."
        ),
    )

    def describe(self, unsafe: UnsafeFree, describer: Describer) -> Finding:
        lifetime = unsafe.lifetime
        use = describer.access(unsafe.use, unsafe.how)
        free = describer.free_access(lifetime, unsafe.domain)
        owner = free.stream_label
        site = describer.site(lifetime.alloc)[1]
        message = (
            f"The block allocated{f' at {site}' if site else ''} is freed on {owner}{at(free)} "
            f"while {what(use)} may still {'write' if unsafe.use.write else 'read'} it"
        )
        second = free
        reuse = None
        if unsafe.racer is not None and unsafe.reused is not None:
            second = describer.access(unsafe.racer, unsafe.how)
            reuse = (second, unsafe.reused)
            message += f"; the allocator handed it to {what(second)}, which {verb(second)} it concurrently"
        else:
            message += f"; the allocator can hand it to the next allocation on {owner}"
        join = join_code(free, use)
        tensor, which = tensor_code(describer, lifetime, function_of(use))
        named = describer.tensor(lifetime)
        keep = f"`{named[0]}`" if named is not None else "the tensor"
        record = f"{tensor}.record_stream({stream_code(use, USER)})"
        return Finding(
            kind=KIND,
            hazard="WAW" if unsafe.use.write else "WAR",
            accesses=[use, second],
            message=message + ".",
            missing_edge=(
                f"no happens-before edge from {what(use)} to the next allocation on {owner} after the free{at(free)}"
            ),
            fix=(
                f"keep {keep} alive until after `{join}` (join, then free), "
                f"or call `{record}` after {op_name(use)}{at(use)}"
                + where((join, record), (free, OWNER), (use, USER), describer=describer)
                + which
            ),
            fix_code=join,
            aliasing=reuse is not None,
            graph=unsafe.domain,
            allocation=describer.allocation(lifetime, reuse),
        )

    def suggestion(self, finding: Finding) -> Suggestion | None:
        """A join just before the free."""
        alloc = finding.allocation
        if alloc is None or not alloc.free_location:
            return None
        use = finding.accesses[0]
        owner = Access("free", alloc.stream, alloc.stream_label, "free", alloc.free_seq or 0)
        # A free in the function that allocated is a statement there (``del x``, a rebinding):
        # the join goes just before it. A free elsewhere is where a local died as its function
        # returned, so that line (the call) is not where the join goes.
        exact = _function(alloc.alloc_stack) is not None and _function(alloc.alloc_stack) == _function(alloc.free_stack)
        why = f"join {use.stream_label} before the {'free' if exact else 'last reference to the tensor dies'}"
        return Suggestion(finding.fix_code or join_code(owner, use), alloc.free_location, why, exact)

    def dedup_key(self, unsafe: UnsafeFree) -> tuple[Hashable, Domain]:
        """What the signature reads, by stack id instead of location: the use, the racer (or
        the free) and the allocation's stack."""
        lifetime = unsafe.lifetime
        second: Hashable
        if unsafe.racer is not None and unsafe.reused is not None:
            second = access_key(unsafe.racer)
        else:
            second = (lifetime.free or {}).get("stack")
        return (access_key(unsafe.use), second, (lifetime.alloc or {}).get("stack")), unsafe.domain

    def unordered_launch(self, unsafe: UnsafeFree) -> tuple[Domain, int] | None:
        """Folded, it names the access that reused the block while the use was pending."""
        if unsafe.racer is None or unsafe.reused is None:
            return None
        return unsafe.domain, unsafe.racer.event["seq"]


def _function(stack: list[list[Any]]) -> tuple[str, str] | None:
    """(file, function) of a stack's innermost frame."""
    return (str(stack[0][0]), str(stack[0][2])) if stack and len(stack[0]) > 2 else None


DETECTOR = UnsafeFreeDetector()
