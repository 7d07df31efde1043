"""``as2d mic``: live dictation through the real pipeline (real models, real clips, real threads).

Clips are played with ``--input`` (the file source paces them like a microphone). The committed
dictation is compared with ``as2d transcribe`` of the same file, after Whisper's English
normaliser: live decoding cuts the audio into utterances at pauses (and may commit a word from
a growing utterance that the final decode would have changed), so it cannot be token-identical
to a 30-s window decode. The bound asserted: **pooled WER ≤ 5 % and no clip above 15 %** against
``as2d transcribe --decoder target`` (measured here: 0 on four of the five clips below, one
word in 126 on two_cities.wav).

The only fakes are the sounddevice failure simulations (PortAudio missing, no device, a device
that disappears mid-run); the stream that disappears still delivers a real clip before it does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from as2d.runtime.live.agreement import LocalAgreement, tail_after
from as2d.runtime.live.endpoint import EndpointConfig, Endpointer

ROOT = Path(__file__).resolve().parent.parent
MIC_MAIN = ("from as2d.cli.app import app, entry; from as2d.cli.mic_cmd import register; "
            "register(app); entry()")


# -- helpers --------------------------------------------------------------------------------------
def _moonshine(name: str) -> Path:
    moonshine_voice = pytest.importorskip("moonshine_voice")
    path = Path(moonshine_voice.__file__).parent / "assets" / name
    if not path.is_file():
        pytest.skip(f"{name} not shipped by moonshine-voice")
    return path


@pytest.fixture(scope="module")
def cli():
    from typer.testing import CliRunner

    from as2d.cli.app import app
    from as2d.cli.mic_cmd import register

    register(app)
    register(app)  # idempotent: app.py may already have registered it
    assert sum(c.name == "mic" for c in app.registered_commands) == 1
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return run


def _wer(ref: str, hyp: str) -> tuple[float, int, int]:
    """(WER, errors, reference words) after Whisper's English normaliser."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    r, h = norm(ref), norm(hyp)
    n = len(r.split())
    wer = jiwer.wer(r, h) if n else float(bool(h.split()))
    return wer, round(wer * n), n


# -- endpointing (pure) --------------------------------------------------------------------------
def _run_endpointer(probs, **cfg):
    ep = Endpointer(EndpointConfig(**cfg))
    out = []
    for p in probs:
        out += ep.push(p)
    out += ep.finish()
    return out


F = 512 / 16000  # seconds per frame


def frames(seconds: float, p: float) -> list[float]:
    return [p] * int(round(seconds / F))


def test_endpointer_silence_and_blips_make_no_utterance():
    assert _run_endpointer(frames(5, 0.02)) == []
    # A 0.1-s click is below the minimum speech: dropped, never started.
    kinds = [b.kind for b in _run_endpointer(frames(1, 0.0) + frames(0.1, 0.9) + frames(2, 0.0))]
    assert kinds == ["drop"]


def test_endpointer_utterance_with_tentative_end_and_padding():
    lead = frames(1, 0.0)
    voiced = frames(2, 0.9) + frames(0.3, 0.4) + frames(1, 0.9)
    out = _run_endpointer(lead + voiced + frames(1.5, 0.0), pad=0.25, tail=0.1, settle=0.25,
                          min_silence=0.5)
    kinds = [b.kind for b in out]
    # 0.3 s at 0.4 is inside the hysteresis band (≥ 0.35): no pause at all.
    assert kinds == ["start", "tentative", "settle", "end"]
    start, tentative, settle, end = out
    assert start.start == len(lead) * 512 - 4000  # the pad before the first voiced frame
    assert end.reason == "silence"
    assert end.speech_end == (len(lead) + len(voiced)) * 512
    assert end.end == end.speech_end + 1600  # the tail after speech
    # Same audio: the speculative final is reused by the settle and by the end.
    assert (tentative.start, tentative.end) == (settle.start, settle.end) == (end.start, end.end)


