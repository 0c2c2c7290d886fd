"""One small captured program per hazard class (HAZARDS.md H2-H6, H10), each with its fixed twin.

Every scenario is a few lines of stream choreography inside one ``torch.cuda.graph`` capture,
modelled on the serving code where the hazard was seen. ``torch.cuda._sleep`` delays the
right branch so that, at replay, the buggy variant really corrupts its output while the
fixed variant does not; streamrace flags the buggy one from the capture alone.

    python examples/hazard_gallery.py            # every scenario, buggy and fixed
    python examples/hazard_gallery.py H5 --fixed
"""

from __future__ import annotations

import argparse
import sys

import torch

import streamrace

N = 1 << 20  # 4 MiB of float32: large-pool blocks


class Scenario:
    """A captured region (``body``) with its expected outputs, computed on one stream."""

    hazard = ""
    title = ""

    def __init__(self, fixed: bool, sleep_cycles: int) -> None:
        self.fixed, self.sleep_cycles = fixed, sleep_cycles
        self.x = torch.empty(N, device="cuda")  # the static input buffer the graph reads
        self.side = torch.cuda.Stream()
        streamrace.name_stream(self.side, "side")

    def sleep(self) -> None:
        torch.cuda._sleep(self.sleep_cycles)

    def reset(self) -> None:
        """Clear persistent buffers before a replay."""

    def body(self) -> None:
        raise NotImplementedError

    def observed(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def expected(self) -> list[torch.Tensor]:
        raise NotImplementedError


class LateJoin(Scenario):
    hazard, title = "H2", "a buffer written on a side stream is read on main before the join"

    def __init__(self, fixed: bool, sleep_cycles: int) -> None:
        super().__init__(fixed, sleep_cycles)
        self.topk = torch.zeros(N, device="cuda")  # persistent, like a per-batch top-k buffer

    def reset(self) -> None:
        self.topk.zero_()

    def body(self) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            self.sleep()
            self.topk.copy_(self.x * 2)
        if self.fixed:
            main.wait_stream(self.side)
        self.out = self.topk + 1
        if not self.fixed:
            main.wait_stream(self.side)

    def observed(self) -> list[torch.Tensor]:
        return [self.out]

    def expected(self) -> list[torch.Tensor]:
        return [self.x * 2 + 1]


class EarlyFork(Scenario):
    hazard, title = "H3", "the next layer forks before the previous layer's read of a shared buffer"

    def __init__(self, fixed: bool, sleep_cycles: int) -> None:
        super().__init__(fixed, sleep_cycles)
        self.shared = torch.zeros(N, device="cuda")

    def body(self) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)  # layer 1 fork
        with torch.cuda.stream(self.side):
            self.shared.copy_(self.x)
        main.wait_stream(self.side)
        if not self.fixed:
            self.side.wait_stream(main)  # layer 2 fork, issued before layer 1's read
        self.sleep()
        self.out1 = self.shared * 1  # layer 1 reads the shared buffer
        if self.fixed:
            self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            self.shared.copy_(self.x * 2)
        main.wait_stream(self.side)
        self.out2 = self.shared * 1

    def observed(self) -> list[torch.Tensor]:
        return [self.out1, self.out2]

    def expected(self) -> list[torch.Tensor]:
        return [self.x.clone(), self.x * 2]


class MissingEventWait(Scenario):
    hazard, title = "H4", "a main-stream product made after the fork is read on the side stream without an event"

    def body(self) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        self.sleep()
        produced = self.x * 3  # made on main after the fork
        ready = torch.cuda.Event()
        ready.record(main)
        with torch.cuda.stream(self.side):
            if self.fixed:
                self.side.wait_event(ready)
            self.out = produced + 1
        main.wait_stream(self.side)

    def observed(self) -> list[torch.Tensor]:
        return [self.out]

    def expected(self) -> list[torch.Tensor]:
        return [self.x * 3 + 1]


