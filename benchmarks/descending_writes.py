"""The Python engine's last writes (streamrace/analysis/last_writes.py) written at ascending
and at descending addresses, side by side in one run: a write below every span used to move
all of them (a flat list's insert at the front), so descending writes were quadratic.

    python benchmarks/descending_writes.py --blocks 100000
"""

from __future__ import annotations

import argparse
import time

from streamrace.analysis.last_writes import LastWrites


def seconds(addresses: list[int]) -> float:
    """CPU seconds to write a 64-byte span at each address, then read each back."""
    last: LastWrites[int] = LastWrites()
    start = time.process_time()
    for k, addr in enumerate(addresses):
        last.assign(addr, addr + 64, k)
    for addr in addresses:
        for _ in last.under(addr, addr + 64):
            pass
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    args = parser.parse_args()
    ascending = [k * 128 for k in range(args.blocks)]
    up, down = seconds(ascending), seconds(ascending[::-1])
    print(f"{args.blocks:,} blocks: ascending {up:.2f} s, descending {down:.2f} s", end="")
    print(f", descending / ascending {down / up:.2f}x")


if __name__ == "__main__":
    main()
