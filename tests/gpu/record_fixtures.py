"""Record the real traces committed under examples/traces/ (run on the GPU machine).

python tests/gpu/record_fixtures.py OUTDIR
python tests/gpu/record_fixtures.py OUTDIR padded   # only the padded-scatter traces
python tests/gpu/record_fixtures.py OUTDIR dsv4     # only the dsv4_mini traces
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example


def record_padded(out: pathlib.Path) -> None:
    """padded_{stale,reserved,guarded} (examples/padded_scatter.py) and dsv4_padded_race (the
    DSV4 decode's race and its stale padding together)."""
    padded = load_example("padded_scatter")
    for variant in padded.VARIANTS:
        name = f"padded_{variant}"
        session, outcome = padded.record(variant, trace=str(out / f"{name}.jsonl.gz"))
        print(name, [(f.kind, f.count) for f in session.findings], f"corrupted {outcome.corrupted}/{outcome.rounds}")
    dsv4 = load_example("dsv4_mini_decode")
    session, check = dsv4.run_padded("bug", "stale", trace=str(out / "dsv4_padded_race.jsonl.gz"))
    print("dsv4_padded_race", [(f.kind, f.count) for f in session.findings], check)


def record_dsv4(out: pathlib.Path) -> None:
    """dsv4_mini_{race,latent,fixed,record_stream} (examples/dsv4_mini_decode.py): the README's trace."""
    dsv4 = load_example("dsv4_mini_decode")
    for name, variant, latent in [
        ("dsv4_mini_race", "bug", False),
        ("dsv4_mini_latent", "bug", True),
        ("dsv4_mini_fixed", "keep-alive", False),
        ("dsv4_mini_record_stream", "record-stream", False),
    ]:
        session, _ = dsv4.run(variant, latent=latent, trace=str(out / f"{name}.jsonl.gz"))
        print(name, [(f.kind, f.aliasing, f.count) for f in session.findings], session.errors)


def record_galleries(out: pathlib.Path) -> None:
    """gallery_* (examples/hazard_gallery.py) and execution_* (examples/execution_gallery.py)."""
    gallery = load_example("hazard_gallery")
    for hazard in gallery.SCENARIOS:
        for fixed in (False, True):
            name = f"gallery_{hazard}_{'fixed' if fixed else 'buggy'}"
            session, (corrupted, replays) = gallery.run(hazard, fixed, trace=str(out / f"{name}.jsonl.gz"))
            print(name, [(f.kind, f.hazard) for f in session.findings], f"corrupted {corrupted}/{replays}")
    execution = load_example("execution_gallery")
    for key, scenario in execution.SCENARIOS.items():
        for fixed in (True,) if scenario.correct_pattern else (False, True):
            name = f"execution_{key}_{'fixed' if fixed else 'buggy'}"
            session, outcome = execution.record(key, fixed, trace=str(out / f"{name}.jsonl.gz"))
            kinds = [(f.kind, f.aliasing, f.count) for f in session.findings]
            print(name, kinds, f"corrupted {outcome.corrupted}/{outcome.rounds}", "premise", outcome.premise)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if sys.argv[2:] == ["padded"]:
        record_padded(out)
        return
    if sys.argv[2:] == ["dsv4"]:
        record_dsv4(out)
        return
    record_padded(out)
    record_dsv4(out)
    record_galleries(out)


if __name__ == "__main__":
    main()
