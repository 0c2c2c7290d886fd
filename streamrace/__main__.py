"""``python -m streamrace``: the same command line as the ``streamrace`` console script."""

from streamrace.cli import console

console()
