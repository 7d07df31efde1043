"""JSON files of a model folder, read as untrusted input."""

from __future__ import annotations

import json
from pathlib import Path

MAX_JSON = 64 << 20  # bytes: a manifest or config is a few kB, a tokenizer.json a few MB


def read_json_capped(path: Path, cap: int = MAX_JSON):
    """``path``'s JSON, refused (ValueError naming the file) past ``cap`` bytes or nested too
    deep to parse: a model folder is untrusted input, and a multi-GB ``config.json`` must not be
    read into memory, nor ``[[[[...]]]]`` end in a RecursionError."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if size > cap:
        raise ValueError(f"{path}: {size} bytes is too large for a model's JSON file")
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read(cap + 1))
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a model's JSON file") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
