"""What a process that ends right after its work may leave to the operating system.

The command line (``streamrace``, ``python -m streamrace``) analyses, writes its report and
exits. An analysis of a long trace ends holding millions of small objects (the events its
engine kept for later replays), and freeing them one by one cost a sixth of ``streamrace
analyze`` on benchmarks/synthetic.py's capture set (0.38 of 2.3 s, cProfile): work whose only
effect is the memory the process gives back a moment later anyway. So the console entry
(``cli.console``) asks analyses to keep their engines (``retain_until_exit``) and ends the
process with ``os._exit`` once its output is flushed, as mypy does for the same reason. A
library caller, the pytest plugin and ``cli.main`` called in-process free as before.
"""

from __future__ import annotations

import gc

_RETAINED: list[object] | None = None  # what analyses left to the process's end, once asked


def retain_until_exit() -> None:
    """From now on, analyses keep what they would free at their end (this process ends soon)."""
    global _RETAINED
    if _RETAINED is None:
        _RETAINED = []


def forget_retained() -> None:
    """Analyses free what they made again (a worker process that outlives many of them)."""
    global _RETAINED
    _RETAINED = None


def retain(*objects: object) -> bool:
    """Keep these to the process's end, unless that was not asked for (False: free them).
    What is kept is frozen out of the cyclic collector's scans (it makes no garbage)."""
    if _RETAINED is None:
        return False
    _RETAINED.append(objects)
    return True


def freeze_retained() -> None:
    """After an analysis: the collector stops scanning what it kept (``gc.freeze``), so that
    a later collection does not walk millions of live objects to find no cycle."""
    if _RETAINED:
        gc.freeze()