def test_endpointer_tentative_after_tail_settle_after_settle_end_after_silence():
    """The final decode may start a few frames into the pause; the text is committed at
    ``settle``; the utterance closes at ``min_silence``. The old behaviour (tail = pad, no
    settle) is one configuration away."""
    speech = frames(1.0, 0.9)
    ep = Endpointer(EndpointConfig(tail=0.1, settle=0.25, min_silence=0.5))
    at = {}
    for i, p in enumerate(speech + frames(1.0, 0.0)):
        for b in ep.push(p):
            at.setdefault(b.kind, (i + 1 - len(speech)) * F)  # seconds of silence so far
    assert set(at) == {"start", "tentative", "settle", "end"}
    assert 0.1 <= at["tentative"] < 0.1 + F
    assert 0.25 <= at["settle"] < 0.25 + F
    assert 0.5 <= at["end"] < 0.5 + F
    old = _run_endpointer(speech + frames(1.0, 0.0), pad=0.25, tail=None, settle=None)
    assert [b.kind for b in old] == ["start", "tentative", "end"]
    assert old[-1].end - old[-1].speech_end == 4000
    with pytest.raises(ValueError, match="settle"):
        EndpointConfig(settle=0.6, min_silence=0.5).validate()


def test_endpointer_pause_shorter_than_silence_resumes():
    out = _run_endpointer(frames(1.5, 0.9) + frames(0.35, 0.0) + frames(1.5, 0.9)
                          + frames(1, 0.0), min_silence=0.5, pad=0.25, settle=None)
    assert [b.kind for b in out] == ["start", "tentative", "resume", "tentative", "end"]
    # With a settle shorter than the pause, the text is committed in the pause, and the
    # utterance goes on (its audio is not cut): the session counts an early commit.
    out = _run_endpointer(frames(1.5, 0.9) + frames(0.35, 0.0) + frames(1.5, 0.9)
                          + frames(1, 0.0), min_silence=0.5, settle=0.25)
    assert [b.kind for b in out] == ["start", "tentative", "settle", "resume", "tentative",
                                     "settle", "end"]


def test_endpointer_cuts_long_speech_at_its_quietest_point():
    probs = frames(12, 0.9)
    dip = int(10.5 / F)
    probs[dip] = 0.55  # still speech, but the least speech-like frame near the limit
    out = _run_endpointer(probs, max_utterance=11.0)
    kinds = [b.kind for b in out]
    assert kinds[:3] == ["start", "end", "start"]
    cut = out[1]
    assert cut.reason == "max-length"
    assert abs(cut.end / 16000 - (dip + 0.5) * F) < 0.01
    assert out[2].start == cut.end  # the next utterance starts exactly there


# -- agreement policy (pure) -----------------------------------------------------------------------
def test_local_agreement_commits_only_what_two_hypotheses_share():
    la = LocalAgreement(2)
    assert la.update("It was the best") == []
    assert la.update("It was the best of times,") == "It was the best".split()
    assert la.tentative_text == "of times,"
    assert la.update("It was the best of times, it was the") == ["of", "times,"]
    # The final decode settles the rest, even where it disagrees with the open words.
    assert la.update("It was the best of times. It was the worst.", final=True) == \
        ["It", "was", "the", "worst."]
    assert la.committed_text == "It was the best of times, It was the worst."
    assert la.tentative_text == ""


def test_agreement_never_withdraws_and_aligns_a_changed_mind():
    assert tail_after(["He", "was", "not"], ["He", "was", "not", "an"]) == ["an"]
    # Whisper changed "not" to "nut": the tail still starts after the committed words.
    assert tail_after(["He", "was", "not"], ["he", "was", "nut", "an", "ill"]) == ["an", "ill"]
    assert tail_after(["Hello,"], ["Hello!", "world"]) == ["world"]


def test_agreement_skips_changed_words_but_not_new_ones():
    """After the last word both have, a hypothesis word that stands for the next committed one
    (spelt again, replaced, merged or split) is skipped; a committed word that repeats one just
    before it and has no look-alike was dropped by the re-decode, and what the hypothesis has
    there is new text. Seen live: a settle had committed "... for good or for", the next decode
    heard "... for good or evil in the superlative", and skipping a word for the second "for"
    lost "evil"."""
    w = str.split
    assert tail_after(w("received for good or for"), w("received for good or evil in the")) \
        == w("evil in the")
    # Spelt again, or replaced by another word: not new text.
    assert tail_after(w("was so far light."), w("was so far like the present period.")) \
        == w("the present period.")
    assert tail_after(w("some of its noises"), w("some of its noisiest authorities")) \
        == ["authorities"]
    assert tail_after(w("of its compassion"), w("of its comparison only.")) == ["only."]
    assert tail_after(w("back in ten"), w("back in 10 minutes.")) == ["minutes."]
    assert tail_after(w("went to a"), w("went to the store")) == ["store"]
    assert tail_after(w("a b c d e"), w("a x")) == []
    # A repeated word swapped for a function word or a number was replaced, not dropped.
    assert tail_after(w("at the end of the"), w("at the end of a long day")) == w("long day")
    assert tail_after(w("two by two"), w("2 by 2 and")) == ["and"]
    assert tail_after(w("I think I"), w("I think we should go")) == w("should go")
    assert tail_after(w("very very"), w("very good indeed")) == w("good indeed")
    # Merged and split words.
    assert tail_after(w("not an ill disposed"), w("not an ill-disposed young man.")) \
        == w("young man.")
    assert tail_after(w("not an ill-disposed"), w("not an ill disposed young man.")) \
        == w("young man.")
    assert tail_after(w("went in to"), w("went into it and")) == w("it and")
    assert tail_after(w("every one"), w("everyone was there")) == w("was there")
    assert _committed("I'll be there in ten", "I'll be there in 10 minutes.",
                      "I'll be there in 10 minutes. See you.") == "I'll be there in ten minutes."
    assert _committed("We stopped at the end of the", "We stopped at the end of a long day",
                      "We stopped at the end of a long day and") \
        == "We stopped at the end of the long day"


