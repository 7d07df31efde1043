"""``scripts/bench_e2e.py``'s whisper.cpp side, without whisper.cpp (it is not installed on CI).

whisper-cli pairs the n-th ``-of`` with the n-th input file, so a command that lists them out of
step would score one clip's text against another's reference; these tests pin that pairing,
the greedy flags every measurement relies on, how the text files are read back, and that a
half-given whisper.cpp side is refused before anything runs.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_e2e.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_e2e", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e"] = mod  # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def test_each_output_name_pairs_with_its_input_file(tmp_path):
    b = _bench()
    files = [str(tmp_path / "a" / "one.wav"), str(tmp_path / "b" / "two.flac")]
    cmd = b.wcpp_command(Path("/x/whisper-cli"), Path("/m/ggml.bin"), 2, "en", tmp_path / "out",
                         files, ["-nt"])
    assert cmd[:7] == ["/x/whisper-cli", "-m", "/m/ggml.bin", "-t", "2", "-l", "en"]
    assert cmd[-2:] == files
    for flag in ("-bs", "-bo"):
        assert cmd[cmd.index(flag) + 1] == "1"
    assert "-nf" in cmd and "-otxt" in cmd and "-nt" in cmd
    outs = [cmd[i + 1] for i, x in enumerate(cmd) if x == "-of"]
    assert outs == [str(tmp_path / "out" / "one"), str(tmp_path / "out" / "two")]


def test_text_is_read_from_each_files_txt(tmp_path):
    b = _bench()
    clips = [b.Clip(tmp_path / "one.wav", 1.0, "x"), b.Clip(tmp_path / "two.wav", 1.0, None)]
    (tmp_path / "one.txt").write_text("Ten of clubs.\n  And more. \n\n", encoding="utf-8")
    texts = b.read_wcpp_texts(tmp_path, clips)
    assert texts == {str(tmp_path / "one.wav"): "Ten of clubs. And more."}  # two.txt missing


def test_whisper_cli_without_a_model_is_refused(tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--whisper-cli",
                          sys.executable], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "needs --whisper-cli PATH and --ggml MODEL" in run.stderr
