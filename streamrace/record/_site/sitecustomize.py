"""Put on PYTHONPATH by ``streamrace run``: start the recorder, then the site's own sitecustomize."""

import importlib
import os
import sys

try:
    from streamrace.record.autostart import install_from_env

    install_from_env()
except Exception as exc:  # never stop the user's program from starting
    print(f"streamrace: recorder not installed: {exc}", file=sys.stderr)

# Chain to a sitecustomize that ours shadows, if there is one.
_here = os.path.dirname(os.path.abspath(__file__))
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["sitecustomize"]
try:
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.path[:] = _saved