def _committed(first: str, *hypotheses: str) -> str:
    """What LocalAgreement-2 has committed after ``first`` (committed whole, as a settle does)
    and then ``hypotheses``."""
    la = LocalAgreement(2)
    la.update(first, final=True)
    for h in hypotheses:
        la.update(h)
    return la.committed_text


def test_agreement_reads_a_contraction_as_the_words_it_contracts():
    """A re-decode that contracts two committed words ("do not" → "don't") or spells out a
    committed contraction ("it's" → "it is") neither loses the next word nor repeats one (it
    lost "want" and repeated "not" before: a contraction's letters do not begin its second
    word)."""
    w = str.split
    assert tail_after(w("I do not"), w("I don't want to go")) == w("want to go")
    assert tail_after(w("I don't"), w("I do not want to go")) == w("want to go")
    assert tail_after(w("and it is"), w("and it's raining now")) == w("raining now")
    assert tail_after(w("and it\u2019s"), w("and it is raining")) == ["raining"]
    assert tail_after(w("we will"), w("we'll see you")) == w("see you")
    assert tail_after(w("I will not"), w("I won't go")) == ["go"]
    assert tail_after(w("I can not"), w("I can't believe it")) == w("believe it")
    assert tail_after(w("they have"), w("they've gone home")) == w("gone home")
    assert tail_after(w("I would"), w("I'd like that")) == w("like that")
    # The pronoun comes back later: the alignment must not anchor on it (lost "like it if").
    assert tail_after(w("I would"), w("I'd like it if I")) == w("like it if I")
    assert tail_after(w("we are"), w("we're here, we")) == w("here, we")
    assert tail_after(w("it's it is it is"), w("it is it's it's true")) == ["true"]
    # The committed words end inside a contraction: its second word is new ("I do know"
    # would say the opposite).
    assert tail_after(w("I do"), w("I don't know")) == w("not know")
    assert tail_after(w("I do"), w("I don't. Really.")) == w("not. Really.")
    # A quote mark that opens or closes a word is no apostrophe.
    assert tail_after(w("the end of the"), w("the end of a\u2019 long")) == ["long"]
    assert tail_after(w("for good or for\u2019"), w("for good or evil in")) == w("evil in")
    # Not contractions: a possessive kept, a look-alike without an apostrophe.
    assert tail_after(w("the dog's"), w("the dog's bone")) == ["bone"]
    assert tail_after(w("the dogs'"), w("the dogs' bowls")) == ["bowls"]
    assert tail_after(w("it is"), w("its tail")) == []  # "its" replaced "it", "tail" "is"
    assert _committed("I do not", "I don't want it.", "I don't want it. Thanks.") \
        == "I do not want it."
    assert _committed("I would", "I'd like it if I could go.", "I'd like it if I could go. Now.") \
        == "I would like it if I could go."


