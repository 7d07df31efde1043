"""Files the engine writes beside the models (a prompt head's KV rows, a tokenizer store).

They are caches: another process may read one at any moment, and a read-only or full model
folder only means working without them. So each is written to a sibling temporary file (named
for the process and thread) and renamed over the old one, and a failure to write is a False,
never an error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path


def write_replacing(path: Path, write: Callable[[Path], object]) -> bool:
    """``write(tmp)`` then rename ``tmp`` to ``path`` in one step; False (and no ``tmp`` left)
    when the folder refused either."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False
