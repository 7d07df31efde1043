"""Files the engine writes beside the models (a prompt head's KV rows, a tokenizer store).

They are caches: another process may read one at any moment, and a read-only or full model
folder only means working without them. So each is written to a sibling temporary file (named
for the process and thread) and renamed over the old one, and a failure to write is a False,
never an error. Where the models folder is read-only they go to the user cache
(:func:`user_cache`), and work that two processes should not do at once (a measurement, a
graph's twin) is serialised by a lock file (:func:`exclusive`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def user_cache(*parts: str) -> Path | None:
    """``parts`` under as2d's user cache folder (``~/.cache/as2d/``), made if need be; None
    where it cannot be made or written (then nothing is kept there)."""
    try:
        from platformdirs import user_cache_dir

        return writable_folder(Path(user_cache_dir("as2d", appauthor=False), *parts))
    except Exception:  # noqa: BLE001 - no user cache folder on this platform
        return None


def writable_folder(folder: Path) -> Path | None:
    """``folder``, made if need be, when this process may write in it; else None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK | os.X_OK) else None


@contextmanager
def exclusive(lock: Path | None) -> Iterator[None]:
    """Between processes, one at a time: an exclusive ``flock`` on the file ``lock`` for the
    ``with`` block (released when the file closes). Where the lock cannot be taken (no path, a
    read-only folder, no ``fcntl``), the block runs unserialised: the work is then only done
    twice, never wrongly."""
    handle = None
    if lock is not None:
        try:
            import fcntl

            handle = open(lock, "a")  # noqa: SIM115 - held for the with block
            fcntl.flock(handle, fcntl.LOCK_EX)
        except (OSError, ImportError):
            if handle is not None:
                handle.close()
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()