def test_agreement_with_contractions_on_every_spelling_and_cut():
    """Sentences whose contractions are spelt either way in the committed words and in the
    re-decode, cut after every word: the tail is exactly the re-decode's words after the cut
    (2,688 cases; before, 661 of them lost or repeated a word)."""
    import itertools
    import re

    sentences = [
        "I said that [I'm|I am] sure [it's|it is] fine and [we'll|we will] go",
        "[I don't|I do not] think [they're|they are] here but [she's|she has] gone home",
        "[Let's|Let us] see if [you'd|you would] like what [we've|we have] got",
        "[I can't|I can not] believe [he won't|he will not] come, [it's|it is] sad",
        "The dog's bone [isn't|is not] where [John's|John is] standing now",
        "[I'd|I would] say [there's|there is] no way [I'll|I will] do it",
        "[it's|it is] [it's|it is] [it's|it is] true",
        "[I do not|I don't] know, [I do not|I don't] care at all",
        "[we are|we're] [we are|we're] done here today",
    ]
    cases = 0
    for sentence in sentences:
        units = [(m[1].split(), m[2].split()) if m[1] else ([m[3]], [m[3]])
                 for m in re.finditer(r"\[([^|\]]+)\|([^\]]+)\]|(\S+)", sentence)]
        k = sum(u[0] != u[1] for u in units)
        for ca, cb in itertools.product(itertools.product((0, 1), repeat=k), repeat=2):
            ia, ib = iter(ca), iter(cb)
            a = [u[next(ia)] if u[0] != u[1] else u[0] for u in units]
            b = [u[next(ib)] if u[0] != u[1] else u[0] for u in units]
            hypothesis = [x for unit in b for x in unit]
            for cut in range(1, len(units)):
                committed = [x for unit in a[:cut] for x in unit]
                expected = [x for unit in b[cut:] for x in unit]
                assert tail_after(committed, hypothesis) == expected, (committed, hypothesis)
                cases += 1
    assert cases == 2688


# -- voice activity detection ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["silero", "energy"])
def test_vad_on_silence_and_on_speech(kind, librivox):
    from as2d.runtime.audio import load_audio
    from as2d.runtime.vad.silero import make_vad

    vad = make_vad(kind)
    silence = np.zeros(16000 * 2, np.float32)
    assert vad.probabilities(silence).max() < 0.2
    clip = load_audio(librivox[0].path).samples
    p = vad.probabilities(clip)
    speech_share = float((p >= 0.5).mean())
    assert speech_share > 0.5, speech_share  # a read sentence: mostly speech
    # Endpointing the clip (with 1 s of silence around it) finds it as one utterance.
    padded = np.concatenate([silence[:16000], clip, silence])
    out = _run_endpointer(list(vad.probabilities(padded)), min_silence=0.8)
    ends = [b for b in out if b.kind == "end"]
    assert len(ends) >= 1
    assert ends[0].start / 16000 < 1.3 and ends[-1].speech_end / 16000 > len(clip) / 16000


def test_silero_ignores_steady_noise():
    from as2d.runtime.vad.silero import SileroVAD

    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(16000 * 3) * 0.01).astype(np.float32)
    assert SileroVAD().probabilities(noise).max() < 0.5


def test_file_source_plays_every_sample_no_earlier_than_real_time(librivox):
    from as2d.runtime.audio import load_audio
    from as2d.runtime.live.audio_input import FileSource

    audio = load_audio(librivox[1].path)  # 3 s
    src = FileSource(audio, speed=4.0)
    src.start()
    chunks = []
    while True:
        try:
            c = src.read(5.0)
        except EOFError:
            break
        assert c is not None
        chunks.append(c)
    got = np.concatenate([c.samples for c in chunks])
    assert np.array_equal(got, audio.samples)
    walls = [c.wall for c in chunks]
    assert walls == sorted(walls)
    # Paced: the last sample is not handed over before its time (a lower bound only).
    assert walls[-1] - src.started_at >= audio.duration / 4.0 - 0.02


def test_output_file_is_appended_on_a_line_of_its_own(tmp_path):
    from as2d.cli.mic_display import CommitWriter
    from as2d.runtime.live.live_events import Committed, UtteranceDone

    out = tmp_path / "notes.txt"
    out.write_text("yesterday's dictation, no newline")
    w = CommitWriter(out, stdout=False)
    w(Committed(1, "Hello there", True, False))
    assert out.read_text().endswith("\nHello there")  # flushed at once, on a new line
    w(Committed(1, "world.", False, True))
    w(UtteranceDone(1, "Hello there world.", 0.0, 1.0, 0.8, "silence", 0.4, 2, 5, 0.05))
    w.close()
    assert out.read_text() == "yesterday's dictation, no newline\nHello there world.\n"


