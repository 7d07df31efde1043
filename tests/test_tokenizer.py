"""The tokenizer and the logit rules' token sets are Whisper's own, read from each model.

base (multilingual) and tiny.en have different vocabularies and special-token ids; every id
comes from the model's tokenizer.json, and the sets Whisper suppresses must equal the ones the
model's own generation config lists (computed by Whisper's reference tokenizer).
"""

from __future__ import annotations

import pytest
from helpers import greedy_window

MODELS = ["base", "tiny.en"]


@pytest.mark.parametrize("name,prompt,eot", [
    ("base", [50258, 50259, 50359, 50363], 50257),
    ("tiny.en", [50257, 50362], 50256),
])
def test_prompts_and_end_of_text_come_from_the_vocabulary(name, prompt, eot, whisper):
    tk = whisper(name, "int8").tokenizer
    got = tk.sot_sequence("en" if tk.multilingual else None) + [tk.no_timestamps]
    assert got == prompt
    assert tk.eot == eot
    assert tk.timestamp_begin == tk.no_timestamps + 1


@pytest.mark.parametrize("name", MODELS)
def test_suppressed_tokens_equal_the_models_generation_config(name, whisper):
    model = whisper(name, "int8")
    tk, cfg = model.tokenizer, model.config
    assert sorted(tk.suppress_tokens()) == sorted(cfg["suppress_ids"])
    # suppress-blank at the first position: the space token and end-of-text.
    assert sorted(tk.encode(" ") + [tk.eot]) == sorted(cfg["suppress_ids_begin"])


def test_multilingual_vocabulary_knows_99_languages(whisper):
    tk = whisper("base", "int8").tokenizer
    assert tk.multilingual and len(tk.languages) == 99
    assert tk.language_token("English") == tk.language_token("en") == 50259
    with pytest.raises(ValueError):
        tk.language_token("yue")  # a later Whisper language, not in base's vocabulary


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_encode_reproduces_the_tokens_the_model_emits(name, whisper, clips):
    """Re-encoding decoded text gives the model's own ids (canonical byte-pair merges), so
    drafted words re-tokenised for the target can match what the target would emit. Two real
    windows: a LibriVox sentence (7 s) and two_cities' first 30 s (long sentences, commas); the
    other LibriVox clips are more sentences of the same reading."""
    from as2d.runtime.audio import load_audio
    from as2d.runtime.whisper.features import LogMel

    model = whisper(name, "int8")
    tk = model.tokenizer
    picked = [c for c in clips if c.name in ("sense_and_sensibility_01_austen_64kb-0870.wav",
                                              "two_cities.wav")]
    assert picked
    for clip in picked:
        tokens = greedy_window(model, LogMel(load_audio(clip.path), 80).window(0), False)
        text = tk.decode(tokens)
        assert tk.encode(text) == tokens, f"{clip.name}: {text!r}"


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("text", [" the cat sat on the mat.", " Ça va? Très bien.",
                                  " 1,234.5 km/h — “quoted”", " 東京", "  two  spaces"])
def test_decode_inverts_encode(name, text, whisper):
    tk = whisper(name, "int8").tokenizer
    ids = tk.encode(text)
    assert all(0 <= t < tk.eot for t in ids)
    assert tk.decode(ids) == text
    assert tk.decode_bytes(ids) == text.encode("utf-8")


@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_the_vocabulary_reader_answers_as_the_tokenizers_library_does(name, bundle):
    """Start-up reads only the vocabulary, special tokens and pre-tokenizer of tokenizer.json;
    every answer the tokenizer uses must be what a full ``tokenizers`` tokenizer gives."""
    import random

    from tokenizers import Tokenizer

    from as2d.runtime.whisper.tokenizer import WhisperTokenizer, _piece_bytes, _Vocabulary

    path = bundle(name, "int8") / "tokenizer.json"
    full = Tokenizer.from_file(str(path))
    ours = WhisperTokenizer(path, 51865 if name == "base" else 51864).tok
    assert isinstance(ours, _Vocabulary)
    eot = full.token_to_id("<|endoftext|>")
    rng = random.Random(0)
    single = [i for i in range(eot) if len(_piece_bytes(full.id_to_token(i))) == 1]
    for _ in range(3000):  # any ids, and single bytes that split UTF-8 characters
        ids = [rng.randrange(eot) for _ in range(rng.randint(1, 10))]
        assert ours.decode(ids) == full.decode(ids, skip_special_tokens=False)
        ids = [rng.choice(single) for _ in range(rng.randint(1, 6))]
        assert ours.decode(ids) == full.decode(ids, skip_special_tokens=False)
    for text in (" Hello world, it's 2024! Ça va? 日本語  end  ", "Don't you'll  ♪♪ (music)\n\n",
                 "émoji 🎉 -- <<>> 「」\t tabs"):
        assert ours.pre_tokenizer.pre_tokenize_str(text) == full.pre_tokenizer.pre_tokenize_str(
            text)
    for tid in [0, 1, 500, *range(eot - 3, full.get_vocab_size())]:
        assert ours.id_to_token(tid) == full.id_to_token(tid)
        assert ours.token_to_id(full.id_to_token(tid)) == tid
    assert ours.get_vocab() == full.get_vocab(with_added_tokens=False)
    assert ours.get_vocab_size() == full.get_vocab_size()
