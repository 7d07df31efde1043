"""AS²D's engine: every speculative path commits exactly what the target alone commits.

The scheduler parts (re-tokenisation, alignment, budget) are specified on their own first;
then the whole engine is checked against target-only greedy decoding on real clips with real
drafters, and the scheduler is fed random drafter streams (substitutions, insertions, deletions,
a stream that lags behind) by property tests.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d.runtime.audio import load_audio
from as2d.runtime.events import LanguageDetected, Note, Verified
from as2d.runtime.speculative.align import Aligner
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.stream import CandidateStream
from as2d.runtime.transcribe.as2d import AS2D, AlignedSource
from as2d.runtime.transcribe.drafter import make_retokenizer
from as2d.runtime.transcribe.longform import LongFormTranscriber, TranscriptionInfo
from as2d.runtime.transcribe.sd import SerialSD
from as2d.runtime.transcribe.strategy import TargetOnly
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

OPTS = TranscribeOptions(language="en")


def decode(model, decoder, audio, listener=None) -> list[list[int]]:
    """The tokens of every segment ``decoder`` commits for ``audio`` (English, greedy)."""
    return [s.tokens for s in LongFormTranscriber(model, decoder, listener).transcribe(audio, OPTS)]


# -- re-tokenisation ---------------------------------------------------------------------------
WORDS = ["the", "The", "then", "Dashwood", "ill-disposed", "naïve", "café", "1,234", "42",
         "don't", "it's", "Mr.", "—", "日本語", "über", "?", "!", ",", "(", ")", "\"quoted\"",
         "amiable", "prudently", "  ", "e.g.", "x", "I"]


@pytest.fixture(scope="module")
def tokenizers(whisper):
    return whisper("tiny.en").tokenizer, whisper("base").tokenizer


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=25), st.randoms())
def test_retokenizer_gives_the_targets_own_tokens_word_by_word(tokenizers, words, rnd):
    drafter_tk, target_tk = tokenizers
    text = "".join((" " if rnd.random() < 0.8 else "") + w for w in words)
    ids = drafter_tk.encode(text)
    retok = make_retokenizer(drafter_tk, target_tk)
    out: list[int] = []
    i = 0
    while i < len(ids):  # feed the drafter's tokens in random bursts, as it produces them
        n = rnd.randint(1, 4)
        out += retok.feed(ids[i : i + n])
        i += n
    out += retok.flush()
    assert out == target_tk.encode(text)
    assert target_tk.decode(out) == text


def test_retokenizer_holds_back_a_word_that_may_still_grow(tokenizers):
    drafter_tk, target_tk = tokenizers
    retok = make_retokenizer(drafter_tk, target_tk)
    assert retok.feed(drafter_tk.encode(" prudent")) == []
    released = retok.feed(drafter_tk.encode("ly in"))
    assert target_tk.decode(released) == " prudently"
    assert target_tk.decode(retok.flush()) == " in"


def test_whisper_tokens_match_the_models_own_tokenisation(whisper):
    # The multilingual tokenizer.json lacks the merge behind "Ġt": encoding by rank must not.
    tk = whisper("base").tokenizer
    assert tk.encode(" then the times") == [550, 264, 1413]


# -- alignment ---------------------------------------------------------------------------------
def stream_of(tokens: list[int]) -> CandidateStream:
    s = CandidateStream()
    s.extend(list(tokens), 0.0)
    return s


def test_aligner_offers_what_follows_the_committed_text():
    a = Aligner(stream_of(list(range(100, 120))))
    assert a.candidates(4) == [100, 101, 102, 103]
    for t in (100, 101, 102):
        a.observe(t)
    assert a.candidates(3) == [103, 104, 105]


def test_aligner_stops_candidates_at_a_drafter_segment_boundary():
    s = stream_of(list(range(100, 120)))
    s.boundaries[5] = 3.0  # the drafter closed a segment before index 5
    a = Aligner(s)
    assert a.candidates(10) == [100, 101, 102, 103, 104]


@pytest.mark.parametrize("edit", ["substitution", "insertion", "deletion"])
def test_aligner_resynchronises_after_an_edit(edit):
    truth = list(range(1000, 1040))
    drafted = list(truth)
    at = 15
    if edit == "substitution":
        drafted[at] = 7
    elif edit == "insertion":
        drafted[at:at] = [7, 8]
    else:
        del drafted[at : at + 2]
    a = Aligner(stream_of(drafted))
    for t in truth[: at + 4]:
        a.observe(t)
    # Four tokens after the edit the pointer is back on the drafter's copy of the next token.
    assert a.synced
    assert a.candidates(3) == truth[at + 4 : at + 7]


def test_aligner_keeps_its_place_where_the_target_spells_a_number_the_drafter_wrote(tokenizers):
    """tiny.en writes "10 of clubs. 4 of hearts" where base says "Ten of clubs. Four of
    hearts": a number word and its digits are one key, so the aligner stays on the drafter's
    text instead of searching for it again."""
    from as2d.runtime.speculative.align import TokenKeys

    tk = tokenizers[1]
    keys = TokenKeys(tk.token_bytes, tk.encode_piece)
    drafted = tk.encode(" 10 of clubs. 4 of hearts")
    a = Aligner(stream_of(drafted), keys=keys)
    (ten,) = tk.encode(" Ten")
    a.observe(ten)
    assert a.synced
    assert a.candidates(3) == drafted[1:4]  # " of clubs."
    for t in drafted[1:4]:
        a.observe(t)
    (four,) = tk.encode(" Four")
    a.observe(four)
    assert a.synced and a.candidates(2) == drafted[5:7]  # " of hearts"
    assert keys.key(ten) == keys.key(drafted[0]) == "10"
    assert keys.key(tk.encode(" ninety")[0]) == "90"


def test_aligner_never_jumps_back_to_an_earlier_repetition():
    # "it was the age of wisdom , it was the age of foolishness"
    phrase = [1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4, 5, 7]
    a = Aligner(stream_of(phrase))
    for t in phrase[:9]:
        a.observe(t)
    a.observe(99)  # the target says something the drafter did not
    a.observe(3)
    assert a.pos >= 9


def test_aligner_rewinds_to_the_text_a_window_kept():
    a = Aligner(stream_of(list(range(100, 140))))
    a.window_start()
    for t in range(100, 110):
        a.observe(t)
    a.rewind(kept=6)  # the last 4 tokens are decoded again by the next window
    assert a.candidates(2) == [106, 107]


# -- budget ------------------------------------------------------------------------------------
def test_budget_verifies_more_when_the_drafter_is_right():
    good, bad = Budget(), Budget()
    for _ in range(30):
        good.record(offered=8, accepted=8, rows=9, seconds=0.010)
        bad.record(offered=4, accepted=0, rows=5, seconds=0.010)
    assert good.choose(16) >= 8
    assert bad.choose(16) <= 1


def test_budget_learns_the_cost_of_an_extra_row():
    b = Budget()
    for rows in (1, 2, 5, 9, 3, 1, 7, 4) * 4:
        b.record(offered=rows - 1, accepted=rows - 1, rows=rows, seconds=0.005 + 0.001 * rows)
    assert b.slope() == pytest.approx(0.001 / 0.006, rel=0.05)


def test_a_budget_at_zero_comes_back_when_the_drafter_recovers():
    b = Budget()
    for _ in range(30):  # a hard stretch: every offer rejected
        b.record(offered=4, accepted=0, rows=5, seconds=0.010)
    assert b.choose(16) == 0
    for _ in range(20):  # the drafter's next tokens would have been right (not offered)
        b.shadow(True)
    assert b.choose(16) >= 2


def test_a_budget_at_zero_still_tries_one_candidate_now_and_then():
    b = Budget(probe_every=8)
    for _ in range(30):
        b.record(offered=4, accepted=0, rows=5, seconds=0.010)
    choices = [b.choose(16) for _ in range(16)]
    assert choices.count(1) == 2 and set(choices) == {0, 1}


def test_a_noisy_pass_time_cannot_price_rows_out():
    b = Budget()
    # Passes with candidates ran while the drafter's encoder shared the cores: they look slow
    # (a fitted slope of 1.3 — an extra row as dear as a whole pass — would choose k = 0).
    for rows in (1, 4, 1, 4, 1, 4, 1, 4) * 4:
        b.record(offered=rows - 1, accepted=rows - 1, rows=rows,
                 seconds=0.008 if rows == 1 else 0.008 * (1 + 1.3 * 3))
    assert b._slope > 1.2 and b.slope() == b.max_slope
    assert b.choose(16) >= 2


def test_a_beams_candidate_costs_its_rows_in_a_pass_of_the_beams_width():
    """One pricing policy for every search: the fit is in rows, so passes of a beam of 5
    (5·(1+k) rows) give the slope greedy passes would, and a beam's candidate is priced per
    pass of its width; a fresh copy keeps the settings and forgets what was learned."""
    b = Budget()
    assert b.slope(5) == pytest.approx(5 * 0.08 / (1 + 4 * 0.08))  # the prior: 0.30
    for k in (0, 1, 3, 2, 0, 4, 1, 2) * 4:
        b.record(offered=k, accepted=k, rows=5 * (1 + k), seconds=0.005 + 0.001 * 5 * (1 + k))
    assert b.slope() == pytest.approx(0.001 / 0.006, rel=0.05)
    assert b.slope(5) == pytest.approx(0.005 / 0.010, rel=0.05)
    assert b.choose(16, 5) <= b.beam_k_max < b.choose(16)
    b.k_max = 12
    fresh = b.fresh()  # a beam window's: the run's settings, none of its history
    assert fresh.k_max == 12 and fresh.slope() == pytest.approx(0.08) and fresh._n == 0


def test_fixed_budget_is_a_fixed_k():
    assert Budget(fixed=4).choose(16) == 4
    assert Budget(fixed=4).choose(2) == 2


# -- the engine, losslessly --------------------------------------------------------------------
SHORT, SENTENCE = "001.wav", "sense_and_sensibility_01_austen_64kb-0870.wav"
TWO_CITIES, ENDGAME = "two_cities.wav", "endgame_nagg_nell.wav"


@pytest.fixture(scope="module")
def lossless_clips(clips):
    """The module's real clips by name: a card (1 s, where tiny.en drafts a word base does
    not say), a LibriVox sentence (7 s: one window, 30 tokens), two_cities (44 s: two windows,
    the second prompted by the first) and endgame (28 s: one long window). One or two clips
    per decoder path: the verification kernel under every path is tested exhaustively in
    tests/test_kernel.py."""
    names = {SHORT, SENTENCE, TWO_CITIES, ENDGAME}
    return {c.name: load_audio(c.path) for c in clips if c.name in names}


@pytest.fixture(scope="module")
def base_reference(base_target_only):
    """``base_reference(audio)`` → base int8's target-only tokens for one of the module's
    clips (read from its file), decoded once per session: each is compared with two or three
    decoders here, and tests/test_pipeline.py and others compare with some of the same
    clips'."""
    return lambda audio: base_target_only(audio.source)