class InPlaceWhileRead(Scenario):
    hazard, title = "H5", "one branch mutates in place a tensor the other branch reads"

    def body(self) -> None:
        main = torch.cuda.current_stream()
        hidden = self.x * 1
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            self.sleep()
            self.shared_out = hidden * 2  # the shared-experts branch reads hidden
        if self.fixed:
            self.routed_out = hidden * 10  # out of place: the side branch keeps its input
        else:
            self.routed_out = hidden.mul_(10)  # in place, while the side branch may still read it
        main.wait_stream(self.side)

    def observed(self) -> list[torch.Tensor]:
        return [self.shared_out, self.routed_out]

    def expected(self) -> list[torch.Tensor]:
        return [self.x * 2, self.x * 10]


class SharedWorkspace(Scenario):
    hazard, title = "H6", "a static workspace used by two streams at once"

    def __init__(self, fixed: bool, sleep_cycles: int) -> None:
        super().__init__(fixed, sleep_cycles)
        self.workspace = torch.zeros(N, device="cuda")
        self.side_workspace = torch.zeros(N, device="cuda") if fixed else self.workspace

    def body(self) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        self.workspace.copy_(self.x)  # main's partial results
        self.sleep()
        self.main_out = self.workspace * 1
        with torch.cuda.stream(self.side):
            self.side_workspace.copy_(self.x * 5)
            self.side_out = self.side_workspace * 1
        main.wait_stream(self.side)

    def observed(self) -> list[torch.Tensor]:
        return [self.main_out, self.side_out]

    def expected(self) -> list[torch.Tensor]:
        return [self.x.clone(), self.x * 5]


class RecordStreamOnOwner(Scenario):
    hazard, title = "H10", "record_stream on the allocating stream (a no-op), then freed before the join"

    def body(self) -> None:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        produced = self.x * 1
        ready = torch.cuda.Event()
        ready.record(main)
        with torch.cuda.stream(self.side):
            self.side.wait_event(ready)
            self.sleep()
            self.out = produced * 2
        # The fix names the consumer; naming the allocating stream does nothing.
        produced.record_stream(self.side if self.fixed else main)
        del produced
        self.after = self.x * 5  # next main allocation: reuses the block unless it is parked
        main.wait_stream(self.side)

    def observed(self) -> list[torch.Tensor]:
        return [self.out, self.after]

    def expected(self) -> list[torch.Tensor]:
        return [self.x * 2, self.x * 5]


SCENARIOS: dict[str, type[Scenario]] = {
    cls.hazard: cls
    for cls in (LateJoin, EarlyFork, MissingEventWait, InPlaceWhileRead, SharedWorkspace, RecordStreamOnOwner)
}


def run(
    hazard: str, fixed: bool, replays: int = 3, trace: str | None = None, sleep_cycles: int = 20_000_000
) -> tuple[streamrace.Session, tuple[int, int]]:
    """Capture one scenario under streamrace.watch(), replay it, and count corrupted replays."""
    scenario = SCENARIOS[hazard](fixed, sleep_cycles)
    scenario.x.copy_(torch.randn(N, device="cuda"))
    capture_stream = torch.cuda.Stream()
    streamrace.name_stream(capture_stream, "main")
    graph = torch.cuda.CUDAGraph()
    with streamrace.watch(trace) as session, torch.cuda.graph(graph, stream=capture_stream):
        scenario.body()
    gen = torch.Generator(device="cuda").manual_seed(0)
    corrupted = 0
    for _ in range(replays):
        scenario.x.copy_(torch.randn(N, device="cuda", generator=gen))
        scenario.reset()
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        ok = all(torch.equal(got, want) for got, want in zip(scenario.observed(), scenario.expected(), strict=True))
        corrupted += not ok
    return session, (corrupted, replays)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hazards", nargs="*", metavar="HAZARD", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--fixed", action="store_true", help="only the fixed twins")
    parser.add_argument("--buggy", action="store_true", help="only the buggy variants")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.hazards) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown hazard {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    variants = [True] if args.fixed else [False] if args.buggy else [False, True]
    for hazard in args.hazards or SCENARIOS:
        for fixed in variants:
            session, (corrupted, replays) = run(hazard, fixed)
            kinds = ", ".join(sorted({f.kind for f in session.findings})) or "none"
            print(
                f"{hazard} {'fixed' if fixed else 'buggy'}: {SCENARIOS[hazard].title}\n"
                f"    streamrace findings: {kinds}; replay: {corrupted} of {replays} corrupted"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