# -- the whole command on real clips ---------------------------------------------------------------
@pytest.mark.slow
def test_dictation_matches_transcribe(cli, librivox, models_root, whisper, base_target_only):
    """Unpaced (--speed 0): the file is endpointed faster than it is decoded, so utterances
    that ended while the decoder was busy are decoded together (up to one 30-s window) —
    the backlog path of a slow machine. Each voice detector once: silero on one long clip
    (several utterances), energy on one short sentence (both detectors on silence and on
    speech: test_vad_on_silence_and_on_speech). The reference is the text of ``as2d
    transcribe --decoder target`` (base, greedy; English, as it detects on these clips): the
    session's target-only decode of the clip, the same model and tokens, decoded once for
    every module that compares with it rather than by a command of its own here."""
    two_cities = _moonshine("two_cities.wav")
    tokenizer = whisper("base", "int8", 2).tokenizer
    errors = words = 0
    for clip, vad in [(librivox[0].path, "energy"), (two_cities, "silero")]:
        ref = tokenizer.decode([t for seg in base_target_only(clip) for t in seg])
        got = cli("mic", "--input", clip, "--speed", "0", "--vad", vad, "--no-live", "-q",
                  "--models-dir", models_root)
        assert got.exit_code == 0, got.output
        wer, e, n = _wer(ref, got.stdout)
        assert wer <= 0.15, (clip.name, vad, ref, got.stdout)
        errors, words = errors + e, words + n
    assert errors / words <= 0.05, (errors, words)


@pytest.mark.serial
@pytest.mark.slow
def test_paced_dictation_commits_incrementally_and_reports_latency(whisper, tmp_path, librivox):
    """Paced (2× real time): the growing utterance is decoded while it is spoken, the file is
    flushed at every commit, and each utterance reports its latency."""
    from as2d.cli.mic_display import CommitWriter, MicStats
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.live.audio_input import FileSource
    from as2d.runtime.live.live_events import Committed, Hypothesis
    from as2d.runtime.live.session import LiveOptions, LiveSession
    from as2d.runtime.speculative.budget import Budget
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.vad.silero import make_vad

    clip = librivox[0].path  # one 7-s sentence
    target = whisper("base", "int8", 2)  # the suite's loaded models
    drafter = whisper("tiny.en", "int8", 1)
    out = tmp_path / "dictation.txt"
    writer = CommitWriter(out, stdout=False)
    seen: list[tuple[str, str]] = []
    hypotheses: list[Hypothesis] = []

    def check_flushed(event) -> None:  # runs right after the writer, on the decoder thread
        if isinstance(event, Committed):
            seen.append((event.text, out.read_text()))
        elif isinstance(event, Hypothesis):
            hypotheses.append(event)

    stats = MicStats()
    listener = fanout(writer, check_flushed, stats)
    strategy = AS2D(target, drafter, None, Budget())
    try:
        # 2× real time: the pace only scales the clock the source plays to. Measured on the
        # shared machine: partial decodes at 1.0, 3.0-3.5 and 5.2 s of audio (1× gave one every
        # ~0.8 s), where the check needs one before 6.5 s; half the wall time of 1×.
        session = LiveSession(FileSource(load_audio(clip), 2.0), make_vad("silero"),
                              LongFormTranscriber(target, strategy, stats),
                              LiveOptions(language="en"),
                              listener, "as2d", drafter.name)
        session.start()
        assert session.wait(120)
    finally:
        strategy.close()
        writer.close()
    assert session.error is None
    assert seen and all(on_disk.rstrip().endswith(text) for text, on_disk in seen)
    # The utterance was decoded while it grew, not only once it had ended.
    assert any(not h.final and h.audio_seconds < 6.5 for h in hypotheses), hypotheses
    assert stats.utterances and all(u.latency is not None and u.latency >= 0
                                    for u in stats.utterances if u.text)
    lines = out.read_text().splitlines()
    assert lines == [u.text for u in stats.utterances if u.text]

    reference = " ".join(s.text for s in LongFormTranscriber(target).transcribe(
        load_audio(clip), TranscribeOptions(language="en")))
    wer, _, _ = _wer(reference, session.text)
    assert wer <= 0.15, (reference, session.text)


@pytest.mark.parametrize("inner,drafter_with_hints",
                         [("target", False), ("as2d", False), ("as2d", True)])
