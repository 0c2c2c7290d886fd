"""Write examples/traces/handbuilt_freed_before_join.jsonl: a hand-built trace of dsv4_mini.capture().

The events are what the recorder would see while ``examples/dsv4_mini.py`` captures its graph
(the DSV4 freed-before-join bug, hazard H1): main allocates ``qkv`` and records an event; the
side stream waits on it and reads ``qkv``; main frees ``qkv`` before the join, allocates a
tensor of the same size that gets the same block, and writes it; only then does main join the
side stream.

Source locations are looked up in dsv4_mini.py by the code on the line, so editing that file
cannot leave the trace pointing at the wrong lines. Run from the repository root:

    python examples/make_handbuilt_trace.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from streamrace.trace.builder import TraceBuilder

EXAMPLES = Path(__file__).resolve().parent
SOURCE = EXAMPLES / "dsv4_mini.py"
# Repo-relative, so that `streamrace analyze` run from the repository root finds the source.
SOURCE_NAME = "examples/dsv4_mini.py"
OUTPUT = EXAMPLES / "traces" / "handbuilt_freed_before_join.jsonl"

# dsv4_mini.capture() defaults, in bf16.
TOKENS, DIM, Q_DIM, TOPK, BF16 = 8, 1024, 512, 64, 2
QKV_COLS = 3 * Q_DIM


def at(code: str) -> str:
    """``"examples/dsv4_mini.py:LINE in FUNC"`` for the one line of dsv4_mini.py that contains ``code``."""
    lines = SOURCE.read_text(encoding="utf-8").splitlines()
    hits = [i for i, text in enumerate(lines) if code in text]
    if len(hits) != 1:
        raise SystemExit(f"{SOURCE}: {len(hits)} lines contain {code!r}; expected exactly one")
    func = next(
        (m.group(1) for text in reversed(lines[: hits[0]]) if (m := re.match(r"\s*def (\w+)", text))),
        "<module>",
    )
    return f"{SOURCE_NAME}:{hits[0] + 1} in {func}"


def build() -> TraceBuilder:
    tb = TraceBuilder(producer="examples/make_handbuilt_trace.py (hand-built, not recorded)")
    main = tb.stream("main")
    side = tb.stream("indexer")

    # Model init and the static input: eager allocations before the capture.
    w_qkv = tb.alloc(QKV_COLS * DIM * BF16, main, at=at("self.wqkv = torch.nn.Linear"))
    w_norm = tb.alloc(Q_DIM * BF16, main, at=at("self.q_norm = torch.nn.RMSNorm"))
    w_mix = tb.alloc(QKV_COLS * Q_DIM * BF16, main, at=at("self.wmix = torch.nn.Linear"))
    w_o = tb.alloc(DIM * QKV_COLS * BF16, main, at=at("self.wo = torch.nn.Linear"))
    w_idx = tb.alloc(QKV_COLS * TOPK * BF16, main, at=at("self.w_idx = torch.nn.Parameter"))
    topk_scores = tb.alloc(TOKENS * TOPK * BF16, main, at=at('self.register_buffer("topk_scores"'))
    hidden = tb.alloc(TOKENS * DIM * BF16, main, at=at("hidden = torch.randn"))

    def whole(addr: int, rows: int, cols: int) -> dict:
        return tb.view(addr, [rows, cols], itemsize=BF16)

    with tb.capture(main) as graph:
        pool = (graph, 0)  # the graph's private pool: every allocation inside the capture comes from it
        # _prologue: qkv on main, handed to the indexer through an event.
        line = at("qkv = self.wqkv(hidden)")
        qkv = tb.alloc(TOKENS * QKV_COLS * BF16, main, at=line, pool=pool)
        tb.op(
            "aten::linear",
            main,
            reads=[whole(hidden, TOKENS, DIM), whole(w_qkv, QKV_COLS, DIM)],
            writes=[whole(qkv, TOKENS, QKV_COLS)],
            at=line,
        )
        qkv_ready = tb.event()
        tb.record(qkv_ready, main, at=at("qkv_ready.record()"))
        tb.wait(qkv_ready, side, at=at("self.side.wait_event(qkv_ready)"))
        tb.op(
            "aten::mm.out",
            side,
            reads=[whole(qkv, TOKENS, QKV_COLS), whole(w_idx, QKV_COLS, TOPK)],
            writes=[whole(topk_scores, TOKENS, TOPK)],
            at=at("torch.mm(qkv, self.w_idx, out=self.topk_scores)"),
        )
        line = at("q = self.q_norm(qkv[:, : self.q_dim])")
        q = tb.alloc(TOKENS * Q_DIM * BF16, main, at=line, pool=pool)
        tb.op(
            "aten::rms_norm",
            main,
            # qkv[:, :q_dim]: a strided view, the first q_dim columns of every row.
            reads=[tb.view(qkv, [TOKENS, Q_DIM], [QKV_COLS, 1], itemsize=BF16), tb.span(w_norm, Q_DIM * BF16)],
            writes=[whole(q, TOKENS, Q_DIM)],
            at=line,
        )
        # The bug: qkv's last reference dies as _prologue returns, while the indexer may still be
        # reading it. The free happens in the caller's line, as the recorder sees it.
        tb.free(qkv, at=at("q = self._prologue(hidden)"))

        # forward: the next same-size main-stream allocation gets qkv's block.
        line = at("mixed = self.wmix(q)")
        mixed = tb.alloc(TOKENS * QKV_COLS * BF16, main, addr=qkv, at=line, pool=pool)
        tb.op(
            "aten::linear",
            main,
            reads=[whole(q, TOKENS, Q_DIM), whole(w_mix, QKV_COLS, Q_DIM)],
            writes=[whole(mixed, TOKENS, QKV_COLS)],
            at=line,
        )
        tb.wait_stream(main, side, at=at("torch.cuda.current_stream().wait_stream(self.side)"))

        line = at("return self.wo(mixed) + self.topk_scores.sum()")
        proj = tb.alloc(TOKENS * DIM * BF16, main, at=line, pool=pool)
        tb.op(
            "aten::linear",
            main,
            reads=[whole(mixed, TOKENS, QKV_COLS), whole(w_o, DIM, QKV_COLS)],
            writes=[whole(proj, TOKENS, DIM)],
            at=line,
        )
        total = tb.alloc(BF16, main, at=line, pool=pool)
        tb.op("aten::sum", main, reads=[whole(topk_scores, TOKENS, TOPK)], writes=[tb.span(total, BF16)], at=line)
        out = tb.alloc(TOKENS * DIM * BF16, main, at=line, pool=pool)
        tb.op(
            "aten::add",
            main,
            reads=[whole(proj, TOKENS, DIM), tb.span(total, BF16)],
            writes=[whole(out, TOKENS, DIM)],
            at=line,
        )
        for temp in (proj, total, mixed, q):
            tb.free(temp, at=line)
    return tb


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else OUTPUT
    path.parent.mkdir(parents=True, exist_ok=True)
    build().write(str(path))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
