"""Hostile and careless input: untrusted model folders, damaged models, signals, outputs, bounds.

Every case ends in one of two ways: the right result, or one ``as2d: error: ...`` line and a
non-zero exit. Never a traceback, a hang, code run from a model folder, or wrong text with
exit 0. On real models and real audio. What is about the process (exit codes, signals, closed or
full outputs, two processes at once, warnings on stderr) runs the real console script
(``python -m as2d``), once per kind of failure; the other cases of a kind run the same command
in-process (:func:`tests.helpers.cli`: the same code and the same error line, without a
second's start-up each).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import cli, error_line, linked_bundle

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
SPEECH = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav"
TINY = ["--model", "tiny.en", "--decoder", "target"]


def as2d(*argv, env=None, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "as2d", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


def one_error_line(p, *fragments, code=None) -> str:
    """The run failed with exactly one ``as2d: error:`` line that names ``fragments``."""
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode != 0 if code is None else p.returncode == code, (p.returncode,
                                                                         p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("as2d: error:")]
    assert len(errors) == 1, p.stderr
    for f in fragments:
        assert f.lower() in errors[0].lower(), errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def env(models_root):
    return dict(os.environ, AS2D_MODELS_DIR=str(models_root), AS2D_ENCODER="onnxruntime")


# -- untrusted chat templates ----------------------------------------------------------------

HOSTILE_TEMPLATES = {
    "cycler globals": "{{ cycler.__init__.__globals__.os.popen('touch MARK').read() }}",
    "lipsum globals": "{{ lipsum.__globals__['os'].system('touch MARK') }}",
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "str.format escape": "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
    "list mutation": "{% set l = [] %}{{ l.append('touch MARK') }}",
    "range 10**9": "{% for i in range(10**9) %}x{% endfor %}",
    "nested loops": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}"
                    "{% endfor %}",
    "repetition": "{{ 'x' * 1000000000 }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "recursive doubling": "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('x') }}",
    "huge power": "{{ 2 ** 64 ** 64 }}",
    "filter width": "{{ 'x'|center(1000000000) }}",
    "percent width": "{{ '%999999999d' % 1 }}",
    "format width": "{{ '{:>999999999}'.format(1) }}",
    "output flood": "{% for i in range(99999) %}{% for j in range(999) %}xxxx{% endfor %}"
                    "{% endfor %}",
    "recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "syntax error": "{% for %}",
    "raise_exception": "{{ raise_exception('no system role') }}",
    "no user message": "<|assistant|>",
}


@pytest.mark.parametrize("name", list(HOSTILE_TEMPLATES))
def test_hostile_chat_templates_run_nothing_and_end_in_one_line(name, tmp_path, monkeypatch):
    from as2d.runtime.llm.template import TemplateError, render_chat_template

    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(TemplateError) as exc:
        out = render_chat_template(HOSTILE_TEMPLATES[name],
                                   messages=[{"role": "user", "content": "hi"}],
                                   add_generation_prompt=True)
        if "hi" not in out:  # the template that hides the message is refused by the caller
            raise TemplateError("the chat template does not show the user's message")
    assert time.monotonic() - t0 < 15  # the renderer stops at 2 s; a loaded machine is slow
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "MARK").exists(), "the template ran a shell command"


def test_a_real_chat_template_still_renders():
    from as2d.runtime.llm.template import render_chat_template

    chatml = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
              "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
              "{% endif %}")
    out = render_chat_template(chatml, messages=[{"role": "user", "content": "hi"}],
                               add_generation_prompt=True)
    assert out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


_TEXT = ["It was the best of times, it was the worst of times. " * 20,
         "Question: What was it? Answer: The age of wisdom. " * 20]


def test_llm_folder_with_a_hostile_template_is_refused_before_anything_runs(tmp_path,
                                                                            models_root):
    """``as2d ask`` in-process: the refusal is the command's line, not the process's (``ask``
    runs as a process in test_a_float_max_sample_gives_the_clean_words_in_mic_and_ask)."""
    from tiny_llm import export_tiny_decoder

    mark = tmp_path / "MARK"
    template = "{{ cycler.__init__.__globals__.os.popen('touch " + str(mark) + "').read() }}"
    folder = export_tiny_decoder(tmp_path / "llm", _TEXT, chat_template=template)
    r = cli("ask", SPEECH, "What happened?", *TINY, "--llm", folder, models_dir=models_root)
    error_line(r, 1, "chat template", "unsafe")
    assert not mark.exists(), "the chat template ran a shell command"
    assert r.stdout == ""


@pytest.mark.parametrize("damage", ["config list", "config bad utf-8", "tokenizer garbage",
                                    "eos id a string", "context a string"])
def test_garbage_in_an_llm_folder_is_one_line(damage, tmp_path):
    from tiny_llm import export_tiny_decoder

    from as2d.loading import ModelError, load_llm

    folder = export_tiny_decoder(tmp_path / "llm", _TEXT)
    config = json.loads((folder / "config.json").read_text())
    if damage == "config list":
        (folder / "config.json").write_text("[1, 2, 3]")
    elif damage == "config bad utf-8":
        (folder / "config.json").write_bytes(b'{"a": "\xff\xfe"}')
    elif damage == "tokenizer garbage":
        (folder / "tokenizer.json").write_bytes(os.urandom(3000))
    elif damage == "eos id a string":
        (folder / "config.json").write_text(json.dumps(dict(config, eos_token_id="x")))
        (folder / "generation_config.json").unlink()
    else:
        (folder / "config.json").write_text(json.dumps(dict(config,
                                                            max_position_embeddings="big")))
    with pytest.raises(ModelError) as exc:
        load_llm(str(folder))
    assert "\n" not in str(exc.value) and str(folder) in str(exc.value)


# -- damaged models ----------------------------------------------------------------------------

def _copy_bundle(models_root: Path, name: str, dest: Path) -> Path:
    shutil.copytree(models_root / name, dest, ignore=shutil.ignore_patterns(".*"))
    return dest


def _damageable_bundle(models_root: Path, dest: Path, damaged: str) -> Path:
    """tiny.en's bundle with ``damaged`` copied (the file a test damages) and its other files
    linked: 600 MB not copied for each case."""
    return linked_bundle(models_root / "tiny.en-int8", dest, copied=(damaged,))


def test_one_flipped_byte_in_a_graph_is_caught_at_load(models_root, tmp_path, env):
    """The process's exit code and its one line (the damaged manifests below are the same
    command in-process)."""
    bundle = _damageable_bundle(models_root, tmp_path / "tiny", "decoder.onnx")
    graph = bundle / "decoder.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit different
    st = graph.stat()
    graph.write_bytes(bytes(data))
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    p = as2d("transcribe", SPEECH, "--model", bundle, "--decoder", "target", env=env)
    one_error_line(p, "decoder.onnx", "sha256", code=1)
    assert p.stdout == ""


def test_sha256_is_remembered_per_file_identity(models_root, tmp_path, monkeypatch):
    from as2d.models import bundle as bundle_mod

    root = tmp_path / "models"
    root.mkdir()
    monkeypatch.setenv("AS2D_MODELS_DIR", str(root))
    b = bundle_mod.load_bundle(_copy_bundle(models_root, "tiny.en-int8", root / "tiny"))
    hashed = []
    real = bundle_mod.sha256_file
    monkeypatch.setattr(bundle_mod, "sha256_file", lambda p, *a: hashed.append(p) or real(p))
    b.verify_at_load()
    assert len(hashed) == len(b.manifest["sha256"])  # the first load hashes every file
    hashed.clear()
    b.verify_at_load()
    assert hashed == []  # later loads cost a few stat calls
    (b.path / "tokenizer.json").touch()  # a new identity: hashed again
    b.verify_at_load()
    assert [p.name for p in hashed] == ["tokenizer.json"]


@pytest.mark.parametrize("edit,fragment", [
    (lambda m: m.update(sha256="abc"), "sha256"),
    (lambda m: m.update(sizes={"decoder.onnx": "big"}), "sizes"),
    (lambda m: m["sha256"].update({"../../etc/passwd": "0" * 64}), "inside the bundle"),
    (lambda m: m["dims"].update(n_mels=81), "n_mels"),
    (lambda m: m["dims"].update(n_mels=128), "n_mels"),  # the graph takes 80
])
def test_a_damaged_manifest_is_one_line(edit, fragment, models_root, tmp_path):
    bundle = _damageable_bundle(models_root, tmp_path / "tiny", "manifest.json")
    manifest = json.loads((bundle / "manifest.json").read_text())
    edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    r = cli("transcribe", SPEECH, "--model", bundle, "--decoder", "target",
            models_dir=models_root)
    error_line(r, 1, fragment)
    assert r.stdout == ""


# -- losslessness at load ----------------------------------------------------------------------

class _RowsMixing:
    """A model whose pass leaks its width into every row (what the row check exists for)."""

    def row_probe(self):
        class State:
            length = 0

            def forward(self, tokens):
                rows = np.array([[t, self.length + i] for i, t in enumerate(tokens)],
                                np.float32) + np.float32(1e-3) * len(tokens)
                self.length += len(tokens)
                return rows

            def truncate(self, length):
                self.length = length

        return State, [3, 1, 4, 1, 5, 9], lambda state: None


def test_row_exactness_is_checked_for_every_target_and_remembered(models_root, tmp_path):
    from as2d.runtime.rows import MEMO_FILE, probe, rows_exact
    from as2d.runtime.whisper.model import WhisperModel

    # The check can fail: a pass whose rows depend on how many it computes is refused. (The
    # drafter's faster graph is such a pass on some CPUs and not on others: never pinned.)
    assert probe(_RowsMixing())["exact"] is False
    bundle = _copy_bundle(models_root, "tiny.en-int8", tmp_path / "tiny.en-int8")
    target = WhisperModel(bundle, threads=1)
    assert rows_exact(target) is True and target.row_check["max_abs_diff"] == 0.0
    memo = tmp_path / MEMO_FILE  # the models folder: once per graph, onnxruntime and CPU
    assert "onnxruntime" in memo.read_text()
    again = WhisperModel(bundle, threads=1)  # a new process would find the verdict there
    assert rows_exact(again) is True
    assert again.row_check == {"exact": True, "remembered": True}
    # Under each thread count the model is loaded with: its passes run in that session.
    two = WhisperModel(bundle, threads=2)
    assert rows_exact(two) is True and "remembered" not in two.row_check
    assert "rows3|t2|" in memo.read_text()
    # A remembered "no" is believed too: speculation is refused without running the probe.
    memo.write_text(memo.read_text().replace("true", "false"))
    assert rows_exact(WhisperModel(bundle, threads=1)) is False


# -- numbers JSON cannot carry -----------------------------------------------------------------

def test_json_refuses_nan_with_a_clear_error():
    from as2d.runtime.transcribe.longform import Segment
    from as2d.writers import to_json

    seg = Segment(0, 0, 0.0, 1.0, " hi", [1], float("nan"), 1.0, 0.1)
    with pytest.raises(ValueError, match="not finite"):
        to_json([seg], {"language": "en"})


# -- silence on long files ---------------------------------------------------------------------

def test_long_silence_gives_no_text_and_speech_around_it_is_kept_losslessly(tmp_path, env,
                                                                            models_root):
    """One AS²D run of three files, as a batch goes on past files with nothing to say: four
    windows of digital silence and four of dither (-1, 0, 1) give no text, each file says it
    found no speech, and the run exits 0; a sentence, 65 s of silence (a whole silent window)
    and the sentence again keeps both sentences, with target-only's tokens and times (the
    target's run in-process: the same command, not a second process)."""
    n = 16000 * 95  # four windows
    rng = np.random.default_rng(0)
    silent = {"zeros": np.zeros(n, np.int16), "dither": rng.integers(-1, 2, n, np.int16)}
    for kind, samples in silent.items():
        sf.write(tmp_path / f"{kind}.wav", samples, 16000, subtype="PCM_16")
    x, _ = sf.read(SPEECH, dtype="float32")
    mixed = tmp_path / "mixed.wav"
    sf.write(mixed, np.concatenate([x, np.zeros(16000 * 65, np.float32), x]), 16000)
    out = tmp_path / "out"
    p = as2d("transcribe", tmp_path / "zeros.wav", tmp_path / "dither.wav", mixed, "--model",
             "base", "--decoder", "as2d", "-o", out, "-f", "json", env=env)
    assert p.returncode == 0, p.stderr
    for kind in silent:
        assert f"{kind}.wav: no speech found" in p.stderr, p.stderr
        assert json.loads((out / f"{kind}.json").read_text())["segments"] == []
    assert "mixed.wav: no speech found" not in p.stderr
    doc = json.loads((out / "mixed.json").read_text())
    assert doc["decoder"] == "as2d"
    # the text streamed to stdout is the sentences' alone: nothing from the silent files
    assert p.stdout.split() == " ".join(s["text"] for s in doc["segments"]).split()
    target = cli("transcribe", mixed, "--model", "base", "--decoder", "target", "-f", "json",
                 models_dir=models_root)
    assert target.exit_code == 0, target.stderr
    outs = {d["decoder"]: [(s["start"], s["tokens"]) for s in d["segments"]]
            for d in (doc, json.loads(target.stdout))}
    assert outs["target"] == outs["as2d"]
    assert outs["target"][0][0] < 1 and outs["target"][-1][0] > 70  # both speeches are there


