"""``as2d transcribe``: files in, text on stdout, subtitle/JSON files out, stats on request."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

import typer

from as2d import writers
from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.decoding import check_decoder_options, collect_segments, parse_decoder
from as2d.cli.errors import UserError, err, interrupt_code
from as2d.cli.paths import write_json
from as2d.cli.resolve import make_note
from as2d.engine import Decoder
from as2d.runtime.option_errors import as_flags
from as2d.runtime.whisper.alignment import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS

HELP = """Transcribe audio files of any length (30-s windows, timestamp seeking).

Text goes to stdout as it is decoded; with -o, files are written too. Several files are
processed in turn; a bad file is reported and skipped, and the exit code is 1.
"""

LivePipeline = opt.reworded(opt.Live, "Live pipeline view on stderr (default: when stderr is "
                                      "a terminal).")


OneShotDrafter = opt.reworded(
    opt.Drafter, "Drafter model for sd and as2d; auto: tiny.en, or base for a multilingual "
                 "target from small up on another language, and none for one file of one "
                 "window (30 s), where a drafter costs more than it saves.")


# The flags that are decoding options, under whisper's (and TranscribeOptions.parse's) names.
OPTION_FLAGS = (
    "language", "multilingual", "task", "timestamps", "condition_on_previous_text",
    "initial_prompt", "no_speech_threshold", "compression_ratio_threshold",
    "logprob_threshold", "temperature", "temperature_increment_on_fallback", "best_of", "seed",
    "hotwords", "beam_size", "patience", "length_penalty", "vad_filter", "vad_parameters",
    "word_timestamps", "prepend_punctuations", "append_punctuations")


@dataclass
class TranscribeRequest:
    """Everything ``as2d transcribe`` was asked; each field is also its command-line option."""

    files: opt.AudioFiles
    model: opt.Model = "base"
    precision: opt.Precision = None
    language: opt.Language = None
    multilingual: Annotated[bool, typer.Option(
        "--multilingual/--no-multilingual",
        help="Detect the language of every 30-s window, not once per file, for audio that "
             "changes language (faster-whisper's multilingual); json segments record "
             "it.")] = False
    task: Annotated[str, typer.Option(
        "--task", help="transcribe or translate (to English).")] = "transcribe"
    output_dir: Annotated[Path | None, typer.Option(
        "--output-dir", "-o",
        help="Write <name>.<format> files here ('-' for stdout only).")] = None
    output_format: Annotated[list[str] | None, typer.Option(
        "--output-format", "-f",
        help="txt, srt, vtt, tsv, json, rttm (with --diarize) or all; repeat or "
             "comma-separate. Default txt.")] = None
    decoder: opt.DecoderName = Decoder.AS2D
    drafter: OneShotDrafter = "auto"
    budget: opt.Budget = "auto"
    threads: opt.Threads = 0
    drafter_threads: opt.DrafterThreads = 0
    encoder: opt.Encoder = None
    timestamps: Annotated[bool, typer.Option(
        "--timestamps/--no-timestamps", help="Segment timestamps (needed for srt/vtt).")] = True
    condition_on_previous_text: Annotated[bool, typer.Option(
        "--condition-on-previous-text/--no-condition-on-previous-text",
        help="Prompt each window with the previous window's text.")] = True
    initial_prompt: Annotated[str | None, typer.Option(
        "--initial-prompt", help="Text to prompt the first window with.")] = None
    no_speech_threshold: Annotated[float, typer.Option(
        "--no-speech-threshold", help="Skip windows this likely to be silence.")] = 0.6
    compression_ratio_threshold: Annotated[float, typer.Option(
        "--compression-ratio-threshold",
        help="Text compressing better than this is treated as a repetition loop.")] = 2.4
    logprob_threshold: Annotated[float, typer.Option(
        "--logprob-threshold",
        help="A window whose average log-probability is below this falls back to the next "
             "temperature.")] = -1.0
    temperature: Annotated[str, typer.Option(
        "--temperature",
        help="Sampling temperature; grown by the increment into the fallback schedule "
             "(default 0,0.2,...,1.0). A comma-separated list is used as given.")] = "0"
    temperature_increment_on_fallback: Annotated[float, typer.Option(
        "--temperature-increment-on-fallback",
        help="Step of the fallback schedule (0: no fallback, greedy only).")] = 0.2
    best_of: Annotated[int, typer.Option(
        "--best-of", help="Samples drawn at a fallback temperature; the most probable "
                          "is kept.")] = 5
    beam_size: Annotated[int | None, typer.Option(
        "--beam-size", help="Beam search with this many hypotheses at temperature 0 "
                            "(whisper's beam_size; its CLI uses 5). Default: greedy, "
                            "which as2d speeds up speculatively.")] = None
    patience: Annotated[float | None, typer.Option(
        "--patience", help="With --beam-size: stop once beam size × patience hypotheses "
                           "have ended (default 1).")] = None
    length_penalty: Annotated[float | None, typer.Option(
        "--length-penalty", help="With --beam-size: rank finished hypotheses by "
                                 "log-probability / ((5 + length) / 6) ** alpha, alpha in "
                                 "0..1 (default: divide by the length).")] = None
    seed: Annotated[int, typer.Option(
        "--seed", help="Seed of the sampled (fallback) windows: same seed, same text.")] = 0
    hotwords: Annotated[str | None, typer.Option(
        "--hotwords", help="Hint words or phrases put in every window's prompt "
                           "(faster-whisper's hotwords).")] = None
    vad_filter: Annotated[bool, typer.Option(
        "--vad-filter/--no-vad-filter",
        help="Decode only the speech Silero VAD finds (faster-whisper's vad_filter); "
             "timestamps stay those of the file.")] = False
    vad_parameters: Annotated[str | None, typer.Option(
        "--vad-parameters",
        help="VAD settings as name=value pairs: threshold, neg_threshold, "
             "min_speech_duration_ms, max_speech_duration_s, min_silence_duration_ms "
             "(default 2000), speech_pad_ms (default 400).")] = None
    word_timestamps: Annotated[bool, typer.Option(
        "--word-timestamps/--no-word-timestamps",
        help="Time every word (whisper's alignment heads + DTW): 'words' in json, and the "
             "word options below for srt/vtt. The text stays the same.")] = False
    prepend_punctuations: Annotated[str, typer.Option(
        "--prepend-punctuations",
        help="With --word-timestamps: marks joined to the word after them.")
    ] = PREPEND_PUNCTUATIONS
    append_punctuations: Annotated[str, typer.Option(
        "--append-punctuations",
        help="With --word-timestamps: marks joined to the word before them.")
    ] = APPEND_PUNCTUATIONS
    max_line_width: Annotated[int | None, typer.Option(
        "--max-line-width", help="srt/vtt, with --word-timestamps: characters per line "
                                 "before it breaks.")] = None
    max_line_count: Annotated[int | None, typer.Option(
        "--max-line-count", help="srt/vtt, with --word-timestamps and --max-line-width: "
                                 "lines per cue (cues then no longer follow segments).")] = None
    max_words_per_line: Annotated[int | None, typer.Option(
        "--max-words-per-line", help="srt/vtt, with --word-timestamps: words per cue (no "
                                     "effect with --max-line-width).")] = None
    highlight_words: Annotated[bool, typer.Option(
        "--highlight-words/--no-highlight-words",
        help="srt/vtt, with --word-timestamps: underline each word as it is spoken.")] = False
    diarize: opt.Diarize = False
    num_speakers: opt.NumSpeakers = None
    min_speakers: opt.MinSpeakers = None
    max_speakers: opt.MaxSpeakers = None
    speaker: opt.SpeakerRefs = None
    stats: opt.Stats = False
    stats_json: opt.StatsJson = None
    live: LivePipeline = None
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False

    # Not options: what validate() parses.
    speakers: object = field(init=False, default=None)  # SpeakerOptions, or None

    def __post_init__(self) -> None:
        self.decoder = parse_decoder(self.decoder)


def register(app: typer.Typer) -> None:
    """Add ``as2d transcribe`` to ``app``."""
    from as2d.cli.whisper_compat import WhisperCompatCommand

    # openai-whisper's spellings (--output_format, --word_timestamps True, ...) are rewritten
    # before parsing: existing scripts run unchanged, and --help stays as2d's own.
    add_command(app, "transcribe", TranscribeRequest, run_transcribe, HELP,
                no_args_is_help=True, cls=WhisperCompatCommand)


def validate(req: TranscribeRequest) -> list[str]:
    try:
        formats = writers.parse_formats(req.output_format, req.diarize)
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    check_decoder_options(req.budget, req.threads, req.drafter_threads)
    from as2d.runtime.speakers.speaker_options import from_flags

    try:
        req.speakers = from_flags(req.diarize, req.num_speakers, req.min_speakers,
                                  req.max_speakers, req.speaker or ())
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    if req.diarize:
        req.word_timestamps = True  # each word gets its speaker; segments split between them
        for _, ref in req.speakers.references:
            if not Path(ref).is_file():
                raise UserError(f"--speaker: {ref}: no such file", 2)
    elif "rttm" in formats and not req.diarize:
        raise UserError("-f rttm needs --diarize", 2)

    if not req.timestamps and any(f in ("srt", "vtt") for f in formats):
        raise UserError("srt and vtt need timestamps: drop --no-timestamps", 2)
    try:
        # Every decoding option's parser and bounds (the language, the temperatures, finite
        # thresholds, --best-of, --beam-size, ...) are TranscribeOptions' own, the same for
        # the API, the server and batch.
        transcribe_options(req)
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    _check_word_options(req)
    return formats


def _check_word_options(req: TranscribeRequest) -> None:
    """whisper's rules: the subtitle word options need --word-timestamps."""
    given = {"--max-line-width": req.max_line_width, "--max-line-count": req.max_line_count,
             "--max-words-per-line": req.max_words_per_line}
    for flag, value in given.items():
        if value is not None and value < 1:
            raise UserError(f"{flag} must be 1 or more, not {value}", 2)
    given["--highlight-words"] = req.highlight_words
    if not req.word_timestamps:
        for flag, value in given.items():
            if value:
                raise UserError(f"{flag} needs --word-timestamps", 2)
    if req.max_line_count and not req.max_line_width:
        err("as2d: warning: --max-line-count has no effect without --max-line-width")
    if req.max_words_per_line and req.max_line_width:
        err("as2d: warning: --max-words-per-line has no effect with --max-line-width")