@pytest.mark.slow
def test_as2d_and_sd_commit_exactly_the_target_only_tokens(whisper, lossless_clips,
                                                           base_reference):
    """A short clip, and for SD a two-window one (each window drafted after the previous
    text). AS²D on the two windows, the drafter racing the target and its stream carried
    across the boundary, is the same comparison in
    test_an_english_only_drafter_drafts_while_the_target_detects_the_language (and on a
    sentence with the drafter done first, test_as2d_actually_accepts_candidates)."""
    target = whisper("base", "int8", threads=2)
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    short, long = lossless_clips[SHORT], lossless_clips[TWO_CITIES]
    assert decode(target, AS2D(target, drafter, budget=Budget()), short) == base_reference(short)
    for audio in (short, long):
        assert decode(target, SerialSD(target, drafter, budget=Budget(fixed=4)),
                      audio) == base_reference(audio)


@pytest.mark.slow
def test_same_vocabulary_drafting_is_lossless_too(whisper, lossless_clips):
    """The fp32 target drafted by its own int8 weights (no re-tokenisation between the two),
    on one sentence: what differs from tiny.en drafting is the path, not the clip. (The only
    speculative decode of a real fp32 target: the int8 drafts are rejected where the two
    precisions part.)"""
    target = whisper("base", "fp32", threads=2)
    drafter = whisper("base", "int8", threads=1, role="drafter")
    audio = lossless_clips[SENTENCE]
    reference = decode(target, TargetOnly(target), audio)
    assert decode(target, AS2D(target, drafter), audio) == reference
    assert decode(target, SerialSD(target, drafter), audio) == reference