def test_previous_decode_as_candidates_is_lossless_and_saves_passes(inner, drafter_with_hints,
                                                                     whisper, librivox,
                                                                     base_target_only):
    """A re-decode of a grown utterance, with its previous decode offered first: the same tokens
    as without, in fewer target passes. Beside AS²D, the decode without a hint is drafted, and
    the hinted one runs with the target alone unless ``drafter_with_hints``. The tokens without
    a hint are the target alone's (AS²D's too: it is lossless), decoded once per session."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import RunStarted, WindowDone
    from as2d.runtime.live.hints import HintedStrategy
    from as2d.runtime.speculative.budget import Budget
    from as2d.runtime.transcribe.as2d import AS2D
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.strategy import TargetOnly
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    target = whisper("base", "int8", 2)  # the suite's loaded models, not one load per case
    if inner == "as2d":
        drafter = whisper("tiny.en", "int8", 1)
        plain = AS2D(target, drafter, None, Budget())
    else:
        plain = TargetOnly(target)
    samples = load_audio(librivox[2].path).samples
    grown, earlier = samples, samples[: int(len(samples) * 0.7)]
    opts = TranscribeOptions(language="en")

    def decode(decoder, audio):
        passes, runs = [], []

        def listen(e):
            if isinstance(e, WindowDone):
                passes.append(e.stats.passes)
            elif isinstance(e, RunStarted):
                runs.append((e.decoder, e.drafter))

        t = LongFormTranscriber(target, decoder, listen)
        tokens = [tok for seg in t.transcribe(audio, opts) for tok in seg.tokens]
        return tokens, sum(passes), runs

    reference = [tok for seg in base_target_only(librivox[2].path) for tok in seg]
    try:
        if inner == "target":  # its passes without a hint, to count what the hint saves
            _, plain_passes, _ = decode(plain, grown)
        hinted = HintedStrategy(plain, drafter_with_hints)
        assert hinted.verifies_samples == (inner == "as2d")  # a fallback's samples drafted too
        _, _, first_runs = decode(hinted, earlier)  # the utterance 0.7 of the way through
        assert hinted.last, "the hint is what the earlier decode committed"
        hinted.previous, hinted.offered, hinted.accepted = hinted.last, 0, 0
        stream = getattr(plain, "stream", None)
        tokens, hinted_passes, runs = decode(hinted, grown)
        drafted_again = getattr(plain, "stream", None) is not stream
    finally:
        plain.close()
    assert tokens == reference
    if inner == "as2d":
        assert first_runs == [("as2d", drafter.name)]  # no hint: the drafter drafts
        if drafter_with_hints:
            assert runs == [("as2d", drafter.name)] and drafted_again
        else:
            assert runs == [("target", None)] and not drafted_again
    # The earlier decode heard "Cold to be ..." where the whole clip says "Rather to be ...":
    # the look-up re-synchronises after the changed word and copies the rest of the prefix.
    if not drafter_with_hints:  # beside a drafter, who proposes depends on its timing
        assert hinted.accepted >= 5, (hinted.accepted, len(reference))
    if inner == "target":
        assert hinted_passes < plain_passes, (hinted_passes, plain_passes)


def test_no_hints_where_rows_are_not_exact(bundle, librivox):
    """A hint is verified several tokens a pass: on a model whose rows are not computed
    independently (checked once per machine) that could change the text, so the session
    offers none and says why, as the engine decodes with the target alone there."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import Note
    from as2d.runtime.live.audio_input import FileSource
    from as2d.runtime.live.hints import HintedStrategy
    from as2d.runtime.live.session import LiveOptions, LiveSession
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.vad.silero import make_vad
    from as2d.runtime.whisper.model import WhisperModel

    target = WhisperModel(bundle("base", "int8"), threads=2)
    target.row_check = {"exact": False}  # as a probe on such a CPU finds it
    notes = []
    transcriber = LongFormTranscriber(target)
    session = LiveSession(FileSource(load_audio(librivox[0].path), 1.0), make_vad("energy"),
                          transcriber, LiveOptions(language="en"),
                          lambda e: isinstance(e, Note) and notes.append(e.message))
    assert session.hinted is None
    assert not isinstance(transcriber.strategy, HintedStrategy)
    assert any("not offered as candidates" in n for n in notes), notes


def _joined_speech(clips, seconds: float, gap: float = 1.0) -> np.ndarray:
    """Real clips one after another with a pause between them, up to ``seconds``."""
    from as2d.runtime.audio import load_audio

    parts, total, i = [], 0, 0
    pause = np.zeros(int(gap * 16000), np.float32)
    while total < seconds * 16000:
        x = load_audio(clips[i % len(clips)].path).samples.astype(np.float32)
        parts += [x, pause]
        total += len(x) + len(pause)
        i += 1
    return np.concatenate(parts)


