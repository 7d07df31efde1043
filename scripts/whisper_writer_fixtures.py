"""Make tests/data/whisper_writers: what openai-whisper's own writers write for fixed results.

openai-whisper needs torch (and numba, triton) to install, too heavy for the test
environment; its writers (``whisper/utils.py``) need only the standard library. This script
loads that one file from a checkout of openai/whisper and runs its writers on the results in
``tests/data/whisper_writers/results.json`` (hand-made edge cases and a real as2d run with word
timestamps), with and without the word options; ``tests/test_writers.py`` checks that as2d's
writers give the same bytes.

    git clone https://github.com/openai/whisper /tmp/whisper   # release 20250625
    python scripts/whisper_writer_fixtures.py /tmp/whisper/whisper/utils.py
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "tests" / "data" / "whisper_writers"

# (name, writer options): every result is written with each of these.
OPTION_SETS = [
    ("plain", {}),
    ("width20", {"max_line_width": 20}),
    ("width24_lines2", {"max_line_width": 24, "max_line_count": 2}),
    ("width42_lines1", {"max_line_width": 42, "max_line_count": 1}),
    ("words3", {"max_words_per_line": 3}),
    ("highlight", {"highlight_words": True}),
    ("highlight_width30_lines2", {"highlight_words": True, "max_line_width": 30,
                                  "max_line_count": 2}),
]


def main(utils_path: str) -> int:
    spec = importlib.util.spec_from_file_location("whisper_utils", utils_path)
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    results = json.loads((HERE / "results.json").read_text(encoding="utf-8"))
    writers = {"txt": utils.WriteTXT, "srt": utils.WriteSRT, "vtt": utils.WriteVTT,
               "tsv": utils.WriteTSV, "json": utils.WriteJSON}
    count = 0
    for name, result in results.items():
        has_words = "words" in (result["segments"] or [{}])[0]
        for opt_name, options in OPTION_SETS:
            if options and not has_words:
                continue
            for fmt, cls in writers.items():
                if options and fmt not in ("srt", "vtt"):
                    continue
                buf = io.StringIO()
                cls(".").write_result(result, buf, **options)
                out = HERE / f"{name}.{opt_name}.{fmt}"
                out.write_bytes(buf.getvalue().encode("utf-8"))
                count += 1
    print(f"wrote {count} files to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
