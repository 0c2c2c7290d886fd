"""Record the static-output and escaped-allocation traces committed under examples/traces/
(run on the GPU machine): stale_{graphed,view,workspace}_{buggy,fixed}, the programs of
examples/static_outputs.py (HAZARDS.md M4, M5).

python tests/gpu/record_stale_fixtures.py OUTDIR
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example

import streamrace


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    example = load_example("static_outputs")
    for name, scenario in example.SCENARIOS.items():
        for fixed in (False, True):
            trace = f"stale_{name}_{'fixed' if fixed else 'buggy'}"
            with streamrace.watch(trace=str(out / f"{trace}.jsonl.gz")) as session:
                outcome = scenario.run(fixed)
            found = [(f.kind, f.count) for f in session.findings]
            print(
                trace,
                found,
                f"corrupted {outcome.corrupted}/{outcome.rounds}",
                f"premise {outcome.premise}",
                session.errors,
            )


if __name__ == "__main__":
    main()