@pytest.mark.serial
@pytest.mark.slow
def test_endurance_replay_keeps_up_without_drift(whisper, librivox):
    """The CI version of the one-hour replay (scripts/mic_endurance.py): joined real speech
    played at 3× real time through the whole pipeline. The input queue and the decoder's queue
    stay bounded, latency at the end is like at the start, memory does not grow, and the saved
    text matches ``transcribe`` of the same audio within a small WER."""
    import resource
    import statistics

    from as2d.cli.mic_display import MicStats
    from as2d.runtime.audio import Audio
    from as2d.runtime.events import fanout
    from as2d.runtime.live.audio_input import FileSource
    from as2d.runtime.live.session import LiveOptions, LiveSession
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.vad.silero import make_vad

    samples = _joined_speech(librivox, 66.0)
    target = whisper("base", "int8", 2)
    stats = MicStats()
    # 3× real time: the property is "no drift" (a queue, latency or memory that keeps growing),
    # not speed. Measured on the shared 2-core machine (load 4-7) at 3×: at most 1 ended
    # utterance waiting for the decoder and 0.16 s of audio at the input (bounds: 6 and 5 s),
    # the same 11 utterances as at 2×: the bounds keep their margin at a third less wall time.
    session = LiveSession(FileSource(Audio(samples, source="joined"), 3.0), make_vad("silero"),
                          LongFormTranscriber(target, None, stats), LiveOptions(language="en"),
                          fanout(stats), "target")

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20

    session.start()
    samples_seen: list[tuple[float, int, float]] = []
    while not session.wait(1.0):
        queued, finals = session.backlog()
        samples_seen.append((queued, finals, rss_mb()))
    assert session.error is None
    assert samples_seen
    assert max(q for q, _, _ in samples_seen) < 5.0  # seconds of audio waiting at the input
    assert max(f for _, f, _ in samples_seen) <= 6  # ended utterances waiting for the decoder
    # onnxruntime's arenas grow while new input shapes come in (the first utterances): compare
    # the middle third with the last, after that warm-up.
    third = len(samples_seen) // 3 or 1
    rss_mid = statistics.median(r for _, _, r in samples_seen[third:2 * third])
    rss_end = statistics.median(r for _, _, r in samples_seen[-third:])
    assert rss_end - rss_mid < 150, (rss_mid, rss_end)
    lat = [x for x in stats.latencies if x is not None]
    assert len(lat) >= 10
    half = len(lat) // 2
    assert statistics.median(lat[half:]) <= statistics.median(lat[:half]) * 2.0 + 1.5, lat
    reference = " ".join(s.text for s in LongFormTranscriber(target).transcribe(
        Audio(samples, source="joined"), TranscribeOptions(language="en")))
    wer, _, _ = _wer(reference, session.text)
    assert wer <= 0.05, (wer, reference, session.text)


