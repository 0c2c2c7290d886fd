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
_ours = sys.modules.pop("sitecustomize", None)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.path[:] = _saved
    # The import system looks this module up by name once it has run: put ours back (None:
    # imported under another name, so the chained one keeps the name).
    if _ours is not None:
        sys.modules["sitecustomize"] = _ours
