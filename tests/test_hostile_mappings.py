"""Events handed over in memory whose lookups run Python code: the C++ core must hold what it
reads (it looks fields up with borrowed references), so that code that changes or makes afresh
what it hands back never makes it read freed memory. Each case runs in a child process, since
what it guards against is a crash; the Python engine's answer is the reference."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from streamrace.analysis.core import cpp_available

pytestmark = pytest.mark.skipif(not cpp_available(), reason="the C++ core is not built")

# A key colliding with "addr" in a range dict: compared with it once, it empties the op's reads,
# freeing the ranges still to be walked.
EMPTIES_THE_LIST = """
class Evil:
    armed = False
    def __init__(self, ev): self.ev = ev
    def __hash__(self): return hash("addr")
    def __eq__(self, other):
        if Evil.armed:
            Evil.armed = False
            self.ev["reads"].clear()
        return False

ev = {"ev": "op", "op": "k", "seq": 1, "stream": 1, "reads": [], "writes": []}
first = {}
first[Evil(ev)] = 0
first.update({"addr": 4096, "nbytes": 64})
ev["reads"] = [first] + [{"addr": 8192 + 64 * i, "nbytes": 64} for i in range(8)]
del first
engine.feed({"ev": "stream", "seq": 0, "stream": 1})
Evil.armed = True
engine.feed(ev)
print("ok", engine.accesses)
"""

# A Mapping that is not a dict and makes every value afresh: nothing holds what it hands back.
MAKES_VALUES_AFRESH = """
import copy
from collections.abc import Mapping
from streamrace.trace import load_trace

class Fresh(Mapping):
    def __init__(self, d): self._d = d
    def __getitem__(self, key): return copy.deepcopy(self._d[key])
    def __iter__(self): return iter(self._d)
    def __len__(self): return len(self._d)

trace = load_trace(sys.argv[2])
engine.run(Fresh(ev) for ev in trace.events)
print("ok", engine.accesses, len(list(engine.detections)))
"""


def _run(script: str, engine: str, *args: str) -> str:
    code = (
        "import sys\nfrom streamrace.analysis.core import new_engine\n"
        "engine = new_engine(core=sys.argv[1])\n" + textwrap.dedent(script)
    )
    done = subprocess.run([sys.executable, "-c", code, engine, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-3000:]
    return done.stdout


def test_a_range_lookup_that_empties_the_list_being_walked() -> None:
    assert _run(EMPTIES_THE_LIST, "cpp") == _run(EMPTIES_THE_LIST, "python")


def test_a_mapping_that_makes_its_values_afresh() -> None:
    from pathlib import Path

    trace = str(Path(__file__).resolve().parents[1] / "examples" / "traces" / "execution_X1_buggy.jsonl.gz")
    cpp = _run(MAKES_VALUES_AFRESH, "cpp", trace)
    assert cpp == _run(MAKES_VALUES_AFRESH, "python", trace) and cpp.split()[2] != "0"