class _DraftFirstAS2D(AS2D):
    """AS²D whose target waits for the drafter to finish the audio before it starts, so the
    share of accepted candidates depends on the scheduler and the drafter, not on how busy
    the machine running the test happens to be."""

    def begin(self, mel, language, options):
        super().begin(mel, language, options)
        self.worker.join()


@pytest.mark.slow
def test_as2d_actually_accepts_candidates(whisper, lossless_clips, base_reference):
    """On a sentence (one window: acceptance is the drafter's and the scheduler's on every
    window alike; two windows with the drafter racing the target are the detection test's
    below)."""
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    events = []
    audio = lossless_clips[SENTENCE]
    assert decode(target, _DraftFirstAS2D(target, drafter), audio,
                  events.append) == base_reference(audio)
    verified = [e for e in events if isinstance(e, Verified)]
    committed = sum(len(e.committed) for e in verified)
    assert sum(e.accepted for e in verified) > 0.5 * committed
    assert committed / len(verified) > 2.0  # tokens per target pass


class _ScriptedAS2D(AS2D):
    """AS²D whose candidate stream is scripted instead of drafted: it starts with ``ready``
    tokens and reveals ``lag`` more after every target pass (a drafter running behind)."""

    def __init__(self, target, script: list[int], ready: int, lag: int, boundaries=()):
        super().__init__(target, target)
        self.script, self.ready, self.lag, self.marks = script, ready, lag, boundaries

    def start_early(self, mel, language, options):
        pass

    def begin(self, mel, language, options):
        self.mel = mel
        self.stream = CandidateStream()
        self.aligner = Aligner(self.stream, keys=self.keys)  # as a real run: style-aware
        self.stream.extend(self.script[: self.ready], 0.0)
        for b in self.marks:
            self.stream.boundaries[b] = 0.0

    def source(self, window):
        return _LaggingSource(self, window)

    def reveal(self):
        n = len(self.stream)
        self.stream.extend(self.script[n : n + self.lag], 0.0)


