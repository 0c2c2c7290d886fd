"""Record the static-output and escaped-allocation traces committed under examples/traces/
(run on the GPU machine): stale_{graphed,view,workspace}_{buggy,fixed}, the programs of
examples/static_outputs.py (HAZARDS.md M4, M5).

python tests/gpu/record_stale_fixtures.py OUTDIR
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example
from fixture_recording import record_buggy_and_fixed


def main() -> None:
    example = load_example("static_outputs")
    runs = {f"stale_{name}": scenario.run for name, scenario in example.SCENARIOS.items()}
    record_buggy_and_fixed(sys.argv[1], runs)


if __name__ == "__main__":
    main()
