"""Three edges of a recording, for two checkouts side by side: before and after a change (the
fake CUDA of the tests, no GPU needed).

* **stop**: a recording of eager work alone reaches no flush point of the recorder's (a
  replay, a capture's end, a reset), so its stop drains and settles every event it made;
  timed: the stop, after ``--ops`` eager ``add_``.
* **full disk**: every chunk the trace writer is handed fails (``OSError``, no space left);
  the failed flush keeps its events; timed: ``--steps`` fake serving steps (stage a block on
  a copy stream, wait, copy it in, replay, sample), the default flush size.
* **eager ops**: ``--ops`` eager ``add_`` on two blocks, recorded in memory by the native hooks
  (torch's own CPU kernels: the op and its hooks are all there is, as in a GPU program's
  launch path); timed: the ops. What the hooks add to an op here was what they add on the GPU
  machines (about 1.4 us, docs/performance.md), so a change to them can be measured here.
* **model forwards**: ``--forwards`` forwards of a small decode model (four layers of norms,
  linears, attention over a cache written with ``index_copy_``, a gated MLP: 96 recorded ops,
  about 300 dispatches each) on tiny CPU tensors in inference mode, as a server runs it,
  recorded in memory by the native hooks; one intra-op thread; timed: the forwards. Unlike
  ``add_``, most of a model's dispatches are ops' kernels calling other ops.

Each checkout (a directory holding a built ``streamrace`` package and its ``tests/``, e.g.
``git worktree add`` plus ``python setup.py build_ext --inplace``) gets one worker process,
native hooks; the rounds alternate between the workers so that both see the same load. CPU
seconds; printed: fastest and median of each, and after / before of the fastest.

    python benchmarks/recording_edges.py /tmp/before . --rounds 5
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkouts import Checkouts, checkout_parser, print_side_by_side, require_checkouts, serve

EDGES = ("stop", "full disk", "eager ops", "model forwards")


def decode_model(hidden: int = 16, layers: int = 4, batch: int = 4):
    """A forward of a small decode model on CPU tensors (``model forwards``)."""
    import torch

    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.o = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, hidden)
            self.up, self.down = torch.nn.Linear(hidden, 2 * hidden), torch.nn.Linear(hidden, hidden)
            self.weight = torch.nn.Parameter(torch.ones(hidden))
            self.cache = torch.zeros(32, hidden)

        def norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

        def forward(self, x, loc):
            q = self.q(self.norm(x))
            self.cache.index_copy_(0, loc, q)
            x = x + self.o(torch.softmax(q @ self.cache.t(), -1) @ self.cache)
            gate, up = self.up(self.norm(x)).chunk(2, -1)
            return x + self.down(torch.nn.functional.silu(gate) * up)

    stack = [Layer() for _ in range(layers)]
    x, loc = torch.randn(batch, hidden), torch.arange(batch)

    def forward():
        y = x
        for layer in stack:
            y = layer(y, loc)
        return y

    return forward


def worker(ops: int, steps: int, forwards: int) -> None:
    """Answer each edge with the CPU seconds of one round, on a fresh recording."""
    import tempfile

    import torch
    from fake_cuda import FakeCuda, FakeGraph, memcopy

    from streamrace.record.recorder import Recorder
    from streamrace.trace.incremental import IncrementalTraceWriter

    def full(self, events, lines=None):
        raise OSError(28, "No space left on device")

    def eager_adds(fake: FakeCuda, **options) -> tuple[Recorder, float]:
        """``ops`` eager ``add_`` on two blocks under a started recorder (left running): the
        recorder, and the ops' CPU seconds."""
        recorder = Recorder(hooks="native", runtime=fake, **options)
        recorder.start()
        with fake.on(0x1000):
            a, b = fake.alloc(), fake.alloc()
            start = time.process_time()
            for _ in range(ops):
                b.add_(a)
            return recorder, time.process_time() - start

    forward = decode_model()

    def answer(edge: str) -> dict[str, float]:
        fake = FakeCuda()
        if edge == "model forwards":
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the model's kernels: no intra-op threads spinning beside it
            recorder = Recorder(hooks="native", runtime=fake)
            recorder.start()
            with torch.inference_mode():
                forward()  # the hooks learn the model's ops
                start = time.process_time()
                for _ in range(forwards):
                    forward()
                seconds = time.process_time() - start
            recorder.stop()
            torch.set_num_threads(threads)
            return {"seconds": seconds}
        if edge == "eager ops":
            recorder, seconds = eager_adds(fake)
            recorder.stop()
            return {"seconds": seconds}
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "t.jsonl.gz")
            if edge == "stop":
                recorder, _ = eager_adds(fake, trace=path, flush_events=1 << 62)
                start = time.process_time()
                recorder.stop()
                return {"seconds": time.process_time() - start}
            write, IncrementalTraceWriter.write = IncrementalTraceWriter.write, full
            try:
                recorder = Recorder(hooks="native", runtime=fake, trace=path)
                recorder.start()
                start = time.process_time()
                with fake.on(0x1000):
                    static_in, static_out = fake.alloc(), fake.alloc()
                    graph = FakeGraph(fake, work=lambda: memcopy(static_out, static_in))
                    graph.capture_begin()
                    static_out.add_(static_in)
                    graph.capture_end()
                    ready = fake.event()
                    for step in range(steps):
                        with fake.on(0x3000):
                            staged = fake.alloc()
                            staged.fill_(float(step))
                            fake.record(ready)
                        fake.wait(ready)
                        static_in.copy_(staged)
                        graph.replay()
                        static_out.mul_(0.5)
                        fake.free(staged)
                seconds = time.process_time() - start
                recorder.stop()
            finally:
                IncrementalTraceWriter.write = write
            return {"seconds": seconds}

    serve(answer)


def main() -> None:
    parser = checkout_parser(__doc__)
    parser.add_argument("--ops", type=int, default=300_000, help="eager ops (before the stop; timed)")
    parser.add_argument("--steps", type=int, default=6_000, help="serving steps with the disk full")
    parser.add_argument("--forwards", type=int, default=1_500, help="model forwards (timed)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per checkout and edge")
    args = parser.parse_args()
    if args.worker:
        worker(args.ops, args.steps, args.forwards)
        return
    require_checkouts(parser, args)
    checkouts = Checkouts(
        __file__,
        (args.before, args.after),
        lambda tree: [tree, os.path.join(tree, "tests")],
        ("--worker", "--ops", str(args.ops), "--steps", str(args.steps), "--forwards", str(args.forwards)),
    )
    print_side_by_side(checkouts, EDGES, args.rounds, lambda answer: answer["seconds"], "CPU seconds", 14, 2, 3)
    checkouts.close()


if __name__ == "__main__":
    main()
