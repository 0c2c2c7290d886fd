"""``stale-read``: a read gets another allocation's data, because the block it reads was
handed out again and written through the other allocation while the reader's still held it
(docs/findings.md; the rule is docs/analysis.md §8.4). Graphs sharing a memory pool replayed
out of capture order (HAZARDS.md X4) are the usual cause: a replay writes through an
allocation its capture freed, into bytes a later capture's tensor was given. The engines
detect it as a ``StaleRead``."""

from __future__ import annotations

from streamrace.analysis.describe import Describer, at, op_name, verb, what
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.engine import StaleRead
from streamrace.analysis.findings import Access, Finding

KIND = "stale-read"


class StaleReadDetector(Detector[StaleRead]):
    kind = KIND
    severity = "error"
    docs_anchor = "stale-read-error"
    records = (StaleRead,)
    rule = SarifRule(
        name="StaleRead",
        short="A read gets another allocation's data: its block was handed out again and overwritten",
        full=(
            "A tensor's bytes were last written through another allocation of the same block, made "
            "while the tensor still held them: the block was freed (often inside a capture) and given to "
            "another tensor, whose writer ran after the tensor's own. The read gets the other tensor's "
            "data. Graphs that share a memory pool and are replayed out of capture order do this."
        ),
        fix=(
            "Replay graphs that share a pool in the order they were captured, or give them private "
            "pools; keep a tensor that a later graph or the program reads alive, unfreed, until every "
            "graph that shares its pool has been captured."
        ),
    )

    def describe(self, stale: StaleRead, describer: Describer) -> Finding:
        reader, writer = describer.access(stale.reader), describer.access(stale.writer)
        read, wrote = stale.read_lifetime, stale.write_lifetime
        # The earlier allocation of the block is the one whose free let the other take it.
        first, second = (read, wrote) if read.alloc["seq"] < wrote.alloc["seq"] else (wrote, read)
        later_side = reader if second is read else writer
        allocation = describer.allocation(first, (later_side, second))
        read_site, wrote_site = describer.site(read.alloc)[1], describer.site(wrote.alloc)[1]
        message = (
            f"{what(reader)} {verb(reader)} the tensor allocated{_at(read_site)}, but the last write to "
            f"those bytes, {what(writer)}, went through another allocation of the block{_at(wrote_site)}: "
            f"the block was handed out again while the tensor held it, so the read gets the other tensor's data"
        )
        return Finding(
            kind=KIND,
            hazard="RAW",
            accesses=[writer, reader],
            message=message + ".",
            missing_edge=(
                f"no write of the tensor's own allocation between {what(writer)} and {what(reader)}: "
                "the two allocations share the block at once"
            ),
            fix=_fix(reader, writer, read_site, describer.site(first.free)[1]),
            aliasing=True,
            graph=None,
            allocation=allocation,
            count=stale.count,
        )


def _at(site: str | None) -> str:
    return f" at {site}" if site else ""


def _fix(reader: Access, writer: Access, read_site: str | None, free_site: str | None) -> str:
    tensor = f"the tensor allocated{_at(read_site)}"
    if writer.captured is not None:
        freed = f" (freed{_at(free_site)})" if free_site else ""
        return (
            f"replay the graphs that share this pool in the order they were captured, or capture them into "
            f"private pools: graph {writer.captured['graph']}'s replay{at(writer)} writes the block through an "
            f"allocation{freed} whose block {tensor} was given later"
        )
    return f"keep {tensor} alive, unfreed, while {op_name(reader)}{at(reader)} may read it"


DETECTOR = StaleReadDetector()