def _mic_process(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-c", MIC_MAIN, "mic", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.serial
@pytest.mark.slow
def test_ctrl_c_finishes_the_utterance_and_keeps_the_text(tmp_path, models_root):
    clip = _moonshine("two_cities.wav")
    out = tmp_path / "dictation.txt"
    proc = _mic_process(["--input", str(clip), "--speed", "1.5", "--no-live", "--output",
                         str(out), "--models-dir", str(models_root)])
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # wait for the first committed line
            if out.is_file() and out.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
        assert out.read_text().count("\n") >= 1
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "finishing the utterance in progress" in stderr
    text = out.read_text()
    assert text == stdout  # everything printed was saved, and the reverse
    assert text.endswith("\n") and "It was the best of times" in text
    assert "comparison only" not in text  # it did stop early
    assert "Traceback" not in stderr


# -- input failures (simulated sounddevice) --------------------------------------------------------
def test_portaudio_missing_is_one_line(cli, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_portaudio(name, *a, **kw):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    r = cli("mic")
    assert r.exit_code == 1
    assert r.output.startswith("as2d: error: cannot use the microphone: the PortAudio library "
                               "is missing")
    assert r.output.count("\n") == 1
    r = cli("mic", "--list-devices")
    assert r.exit_code == 1 and "PortAudio" in r.output


class _FakeDevices:
    """sounddevice's device queries on a machine with one input device, or none."""

    def __init__(self, present: bool) -> None:
        self.present = present

    def query_devices(self, device=None, kind=None):
        if not self.present:
            if kind == "input":
                raise ValueError("No input device matching")
            return []
        info = {"name": "Fake USB Mic", "index": 0, "hostapi": 0, "max_input_channels": 1,
                "max_output_channels": 0, "default_samplerate": 16000.0}
        if device is not None and kind == "input" and device not in (0, "Fake USB Mic"):
            raise ValueError(f"No input device matching {device!r}")
        return info if kind == "input" or device is not None else [info]


def test_no_input_device(cli, monkeypatch):
    import sounddevice as sd

    fake = _FakeDevices(False)
    monkeypatch.setattr(sd, "query_devices", fake.query_devices)
    monkeypatch.setattr(sd, "query_hostapis", lambda: [{"name": "ALSA"}])
    r = cli("mic")
    assert r.exit_code == 1
    assert r.output.startswith("as2d: error: no audio input device found")
    r = cli("mic", "--list-devices")
    assert r.exit_code == 1 and "no audio input device" in r.output


@pytest.mark.slow
def test_device_disappearing_mid_run_saves_the_text(cli, monkeypatch, tmp_path, librivox,
                                                    models_root):
    """The stream delivers a real clip through the callback, then the device vanishes:
    PortAudio stops calling back and reports the stream finished."""
    import sounddevice as sd

    from as2d.runtime.audio import load_audio

    samples = load_audio(librivox[1].path).samples  # 3 s: "He was not an ill-disposed young man"

    class VanishingStream:
        def __init__(self, *, callback, finished_callback, blocksize, **kw):
            self.callback, self.finished = callback, finished_callback
            self.block = blocksize
            self.thread = threading.Thread(target=self._run, daemon=True)

        def _run(self):  # PortAudio's thread: blocks at 4× real time, then the device is gone
            for i in range(0, len(samples) - self.block, self.block):
                self.callback(samples[i:i + self.block, None], self.block, None, None)
                time.sleep(self.block / 16000 / 4)
            self.finished()

        def start(self):
            self.thread.start()

        def stop(self):
            pass

        def close(self):
            pass

    fake = _FakeDevices(True)
    monkeypatch.setattr(sd, "query_devices", fake.query_devices)
    monkeypatch.setattr(sd, "check_input_settings", lambda **kw: None)
    monkeypatch.setattr(sd, "InputStream", VanishingStream)
    r = cli("mic", "--device", "0", "--list-devices")
    assert r.exit_code == 0 and "Fake USB Mic" in r.output
    out = tmp_path / "dictation.txt"
    r = cli("mic", "--device", "Fake USB Mic", "--no-live", "-q", "--output", out,
            "--models-dir", models_root)
    assert r.exit_code == 1
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("as2d: error: the audio input 'Fake USB Mic' stopped delivering")
    assert str(out) in last  # tells where the text is
    saved = out.read_text()
    assert "young man" in saved and saved.endswith("\n")


def test_cli_endpointing_defaults_are_the_engines():
    """`as2d mic`'s flags repeat EndpointConfig's defaults (the CLI does not import the live
    engine to show its help): they must not drift apart (the tail moved 0.1 -> 0.05 s)."""
    import dataclasses

    from as2d.cli.mic_cmd import MicRequest
    from as2d.runtime.live.endpoint import EndpointConfig

    cli = {f.name: f.default for f in dataclasses.fields(MicRequest)}
    engine = EndpointConfig()
    for flag, field in (("threshold", "threshold"), ("min_speech", "min_speech"),
                        ("silence", "min_silence"), ("pad", "pad"), ("tail", "tail"),
                        ("settle", "settle"), ("max_utterance", "max_utterance")):
        assert cli[flag] == getattr(engine, field), (flag, cli[flag], getattr(engine, field))


def test_bad_options_are_one_line(cli, tmp_path, librivox):
    for args, words in ((["--decoder", "fast"], "--decoder"), (["--vad", "webrtc"], "--vad"),
                        (["--speed", "2"], "--speed applies to --input"),
                        (["--input", tmp_path / "missing.wav"], "no such file"),
                        (["--max-utterance", "1"], "--max-utterance"),
                        (["--threshold", "1.5"], "threshold"),
                        (["--input", librivox[1].path, "--output", tmp_path / "no" / "x.txt"],
                         "cannot write there")):
        r = cli("mic", *args)
        assert r.exit_code != 0, args
        assert r.output.startswith("as2d: error: ") and words in r.output, (args, r.output)
        assert r.output.count("\n") == 1
