"""Record the three DSV4 traces ``streamrace diff`` is proven on (run on the GPU machine).

    python tests/gpu/record_diff_fixtures.py examples/traces

writes ``dsv4_index_bf16``, ``dsv4_index_fp8`` and ``dsv4_index_no_overlap`` (``.jsonl.gz``)
into the directory, each recorded with the example's replay check, then prints each run's
verdict and the diff of the pairs that tests/test_diff_real.py checks. Run from the repository
root: the traces name the example's source by its path from there.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = "examples/dsv4_mini_decode.py"

# name -> the example's flags: the bf16 index-K build (manifest: the freed qkv block is reused
# before the join), the fp8 one (latent: q comes from the large pool), and overlap off.
RUNS = {
    "dsv4_index_bf16": ["--index-dtype", "bf16"],
    "dsv4_index_fp8": ["--index-dtype", "fp8"],
    "dsv4_index_no_overlap": ["--index-dtype", "bf16", "--variant", "no-overlap"],
}
PAIRS = [
    ("dsv4_index_bf16", "dsv4_index_fp8"),
    ("dsv4_index_fp8", "dsv4_index_bf16"),
    ("dsv4_index_bf16", "dsv4_index_no_overlap"),
    ("dsv4_index_no_overlap", "dsv4_index_bf16"),
]


def record(name: str, out: pathlib.Path) -> tuple[pathlib.Path, str]:
    """Run the example with --check, its trace written to OUT/NAME.jsonl.gz: (trace, stdout)."""
    trace = out / f"{name}.jsonl.gz"
    cmd = [sys.executable, EXAMPLE, *RUNS[name], "--check", "--trace", str(trace)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return trace, proc.stdout


def corrupted(stdout: str) -> bool:
    """The example's replay verdict: ``replay check: CORRUPTED: ...`` or ``replay check: exact: ...``."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("replay check: ")]
    return line.startswith("replay check: CORRUPTED")


def diff(a: pathlib.Path, b: pathlib.Path, *flags: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "streamrace", "diff", str(a), str(b), *flags]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def main() -> None:
    out = pathlib.Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    traces = {}
    for name in RUNS:
        traces[name], stdout = record(name, out)
        print(name, "CORRUPTED" if corrupted(stdout) else "exact", "->", traces[name])
        print(stdout)
    for a, b in PAIRS:
        proc = diff(traces[a], traces[b])
        print(f"== streamrace diff {a} {b}: exit {proc.returncode}")
        print(proc.stdout, proc.stderr)


if __name__ == "__main__":
    main()
