"""Record the application-pool traces committed under examples/traces/ (run on the GPU machine):
pool_kv_{buggy,fixed}, examples/paged_kv_pool.py's paged KV cache under overlap scheduling.

python tests/gpu/record_pool_fixtures.py OUTDIR
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example

import streamrace


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    pool = load_example("paged_kv_pool")
    for fixed in (False, True):
        name = f"pool_kv_{'fixed' if fixed else 'buggy'}"
        with streamrace.watch(trace=str(out / f"{name}.jsonl.gz")) as session:
            outcome = pool.run(fixed)
        found = [(f.kind, f.aliasing, f.count) for f in session.findings]
        print(name, found, f"corrupted {outcome.corrupted}/{outcome.rounds}", session.errors)


if __name__ == "__main__":
    main()
