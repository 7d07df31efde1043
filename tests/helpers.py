"""Small shared helpers for the foundation tests (greedy window decoding, peers, audio files)."""

from __future__ import annotations

import gc
import shutil
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

# CTranslate2 folders of the same weights our bundles are converted from.
_CT2_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
# Folders assembled in this test process, by model name: the first caller's (a pytest
# temporary folder, kept for the whole session) serves every later one; the callers only read
# it. Whichever module asks first assembles it, so no test depends on another having run.
_ASSEMBLED: dict[str, Path] = {}


class LazyModule:
    """A test file's heavy dependency (torch, transformers, Ray, the OpenAI client), imported
    on first use and skipping the test where it is missing. Imported at the top of the file it
    costs seconds at every collection, including the fast lane's and each worker's, which run
    none of the file's tests."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        # Collection looks every module-level name over for private markers (``__test__``,
        # ``_pytestfixturefunction``, ...): those are not the module's and import nothing.
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(pytest.importorskip(self._name), attr)


def ct2_folder(name: str, work: Path) -> Path:
    """A CTranslate2 model folder for ``name`` ("base" or "tiny.en"), from the source packages
    (assembled in ``work`` on the process's first call for ``name``; read-only for callers)."""
    from as2d.models.catalog import lookup
    from as2d.models.source_packages import assemble, locate

    entry = lookup(name)
    src = entry.source
    side = locate(src.parts[0], src).parent  # the package folder holding the first part
    if len(src.parts) == 1:
        return side
    made = _ASSEMBLED.get(entry.name)
    if made is not None and (made / "model.bin").is_file():
        return made
    dest = work / f"ct2-{entry.name}"
    if not (dest / "model.bin").is_file():
        dest.mkdir(parents=True, exist_ok=True)
        assemble(src, dest / "model.bin")
        for f in _CT2_FILES:
            if (side / f).is_file():
                shutil.copyfile(side / f, dest / f)
    _ASSEMBLED[entry.name] = dest
    return dest


def linked_bundle(src: Path, dest: Path, copied=(), skip=(".",)) -> Path:
    """``src``'s files in a folder of their own without copying their weights for each test:
    those named in ``copied`` copied (the files a test edits in place), the others linked (a
    writer replaces a file, never writes into it), names starting with one of ``skip`` left
    out (what the test writes itself, or state kept beside the bundle)."""
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith(tuple(skip)):
            if f.name in copied:
                shutil.copyfile(f, dest / f.name)
            else:
                (dest / f.name).symlink_to(f)
    return dest


def prompt_for(model, timestamps: bool) -> list[int]:
    tk = model.tokenizer
    seq = tk.sot_sequence("en" if model.multilingual else None)
    return seq if timestamps else seq + [tk.no_timestamps]


def greedy_tokens(model, ctx, timestamps: bool, sample_len: int = 224) -> list[int]:
    """Our target-only greedy tokens for one encoded window (end-of-text excluded)."""
    from as2d.runtime.transcribe.window import WindowState
    from as2d.runtime.whisper.logits import LogitRules

    tk = model.tokenizer
    prompt = prompt_for(model, timestamps)
    rules = LogitRules(tk, model.dims.n_vocab, timestamps=timestamps,
                       suppress=tuple(tk.suppress_tokens()))
    state = model.decoder_state(ctx)
    try:
        dec = WindowState(state, rules, prompt, prompt.index(tk.sot), sample_len, tk.eot)
        dec.start()
        while not dec.done:
            dec.step([])
        return list(dec.generated)
    finally:
        model.release(state)


def greedy_window(model, mel_window: np.ndarray, timestamps: bool,
                  sample_len: int = 224) -> list[int]:
    return greedy_tokens(model, model.encode(mel_window), timestamps, sample_len)


def edit_distance(a: list, b: list) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def sox(*args) -> None:
    """Run the sox command line tool (Debian package ``sox``); skip the test without it."""
    if shutil.which("sox") is None:
        import pytest

        pytest.skip("sox is not installed (apt-get install sox)")
    subprocess.run(["sox", *map(str, args)], check=True, capture_output=True)


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000, subtype: str = "PCM_16"):
    import soundfile as sf

    sf.write(str(path), samples, rate, subtype=subtype)
    return path


def cli(*args, models_dir=None, input=None):
    """Run ``as2d ARGS`` in-process; an unexpected exception fails the test with its traceback."""
    from typer.testing import CliRunner

    from as2d.cli.app import app

    env = {"AS2D_MODELS_DIR": str(models_dir)} if models_dir else {}
    result = CliRunner().invoke(app, [str(a) for a in args], env=env, input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def error_line(result, code: int, *fragments: str) -> str:
    """The run failed with ``code``, and said why in exactly one ``as2d: error:`` line."""
    err = result.stderr
    assert "Traceback" not in err, err
    assert result.exit_code == code, (result.exit_code, err)
    lines = [line for line in err.splitlines() if line.startswith("as2d: error:")]
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    for f in fragments:
        assert f.lower() in lines[0].lower(), f"{f!r} not in {lines[0]!r}"
    return lines[0]


def greedy_reference(model, prompt_ids, max_new: int, stop_ids) -> list[int]:
    """Plain greedy generation, one token per pass, written independently of the generator
    (the oracle that every answer must equal, token for token)."""
    stops = set(stop_ids)
    state = model.state()
    try:
        logits = model.prefill(state, list(prompt_ids))
        out: list[int] = []
        while True:
            token = int(np.argmax(logits))
            out.append(token)
            if token in stops or len(out) >= max_new or state.length >= state.capacity:
                return out
            logits = state.forward([token])[-1]
    finally:
        model.release(state)


class Hang(Exception):
    """A block ran past its :func:`deadline` (not an OSError, which the code under test may
    turn into a clean error of its own)."""


@contextmanager
def deadline(seconds: int, what: str = "no answer"):
    """The block fails with :class:`Hang` after ``seconds`` (SIGALRM; the main thread's): a
    hang in the code under test fails the test instead of stalling the suite."""
    def on_alarm(signum, frame):
        raise Hang(f"{what} in {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def young_heap():
    """For a module fixture (``yield from young_heap()``) where the product runs a full
    ``gc.collect()`` per encoder candidate it measures or checks: in a test worker that ran
    other files first, each collection walks the millions of objects they left (0.5-0.8 s).
    Those are frozen for the module, so a collection walks only what its tests made."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
