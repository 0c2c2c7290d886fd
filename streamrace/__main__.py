"""``python -m streamrace``: the same command line as the ``streamrace`` console script."""

import sys

from streamrace.cli import main

sys.exit(main())
