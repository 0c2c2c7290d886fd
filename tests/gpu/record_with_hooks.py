"""Record the DSV4 example (every variant) and the hazard gallery with one set of hooks.

Run in a fresh process per set by tests/gpu/test_hooks_gpu.py, so that both see the same
allocations: python tests/gpu/record_with_hooks.py native|python OUTDIR
"""

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example


def main() -> None:
    kind, out = sys.argv[1], pathlib.Path(sys.argv[2])
    os.environ["STREAMRACE_HOOKS"] = kind
    out.mkdir(parents=True, exist_ok=True)
    dsv4 = load_example("dsv4_mini_decode")
    for variant in dsv4.VARIANTS:
        session, _ = dsv4.run(variant, trace=str(out / f"dsv4_{variant}.jsonl.gz"), sleep_cycles=1000)
        assert session.recorder.hooks_kind == kind, session.recorder.hooks_kind
    gallery = load_example("hazard_gallery")
    for hazard in gallery.SCENARIOS:
        for fixed in (False, True):
            name = f"gallery_{hazard}_{'fixed' if fixed else 'buggy'}.jsonl.gz"
            gallery.run(hazard, fixed, replays=1, trace=str(out / name), sleep_cycles=1000)


if __name__ == "__main__":
    main()
