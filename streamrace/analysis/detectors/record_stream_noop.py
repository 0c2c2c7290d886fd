"""``record-stream-noop``: ``record_stream`` named the block's own stream, which does nothing
(H10; docs/findings.md, docs/analysis.md §5). The engines detect it as a ``RecordStreamNoop``."""

from __future__ import annotations

from streamrace.analysis.describe import CONSUMER, Describer, at, code_name, function_of, tensor_code
from streamrace.analysis.detectors.detector import Detector, SarifRule
from streamrace.analysis.engine import RecordStreamNoop
from streamrace.analysis.findings import Access, Finding

KIND = "record-stream-noop"


class RecordStreamNoopDetector(Detector[RecordStreamNoop]):
    kind = KIND
    severity = "warning"
    docs_anchor = "record-stream-noop-warning"
    records = (RecordStreamNoop,)
    rule = SarifRule(
        name="RecordStreamNoop",
        short="record_stream names the allocating stream, so it does nothing",
        full=(
            "`t.record_stream(s)` was called with `s` the stream that allocated `t`. PyTorch's allocator "
            "ignores that: it already orders the block against its own stream."
        ),
        fix=(
            "Record on the consumer stream, `t.record_stream(consumer)`, or, better, keep a reference "
            "until after the join."
        ),
    )

    def describe(self, noop: RecordStreamNoop, describer: Describer) -> Finding:
        ev = noop.event
        frames, location = describer.site(ev)
        call = Access(
            op="record_stream",
            stream=ev["stream"],
            stream_label=describer.label(ev["stream"]),
            access="record_stream",
            seq=ev["seq"],
            location=location,
            stack=frames,
            graph=noop.domain,
        )
        if noop.users:
            user = describer.label(noop.users[0])
            consumer, which = code_name(user), ""
            if consumer is None:
                consumer, which = CONSUMER, f", where `{CONSUMER}` is {user}"
        else:
            consumer, which = CONSUMER, f", where `{CONSUMER}` is the stream that uses the tensor"
        site, _ = describer.placement(frames)
        call.site = site
        tensor, named = tensor_code(describer, noop.lifetime, function_of(call))
        if named:
            which = f"{which}{named}" if which else named
        return Finding(
            kind=KIND,
            hazard=None,
            accesses=[call],
            message=(
                f"record_stream{at(call)} names {call.stream_label}, the stream that allocated the block, "
                "so it does nothing and the consumer stream's use stays unprotected."
            ),
            fix=f"record on the consumer stream, not the allocating one: `{tensor}.record_stream({consumer})`{which}",
            graph=noop.domain,
            allocation=describer.allocation(noop.lifetime),
        )


DETECTOR = RecordStreamNoopDetector()