def subtitle_options(req: TranscribeRequest) -> writers.SubtitleOptions:
    return writers.SubtitleOptions(req.max_line_width, req.max_line_count,
                                   req.highlight_words, req.max_words_per_line)


def engine_spec(req: TranscribeRequest, shares_cores: bool = False):
    """The engine a request needs (``as2d batch`` builds its workers' the same way)."""
    from as2d.engine import EngineSpec

    return EngineSpec(model=req.model, precision=req.precision, drafter=req.drafter,
                      decoder=req.decoder, budget=req.budget, threads=req.threads,
                      drafter_threads=req.drafter_threads, encoder=req.encoder,
                      models_dir=req.models_dir, vad=req.vad_filter,
                      word_timestamps=req.word_timestamps, shares_cores=shares_cores,
                      speakers=req.diarize)


def transcribe_options(req: TranscribeRequest):
    """The engine's options for a request (``as2d batch`` builds them the same way): the
    flags are whisper's names, so they go as they are to the one parser."""
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    given = vars(req)
    return TranscribeOptions.parse(**{name: given[name] for name in OPTION_FLAGS})


def run_transcribe(req: TranscribeRequest) -> int:
    """Transcribe ``req.files`` in turn; the exit code (1 if a file failed, 130 if stopped)."""
    from as2d.cli.progress import make_reporter
    from as2d.cli.resolve import build_engine
    from as2d.runtime.audio import declared_seconds, load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.transcribe.ahead import AudioReader
    from as2d.runtime.transcribe.stats import StatsCollector
    from as2d.runtime.transcribe.transcribe_options import check_model

    formats = validate(req)
    to_stdout = req.output_dir is None or str(req.output_dir) == "-"
    if to_stdout and len(formats) > 1:
        raise UserError("several formats need files: add -o DIR", 2)
    files_out = None if to_stdout else writers.FileOutputs(req.output_dir, formats,
                                                           subtitle_options(req))
    if files_out is not None:
        # Before any decoding: a bad output folder should not cost a whole transcription.
        try:
            files_out.prepare()
        except OSError as exc:
            raise UserError(f"{req.output_dir}: cannot write output files there "
                            f"({exc.strerror or exc})", 2) from None

    # Start-up overlaps: the first file decodes while the engine loads its models.
    reader = AudioReader(req.files, lambda path: load_audio(
        path, on_wait=lambda note: err(f"as2d: {note}")))
    stats = StatsCollector()
    reporter = make_reporter(req.live, req.quiet, sys.stderr)
    # One recording that declares its length: the engine knows whether a drafter pays.
    recording_seconds = declared_seconds(req.files[0]) if len(req.files) == 1 else None
    try:
        engine = build_engine(replace(engine_spec(req), recording_seconds=recording_seconds),
                              make_note(req.quiet), fanout(stats, reporter))
    except BaseException:
        reader.close()
        raise
    options = transcribe_options(req)
    # Each next file decodes (and its log-mel and draft start) while this one is transcribed.
    reader.ready = lambda audio: engine.prefetch(audio, options)
    with engine:  # closed on errors too: the strategy's worker threads must not linger
        try:
            # What this model cannot do (an English-only model translating), before any file.
            check_model(engine.target, options)
        except ValueError as exc:
            reader.close()
            raise UserError(as_flags(exc), 2) from None
        try:
            return _run_files(req, formats, to_stdout, files_out, engine, stats, reporter,
                              options, reader)
        finally:
            reader.close()


