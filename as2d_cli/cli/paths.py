"""Files the user asked for (``--stats-json``, ``--json``, ``--plot``): checked before the slow
work, so that a typo in a folder does not cost a whole run, and written with one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

from as2d.cli.errors import UserError


def check_writable(path: Path, what: str) -> None:
    """Fail now, with one line, if ``path`` cannot be written later (its folder is made)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        raise UserError(f"{path}: cannot write {what} (not a writable file path)")


def write_json(path: Path, doc, what: str) -> None:
    """Write ``doc`` as indented JSON to ``path`` (its folder made), or fail with one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"  # NaN is not JSON
        path.write_text(text)
    except ValueError:
        raise UserError(f"{path}: cannot write {what} (a value is not a finite number, "
                        "which JSON cannot carry)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot write {what} ({exc.strerror or exc})") from None
