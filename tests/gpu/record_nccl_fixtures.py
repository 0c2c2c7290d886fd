"""Record the NCCL traces committed under examples/traces/ (run on the GPU machine), and write
what the recorder saw, for each scenario of examples/nccl_gallery.py, buggy and fixed:

    python tests/gpu/record_nccl_fixtures.py OUTDIR

OUTDIR gets ``nccl_<ID>_<buggy|fixed>.jsonl.gz`` (native hooks: the committed fixtures), the
same recorded with the Python hooks (``python/``), and ``diagnostics.json`` and a summary on
stdout: per variant the corruption count and premise, the findings (kind, hazard, ops, streams,
signature, count), each collective op event (stream, whether it was moved onto NCCL's
internal stream, its reads and writes) with the event records and waits around it, the
streams and their names, event counts by kind, the recorder's errors, and whether the two hook
kinds agree on the findings. One run tells what to fix.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import traceback
from collections import Counter
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example

from streamrace.record.collectives import collective_name


def describe(session: Any, outcome: Any) -> dict[str, Any]:
    """What one recorded variant shows: outcome, findings, the collectives and their edges."""
    trace = session.trace
    events = trace.events if trace is not None else []
    streams = {e["stream"]: e.get("name") for e in events if e["ev"] == "stream"}
    collectives = []
    for index, event in enumerate(events):
        if event["ev"] != "op" or collective_name(event["op"]) is None:
            continue
        nearby = [
            {k: e.get(k) for k in ("seq", "ev", "event", "stream", "stack")}
            for e in events[max(0, index - 8) : index + 8]
            if e["ev"] in ("event_record", "event_wait", "event_create", "kernel", "capture_begin", "capture_end")
        ]
        collectives.append(
            {
                "seq": event["seq"],
                "op": event["op"],
                "stream": event["stream"],
                "stream_name": streams.get(event["stream"]),
                "moved_to_internal_stream": streams.get(event["stream"]) == "nccl",
                "reads": event["reads"],
                "writes": event["writes"],
                "events_around": nearby,
            }
        )
    return {
        "corrupted": outcome.corrupted,
        "rounds": outcome.rounds,
        "premise": outcome.premise,
        "findings": [
            {
                "kind": f.kind,
                "hazard": f.hazard,
                "count": f.count,
                "signature": f.signature,
                "graph": f.graph,
                "accesses": [(a.access, a.op, a.stream_label, a.location) for a in f.accesses],
                "message": f.message,
                "fix": f.fix,
            }
            for f in session.findings
        ],
        "collectives": collectives,
        "streams": {str(k): v for k, v in streams.items()},
        "event_kinds": dict(Counter(e["ev"] for e in events)),
        "kernel_events": [
            {k: e.get(k) for k in ("seq", "name", "stream", "graph", "node", "reads", "writes")}
            for e in events
            if e["ev"] == "kernel"
        ],
        "header": {k: trace.header.get(k) for k in ("hooks", "recording", "recorder_errors", "torch", "cuda")}
        if trace is not None
        else None,
        "errors": session.errors,
    }


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    (out / "python").mkdir(parents=True, exist_ok=True)
    gallery = load_example("nccl_gallery")
    env = {k: os.environ.get(k) for k in gallery.NO_MULTICAST}
    diagnostics: dict[str, Any] = {"env": env}
    failed = False
    for key, scenario in gallery.SCENARIOS.items():
        for fixed in (False, True):
            name = f"nccl_{key}_{'fixed' if fixed else 'buggy'}"
            entry: dict[str, Any] = {}
            for hooks, path in (("native", out / f"{name}.jsonl.gz"), ("python", out / "python" / f"{name}.jsonl.gz")):
                try:
                    session, outcome = gallery.record(key, fixed, trace=str(path), hooks=hooks)
                    entry[hooks] = describe(session, outcome)
                except Exception:
                    entry[hooks] = {"exception": traceback.format_exc()}
                    failed = True
            kinds = {h: sorted({f["kind"] for f in d.get("findings", [])}) for h, d in entry.items()}
            want = [] if fixed else [scenario.finding]
            entry["verdict"] = {
                "want": want,
                "kinds": kinds,
                "flagged_right": all(k == want for k in kinds.values()),
                "hooks_agree": len({json.dumps(k) for k in kinds.values()}) == 1,
            }
            native = entry.get("native", {})
            print(
                name,
                "kinds",
                kinds,
                f"corrupted {native.get('corrupted')}/{native.get('rounds')}",
                "premise",
                native.get("premise"),
                "moved",
                [c["moved_to_internal_stream"] for c in native.get("collectives", [])],
                "errors",
                native.get("errors"),
                flush=True,
            )
            failed |= not entry["verdict"]["flagged_right"]
            diagnostics[name] = entry
    (out / "diagnostics.json").write_text(json.dumps(diagnostics, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
