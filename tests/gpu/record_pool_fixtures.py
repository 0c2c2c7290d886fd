"""Record the application-pool traces committed under examples/traces/ (run on the GPU machine):
pool_kv_{buggy,fixed}, examples/paged_kv_pool.py's paged KV cache under overlap scheduling.

python tests/gpu/record_pool_fixtures.py OUTDIR
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import load_example
from fixture_recording import record_buggy_and_fixed


def main() -> None:
    pool = load_example("paged_kv_pool")
    record_buggy_and_fixed(
        sys.argv[1],
        {"pool_kv": pool.run},
        shown=lambda finding: (finding.kind, finding.aliasing, finding.count),
        premise=False,
    )


if __name__ == "__main__":
    main()
