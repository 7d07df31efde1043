"""``as2d bench``: target-only, classic SD (drafter × budget catalog) and AS²D, side by side.

Every configuration decodes the same audio in this one process, repeats interleaved so that
drift in the machine's speed hits all of them alike; per-window decode times are medians over
the repeats. Target-only gets every core for its encoder and decoder, SD (serial) gives both of
its models every core, AS²D splits them as it does in `as2d transcribe`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.errors import UserError
from as2d.cli.paths import check_writable, write_json
from as2d.cli.resolve import make_note
from as2d.engine import SharedModels

AUDIO_EXT = {".wav", ".flac", ".ogg", ".mp3", ".opus", ".aiff", ".aif", ".au", ".caf"}
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CARDS = Path("/usr/share/pocketsphinx/test/data/cards")

BenchThreads = opt.reworded(opt.Threads, "Cores to use (0: all).")


@dataclass
class Item:
    name: str
    audio: object  # as2d.runtime.audio.Audio
    reference: str | None = None


# -- bench sets -------------------------------------------------------------------------------
def _librivox() -> list[tuple[Path, str | None]]:
    refs = {}
    tfile = LIBRIVOX / "transcription"
    if tfile.is_file():
        for line in tfile.read_text().splitlines():
            text, _, ident = line.rpartition("(")
            refs[ident.strip(") ")] = text.replace("<s>", "").replace("</s>", "").strip()
    return [(p, refs.get(p.stem)) for p in sorted(LIBRIVOX.glob("*.wav"))]


def _moonshine() -> list[tuple[Path, str | None]]:
    try:
        import moonshine_voice
    except ImportError:
        return []
    assets = Path(moonshine_voice.__file__).parent / "assets"
    return [(assets / n, None) for n in ("beckett.wav", "two_cities.wav", "endgame_nagg_nell.wav")
            if (assets / n).is_file()]


def _folder(path: Path) -> list[tuple[Path, str | None]]:
    refs = {}
    tsv = path / "refs.tsv"
    if tsv.is_file():
        for line in tsv.read_text(encoding="utf-8").splitlines():
            if "\t" in line:
                name, text = line.split("\t", 1)
                refs[name.strip()] = text.strip()
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in AUDIO_EXT)
    return [(p, refs.get(p.name, refs.get(p.stem))) for p in files]


SETS = {
    "librivox": ("the 5 LibriVox clips of pocketsphinx-testdata, with references", _librivox),
    "cards": ("the 5 playing-card clips of pocketsphinx-testdata",
              lambda: [(p, None) for p in sorted(CARDS.glob("*.wav"))]),
    "moonshine": ("the 3 public-domain readings shipped in moonshine-voice", _moonshine),
}


def _long_item(minutes: float) -> Item:
    """A long recording for long-form behaviour: the real clips above, joined end to end
    with half a second of silence between them, repeated up to ``minutes``."""
    import numpy as np

    from as2d.runtime.audio import SAMPLE_RATE, Audio, load_audio

    parts = [load_audio(p).samples for p, _ in _librivox() + _moonshine()]
    if not parts:
        raise UserError("the long set needs pocketsphinx-testdata or moonshine-voice")
    gap = np.zeros(SAMPLE_RATE // 2, np.float32)
    out: list = []
    total = 0
    want = max(1, int(minutes * 60 * SAMPLE_RATE))  # --long-minutes 1e-9: one sample
    while total < want:
        for p in parts:
            out += [np.asarray(p), gap]
            total += len(p) + len(gap)
            if total >= want:
                break
    audio = Audio(np.concatenate(out)[:want], source=f"long-{minutes:g}min")
    return Item(audio.source, audio)


def collect(files: list[Path], sets: list[str], long_minutes: float) -> list[Item]:
    from as2d.runtime.audio import AudioError, load_audio

    items: list[Item] = []
    pairs: list[tuple[Path, str | None]] = []
    for s in sets:
        if s == "long":
            items.append(_long_item(long_minutes))
        elif s in SETS:
            got = SETS[s][1]()
            if not got:
                raise UserError(f"bench set {s!r} is not available here ({SETS[s][0]})")
            pairs += got
        else:
            raise UserError(f"unknown bench set {s!r} (choose from "
                            f"{', '.join([*SETS, 'long'])})", 2)
    for f in files:
        f = Path(f)
        pairs += _folder(f) if f.is_dir() else [(f, None)]
    for path, ref in pairs:
        try:
            items.append(Item(path.name, load_audio(path), ref))
        except AudioError as exc:
            raise UserError(str(exc)) from None
    if not items:
        raise UserError("nothing to benchmark: give audio files or folders, or --set NAME", 2)
    return items


# -- configurations ---------------------------------------------------------------------------
def catalog(targets: list[str], drafters: list[str], budgets: list[int]):
    from as2d.runtime.bench.metrics import Config

    out = []
    for t in targets:
        out.append(Config(f"{t}/target", t, "target"))
        for d in drafters:
            if d == t:
                continue
            for k in budgets:
                out.append(Config(f"{t}/sd:{d}:k{k}", t, "sd", d, k))
        for d in drafters[:1]:
            out.append(Config(f"{t}/as2d:{d}", t, "as2d", d, None))
    return out


def _engine(cfg, models, cores: int, listener):
    """What ``as2d transcribe --decoder …`` would run, on the benchmark's shared models
    (an :class:`as2d.engine.SharedModels`)."""
    from as2d.engine import Engine, EngineSpec

    spec = EngineSpec(model=cfg.target, drafter=cfg.drafter, decoder=cfg.decoder,
                      budget="auto" if cfg.budget is None else cfg.budget, threads=cores,
                      models_dir=models.models_dir)
    return Engine(spec, progress=models.progress, listener=listener, load_whisper=models)


def run_config(cfg, items: list[Item], models, cores: int, beam_size: int | None = None):
    """One pass of one configuration over every item: window timings, wall time, texts
    (``beam_size``: beam search, speculative for AS²D, target-only for the others)."""
    from dataclasses import replace

    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    stats = StatsCollector()
    options = TranscribeOptions(language="en", beam_size=beam_size)
    windows, texts = [], {}
    wall = 0.0
    with _engine(cfg, models, cores, stats) as engine:
        for item in items:
            t0 = time.perf_counter()
            segs = list(engine.transcribe(item.audio, options))
            wall += time.perf_counter() - t0
            texts[item.name] = "".join(s.text for s in segs)
            for w in stats.current.windows:
                windows.append(replace(w, source=item.name))
    return windows, wall, texts


def word_error_rate(texts: dict[str, str], items: list[Item]) -> float | None:
    pairs = [(i.reference, texts.get(i.name, "")) for i in items if i.reference]
    if not pairs:
        return None
    try:
        import jiwer
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError:
        return None
    norm = EnglishTextNormalizer()
    refs = [norm(r) for r, _ in pairs]
    hyps = [norm(h) for _, h in pairs]
    return float(jiwer.wer(refs, hyps))


HELP = """Compare target-only, classic SD and AS²D on the same audio, side by side.

