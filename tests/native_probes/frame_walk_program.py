"""Run by tests/test_frame_walk.py under one interpreter, with the probe built for it on the
path (argv[1]): the probe's walk of this thread's frames, the GIL let go, against the
interpreter's own (f_back, f_lineno) in generators, a coroutine, comprehensions, recursion
and another thread. Prints one line: "ok", the version and which walk was built."""

import sys
import threading

sys.path.insert(0, sys.argv[1])
import frame_walk_probe as probe


def python_walk():
    frame, out = sys._getframe(1), []
    while frame is not None:
        out.append((frame.f_code.co_name, frame.f_lineno))
        frame = frame.f_back
    return out


def leaf():
    return python_walk(), probe.walk()


def gen():
    yield leaf()


def deep(n):
    return deep(n - 1) if n else leaf()


async def coro():
    return leaf()


def check(pair):
    want, got = pair
    assert got == want, (got, want)


check(leaf())
check(next(gen()))
[check(leaf()) for _ in range(2)]
check(deep(5))
check((lambda: leaf())())
running = coro()
try:
    running.send(None)
except StopIteration as done:
    check(done.value)
worker = threading.Thread(target=lambda: check(leaf()))
worker.start()
worker.join()
print("ok", sys.version.split()[0], "without_gil" if probe.without_gil else "public_walk")
