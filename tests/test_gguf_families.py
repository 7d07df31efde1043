"""GGUF files of the other common small-model families — Qwen2/2.5, Qwen3, Phi-3, Gemma 2,
Gemma 3 — converted by as2d and checked against transformers' own forward pass.

No model hub is reachable here, so each family is a tiny random-weight transformers model of
the real architecture (its own modeling code: Qwen2's q/k/v biases, Qwen3's q/k norms, Phi-3's
fused qkv and gate_up with one key/value head per query head, Gemma 2's soft-capping, post-norms
and sliding window, Gemma 3's q/k norms and two RoPE bases), written as a GGUF the way
llama.cpp's converter writes one (its tensor names and metadata keys; Gemma's RMSNorm scales
stored as ``1 + w``; f32 tensors) with a real tokenizer of the family's kind (byte-level BPE
for Qwen, SentencePiece-style BPE with byte fallback for Gemma and Phi-3) and its chat
template. Then, per family:

* transformers reads the GGUF back (``from_pretrained(gguf_file=...)``, its independent GGUF
  reader) and gives the same logits as the model written: the file follows the conventions;
* the file goes through ``as2d ask --llm PATH.gguf``'s install path; the converted fp32 graph's
  logits equal transformers' forward to float32 rounding, past Gemma's sliding window;
* the int8 bundle passes the runtime's row check, and speculative generation with candidates
  (right and wrong ones) is token-identical to plain greedy;
* the GGUF's ``tokenizer.chat_template`` is the bundle's and renders (sandboxed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import LazyModule

torch = LazyModule("torch")
transformers = LazyModule("transformers")
gguf = LazyModule("gguf")
# Each family is made with torch and transformers (seconds to import and to build): not in the
# fast lane.
pytestmark = pytest.mark.slow

TEXTS = [
    "Marianne was rather ashamed of what she had said. Elinor looked at her sister and smiled.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "The family of Dashwood had long been settled in Sussex. Their estate was large, and "
    "their residence was at Norland Park, in the centre of their property.",
    "How many eggs did they buy? They bought 12 eggs for $3.50 at 10:45 on Tuesday.",
    "Who had leisure to consider how much he could do for them? Mr. John Dashwood did.",
]
PROMPT = ("Marianne was rather ashamed of what she had said. It was the age of wisdom, "
          "it was the epoch of belief.")

# Qwen2's pre-tokenizer expression (as its tokenizer.json splits before byte-level BPE).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Qwen3's switch: with enable_thinking false the assistant turn opens with an empty <think>.
QWEN3_CHAT = CHATML.replace(
    "{{ '<|im_start|>assistant\n' }}{% endif %}",
    "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and enable_thinking is "
    "false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}")
GEMMA_CHAT = ("{{ bos_token }}{% for message in messages %}<start_of_turn>"
              "{{ 'model' if message['role'] == 'assistant' else 'user' }}\n"
              "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
PHI3_CHAT = ("{% for message in messages %}{{ '<|' + message['role'] + '|>' + '\n' + "
             "message['content'] + '<|end|>' + '\n' }}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")

# GGUF token types
NORMAL, CONTROL, BYTE = 1, 3, 6


# -- tokenizers ------------------------------------------------------------------------------
def bpe_vocab(specials: list[str]) -> dict:
    """A byte-level BPE trained on TEXTS, split as Qwen2 splits; specials appended last (as
    Qwen's <|endoftext|>, <|im_start|>, <|im_end|> follow its merges)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(
        vocab_size=360, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    model = json.loads(tok.to_str())["model"]
    tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [NORMAL] * len(tokens) + [CONTROL] * len(specials)
    return dict(model="gpt2", pre="qwen2", tokens=tokens + specials, types=types,
                merges=merges, scores=None)


def spm_vocab(specials: list[str]) -> dict:
    """A SentencePiece-style BPE vocabulary trained on TEXTS: control pieces first, the 256
    byte-fallback pieces ``<0xNN>``, then pieces with ``▁`` for spaces, each scored by the
    rank of the merge that makes it (SentencePiece's BPE merges the best-scored pair first)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=320, show_progress=False))
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
              for m in model["merges"]]
    rank = {a + b: i for i, (a, b) in enumerate(merges)}
    pieces = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    chars = [p for p in pieces if p not in rank]
    normal = sorted(rank, key=rank.get) + chars
    scores = ([0.0] * (len(specials) + 256) + [-float(rank[p]) for p in sorted(rank, key=rank.get)]
              + [-float(len(rank) + i) for i in range(len(chars))])
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + normal
    types = [CONTROL] * len(specials) + [BYTE] * 256 + [NORMAL] * len(normal)
    return dict(model="llama", pre=None, tokens=tokens, types=types, merges=None,
                scores=scores)


# -- the families ----------------------------------------------------------------------------
def _qwen2():
    cfg = transformers.Qwen2Config(
        vocab_size=1024, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=True)
    return cfg, bpe_vocab(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]), CHATML


def _qwen3():
    cfg = transformers.Qwen3Config(
        vocab_size=1024, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    return cfg, bpe_vocab(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]), QWEN3_CHAT


def _phi3():
    cfg = transformers.Phi3Config(
        vocab_size=1024, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        original_max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        sliding_window=None, pad_token_id=None, bos_token_id=1, eos_token_id=2)
    specials = ["<unk>", "<s>", "</s>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"]
    return cfg, spm_vocab(specials), PHI3_CHAT


def _phi3_longrope():
    """Phi-3's LongRoPE (the 128k models): per-frequency factors and a cos/sin scale."""
    cfg, vocab, template = _phi3()
    half = cfg.hidden_size // cfg.num_attention_heads // 2
    cfg.max_position_embeddings, cfg.original_max_position_embeddings = 1024, 256
    cfg.rope_parameters = {"rope_type": "longrope", "rope_theta": 10000.0,
                           "partial_rotary_factor": 1.0,
                           "short_factor": [1.0 + 0.5 * i for i in range(half)],
                           "long_factor": [4.0 + i for i in range(half)]}
    return cfg, vocab, template


def _gemma2():
    cfg = transformers.Gemma2Config(
        vocab_size=1024, hidden_size=64, intermediate_size=112, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
        max_position_embeddings=256, sliding_window=6, attn_logit_softcapping=4.0,
        final_logit_softcapping=10.0, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    return cfg, spm_vocab(["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                           "<end_of_turn>"]), GEMMA_CHAT


def _gemma3():
    cfg = transformers.Gemma3TextConfig(
        vocab_size=1024, hidden_size=64, intermediate_size=112, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
        max_position_embeddings=256, sliding_window=6, pad_token_id=0, bos_token_id=2,
        eos_token_id=1)
    return cfg, spm_vocab(["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                           "<end_of_turn>"]), GEMMA_CHAT


FAMILIES = {"qwen2": _qwen2, "qwen3": _qwen3, "phi3": _phi3, "phi3-longrope": _phi3_longrope,
            "gemma2": _gemma2, "gemma3": _gemma3}
GEMMA_NORM_PLUS_ONE = ("gemma2", "gemma3")


def _tensor_name(arch: str, hf: str) -> str | None:
    """llama.cpp's GGUF name of a transformers parameter (convert_hf_to_gguf's mapping)."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.{i}.{module}.{name}.{kind}
    i, rest = parts[2], ".".join(parts[3:])
    gemma = arch in GEMMA_NORM_PLUS_ONE
    names = {"input_layernorm": "attn_norm",
             "post_attention_layernorm": "post_attention_norm" if gemma else "ffn_norm",
             "pre_feedforward_layernorm": "ffn_norm",
             "post_feedforward_layernorm": "post_ffw_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.qkv_proj": "attn_qkv", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    module, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{names[module]}.{kind}"


def make_family(name: str, folder: Path):
    """(the tiny transformers model, the GGUF path, its chat template) for one family."""
    cfg, vocab, template = FAMILIES[name]()
    arch = name.split("-")[0]
    cfg.vocab_size = len(vocab["tokens"])
    torch.manual_seed(sum(map(ord, name)))
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model.eval()
    gemma = arch in GEMMA_NORM_PLUS_ONE
    with torch.no_grad():  # weights large enough that every part changes the logits
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (1.0 if "embed" in name else p.shape[-1] ** -0.5))
    path = folder / f"tiny-{name}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if arch in ("qwen3", "gemma2", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    rope = cfg.rope_parameters
    w.add_rope_freq_base((rope["full_attention"] if arch == "gemma3" else rope)["rope_theta"])
    if arch == "phi3":
        w.add_rope_dimension_count(head_dim)
    if rope.get("rope_type") == "longrope":  # as convert_hf_to_gguf writes Phi-3 128k
        scale = cfg.max_position_embeddings / cfg.original_max_position_embeddings
        w.add_rope_scaling_attn_factors(
            math.sqrt(1 + math.log(scale) / math.log(cfg.original_max_position_embeddings)))
        w.add_rope_scaling_orig_ctx_len(cfg.original_max_position_embeddings)
        w.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], np.float32))
        w.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], np.float32))
    if gemma:
        w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    tokens = vocab["tokens"]
    w.add_tokenizer_model(vocab["model"])
    if vocab["pre"]:
        w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(tokens)
    w.add_token_types(vocab["types"])
    if vocab["merges"]:
        w.add_token_merges(vocab["merges"])
    if vocab["scores"]:
        w.add_token_scores(vocab["scores"])
    idx = {t: i for i, t in enumerate(tokens)}
    if arch.startswith("qwen"):
        w.add_bos_token_id(idx["<|endoftext|>"])
        w.add_eos_token_id(idx["<|im_end|>"])
        w.add_add_bos_token(False)
    elif arch == "phi3":
        w.add_bos_token_id(idx["<s>"])
        w.add_eos_token_id(idx["<|endoftext|>"])
        w.add_unk_token_id(idx["<unk>"])
        w.add_add_bos_token(False)
        w.add_add_space_prefix(True)
    else:
        w.add_bos_token_id(idx["<bos>"])
        w.add_eos_token_id(idx["<eos>"])
        w.add_unk_token_id(idx["<unk>"])
        w.add_pad_token_id(idx["<pad>"])
        w.add_add_bos_token(True)
        w.add_add_space_prefix(False)
    w.add_chat_template(template)
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        gname = _tensor_name(arch, name)
        data = p.detach().float().numpy()
        if gemma and gname.endswith("norm.weight"):
            data = data + 1.0  # Gemma multiplies by 1 + w; llama.cpp's converter stores that
        w.add_tensor(gname, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, path, template


def hf_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy().astype(np.float64)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """One family: its transformers model, GGUF file, and fp32/int8 bundles (installed the way
    ``as2d ask --llm PATH.gguf`` installs them)."""
    from as2d.models.gguf_install import install_gguf

    name = request.param
    folder = tmp_path_factory.mktemp(name)
    model, path, template = make_family(name, folder)
    arch = name.split("-")[0]
    root = folder / "models"
    bundles = {p: install_gguf(str(path), p, root).path for p in ("fp32", "int8")}
    return dict(name=name, arch=arch, model=model, gguf=path, template=template,
                bundles=bundles)


def test_transformers_reads_the_gguf_as_written(family):
    """transformers' own GGUF reader (tensor names, Gemma's 1 + w, Phi-3's fused tensors)
    reads the file back into the same weights: the file is laid out as llama.cpp's converter
    lays it out, so what as2d converts is what a llama.cpp user has."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    model = family["model"]
    back = transformers.AutoModelForCausalLM.from_config(model.config,
                                                         attn_implementation="eager")
    parsed = load_gguf_checkpoint(str(family["gguf"]), return_tensors=True, model_to_load=back)
    state = {k: torch.as_tensor(np.asarray(v)) for k, v in parsed["tensors"].items()}
    missing, unexpected = back.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if missing:  # tied
        back.tie_weights()
    back.eval()
    ids = list(range(5, 25))
    np.testing.assert_allclose(hf_logits(back, ids), hf_logits(model, ids), rtol=0, atol=1e-4)


def test_logits_match_transformers(family):
    """The converted fp32 graph against transformers' forward on the same weights, over a
    prompt longer than Gemma's sliding window: max |Δlogit| ≤ 1e-4 of the logits' range and
    the same top-1 wherever it is not a near-tie (measured: 1e-7 to 3e-7 of the range). int8
    (per-row activations and weights): the same top-1 at most positions (measured 0.93-1.00).
    Taking out any one family part (a soft cap, the sliding window, a RoPE base, the biases,
    the q/k norms) moves the logits by 2-275% of the range: each one is checked."""
    from as2d.runtime.llm.lm import CausalLM

    lm = CausalLM(family["bundles"]["fp32"])
    ids = lm.tokenizer.encode(PROMPT)
    assert len(ids) > 12
    want = hf_logits(family["model"], ids)
    got = lm.state().forward(ids).astype(np.float64)
    span = want.max() - want.min()
    err = np.abs(got - want).max()
    print(f"{family['name']}: {len(ids)} tokens, max |Δ| {err:.2e} over a range of {span:.1f}")
    assert err <= 1e-4 * span
    # The same top-1 wherever it is not a near-tie (Gemma 2's capped logits crowd the top).
    top2 = np.sort(want, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4 * span
    assert clear.mean() > 0.5
    assert (got.argmax(-1) == want.argmax(-1))[clear].all()
    got8 = CausalLM(family["bundles"]["int8"]).state().forward(ids)
    agree = float((got8.argmax(-1) == want.argmax(-1)).mean())
    print(f"{family['name']}: int8 top-1 agreement {agree:.2f}")
    assert agree >= 0.6


def test_speculation_is_token_identical_to_greedy(family):
    """Candidates taken from a copy of the greedy answer with every fifth token wrong: the
    speculative answer equals plain greedy token for token, with fewer passes (both
    precisions; the int8 bundle also passes the runtime's load-time row check)."""
    from as2d.runtime.ask.generate import SpeculativeGenerator, greedy_generate
    from as2d.runtime.llm.lm import CausalLM
    from as2d.runtime.speculative.lookup import Lookup, LookupSource

    for precision in ("fp32", "int8"):
        lm = CausalLM(family["bundles"][precision], threads=2)
        if precision == "int8":
            assert lm.lossless
        ids = lm.tokenizer.encode(PROMPT)
        plain = greedy_generate(lm, ids, 32, stop_ids=())
        assert len(plain) == 32
        noisy = [(t + 1) % lm.config.vocab_size if k % 5 == 4 else t
                 for k, t in enumerate(plain)]
        source = LookupSource([Lookup("guess", ids + noisy)], {1: 0.9, 2: 0.9, 3: 0.9})
        spec = SpeculativeGenerator(lm).generate(ids, 32, (), candidates=source)
        print(f"{family['name']} {precision}: {len(spec.tokens)} tokens in {spec.passes} "
              "passes")
        assert spec.tokens == plain
        assert spec.passes < len(plain) - 1


def test_chat_template_and_stops_come_from_the_gguf(family):
    """The bundle keeps the GGUF's ``tokenizer.chat_template`` (checked sandboxed at load), so
    the answering prompt is the instruct style, rendered from it (Qwen3's with its reasoning
    switch off); the family's end-of-turn piece stops text."""
    from as2d.runtime.ask.answer import Answerer, AskOptions
    from as2d.runtime.llm.lm import CausalLM

    lm = CausalLM(family["bundles"]["int8"])
    assert lm.chat_template == family["template"]
    builder = Answerer(lm, None, AskOptions()).builder
    assert builder.style == "instruct"
    pieces = builder.render("the transcript", "Who?", False)
    assert [p for p, literal in pieces if literal] == ["the transcript", "Who?"]
    if family["arch"] == "qwen3":  # a reasoning model answers at once, not after <think>
        assert pieces[-1][0].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    manifest = json.loads((family["bundles"]["int8"] / "manifest.json").read_text())
    assert manifest["config"]["architecture"] == family["arch"]
    end = {"qwen2": "<|im_end|>", "qwen3": "<|im_end|>", "phi3": "<|end|>",
           "gemma2": "<end_of_turn>", "gemma3": "<end_of_turn>"}[family["arch"]]
    assert lm.tokenizer.id(end) in lm.stop_ids


def test_tokenizer_matches_transformers(family):
    """The tokenizer rebuilt from the GGUF's vocabulary encodes as transformers' GGUF
    tokenizer does (byte-level BPE with Qwen2's split; SentencePiece BPE with byte fallback,
    Phi-3's dummy space prefix)."""
    from as2d.runtime.llm.lm import CausalLM

    ref = transformers.AutoTokenizer.from_pretrained(str(family["gguf"].parent),
                                                     gguf_file=family["gguf"].name)
    tok = CausalLM(family["bundles"]["int8"]).tokenizer
    for text in (PROMPT, "They'll've paid £3.50 (for 12 eggs) at 10:45.", "naïve café — ok"):
        assert tok.encode(text, bos=False) == ref.encode(text, add_special_tokens=False), text


@pytest.mark.parametrize("case", ["partial_rotary", "moe", "gemma1", "yarn"])
def test_variants_not_handled_are_one_line_errors(case, tmp_path):
    """What the converter does not build is refused before any conversion, in one line that
    names it: partial rotary embeddings, mixtures of experts, a family it does not know,
    YaRN RoPE scaling."""
    from as2d.models.bundle import BundleError
    from as2d.models.gguf_install import install_gguf

    arch = {"gemma1": "gemma", "moe": "qwen2", "yarn": "qwen2"}.get(case, "phi3")
    path = tmp_path / f"{case}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_rope_dimension_count(8 if case == "partial_rotary" else 16)
    if case == "moe":
        w.add_expert_count(4)
    if case == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
    w.add_tensor("output_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    words = {"yarn": "'yarn'", "partial_rotary": "partial rotary",
             "moe": "mixture-of-experts", "gemma1": "Gemma (1)"}[case]
    with pytest.raises(BundleError) as exc:
        install_gguf(str(path), "int8", tmp_path / "models")
    msg = str(exc.value)
    print(msg)
    assert words in msg and "\n" not in msg


def test_ask_end_to_end_with_a_gemma2_gguf(tmp_path, models_root):
    """`as2d ask FILE Q --llm tiny-gemma2.gguf`: a SentencePiece family with its own chat
    markup goes through the whole command (conversion, the GGUF's template rendered for the
    instruct prompt, speculative generation, the answer's checks) to a JSON answer. The random
    weights say nothing sensible, so only the path is checked, not the words (on a 1-s clip;
    the command in this process: the same app, and the interpreter's start is not what is
    checked)."""
    from tests.helpers import cli

    _, path, _ = make_family("gemma2", tmp_path)
    wav = Path("/usr/share/pocketsphinx/test/data/cards/001.wav")
    r = cli("ask", wav, "Who had leisure?", "--llm", path, "--models-dir", models_root, "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    answer = doc.get("answer") if "answer" in doc else doc["answers"][0]["answer"]
    print(answer, doc.get("method"))
    assert isinstance(answer, str) and answer.strip()


def test_llama_sentencepiece_gets_the_dummy_prefix_by_default(tmp_path):
    """A Llama-2-style SentencePiece GGUF (TinyLlama) without ``add_space_prefix`` takes
    llama.cpp's default, the dummy prefix, and encodes ordinary text as transformers' GGUF
    tokenizer does. (Both follow llama.cpp where transformers does not: a prefix after every
    special piece, and one before text that already starts with a space.)"""
    from as2d.models.gguf_reader import GGUFModel
    from as2d.models.gguf_tokenizer import build_tokenizer

    vocab = spm_vocab(["<unk>", "<s>", "</s>"])
    path = tmp_path / "llama-spm.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_scores(vocab["scores"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("output_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tok = build_tokenizer(GGUFModel(path))
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in (PROMPT, "They'll've paid £3.50 (for 12 eggs) at 10:45."):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert tok.id_to_token(ids[0]).startswith("▁")