# -- signals -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_speech(tmp_path_factory) -> Path:
    xs = [sf.read(f, dtype="float32")[0] for f in sorted(LIBRIVOX.glob("*.wav"))]
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate(xs * 12), 16000)  # about 5 minutes
    return path


@pytest.fixture(scope="module")
def shorter_speech(tmp_path_factory) -> Path:
    """About 50 s: two windows, so a signal arrives mid-run (after the first), but a whole run
    is short."""
    xs = [sf.read(f, dtype="float32")[0] for f in sorted(LIBRIVOX.glob("*.wav"))]
    path = tmp_path_factory.mktemp("shorter") / "long.wav"
    sf.write(path, np.concatenate(xs * 2), 16000)
    return path


def _ours(tmpdir: Path) -> list[Path]:
    """What a run left in its TMPDIR (not the 51-byte ``.ses`` session-id file that a library
    under onnxruntime writes on every run, signal or not)."""
    return [p for p in tmpdir.iterdir() if p.name != ".ses"]


# A progress line (``as2d: long.wav: 108/297 s (37%)``), printed after a decoded window: the
# transcription is under way, well past start-up.
PROGRESS = r": \d+/\d+ s \(\d+%\)"


def _start_then_signal(argv, sig, env, wait_for: str, tmpdir: Path, times: int = 1,
                       hup: signal.Handlers = signal.SIG_DFL):
    """Start ``as2d argv``, wait until stderr has shown ``wait_for`` (a regular expression)
    ``times`` times, send ``sig``, and return (exit code, stdout, stderr).

    The child starts with SIGTERM at its default and SIGHUP at ``hup``, whatever this process
    has: a test run started under ``nohup`` (or by a runner that ignores SIGHUP) would pass its
    ignored SIGHUP down, and as2d rightly keeps a SIGHUP ignored at start ignored."""
    def dispositions() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, hup)

    e = dict(env, TMPDIR=str(tmpdir))
    p = subprocess.Popen([sys.executable, "-m", "as2d", *map(str, argv)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
                         preexec_fn=dispositions)
    seen = ""
    try:
        deadline = time.monotonic() + 240
        while len(re.findall(wait_for, seen)) < times and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            seen += line
        assert len(re.findall(wait_for, seen)) >= times, seen
        p.send_signal(sig)
        out, rest = p.communicate(timeout=120)
    finally:  # a failed wait must not leave a transcription running under later tests
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, seen + rest


@pytest.mark.serial
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_transcribe_stopped_by_a_signal_keeps_what_it_did(sig, long_speech, tmp_path, env):
    out_dir, tmpdir = tmp_path / "out", tmp_path / "tmp"
    tmpdir.mkdir()
    code, out, err = _start_then_signal(
        ["transcribe", long_speech, *TINY, "-o", out_dir, "-f", "all", "--no-live"], sig, env,
        PROGRESS, tmpdir, times=2)
    assert code == 128 + sig, err
    assert "Traceback" not in err and "interrupted" in err, err
    assert sorted(p.suffix for p in out_dir.iterdir()) == [".json", ".srt", ".tsv", ".txt",
                                                          ".vtt"]
    doc = json.loads((out_dir / "long.json").read_text())
    assert doc["interrupted"] is True and doc["segments"]
    assert _ours(tmpdir) == []  # the decoded-audio file is gone


@pytest.mark.serial
def test_transcribe_started_with_sighup_ignored_keeps_it_ignored(shorter_speech, tmp_path, env):
    """``nohup as2d transcribe …``: the SIGHUP of a closed terminal does not stop the run (the
    ignored disposition it started with is kept), and the whole file is transcribed."""
    out_dir, tmpdir = tmp_path / "out", tmp_path / "tmp"
    tmpdir.mkdir()
    code, out, err = _start_then_signal(
        ["transcribe", shorter_speech, *TINY, "-o", out_dir, "-f", "json", "--no-live"],
        signal.SIGHUP, env, PROGRESS, tmpdir, hup=signal.SIG_IGN)
    assert code == 0 and "stopped by" not in err and "Traceback" not in err, err
    doc = json.loads((out_dir / "long.json").read_text())
    assert "interrupted" not in doc and doc["segments"][-1]["end"] > doc["duration"] - 30
    assert _ours(tmpdir) == []


@pytest.mark.serial
def test_bench_stopped_by_sigterm_is_one_line(tmp_path, env):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    code, out, err = _start_then_signal(["bench", SPEECH, "--targets", "tiny.en",
                                         "--repeats", "50"], signal.SIGTERM, env, "as2d:",
                                        tmpdir)
    assert code == 143 and "Traceback" not in err, err
    assert _ours(tmpdir) == []


@pytest.mark.serial
def test_mic_stopped_by_sigterm_keeps_the_committed_text(long_speech, tmp_path, env):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    code, out, err = _start_then_signal(["mic", "--input", long_speech, "--model", "tiny.en",
                                         "--no-live"], signal.SIGTERM, env, "as2d:", tmpdir)
    assert code == 143 and "Traceback" not in err, err
    assert _ours(tmpdir) == []


@pytest.mark.serial
def test_models_install_stopped_by_sigterm_leaves_no_temp_folder(tmp_path, env):
    root = tmp_path / "models"
    code, out, err = _start_then_signal(["models", "install", "tiny.en", "--models-dir", root],
                                        signal.SIGTERM, env, "converting", tmp_path)
    assert code == 143 and "Traceback" not in err, err
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []
    # A temp folder left by a killed install (SIGKILL) goes at the next install's lock.
    stale = root / ".tiny.en-int8.killed"
    stale.mkdir()
    (stale / "encoder.onnx").write_bytes(b"half")
    from as2d.models.install import _install_lock, _remove_stale

    with _install_lock(root, "tiny.en-int8"):
        _remove_stale(root, ".tiny.en-int8.")
    assert not stale.exists()


# -- outputs -----------------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_stdout_on_a_full_disk_is_one_line(env):
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", str(SPEECH), *TINY],
                           stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    one_error_line(p, "no space left", code=1)


def test_closed_stdout_is_one_line(env):
    p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", str(SPEECH), *TINY],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                       preexec_fn=lambda: os.close(1), timeout=300)
    one_error_line(p, "standard output is closed", code=1)


@pytest.mark.slow
def test_leaving_without_teardown_keeps_the_output_and_the_exit_code():
    """The CLI ends with os._exit after flushing: what it printed arrives, its exit code
    stands, and a failed flush is still one error line."""
    code = "from as2d.cli.app import _leave; print('the transcript'); _leave({})"
    p = subprocess.run([sys.executable, "-c", code.format(3)], capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (3, "the transcript\n", "")
    p = subprocess.run([sys.executable, "-c", code.format(0)], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, preexec_fn=lambda: os.close(2), timeout=60)
    assert (p.returncode, p.stdout) == (0, b"the transcript\n")  # with stderr closed
    if os.path.exists("/dev/full"):  # buffered output that fails when flushed at the end
        buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-c", code.format(0)], stdout=full,
                               stderr=subprocess.PIPE, text=True, env=buffered, timeout=60)
        one_error_line(p, "no space left", code=1)


def test_two_processes_writing_one_name_say_which_file_they_replaced(tmp_path, env,
                                                                     models_root):
    """Two recordings named x.wav from two folders, transcribed by two processes at once into
    one -o folder: one whole x.txt is kept (never bytes of both) and a process that replaced
    an existing x.txt says so on stderr, even with -q. Then one run given both, over that
    folder: it keeps both (x.txt and x-2.txt: the same stem twice in one output folder), and
    replacing the x.txt already there (a re-run over an output, as whisper does) says so too.
    Its two transcripts are each recording's whole text, which the first x.txt must be one
    of. (That run is in-process: the same command; the two at once are the processes.)"""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(SPEECH, a / "x.wav")
    x, _ = sf.read(SPEECH, dtype="float32")
    sf.write(b / "x.wav", x[: len(x) // 2], 16000)
    out = tmp_path / "out"
    argv = [*TINY, "-o", out, "-q"]
    procs = [subprocess.Popen([sys.executable, "-m", "as2d", "transcribe", f, *map(str, argv)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env) for f in (a / "x.wav", b / "x.wav")]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    notes = [e for e in errs if "replaced existing" in e]
    assert len(notes) == 1 and str(out / "x.txt") in notes[0], errs
    kept = (out / "x.txt").read_text()
    assert not list(out.glob("*.part"))
    both = cli("transcribe", a / "x.wav", b / "x.wav", *argv, models_dir=models_root)
    assert both.exit_code == 0, both.stderr
    assert f"replaced existing {out / 'x.txt'}" in both.stderr
    first, second = (out / "x.txt").read_text(), (out / "x-2.txt").read_text()
    assert first != second and "Dashwood" in first and "Dashwood" in second
    assert kept in {first, second}  # one recording's whole transcript
    assert not list(out.glob("*.part"))


def test_an_english_only_model_refuses_to_translate(models_root):
    """The server answers 400 for it; the command line said nothing and transcribed."""
    r = cli("transcribe", SPEECH, *TINY, "--task", "translate", models_dir=models_root)
    error_line(r, 2, "--task translate needs a multilingual model")
    assert r.stdout == ""


def test_disk_full_mid_batch_leaves_no_part_and_goes_on(tmp_path, env):
    def small_files():  # writes past 300 bytes fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))

    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "as2d", "transcribe", str(SPEECH),
                        str(LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0880.wav"),
                        *TINY, "-o", str(out), "-f", "txt,json"], capture_output=True,
                       text=True, env=env, preexec_fn=small_files, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("as2d: error: cannot write the transcript") == 2, p.stderr
    assert not list(out.glob("*.part"))
    assert "Dashwood" in p.stdout and "young man" in p.stdout  # both files were transcribed


# -- bounds ------------------------------------------------------------------------------------

def test_an_out_of_bounds_value_is_one_line_from_the_process(env):
    """The exit code and the one line of the console script; the other bounds are the same
    line in-process (below)."""
    p = as2d("transcribe", SPEECH, "-t", "100000", env=env, timeout=60)
    one_error_line(p, "--threads", code=2)


@pytest.mark.parametrize("argv,fragment", [
    (["transcribe", SPEECH, "--budget", "100000"], "--budget"),
    (["bench", SPEECH, "--budgets", "-2"], "--budgets"),
    (["bench", SPEECH, "-t", "100000"], "--threads"),
    (["models", "export", "base", "/dev/null/x"], "/dev/null/x"),
])
def test_out_of_bounds_values_are_one_line(argv, fragment, models_root):
    r = cli(*argv, models_dir=models_root)
    assert r.exit_code != 0
    error_line(r, r.exit_code, fragment)


# -- mutated audio files -----------------------------------------------------------------------

def _audio_bytes(fmt: str) -> bytes:
    import io

    x, _ = sf.read(SPEECH, dtype="float32", frames=16000 * 2)
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tiny_transcriber(whisper):
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.strategy import TargetOnly

    model = whisper("tiny.en")
    return LongFormTranscriber(model, TargetOnly(model, None))


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_mutated_audio_bytes_give_a_transcript_or_one_error(fmt, tiny_transcriber, tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from as2d.runtime.audio import AudioError, load_audio
    from as2d.runtime.transcribe.longform import TranscriptionInfo
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    original = _audio_bytes(fmt)

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), min_size=1,
                    max_size=6), st.integers(0, len(original)))
    def check(edits, cut):
        data = bytearray(original[:max(cut, 4)])
        for pos, value in edits:  # most damage goes into the header, where it hurts
            if pos < len(data):
                data[pos] = value
        path = tmp_path / f"m.{fmt.lower()}"
        path.write_bytes(bytes(data))
        t0 = time.monotonic()
        try:
            audio = load_audio(path)
        except AudioError as exc:
            assert "\n" not in str(exc)
            return
        try:
            info = TranscriptionInfo(None, 0.0, audio.duration)
            list(tiny_transcriber.transcribe(audio, TranscribeOptions(language="en"), info))
        finally:
            audio.close()
        assert time.monotonic() - t0 < 60

    check()


# -- numerically hostile audio in every command -------------------------------------------------

def _with_a_float_max_sample(tmp_path: Path) -> Path:
    samples, rate = sf.read(SPEECH, dtype="float32")
    samples = samples.copy()
    samples[len(samples) // 2] = np.finfo(np.float32).max  # finite, and overflows a square
    path = tmp_path / "float_max.wav"
    sf.write(path, samples, rate, subtype="FLOAT")
    return path


def _words(text: str) -> set[str]:
    return {w.strip(".,;:!?\"'").lower() for w in text.split()} - {""}


def test_a_float_max_sample_gives_the_clean_words_in_mic_and_ask(tmp_path, env,
                                                                 tiny_transcriber):
    """The sample is clipped at the input, so dictation and answers see the same speech as a
    clean file: no overflow warning, no NaN, no garbage text. The commands run as processes
    (a warning is a line on their stderr); the clean file's words are tiny.en's, decoded
    in-process."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    loud = _with_a_float_max_sample(tmp_path)
    clean = " ".join(s.text for s in tiny_transcriber.transcribe(
        load_audio(SPEECH), TranscribeOptions(language="en")))
    mic = as2d("mic", "--input", loud, "--speed", "8", "--model", "tiny.en", "--decoder",
               "target", "--no-live", env=env)
    assert mic.returncode == 0 and "Traceback" not in mic.stderr, mic.stderr
    assert "RuntimeWarning" not in mic.stderr and "nan" not in mic.stdout.lower(), mic.stderr
    said = _words(clean)
    assert len(_words(mic.stdout) & said) >= 0.8 * len(said), (mic.stdout, clean)
    # A short answer: the audio's way through the command is under test, not the answer's.
    ask = as2d("ask", loud, "Who had leisure to consider?", "--model", "tiny.en",
               "--decoder", "target", "--max-tokens", "8", "--json", env=env)
    assert ask.returncode == 0 and "Traceback" not in ask.stderr, ask.stderr
    assert "RuntimeWarning" not in ask.stderr, ask.stderr
    def not_json(constant: str):
        raise AssertionError(f"{constant} in the JSON output")

    doc = json.loads(ask.stdout, parse_constant=not_json)  # NaN/Infinity are not JSON
    assert doc["answer"].strip() and "nan" not in doc["answer"].lower(), doc


@pytest.mark.serial
def test_a_signal_while_a_segment_is_printed_stops_the_run_and_keeps_its_segments(models_root):
    """A signal lands wherever the main thread is: here while it prints a segment (outside the
    wait for the next one). The run stops after its current pass and what was decoded is
    kept, as when the signal comes during the wait."""
    from as2d.cli.decoding import collect_segments
    from as2d.engine import Engine, EngineSpec
    from as2d.runtime.audio import load_audio
    from as2d.runtime.transcribe.longform import TranscriptionInfo
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    class Notes:
        def __init__(self) -> None:
            self.notes: list[str] = []

        def note(self, message: str) -> None:
            self.notes.append(message)

    printed: list = []

    def print_then_interrupted(seg) -> None:
        printed.append(seg)
        if len(printed) == 1:
            raise KeyboardInterrupt  # what the SIGTERM/SIGHUP handlers raise too

    audio = load_audio(SPEECH)
    reporter = Notes()
    with Engine(EngineSpec(model="tiny.en", decoder="target", threads=1,
                           models_dir=models_root)) as engine:
        info = TranscriptionInfo(None, 0.0, audio.duration)
        segments, interrupted = collect_segments(engine, audio, TranscribeOptions(), info,
                                                 reporter, on_segment=print_then_interrupted)
    assert interrupted and reporter.notes and "interrupted" in reporter.notes[0]
    assert segments and segments[0] is printed[0]
