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

import streamrace


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    pinned = load_example("pinned_memory")
    for name, run in pinned.SCENARIOS.items():
        for fixed in (False, True):
            trace = f"host_{name}_{'fixed' if fixed else 'buggy'}"
            with streamrace.watch(trace=str(out / f"{trace}.jsonl.gz"), hooks="python") as session:
                outcome = run(fixed)
            found = [(f.kind, f.count) for f in session.findings]
            print(
                trace, found, f"corrupted {outcome.corrupted}/{outcome.steps} premise {outcome.premise}", session.errors
            )


if __name__ == "__main__":
    main()
