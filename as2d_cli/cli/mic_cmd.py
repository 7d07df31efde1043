"""``as2d mic``: live dictation from a microphone (or a file played as one), decoded by AS²D.

Speech is cut into utterances by a voice detector; each utterance, and the growing current
one about every ``--interval`` seconds, is decoded by the chosen decoder (AS²D by default).
Words are committed once successive decodes agree (LocalAgreement-2) and are appended to
stdout and ``--output FILE`` as they are committed, flushed. Ctrl-C stops listening, finishes
the utterance in progress and exits 0; a second Ctrl-C quits at once, keeping what was
committed (exit 130). A missing or lost input device is one ``as2d: error:`` line and exit 1,
with everything committed so far already saved.

The command is declared by :class:`MicRequest` and added to the app by :func:`register`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.decoding import parse_decoder
from as2d.cli.errors import UserError, interrupt_code
from as2d.cli.paths import write_json
from as2d.cli.resolve import make_note
from as2d.engine import Decoder
from as2d.runtime.option_errors import as_flags, check_finite

HELP = """Live dictation: speak, and committed text appears within about a second.

Text goes to stdout (and --output) as it is committed. Ctrl-C stops after the utterance in
progress. --input FILE plays a file as if it were the microphone.
"""

MicLanguage = opt.reworded(opt.Language, "Spoken language; default: detected on the first "
                                         "utterance (English for .en models).")
MicDecoder = opt.reworded(opt.DecoderName, "as2d, sd or target (all give the same text for "
                                           "the same audio).")
MicDrafterThreads = opt.reworded(opt.DrafterThreads, "Threads for the drafter (0: automatic).")
MicStatsFlag = opt.reworded(opt.Stats, "Print latency and decoding figures at the end.")
MicStatsFile = opt.reworded(opt.StatsJson, "Write those figures as JSON.")


@dataclass
class MicRequest:
    """Everything ``as2d mic`` was asked; each field is also its command-line option."""

    model: opt.Model = "base"
    precision: opt.Precision = None
    drafter: opt.Drafter = "auto"
    decoder: MicDecoder = Decoder.AS2D
    budget: opt.Budget = "auto"
    language: MicLanguage = None
    threads: opt.Threads = 0
    drafter_threads: MicDrafterThreads = 0
    encoder: opt.Encoder = None
    device: Annotated[str | None, typer.Option(
        "--device", "-d",
        help="Input device: an index or part of a name (see --list-devices).")] = None
    list_devices: Annotated[bool, typer.Option(
        "--list-devices", help="List the input devices and exit.")] = False
    vad: Annotated[str, typer.Option(
        "--vad", help="Voice activity detector: silero (Silero VAD, ONNX) or energy (loudness "
                      "over the noise floor).")] = "silero"
    threshold: Annotated[float, typer.Option(
        "--threshold",
        help="Speech probability that starts speech (it ends 0.15 below).")] = 0.5
    silence: Annotated[float, typer.Option(
        "--silence", help="Seconds of silence that end an utterance.")] = 0.5
    min_speech: Annotated[float, typer.Option(
        "--min-speech",
        help="Seconds of speech an utterance needs (shorter noises are ignored).")] = 0.25
    pad: Annotated[float, typer.Option(
        "--pad", help="Seconds of audio kept before the speech.")] = 0.25
    tail: Annotated[float, typer.Option(
        "--tail", help="Seconds of silence kept after the speech; the utterance's final "
                       "decode starts once they are in.")] = 0.05
    settle: Annotated[float, typer.Option(
        "--settle", help="Seconds of pause that commit the utterance's text (it stays open "
                         "until --silence); 0: commit only when it ends.")] = 0.25
    hints: Annotated[bool, typer.Option(
        "--hints/--no-hints", help="Offer the previous decode of the utterance as candidates "
                                   "to the next one (same text, fewer passes).")] = True
    max_utterance: Annotated[float, typer.Option(
        "--max-utterance", help="Cut utterances longer than this (seconds), at their quietest "
                                "recent point.")] = 20.0
    interval: Annotated[float, typer.Option(
        "--interval",
        help="Seconds of new audio between decodes of the growing utterance.")] = 0.6
    agreement: Annotated[int, typer.Option(
        "--agreement", help="Hypotheses that must agree before a word is committed "
                            "(LocalAgreement-n).")] = 2
    prompt: Annotated[bool, typer.Option(
        "--prompt/--no-prompt", help="Prompt each utterance with the dictation so far.")] = True
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Append committed text to this file as it is committed.")] = None
    input: Annotated[Path | None, typer.Option(
        "--input", "-i",
        help="Play this audio file through the pipeline instead of the microphone.")] = None
    speed: Annotated[float, typer.Option(
        "--speed", help="Pace of --input: 1 is real time, 4 four times faster, 0 as fast as "
                        "it decodes.")] = 1.0
    live: opt.Live = None
    stats: MicStatsFlag = False
    stats_json: MicStatsFile = None
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False

    def __post_init__(self) -> None:
        self.decoder = parse_decoder(self.decoder)


def register(app: typer.Typer) -> None:
    """Add ``as2d mic`` to ``app`` (once, however often it is called)."""
    add_command(app, "mic", MicRequest, run_mic, HELP)


def validate(req: MicRequest):
    """Check the options before anything slow happens; returns the endpointing config."""
    from as2d.cli.decoding import check_decoder_options
    from as2d.runtime.live.endpoint import EndpointConfig

    check_decoder_options(req.budget, req.threads, req.drafter_threads, req.language)
    if req.vad not in ("silero", "energy"):
        raise UserError(f"--vad must be silero or energy, not {req.vad!r}", 2)
    try:
        check_finite("speed", req.speed, 0.0, what=" (0 plays the file as fast as it is decoded)")
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    if req.input is None and req.speed != 1.0:
        raise UserError("--speed applies to --input FILE only", 2)
    if req.input is not None and req.device is not None:
        raise UserError("--device and --input exclude each other", 2)
    if not 0.1 <= req.interval <= 10:
        raise UserError("--interval must be between 0.1 and 10 seconds", 2)
    if not 1 <= req.agreement <= 5:
        raise UserError("--agreement must be between 1 and 5 hypotheses", 2)
    config = EndpointConfig(threshold=req.threshold, min_speech=req.min_speech,
                            min_silence=req.silence, pad=req.pad, tail=req.tail,
                            settle=_settle(req.settle, req.silence),
                            max_utterance=req.max_utterance)
    if req.tail < 0 or req.settle < 0:
        raise UserError("--tail and --settle cannot be negative", 2)
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(as_flags(exc), 2) from None
    return config


def list_devices() -> int:
    from as2d.runtime.live.audio_input import AudioInputError, list_input_devices

    try:
        devices = list_input_devices()
    except AudioInputError as exc:
        raise UserError(str(exc)) from None
    if not devices:
        raise UserError("no audio input device found (is a microphone connected?); "
                        "transcribe a file with --input FILE")
    for d in devices:
        mark = "*" if d.default else " "
        print(f"{mark} {d.index:3d}  {d.name}  ({d.hostapi}, {d.channels} ch, "
              f"{d.default_rate:.0f} Hz)")
    return 0


def run_mic(req: MicRequest) -> int:
    """Listen (or play ``--input``) until stopped; the exit code (130 after a second Ctrl-C)."""
    from as2d.cli.mic_display import CommitWriter, MicStats, make_mic_reporter, print_mic_stats
    from as2d.cli.progress import want_live
    from as2d.cli.resolve import build_engine
    from as2d.engine import EngineSpec
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.live.audio_input import AudioInputError, FileSource, MicSource
    from as2d.runtime.live.session import LiveOptions
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions, check_model

    if req.list_devices:
        return list_devices()
    endpoint = validate(req)
    note = make_note(req.quiet)

    # The input first: a missing microphone should not cost a model load.
    if req.input is not None:
        audio = load_audio(req.input)  # AudioError → one line (errors.guarded)
        source = FileSource(audio, req.speed)
    else:
        try:
            source = MicSource(req.device)
        except AudioInputError as exc:
            raise UserError(str(exc)) from None

    # The output file too: a typo in its folder should not cost a model load either.
    try:
        writer = CommitWriter(req.output, stdout=True,
                              whole_lines=sys.stdout.isatty()
                              and want_live(req.live, req.quiet, sys.stderr))
    except OSError as exc:
        raise UserError(f"{req.output}: cannot write there ({exc.strerror or exc})", 2) \
            from None

    stats = MicStats()
    reporter = make_mic_reporter(req.live, req.quiet, sys.stderr)
    # The VAD and the audio callback share the cores: pools never spin, even target-only.
    spec = EngineSpec(model=req.model, precision=req.precision, drafter=req.drafter,
                      decoder=req.decoder, budget=req.budget, threads=req.threads,
                      drafter_threads=req.drafter_threads, encoder=req.encoder,
                      models_dir=req.models_dir, shares_cores=True)
    engine = build_engine(spec, note, reporter)  # the draft → verify → commit view
    with engine:
        try:
            language = check_model(engine.target, TranscribeOptions(language=req.language))
        except ValueError as exc:
            raise UserError(as_flags(exc), 2) from None
        options = LiveOptions(endpoint=endpoint, interval=req.interval,
                              agreement=req.agreement, language=language, prompt=req.prompt,
                              hints=req.hints)
        session = engine.live_session(source, options, fanout(writer, stats, reporter), req.vad)
        code = _listen(session, reporter, writer)
    if req.stats:
        print_mic_stats(stats, sys.stderr)
    if req.stats_json:
        doc = {"summary": stats.summary(),
               "utterances": [u.__dict__ for u in stats.utterances]}
        write_json(req.stats_json, doc, "the statistics")
    saved = f"; the text committed so far is in {req.output}" if req.output else ""
    if session.error:
        raise UserError(session.error + saved)
    if writer.error:
        raise UserError(writer.error)
    return code


def _listen(session, reporter, writer) -> int:
    """Run the session to its end; the exit code."""
    reporter.start()
    try:
        session.start()
        return _wait(session, reporter)
    finally:
        reporter.stop()
        writer.close()


def _wait(session, reporter) -> int:
    """Wait for the session; the first Ctrl-C finishes the utterance in progress, the second
    stops at once (what was committed is kept either way)."""
    interrupts = 0
    while True:
        try:
            if session.wait(0.1):
                return interrupt_code(130) if interrupts > 1 else interrupt_code(0)
        except KeyboardInterrupt:
            interrupts += 1
            if interrupts == 1:
                reporter.note("stopping: finishing the utterance in progress "
                              "(Ctrl-C again to quit now)")
                session.stop()
            else:
                reporter.note("quitting: keeping what was committed")
                session.abort()


def _settle(settle: float, silence: float) -> float | None:
    """0 turns the early commit off; a settle longer than the silence is the silence."""
    if settle == 0:
        return None
    return min(settle, silence) if settle > 0 else settle
