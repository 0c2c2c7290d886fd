"""Record the check_input_liveness traces committed under examples/traces/ (run on the GPU
machine, from the repository root so that the traces' paths are the repository's):
liveness_<case>.jsonl.gz, programs of tests/gpu/liveness_cases.py where torch 2.13 raises and
where it accepts. tests/test_liveness_traces.py analyses them.

python tests/gpu/record_liveness_fixtures.py OUTDIR
"""

import gc
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch
from liveness_cases import CASES, Proof

import streamrace

# Raising: a plain input, a view's base, an alias's storage, a Parameter, set_, resize_, two at
# once in a helper; accepting: nothing freed, pool intermediates and outputs, a shared pool, a
# captured torch.equal whose input is then freed.
RECORDED = (
    "dead_input_tensor",
    "view_tensor",
    "alive_storage_dead_tensor_ok",
    "model_weight_dead",
    "dead_storage_raises",
    "resize_larger_detected",
    "error_message_contains_all_tracebacks",
    "nothing_dead_ok",
    "dead_intermediate_tensors_ok",
    "shared_pool_tensor_not_tracked",
    "cpu_result_op_input_freed",
)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cases = {case.name: case for case in CASES}
    for name in RECORDED:
        case = cases[name]
        proof = Proof()
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        path = out / f"liveness_{name}.jsonl.gz"
        with streamrace.watch(trace=str(path)) as session:
            kept = case.program(proof)
        del kept
        found = [
            (f.kind, f.accesses[1].location, (f.allocation.reused_by or {}).get("alloc_location"))
            for f in session.findings
        ]
        print(
            path.name,
            "torch raises" if case.torch_raises else "torch accepts",
            found,
            "premise",
            proof.premise,
            "exact" if proof.exact_all else "NOT EXACT",
            f"{path.stat().st_size} bytes",
            session.errors,
        )


if __name__ == "__main__":
    main()
