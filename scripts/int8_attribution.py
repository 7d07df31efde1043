#!/usr/bin/env python
"""Where does as2d's int8 Whisper lose accuracy against fp32: encoder or decoder, which layers?

Analysis (issue 27, point 2): nothing here changes a bundle. From the same Whisper base
weights (the CTranslate2 folder of the ``models`` extra) it builds decoder variants (``VARIANTS``)
in which some int8 linears are left in fp32, or whose int8 output projection has each row's
top-k logits recomputed from a 16- or 32-bit copy of the embedding (``refine``; bundles now get
the top 8 from fp16 and read their input embedding from that copy: ``NEW``; ``OLD`` is the
decoder before it), and compares them with the fp32 decoder on the fp32 encoder's output:

- teacher forcing: every window of every real clip is decoded greedily by fp32 encoder + fp32
  decoder (no timestamps); each variant is fed those tokens; reported are the positions whose
  argmax differs, the mean KL divergence from fp32 (nats per token), the mean log-probability
  of the tokens, and whether the variant's graph is row-exact (:func:`as2d.runtime.rows.probe`,
  the rule that keeps AS²D lossless);
- long form (``--long-form``): the CLI's target-only transcription of every clip with each
  encoder (onnxruntime int8 and fp32, OpenVINO bf16) × decoder (as2d int8, refine, fp32), and
  the words that differ from fp32 encoder + fp32 decoder.

    python scripts/int8_attribution.py                  # base, the default variants
    python scripts/int8_attribution.py --long-form      # and the transcripts
    python scripts/int8_attribution.py --speed 300      # load times (OLD, NEW) and pass
                                                        # times (NEW beside OLD, fp32 attention
                                                        # to the audio, ...)
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

# name → (linears left in fp32 by name fragment, top-k logits refined, the refine table's
# dtype, input embedding read from that table rather than the int8 copy[, int8 attention to the
# audio: default yes, as bundles have it since converter 10])
OLD = "int8 (as2d ≤ 0.x)"
NEW = "int8 + top-8 fp16 (as2d)"
FP32_AUDIO = "int8 + top-8 fp16, fp32 attention to the audio (converter 9)"
VARIANTS = {
    FP32_AUDIO: ((), 8, "float16", True, False),
    OLD: ((), 0, "float16", False),
    "fp32 output projection": (("decoder.projection",), 0, "float16", False),
    "fp32 self-attention": ((".qkv", ".out"), 0, "float16", False),
    "fp32 cross-attention": ((".cross_q", ".cross_out"), 0, "float16", False),
    "fp32 feed-forward": ((".fc1", ".fc2"), 0, "float16", False),
    "top-4 fp16 refine": ((), 4, "float16", False),
    "top-8 fp16 refine": ((), 8, "float16", False),
    "top-16 fp16 refine": ((), 16, "float16", False),
    "top-8 fp32 refine": ((), 8, "float32", False),
    NEW: ((), 8, "float16", True),
    "refined + fp32 self-attention": ((".qkv", ".out"), 8, "float16", True),
    "refined + fp32 cross-attention": ((".cross_q", ".cross_out"), 8, "float16", True),
    "refined + fp32 feed-forward": ((".fc1", ".fc2"), 8, "float16", True),
}


def build_variant(weights, fp32: tuple[str, ...], refine: int, dtype: str, embed: bool,
                  *rest) -> Path:
    """as2d's int8 decoder with the linears named by ``fp32`` in fp32, each row's top
    ``refine`` logits recomputed from a ``dtype`` copy of the embedding (0: none), and the input
    embedding read from that copy (``embed``) or from the int8 one: see
    :func:`as2d.models.whisper_onnx.build_decoder`."""
    from as2d.models import graph as graph_mod
    from as2d.models.graph import save_model
    from as2d.models.whisper_onnx import build_decoder

    *cross, dest = rest  # the optional int8-attention flag, then where to write
    original = graph_mod.Graph.linear

    def linear(self, x, weight, bias, prefix, quant="fp32"):
        if any(f in prefix for f in fp32):
            quant = "fp32"
        return original(self, x, weight, bias, prefix, quant)

    graph_mod.Graph.linear = linear
    try:
        graph, _ = build_decoder(weights, "int8", exact_rows=True, refine_top=refine,
                                 refine_dtype=np.dtype(dtype), embed_refined=embed,
                                 cross_int8=cross[0] if cross else None)
    finally:
        graph_mod.Graph.linear = original
    save_model(graph, dest)
    return dest


def use_decoder(model, session) -> None:
    from as2d.runtime.whisper.cross import CrossForm

    model.decoder = session
    model._outputs = [o.name for o in session.get_outputs()]
    model.cross_form = CrossForm.of(session)  # the window as this graph reads it


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64) - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def speed(weights, work: Path, model, threads: int, repeats: int) -> None:
    """Session creation times of OLD and NEW (weights in the graph or beside it), and decoder
    pass times of OLD, NEW and NEW with some linears in fp32, interleaved round by round (a
    shared machine's load hits all alike): one token after a 60-token past (a greedy step), and
    passes of 4 and 8 tokens (verification); wall-time medians and minima of ``repeats``
    rounds, and the process's CPU time (less sensitive to other processes on a busy machine)."""
    import statistics

    from onnx import load_model

    from as2d.models.graph import save_model
    from as2d.runtime.audio import load_audio
    from as2d.runtime.sessions import make_session
    from as2d.runtime.whisper.cross import CrossForm, CrossQuantiser
    from as2d.runtime.whisper.features import LogMel
    from as2d.runtime.whisper.model import AudioContext

    paths = {}
    for name in (OLD, NEW):
        dest = build_variant(weights, *VARIANTS[name], work / f"speed-{len(paths)}.onnx")
        paths[name] = dest
        ext = work / f"ext-{len(paths)}" / dest.name
        ext.parent.mkdir()
        save_model(load_model(str(dest)), ext, external_data=True)
        paths[f"{name}, external data"] = ext
    loads: dict[str, list[float]] = {n: [] for n in paths}
    for _ in range(5):
        for name, path in paths.items():
            t0 = time.perf_counter()
            make_session(path, threads)
            loads[name].append(time.perf_counter() - t0)
    for name, v in loads.items():
        print(f"  session creation {name:36} {statistics.median(v):.3f} s "
              f"({size_of(paths[name]) / 1e6:.0f} MB)")
    projection_cost(weights, repeats)
    sessions = {n: make_session(paths[n], threads) for n in (OLD, NEW)}
    for i, n in enumerate((FP32_AUDIO, "refined + fp32 self-attention",
                           "refined + fp32 feed-forward")):
        sessions[n] = make_session(build_variant(weights, *VARIANTS[n], work / f"s{i}.onnx"),
                                   threads)
    rng = np.random.default_rng(0)
    mel = LogMel(load_audio(ROOT / "samples" / "sense_and_sensibility.wav")).window(0)
    raw, quantise = model.encoder.run(mel), CrossQuantiser(threads)
    tok = model.tokenizer
    past = (tok.sot_sequence("en") + list(rng.integers(400, 20000, 60)))[:60]
    steps = {1: list(rng.integers(400, 20000, 1)), 4: list(rng.integers(400, 20000, 4)),
             8: list(rng.integers(400, 20000, 8))}
    times: dict[tuple[str, int], list[float]] = {(n, k): [] for n in sessions for k in steps}
    cpu: dict[tuple[str, int], list[float]] = {(n, k): [] for n in sessions for k in steps}
    states = {}
    for n, sess in sessions.items():
        use_decoder(model, sess)
        states[n] = model.decoder_state(AudioContext(quantise(raw, CrossForm.of(sess)),
                                                     mel.shape[-1]))
        states[n].forward(past)
    for _ in range(repeats):
        for n, sess in sessions.items():
            use_decoder(model, sess)
            st = states[n]
            for k, toks in steps.items():
                t0, c0 = time.perf_counter(), time.process_time()
                st.forward(toks)
                times[(n, k)].append(time.perf_counter() - t0)
                cpu[(n, k)].append(time.process_time() - c0)
                st.truncate(len(past))
    for k in steps:
        print(f"  pass of {k} token(s) after 60 past tokens (wall median / min, CPU median):")
        for n in sessions:
            w, c = times[(n, k)], cpu[(n, k)]
            print(f"    {n:36} {1000 * statistics.median(w):6.2f} / {1000 * min(w):6.2f} ms, "
                  f"{1000 * statistics.median(c):6.2f} ms")


def projection_cost(weights, repeats: int) -> None:
    """The output projection alone, int8 as before and with the refined top 8, and the input
    embedding read from the int8 or the fp16 copy, on one thread (CPU time of the calling
    thread, which runs the whole graph: robust on a busy machine), for 1 and 8 rows."""
    import statistics

    import onnxruntime as ort
    from onnx import TensorProto

    from as2d.models.graph import Graph
    from as2d.models.whisper_onnx import _embed, _logits

    emb = weights.f32("decoder/embeddings/weight")
    sessions = {}
    for k in (0, 8):
        g = Graph("projection")
        x = g.input("x", TensorProto.FLOAT, ["R", emb.shape[1]])
        g.output(_logits(g, x, emb, "int8", k), "logits", TensorProto.FLOAT, ["R", emb.shape[0]])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sessions[k] = ort.InferenceSession(g.model().SerializeToString(), so,
                                           providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for rows in (1, 8):
        x = rng.standard_normal((rows, emb.shape[1])).astype(np.float32)
        cpu: dict[int, list[float]] = {0: [], 8: []}
        for _ in range(repeats):
            for k, sess in sessions.items():
                c0 = time.thread_time()
                sess.run(None, {"x": x})
                cpu[k].append(time.thread_time() - c0)
        print(f"  output projection, {rows} row(s), 1 thread, CPU median / min: " + ", ".join(
            f"{'int8' if k == 0 else 'int8 + top-8 fp16'} {1000 * statistics.median(v):.3f} / "
            f"{1000 * min(v):.3f} ms" for k, v in cpu.items()))
    embeds = {}
    for refined in (False, True):
        g = Graph("embedding")
        t = g.input("tokens", TensorProto.INT64, ["T"])
        g.output(_embed(g, emb, t, "int8", refined), "x", TensorProto.FLOAT, ["T", emb.shape[1]])
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        embeds[refined] = ort.InferenceSession(g.model().SerializeToString(), so,
                                               providers=["CPUExecutionProvider"])
    for rows in (1, 8):
        cpu = {False: [], True: []}
        for _ in range(repeats):
            toks = rng.integers(0, emb.shape[0], rows)
            for k, sess in embeds.items():
                c0 = time.thread_time()
                sess.run(None, {"tokens": toks})
                cpu[k].append(time.thread_time() - c0)
        print(f"  input embedding, {rows} token(s), 1 thread, CPU median / min: " + ", ".join(
            f"{'fp16 copy' if k else 'int8 copy'} {1000 * statistics.median(v):.3f} / "
            f"{1000 * min(v):.3f} ms" for k, v in cpu.items()))


def size_of(path: Path) -> int:
    """The graph's bytes with its external data file, if any."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.is_file() else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long-form", action="store_true", help="also compare transcripts")
    ap.add_argument("--speed", type=int, default=0, metavar="ROUNDS",
                    help="only time OLD against NEW (session creation, decoder passes)")
    ap.add_argument("--only-bundle", action="store_true",
                    help="teacher-force only the bundle's decoders (before and now), not the "
                         "other variants: to compare int8 kernels quickly (AS2D_INT8_EXACT=0 "
                         "runs the graphs as they are where this CPU's u8s8 kernel saturates)")
    args = ap.parse_args()

    from bench_e2e import ct2_base_folder
    from conftest import real_clips
    from wer import reference_clips

    from as2d.models.bundle import models_dir
    from as2d.models.ct2 import load_ct2
    from as2d.models.install import ensure_encoder_f16w, ensure_encoder_fp32, install
    from as2d.runtime.audio import load_audio
    from as2d.runtime.rows import probe
    from as2d.runtime.sessions import make_session
    from as2d.runtime.whisper.cross import CrossForm, CrossQuantiser
    from as2d.runtime.whisper.encoders import OpenVINOEncoder, OrtEncoder, openvino_available
    from as2d.runtime.whisper.features import LogMel
    from as2d.runtime.whisper.model import AudioContext, WhisperModel

    t = args.threads
    b8, b32 = install("base", "int8", models_dir()).path, install("base", "fp32", models_dir()).path
    work = Path(tempfile.mkdtemp(prefix="as2d-int8-"))
    weights = load_ct2(ct2_base_folder(work / "ct2") / "model.bin")
    if args.speed:
        return speed(weights, work, WhisperModel(b8, threads=t, encoder="onnxruntime"), t,
                     args.speed)
    from as2d.runtime.int8_exact import mode

    print(f"int8 products: {mode()} (as2d.runtime.int8_exact)")
    variants = {n: v for n, v in VARIANTS.items() if not args.only_bundle or n in (OLD, NEW)}
    sessions = {name: make_session(build_variant(weights, *spec, work / f"v{i}.onnx"), t)
                for i, (name, spec) in enumerate(variants.items())}
    m8 = WhisperModel(b8, threads=t, encoder="onnxruntime")
    m32 = WhisperModel(b32, threads=t, encoder="onnxruntime")
    own = m8.decoder  # the bundle's own decoder (whichever converter made it)
    enc = {"onnxruntime int8": OrtEncoder(b8 / "encoder.onnx", t, precision="int8"),
           "onnxruntime fp32": OrtEncoder(ensure_encoder_fp32(b8), t, precision="fp32")}
    if openvino_available():
        enc["openvino bf16"] = OpenVINOEncoder(ensure_encoder_f16w(b8), t, "bf16")
    tok = m8.tokenizer
    paths = {c.path.name: c.path for c in reference_clips(work)}
    for c in real_clips():
        paths.setdefault(c.name, c.path)
    paths.setdefault("sense_and_sensibility.wav", ROOT / "samples" / "sense_and_sensibility.wav")

    prompt = tok.sot_sequence("en") + [tok.no_timestamps]
    quantise = CrossQuantiser(t)
    rows = {name: [0, 0, 0.0, 0.0] for name in [*variants, f"int8 encoder, {OLD}",
                                                  f"int8 encoder, {NEW}",
                                                  "int8 encoder, fp32 decoder"]}
    for path in paths.values():
        mel_all = LogMel(load_audio(path))
        for start in range(0, max(1, mel_all.n_frames), 3000):
            mel = mel_all.window(start)
            # The encoders' fp32 keys/values; each decoder reads them in its own form.
            c32 = enc["onnxruntime fp32"].run(mel)
            c8 = enc["onnxruntime int8"].run(mel)
            n_frames = mel.shape[-1]

            def window(model, cross):
                return AudioContext(quantise(cross, CrossForm.of(model.decoder)), n_frames)

            state = m32.decoder_state(window(m32, c32))
            logits, ref = state.forward(prompt), []
            while len(ref) < 200 and (nxt := int(np.argmax(logits[-1][:tok.eot + 1]))) != tok.eot:
                ref.append(nxt)
                logits = state.forward([nxt])
            m32.release(state)
            if not ref:
                continue
            seq, cut = prompt + ref, slice(len(prompt) - 1, len(prompt) + len(ref) - 1)

            def scores(model, cross, seq=seq, cut=cut):
                st = model.decoder_state(window(model, cross))
                out = log_softmax(st.forward(seq)[cut][:, :tok.eot + 1])
                model.release(st)
                return out

            gold = scores(m32, c32)
            got = {}
            for name, session in sessions.items():
                use_decoder(m8, session)
                got[name] = scores(m8, c32)
            for name in (OLD, NEW):
                use_decoder(m8, sessions[name])
                got[f"int8 encoder, {name}"] = scores(m8, c8)
            use_decoder(m8, own)
            got["int8 encoder, fp32 decoder"] = scores(m32, c8)
            for name, lp in got.items():
                r = rows[name]
                r[0] += len(ref)
                r[1] += int((lp.argmax(-1) != gold.argmax(-1)).sum())
                r[2] += float((np.exp(gold) * (gold - lp)).sum())
                r[3] += float(lp[np.arange(len(ref)), ref].sum())
    print(f"teacher-forced on {len(paths)} clips (every window; fp32 encoder unless named), "
          "against fp32 encoder + fp32 decoder:")
    print(f"  {'decoder':31} {'tokens':>6} {'flips':>6} {'mean KL':>9} {'mean logp':>10} "
          f"{'row-exact':>10}")
    for name, (n, flips, kl, lp) in rows.items():
        exact = ""
        if name in sessions:
            use_decoder(m8, sessions[name])
            exact = str(probe(m8)["exact"])
            use_decoder(m8, own)
        print(f"  {name:31} {n:6d} {flips:6d} {kl / n:9.5f} {lp / n:10.4f} {exact:>10}")

    if not args.long_form:
        return
    from whisper_normalizer.english import EnglishTextNormalizer

    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.strategy import TargetOnly
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    norm, opts = EnglishTextNormalizer(), TranscribeOptions(language="en")

    def transcribe(model) -> dict[str, list[str]]:
        run = LongFormTranscriber(model, TargetOnly(model))
        return {n: norm("".join(s.text for s in run.transcribe(load_audio(p), opts))).split()
                for n, p in paths.items()}

    m32.encoder = enc["onnxruntime fp32"]
    gold = transcribe(m32)
    print("\nlong form (target-only greedy, the CLI's options): words differing from fp32 "
          "encoder + fp32 decoder")
    for e, encoder in enc.items():
        for d, (model, session) in {OLD: (m8, sessions[OLD]),
                                    NEW: (m8, sessions[NEW]),
                                    "fp32": (m32, None)}.items():
            model.encoder = encoder
            if session is not None:
                use_decoder(model, session)
            t0 = time.perf_counter()
            texts = transcribe(model)
            diffs = {n: [(" ".join(gold[n][a:b]), " ".join(texts[n][c:dd]))
                         for op, a, b, c, dd in
                         difflib.SequenceMatcher(None, gold[n], texts[n]).get_opcodes()
                         if op != "equal"] for n in paths}
            diffs = {n: x for n, x in diffs.items() if x}
            print(f"  {e:17} + {d:20} {len(diffs)} clips differ {diffs or ''} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        use_decoder(m8, own)


if __name__ == "__main__":
    main()
