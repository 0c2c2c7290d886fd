"""What the native hooks' drain costs an event (the records turned into the trace's dicts, at
every flush of a recording), and what a whole flush costs one (drain, settling, the trace's
lines written), for two checkouts side by side: before and after a change.

Each checkout (a directory holding a built ``streamrace`` package and its ``tests/``, e.g.
``git worktree add`` plus ``python setup.py build_ext --inplace``) gets one worker process that
records on the fake CUDA of the tests (tests/fake_cuda.py: no GPU needed) with the native hooks.
A round records ``--events`` events of one mix and drains them, timed in the worker's CPU time
with the cyclic GC off (as a flush runs it: streamrace.collector.collections_paused); the rounds
alternate between the two workers so that both see the same load. Mixes: ops on contiguous
blocks, ops on strided views (shape and stride), and allocations and frees; then a flush of a
serving step's kinds (an op, an event created and recorded, an allocation and its free), the
recording's trace file in a temporary directory. Printed per mix: ns an event, fastest and
median of each checkout, and after / before.

    python benchmarks/drain_cost.py /tmp/before /path/to/after --rounds 9
"""

from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkouts import Checkouts, checkout_parser, print_side_by_side, require_checkouts, serve

MIXES = ("contiguous ops", "strided ops", "allocs and frees")
FLUSH = "flush, serving kinds"


def _record(fake, blocks, mix: str, events: int) -> None:
    a, b = blocks
    if mix == "contiguous ops":
        for _ in range(events):
            b.add_(a)
    elif mix == "strided ops":
        a2, b2 = a[:64].view(8, 8).t(), b[:64].view(8, 8).t()
        for _ in range(events):
            b2.add_(a2)
    elif mix == "allocs and frees":
        for _ in range(events // 2):
            fake.free(fake.alloc())
    else:
        for _ in range(events // 5):
            b.add_(a)
            fake.record(fake.event())
            fake.free(fake.alloc())


def worker(events: int) -> None:
    """Answer each mix with the CPU seconds of one drain (or flush) and its events."""
    import tempfile

    from fake_cuda import FakeCuda, Kernels

    from streamrace.record.recorder import Recorder

    fake = FakeCuda()
    with tempfile.TemporaryDirectory() as directory, Kernels(fake):
        recorder = Recorder(trace=os.path.join(directory, "t.jsonl.gz"), hooks="native", runtime=fake)
        recorder.output.flush_events = 1 << 62  # flushed here only
        recorder.start()
        hooks = recorder.log.hooks

        def answer(mix: str) -> dict[str, float]:
            recorder.output.flush()
            first = hooks.peek_seq()
            _record(fake, blocks, mix, events)
            gc.disable()
            start = time.process_time()
            if mix == FLUSH:
                recorder.output.flush()
                count = hooks.peek_seq() - first
            else:
                count = len(hooks.drain())
            seconds = time.process_time() - start
            gc.enable()
            return {"seconds": seconds, "events": count}

        with fake.on(0x1000):
            blocks = fake.alloc(), fake.alloc()  # the fake's blocks are few: made once
            serve(answer)
        recorder.stop()


def _ns_an_event(answer: dict[str, float]) -> float:
    return answer["seconds"] / answer["events"] * 1e9


def main() -> None:
    parser = checkout_parser(__doc__)
    parser.add_argument("--events", type=int, default=20_000, help="events recorded per round")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per checkout and mix")
    args = parser.parse_args()
    if args.worker:
        worker(args.events)
        return
    require_checkouts(parser, args)
    checkouts = Checkouts(
        __file__,
        (args.before, args.after),
        lambda tree: [tree, os.path.join(tree, "tests")],
        ("--worker", "--events", str(args.events)),
    )
    print_side_by_side(checkouts, (*MIXES, FLUSH), args.rounds, _ns_an_event, "ns an event", 20, 0, 2)
    checkouts.close()


if __name__ == "__main__":
    main()