class _LaggingSource(AlignedSource):
    """The aligned source of a scripted run: the script advances after every pass."""

    def observe(self, offered, verdict):
        super().observe(offered, verdict)
        self.run.reveal()


@pytest.fixture(scope="module")
def scripted_case(whisper, clips):
    """tiny.en's target-only tokens of two_cities' first 33 s: two windows (the first's 30 s,
    and a second from wherever its last whole segment ends), the stream carried across."""
    from dataclasses import replace

    model = whisper("tiny.en", "int8", threads=1)
    whole = load_audio(next(c.path for c in clips if c.name == "two_cities.wav"))
    audio = replace(whole, samples=whole.samples[: 16000 * 33])
    reference = decode(model, TargetOnly(model), audio)
    text = [t for seg in reference for t in seg if t < model.tokenizer.eot]
    return model, audio, reference, text


# Few examples: each decodes two real windows. The kernel the scheduler feeds is tested over
# hundreds of random candidate sources in tests/test_kernel.py; the aligner and the stream
# (this scheduler's own part) only here and in the aligner's tests above.
@pytest.mark.slow
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scheduler_is_lossless_whatever_the_drafter_streams(scripted_case, data):
    model, audio, reference, text = scripted_case
    rnd = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    p_edit = data.draw(st.sampled_from([0.0, 0.05, 0.2, 0.6]))
    script: list[int] = []
    for t in text:  # the target's own text, damaged the way a drafter damages it
        r = rnd.random()
        if r < p_edit / 3:
            script.append(rnd.randrange(200, 50000))  # substitution
        elif r < 2 * p_edit / 3:
            script += [t, rnd.randrange(200, 50000)]  # insertion
        elif r < p_edit:
            continue  # deletion
        else:
            script.append(t)
    if data.draw(st.booleans()):
        script = [rnd.randrange(200, 50000) for _ in range(rnd.randrange(0, 40))] + script
    ready = data.draw(st.integers(0, len(script)))
    lag = data.draw(st.integers(0, 6))
    marks = sorted(rnd.sample(range(len(script) + 1), min(len(script) + 1, rnd.randrange(0, 12))))
    decoder = _ScriptedAS2D(model, script, ready, lag, marks)
    decoder.budget = Budget(fixed=data.draw(st.sampled_from([None, 1, 3, 8, 16])))
    assert decode(model, decoder, audio) == reference