def _run_files(req, formats, to_stdout, files_out, engine, stats, reporter, options,
               reader) -> int:
    from as2d.runtime.audio import AudioError, display_name
    from as2d.runtime.speakers.assign import label_transcript
    from as2d.runtime.transcribe.longform import TranscriptionInfo

    failures = 0
    interrupted = False
    # Plain text streams to stdout as it is decoded, unless stdout carries another format.
    # With speakers, lines are labelled once the recording's speakers are known: at the end.
    stream_txt = (not to_stdout or formats == ["txt"]) and not req.diarize
    for i, path in enumerate(req.files):
        try:
            audio = reader.take(i)  # decoded ahead, while the last file was transcribed
        except AudioError as exc:
            err(f"as2d: error: {exc}")
            failures += 1
            continue
        # Printable (a name that is not UTF-8 is shown with \x escapes); stdin is "stdin".
        source = "stdin" if str(path) == "-" else display_name(path)
        if audio.stream is not None:
            err(f"as2d: {source}: {audio.streams} audio streams; transcribing {audio.stream}")
        if audio.clipped:
            err(f"as2d: warning: {source}: {audio.clipped} samples beyond full scale clipped "
                "to ±1")
        if audio.truncated:
            err(f"as2d: warning: {path}: the file is truncated; transcribing the "
                 f"{audio.duration:.1f} s that are there")
            failures += 1
        info = TranscriptionInfo(None, 0.0, audio.duration)
        reporter.start_file(str(path), audio.duration)
        # Speakers are found on a thread beside the decoding (never touching its tokens).
        speakers = None
        if req.diarize:
            speakers = engine.diarize_beside(audio.samples, req.speakers)
        try:
            segments, stopped = collect_segments(
                engine, audio, options, info, reporter,
                on_segment=(lambda seg: reporter.print_text(seg.text.strip()))
                if stream_txt else None)
        except BaseException:
            if speakers is not None:  # failed or a second Ctrl-C: no wait for the speakers
                speakers.stop()
            raise
        finally:
            reporter.end_file()
            audio.close()
        interrupted = interrupted or stopped  # stopped already counts info.interrupted
        doc_info = {"language": info.language, "duration": round(info.duration, 3),
                    "source": source, "model": engine.target.name,
                    "decoder": info.plan.decoder}
        if speakers is not None and stopped and not speakers.done():
            # Ctrl-C: the transcript so far is written now, without waiting for the speakers
            # of the whole file (an -f rttm of it is empty)
            speakers.stop()
            doc_info.update(speakers=[], speaker_turns=[])
            err(f"as2d: note: {path}: interrupted before its speakers were found; the "
                "transcript has none")
        elif speakers is not None:
            try:
                segments, fields = label_transcript(segments, speakers.result())
                doc_info.update(fields)
            except ValueError as exc:  # too short, a reference clip with no speech
                err(f"as2d: error: {path}: {exc}")
                failures += 1
                continue
        if interrupted:
            doc_info["interrupted"] = True
        if to_stdout and not stream_txt:
            try:
                text = writers.render(formats[0], segments, doc_info, subtitle_options(req))
            except ValueError as exc:  # NaN in the JSON: refused, never written
                raise UserError(f"{path}: {exc}") from None
            sys.stdout.write(text)
            sys.stdout.flush()
        if files_out is not None:
            try:
                # Named as the input is (its bytes, even when they are not UTF-8).
                written = files_out.write("stdin" if str(path) == "-" else str(path),
                                          segments, doc_info)
            except (OSError, ValueError) as exc:
                # Disk full, a JSON value that is not finite: this file's outputs are lost (no
                # .part is left), the batch goes on with the next file.
                why = exc.strerror or exc if isinstance(exc, OSError) else exc
                err(f"as2d: error: cannot write the transcript of {path} to "
                    f"{req.output_dir} ({why})")
                failures += 1
                written = []
            if written and not req.quiet:
                err("as2d: wrote " + ", ".join(str(p) for p in written))
            if written and files_out.replaced:
                # Re-running over an output replaces it (as whisper does), never silently: it
                # may be another recording's of the same name, written by another process.
                err("as2d: note: replaced existing " + ", ".join(
                    str(p) for p in files_out.replaced))
        if not segments and not interrupted:
            err(f"as2d: {path}: no speech found")
        if interrupted:
            break
    if req.stats or req.stats_json:
        from as2d.cli.stats_report import print_stats

        if req.stats:
            print_stats(stats.runs, sys.stderr)
        if req.stats_json:
            write_json(req.stats_json, [r.to_dict() for r in stats.runs], "the statistics")
    if interrupted:
        return interrupt_code(130)  # 128 + signal after SIGTERM/SIGHUP
    return 1 if failures else 0