Reproduces the paper's evaluation: pooled decoding throughput, end-to-end real-time factor,
acceptance, the share of windows slower than target-only, the hindsight per-window oracle over
the SD (drafter × budget) catalog, and WER where references exist.
"""


@dataclass
class BenchRequest:
    """Everything ``as2d bench`` was asked; each field is also its command-line option.

    The model and budget lists are comma-separated on the command line; :meth:`targets_list`
    and friends split them.
    """

    audio: Annotated[list[Path] | None, typer.Argument(
        help="Audio files or folders (a folder may hold refs.tsv: name<TAB>text).",
        show_default=False)] = None
    sets: Annotated[list[str] | None, typer.Option(
        "--set", "-s", help="librivox, cards, moonshine or long (repeatable).")] = None
    targets: Annotated[str, typer.Option(
        "--targets", help="Target models, comma-separated.")] = "base-int8,base-fp32"
    drafters: Annotated[str, typer.Option(
        "--drafters", help="SD drafter catalog; the first one also drafts for AS²D.")] = \
        "tiny.en-int8,tiny.en-fp32,base-int8"
    budgets: Annotated[str, typer.Option("--budgets", help="SD budgets (k).")] = "2,4,8,16"
    repeats: Annotated[int, typer.Option(
        "--repeats", "-r", help="Timed repeats (median).")] = 3
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed warm-up runs.")] = 1
    long_minutes: Annotated[float, typer.Option(
        "--long-minutes", help="Length of the 'long' set, in minutes.")] = 4.0
    threads: BenchThreads = 0
    beam_size: Annotated[int | None, typer.Option(
        "--beam-size", help="Decode with beam search (AS²D: speculative beam search); the "
                            "report adds beam steps per pass.")] = None
    json_path: Annotated[Path | None, typer.Option(
        "--json", help="Write all figures as JSON.")] = None
    plot_path: Annotated[Path | None, typer.Option(
        "--plot", help="Write a PNG of the results.")] = None
    show_windows: Annotated[bool, typer.Option(
        "--windows", help="Print per-window timings too.")] = False
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False

    def target_list(self) -> list[str]:
        return _csv(self.targets)

    def drafter_list(self) -> list[str]:
        return _csv(self.drafters)

    def budget_list(self) -> list[int]:
        from as2d.engine import MAX_BUDGET

        try:
            budgets = [int(b) for b in _csv(self.budgets)]
        except ValueError:
            raise UserError(f"--budgets must be numbers, e.g. 2,4,8 (got {self.budgets!r})",
                            2) from None
        if not budgets or not all(1 <= b <= MAX_BUDGET for b in budgets):
            raise UserError(f"--budgets must be numbers from 1 to {MAX_BUDGET}, e.g. 2,4,8 "
                            f"(got {self.budgets!r})", 2)
        return budgets


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def register(app: typer.Typer) -> None:
    """Add ``as2d bench`` to ``app``."""
    add_command(app, "bench", BenchRequest, run_bench, HELP)


# The long set is built in memory (4 bytes a sample) and decoded by every configuration on
# every repeat: ten hours is 2.3 GB of samples, and already days of benchmarking.
MAX_LONG_MINUTES = 600.0
MAX_REPEATS = 100


def _check_numbers(req: BenchRequest) -> None:
    """The numeric options, one line and exit code 2 each; the beam's bounds are the engine's
    (:class:`TranscribeOptions`, as for ``as2d transcribe --beam-size``)."""
    from as2d.runtime.option_errors import as_flags, check_finite, check_whole
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    try:
        check_whole("repeats", req.repeats, 1, MAX_REPEATS)
        check_whole("warmup", req.warmup, 0, MAX_REPEATS)
        check_finite("long_minutes", req.long_minutes, 0.0, MAX_LONG_MINUTES, above=True)
        TranscribeOptions(language="en", beam_size=req.beam_size)
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None


def run_bench(req: BenchRequest) -> int:
    """Run every configuration over the audio, print the comparison; the exit code."""
    from as2d.engine import plan_threads
    from as2d.runtime.bench.metrics import ConfigResult, median_of_repeats, results_to_dict, summary
    from as2d.runtime.sessions import cpu_count

    note = make_note(req.quiet)
    budgets = req.budget_list()
    targets, drafters = req.target_list(), req.drafter_list()
    _check_numbers(req)
    from as2d.cli.decoding import check_decoder_options

    check_decoder_options(threads=req.threads)  # -t within what the machine can use
    # A bad output path or a missing plotting library must not surface after a long run.
    if req.json_path:
        check_writable(req.json_path, "the results")
    if req.plot_path:
        check_writable(req.plot_path, "the plot")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserError("--plot needs matplotlib: pip install 'as2d[bench]'", 2) from None
    cores = req.threads or cpu_count()
    items = collect(list(req.audio or []), list(req.sets or []), req.long_minutes)
    configs = catalog(targets, drafters, budgets)
    models = SharedModels(req.models_dir, progress=note)
    audio_s = sum(i.audio.duration for i in items)
    note(f"{len(items)} recordings, {audio_s:.1f} s of audio; {len(configs)} configurations "
         f"× {req.repeats} repeats (+{req.warmup} warm-up), {cores} cores")
    runs: dict[str, list] = {c.name: [] for c in configs}
    walls: dict[str, list] = {c.name: [] for c in configs}
    texts: dict[str, dict] = {}
    t_start = time.perf_counter()
    for rep in range(req.warmup + req.repeats):
        for cfg in configs:
            windows, wall, txt = run_config(cfg, items, models, cores, req.beam_size)
            texts[cfg.name] = txt
            if rep >= req.warmup:
                runs[cfg.name].append(windows)
                walls[cfg.name].append(wall)
        note(f"{'warm-up' if rep < req.warmup else f'repeat {rep - req.warmup + 1}'} done "
             f"({time.perf_counter() - t_start:.0f} s)")
    import statistics

    results = []
    for cfg in configs:
        r = ConfigResult(cfg, median_of_repeats(runs[cfg.name]), audio_s,
                         statistics.median(walls[cfg.name]), texts[cfg.name])
        r.wer = word_error_rate(r.texts, items)
        results.append(r)
    same_text = {}
    for t in targets:
        outs = {json.dumps(r.texts, sort_keys=True) for r in results if r.config.target == t}
        same_text[t] = len(outs) == 1
    report = summary(results)
    report.update(threads={"cores": cores, "target": cores,
                           "sd_drafter": plan_threads(cores, "sd").drafter,
                           "as2d": plan_threads(cores, "as2d").as_dict()},
                  audio_seconds=round(audio_s, 3), items=[i.name for i in items],
                  repeats=req.repeats, warmup=req.warmup, identical_text=same_text,
                  search=f"beam {req.beam_size}" if (req.beam_size or 1) > 1 else "greedy",
                  encoders=models.encoders())
    from as2d.cli.bench_report import plot, print_report

    print_report(report, results, req.show_windows)
    if req.json_path:
        write_json(req.json_path, {"summary": report, "results": results_to_dict(results)},
                   "the results")
        note(f"wrote {req.json_path}")
    if req.plot_path:
        try:
            plot(report, results, req.plot_path)
        except OSError as exc:
            raise UserError(f"{req.plot_path}: cannot write the plot "
                            f"({exc.strerror or exc})") from None
        note(f"wrote {req.plot_path}")
    return 0