@pytest.mark.slow
def test_a_window_repeating_itself_is_guessed_from_its_own_text(whisper, clips):
    """With nothing drafted, the candidates are the window's own repetition: Beckett's lines
    said three times over (each turn its own timestamps) are guessed from the first turn,
    and the tokens are the target's. The first third of the tokens has nothing to repeat;
    where the turns' timestamps part (which depends on this CPU's kernels) is not pinned."""
    from as2d.runtime.audio import Audio

    model = whisper("tiny.en", "int8", threads=1)
    once = load_audio(next(c.path for c in clips if c.name == "beckett.wav"))
    thrice = Audio(np.concatenate([once.samples] * 3), once.source, once.source_rate,
                   once.source_channels, once.truncated)
    events: list = []
    assert decode(model, _ScriptedAS2D(model, [], 0, 0), thrice, events.append) == decode(
        model, TargetOnly(model), thrice)
    verified = [e for e in events if isinstance(e, Verified)]
    committed = sum(len(e.committed) for e in verified)
    repeated = 2 / 3 * committed  # the second and third turns
    assert sum(e.accepted for e in verified) > 0.5 * repeated
    assert len(verified) < committed - 0.5 * repeated


# -- language detection ------------------------------------------------------------------------
AUTO = TranscribeOptions(language=None)  # the CLI's default on a multilingual target: detect


@pytest.mark.slow
def test_an_english_only_drafter_drafts_while_the_target_detects_the_language(
        whisper, lossless_clips, base_reference):
    """The target detects English, so every window's prompt is the one ``language="en"``
    gives: AS²D's tokens are the session's target-only reference."""
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    audio = lossless_clips[TWO_CITIES]
    drafting_during_detection = []

    def listen(event):
        if isinstance(event, LanguageDetected):
            drafting_during_detection.append(decoder.worker is not None)

    decoder = AS2D(target, drafter, listen)
    info = TranscriptionInfo(None, 0.0, audio.duration)
    got = [s.tokens for s in LongFormTranscriber(target, decoder, listen).transcribe(
        audio, AUTO, info)]
    assert drafting_during_detection == [True]
    assert info.language == "en"
    assert got == base_reference(audio)


