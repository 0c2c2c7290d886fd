"""Record the pinned-memory traces committed under examples/traces/ (run on the GPU machine):
host_<scenario>_{buggy,fixed} for each scenario of examples/pinned_memory.py (M1 eager staging,
M1 across replays, M2 D2H, M3 graph-baked free, a serving loop's async staging), with the
reference (Python) hooks.

python tests/gpu/record_host_fixtures.py OUTDIR
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example
from fixture_recording import record_buggy_and_fixed


def main() -> None:
    pinned = load_example("pinned_memory")
    runs = {f"host_{name}": run for name, run in pinned.SCENARIOS.items()}
    record_buggy_and_fixed(sys.argv[1], runs, rounds=lambda outcome: outcome.steps, hooks="python")


if __name__ == "__main__":
    main()