@pytest.fixture(scope="module")
def german(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (scripts/test.sh installs it)")
    path = tmp_path_factory.mktemp("de") / "de.wav"
    subprocess.run(["espeak-ng", "-v", "de", "-w", str(path),
                    "Guten Morgen. Heute ist das Wetter schön, und wir gehen in den Park."],
                   check=True)
    return load_audio(path)


@pytest.mark.slow
def test_an_english_only_drafter_stands_down_when_the_audio_is_not_english(whisper, german):
    target, drafter = whisper("base"), whisper("tiny.en", threads=1, role="drafter")
    events = []
    decoder = AS2D(target, drafter, events.append)
    info = TranscriptionInfo(None, 0.0, german.duration)
    got = [s.tokens for s in LongFormTranscriber(target, decoder, events.append).transcribe(
        german, AUTO, info)]
    assert info.language == "de"
    assert got == [s.tokens for s in LongFormTranscriber(target).transcribe(german, AUTO)]
    assert any(isinstance(e, Note) and "English-only" in e.message for e in events)
    assert len(decoder.stream) == 0 and decoder.stream.finished
    assert not any(e.offered for e in events if isinstance(e, Verified))


@pytest.fixture(scope="module")
def english_then_german(tmp_path_factory):
    """25 s of a LibriVox reading, then 10 s of German (espeak-ng): two windows, whose
    languages differ (the second starts where the first's last whole segment ended). Ten
    seconds are German enough for the second window's detection; more would add windows
    that prove nothing more."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.skip("espeak-ng and sox are needed (scripts/test.sh installs them)")
    folder = tmp_path_factory.mktemp("mixed")
    librivox = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0"
    subprocess.run(["espeak-ng", "-v", "de", "-s", "150", "-w", str(folder / "de.wav"),
                    "Guten Morgen. Heute ist das Wetter schön, und wir gehen am Nachmittag in "
                    "den Park. Danach kaufen wir Brot, Käse und Äpfel auf dem Markt."],
                   check=True)
    subprocess.run(["sox", *(f"{librivox}{n}.wav" for n in (870, 880, 890, 920, 930)),
                    "|sox " + str(folder / "de.wav") + " -p rate 16000 channels 1",
                    str(folder / "mixed.wav")], check=True)
    return load_audio(folder / "mixed.wav")


@pytest.mark.slow
def test_multilingual_detects_each_windows_language_and_every_decoder_agrees(
        whisper, english_then_german):
    """--multilingual (faster-whisper's multilingual=True): the German window is decoded in
    German, its segments say so, and AS²D and SD commit target-only's tokens; tiny.en offers
    nothing in the German window (it cannot draft it) and drafts the English one, a
    multilingual drafter drafts both."""
    target = whisper("base", "int8", threads=2)
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    options = TranscribeOptions(multilingual=True)
    info = TranscriptionInfo(None, 0.0, english_then_german.duration)
    alone = list(LongFormTranscriber(target).transcribe(english_then_german, options, info))
    # Each window's language, in order; how many windows the German part takes depends on
    # where this CPU's kernels put the last timestamp, so only the order is pinned.
    languages = list(dict((s.seek, s.language) for s in alone).values())
    assert languages[0] == "en" and len(languages) >= 2 and set(languages[1:]) == {"de"}
    assert info.language == "en" and info.plan.multilingual
    german = " ".join(s.text for s in alone if s.language == "de")
    assert "Morgen" in german and " wir " in german  # not translated to English
    from as2d.writers import segment_dict

    assert segment_dict(alone[-1])["language"] == "de"  # json's segments say it
    from as2d.runtime.whisper.alignment import WordAligner

    aligner = WordAligner(target, "en")  # the graph as the loader declares it (made on first use)
    aligner.language = "de"  # what the run sets for the German window: aligned after <|de|>
    assert aligner.sot_sequence == target.tokenizer.sot_sequence("de", "transcribe")
    events = []
    run = LongFormTranscriber(target, AS2D(target, drafter, budget=Budget()), events.append)
    assert [s.tokens for s in run.transcribe(english_then_german, options)] == \
        [s.tokens for s in alone]
    offered = {}
    for e in events:
        if isinstance(e, Verified):
            offered[e.window] = offered.get(e.window, 0) + e.offered
    assert offered.get(0, 0) > 0 and all(offered.get(w, 0) == 0 for w in range(1, len(languages)))
    sd = LongFormTranscriber(target, SerialSD(target, drafter, budget=Budget(fixed=4)))
    assert [s.tokens for s in sd.transcribe(english_then_german, options)] == \
        [s.tokens for s in alone]
    # A multilingual drafter (None: each window's language) drafts each of its windows in
    # the language it hears there (as AS²D runs it, to the end of the file).
    from as2d.runtime.transcribe.drafter import DrafterWorker
    from as2d.runtime.whisper.features import LogMel

    base, stream = whisper("base", "int8", threads=1, role="drafter"), CandidateStream()
    mel = LogMel(english_then_german, base.dims.n_mels)
    DrafterWorker(base, target.tokenizer, mel, stream, None).start().join(120)
    drafted = target.tokenizer.decode(list(stream.tokens))
    assert stream.finished and "Dashwood" in drafted and "Morgen" in drafted


def test_multilingual_with_a_language_is_refused():
    with pytest.raises(ValueError, match="multilingual detects every window's language"):
        TranscribeOptions(multilingual=True, language="de")


# -- faults ------------------------------------------------------------------------------------
class _FailingDrafter:
    """A drafter model whose decoder breaks after a few steps (its sessions are real)."""

    def __init__(self, model, after: int) -> None:
        self._m, self._left = model, after
        self.name, self.threads = model.name, model.threads
        self.multilingual, self.tokenizer, self.dims = (model.multilingual, model.tokenizer,
                                                        model.dims)

    def encode(self, mel, run_options=None):
        return self._m.encode(mel, run_options)

    def decoder_state(self, ctx):
        state = self._m.decoder_state(ctx)
        original = state.forward

        def forward(tokens, logit_rows=None):
            self._left -= 1
            if self._left < 0:
                raise RuntimeError("simulated drafter failure")
            return original(tokens, logit_rows=logit_rows)

        state.forward = forward
        return state

    def release(self, state):
        state.__dict__.pop("forward", None)
        self._m.release(state)


@pytest.mark.slow
def test_a_dying_drafter_leaves_the_target_to_finish_alone_losslessly(whisper, lossless_clips,
                                                                     base_reference):
    """The drafter breaks in its decoder after 25 steps, most of the way through the sentence
    (its note names the failure: not an earlier one of the test's own): what is left is the
    target's alone, and the tokens are the reference's."""
    target, drafter = whisper("base"), whisper("tiny.en", threads=1)
    audio = lossless_clips[SENTENCE]
    reference = base_reference(audio)
    events = []
    decoder = AS2D(target, _FailingDrafter(drafter, after=25), events.append)
    assert [s.tokens for s in LongFormTranscriber(target, decoder, events.append).transcribe(
        audio, OPTS)] == reference
    assert any(isinstance(e, Note) and "drafter stopped" in e.message
               and "simulated drafter failure" in e.message for e in events)


@pytest.mark.slow
def test_stopping_mid_run_keeps_what_was_committed_and_ends_both_threads(whisper,
                                                                          lossless_clips):
    target, drafter = whisper("base"), whisper("tiny.en", threads=1)
    audio = lossless_clips[ENDGAME]  # one long window
    passes = []

    def stop_after_some(event):
        if isinstance(event, Verified):
            passes.append(event)
            if len(passes) == 12:
                transcriber.stop()

    transcriber = LongFormTranscriber(target, AS2D(target, drafter, stop_after_some),
                                      stop_after_some)
    segments = list(transcriber.transcribe(audio, OPTS))
    committed = [t for e in passes for t in e.committed if t < target.tokenizer.eot]
    kept = [t for s in segments for t in s.tokens if t < target.tokenizer.eot]
    assert kept and committed[: len(kept)] == kept
    assert segments[-1].partial
    assert not any(t.name == "as2d-drafter" and t.is_alive() for t in threading.enumerate())


def test_thread_count_does_not_change_a_single_logit(whisper, clips):
    # AS²D switches the target between sessions with different thread counts.
    from as2d.runtime.whisper.features import LogMel

    one, two = whisper("tiny.en", threads=1), whisper("tiny.en", threads=2)
    mel = LogMel(load_audio(clips[0].path)).window(0)
    ctx = one.encode(mel)
    assert all(np.array_equal(a, b) for a, b in zip(ctx.cross.values(),
                                                     two.encode(mel).cross.values()))
    s1, s2 = one.decoder_state(ctx), two.decoder_state(ctx)
    tokens = one.tokenizer.sot_sequence("en") + list(range(400, 420))
    a = np.concatenate([s1.forward(tokens[:3]), s1.forward(tokens[3:])])
    b = np.concatenate([s2.forward(tokens[:1]), s2.forward(tokens[1:12]), s2.forward(tokens[12:])])
    one.release(s1)
    two.release(s2)
    assert np.array_equal(a, b)
