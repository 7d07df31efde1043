"""``as2d mic``: live dictation from a microphone (or a file played as one), decoded by AS²D.

Speech is cut into utterances by a voice detector; each utterance, and the growing current
one about every ``--interval`` seconds, is decoded by the chosen decoder (AS²D by default).
Words are committed once successive decodes agree (LocalAgreement-2) and are appended to
stdout and ``--output FILE`` as they are committed, flushed. Ctrl-C stops listening, finishes
the utterance in progress and exits 0; a second Ctrl-C quits at once, keeping what was
committed (exit 130). A missing or lost input device is one ``as2d: error:`` line and exit 1,
with everything committed so far already saved.

The command is added to the app by :func:`register` (``as2d.cli.app`` calls it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from as2d.cli.resolve import UserError, make_note, write_json


@dataclass
class MicRequest:
    model: str = "base"
    precision: str | None = None
    drafter: str = "tiny.en"
    decoder: str = "as2d"
    budget: str = "auto"
    language: str | None = None
    threads: int = 0
    drafter_threads: int = 0
    device: str | None = None
    list_devices: bool = False
    vad: str = "silero"
    threshold: float = 0.5
    silence: float = 0.5
    min_speech: float = 0.25
    pad: float = 0.25
    max_utterance: float = 20.0
    interval: float = 0.6
    agreement: int = 2
    prompt: bool = True
    output: Path | None = None
    input: Path | None = None
    speed: float = 1.0
    live: bool | None = None
    stats: bool = False
    stats_json: Path | None = None
    models_dir: Path | None = None
    quiet: bool = False


def validate(req: MicRequest):
    """Check the options before anything slow happens; returns the endpointing config."""
    from as2d.runtime.live.endpoint import EndpointConfig

    from as2d.cli.engine import check_decoder_options

    check_decoder_options(req.decoder, req.budget, req.threads, req.drafter_threads,
                          req.language)
    if req.vad not in ("silero", "energy"):
        raise UserError(f"--vad must be silero or energy, not {req.vad!r}", 2)
    if req.speed < 0:
        raise UserError("--speed cannot be negative (0 plays the file as fast as it is "
                        "decoded)", 2)
    if req.input is None and req.speed != 1.0:
        raise UserError("--speed applies to --input FILE only", 2)
    if req.input is not None and req.device is not None:
        raise UserError("--device and --input exclude each other", 2)
    if not 0.1 <= req.interval <= 10:
        raise UserError("--interval must be between 0.1 and 10 seconds", 2)
    if not 1 <= req.agreement <= 5:
        raise UserError("--agreement must be between 1 and 5 hypotheses", 2)
    config = EndpointConfig(threshold=req.threshold, min_speech=req.min_speech,
                            min_silence=req.silence, pad=req.pad,
                            max_utterance=req.max_utterance)
    try:
        config.validate()
    except ValueError as exc:
        raise UserError(str(exc), 2) from None
    return config


def list_devices() -> int:
    from as2d.runtime.live.sources import AudioInputError, list_input_devices

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
    from as2d.runtime.audio import load_audio
    from as2d.runtime.events import fanout
    from as2d.runtime.live.session import LiveOptions, LiveSession
    from as2d.runtime.live.sources import AudioInputError, FileSource, MicSource
    from as2d.runtime.sessions import cpu_count
    from as2d.runtime.transcribe.transcriber import Transcriber, resolve_language
    from as2d.runtime.live.vad import VADUnavailable, make_vad

    from as2d.cli.engine import build_strategy, plan_threads
    from as2d.cli.mic_display import CommitWriter, MicStats, make_mic_reporter, print_mic_stats
    from as2d.cli.progress import want_live

    if req.list_devices:
        return list_devices()
    endpoint = validate(req)
    note = make_note(req.quiet)
    try:
        vad = make_vad(req.vad)
    except VADUnavailable as exc:
        raise UserError(str(exc)) from None

    # The input first: a missing microphone should not cost a model load.
    if req.input is not None:
        audio = load_audio(req.input)  # AudioError → one line (run_guarded)
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

    plan = plan_threads(req.threads or cpu_count(), req.decoder, req.drafter_threads)
    from as2d.cli.resolve import load_whisper

    target = load_whisper(req.model, req.precision, req.models_dir, plan.target, progress=note)
    try:
        language = resolve_language(target, req.language)
    except ValueError as exc:
        raise UserError(str(exc), 2) from None

    stats = MicStats()
    reporter = make_mic_reporter(req.live, req.quiet, sys.stderr)
    listener = fanout(writer, stats, reporter)
    strategy = build_strategy(req.decoder, target, req.drafter, req.budget, plan,
                              req.models_dir, reporter, note)
    options = LiveOptions(endpoint=endpoint, interval=req.interval, agreement=req.agreement,
                          language=language, prompt=req.prompt)
    transcriber = Transcriber(target, strategy, fanout(stats, reporter))
    session = LiveSession(source, vad, transcriber, options, listener, req.decoder,
                          strategy.drafter_name)
    code = 0
    reporter.start()
    try:
        session.start()
        code = _wait(session, reporter)
    finally:
        reporter.stop()
        writer.close()
        strategy.close()
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


def _wait(session, reporter) -> int:
    """Wait for the session; the first Ctrl-C finishes the utterance in progress, the second
    stops at once (what was committed is kept either way)."""
    interrupts = 0
    while True:
        try:
            if session.wait(0.1):
                return 130 if interrupts > 1 else 0
        except KeyboardInterrupt:
            interrupts += 1
            if interrupts == 1:
                reporter.note("stopping: finishing the utterance in progress "
                              "(Ctrl-C again to quit now)")
                session.stop()
            else:
                reporter.note("quitting: keeping what was committed")
                session.abort()


def register(app: typer.Typer) -> None:
    """Add ``as2d mic`` to ``app`` (once, however often it is called)."""
    if any(getattr(c, "name", None) == "mic" for c in app.registered_commands):
        return

    @app.command("mic")
    def mic(
        model: str = typer.Option("base", "--model", "-m",
                                  help="Target model: a catalog name (base, tiny.en) or a "
                                       "folder."),
        precision: Optional[str] = typer.Option(None, "--precision", "-p",
                                                help="int8 (default, fastest) or fp32."),
        drafter: str = typer.Option("tiny.en", "--drafter", help="Drafter model for sd and "
                                                                  "as2d."),
        decoder: str = typer.Option("as2d", "--decoder",
                                    help="as2d, sd or target (all give the same text for the "
                                         "same audio)."),
        budget: str = typer.Option("auto", "--budget",
                                   help="Candidates verified per target pass: a number or "
                                        "auto."),
        language: Optional[str] = typer.Option(None, "--language", "-l",
                                               help="Spoken language; default: detected on "
                                                    "the first utterance (English for .en "
                                                    "models)."),
        threads: int = typer.Option(0, "--threads", "-t", help="CPU threads in all (0: all "
                                                                "cores)."),
        drafter_threads: int = typer.Option(0, "--drafter-threads",
                                            help="Threads for the drafter (0: automatic)."),
        device: Optional[str] = typer.Option(None, "--device", "-d",
                                             help="Input device: an index or part of a name "
                                                  "(see --list-devices)."),
        list_devices_: bool = typer.Option(False, "--list-devices",
                                           help="List the input devices and exit."),
        vad: str = typer.Option("silero", "--vad",
                                help="Voice activity detector: silero (Silero VAD, ONNX) or "
                                     "energy (loudness over the noise floor)."),
        threshold: float = typer.Option(0.5, "--threshold",
                                        help="Speech probability that starts speech (it ends "
                                             "0.15 below)."),
        silence: float = typer.Option(0.5, "--silence",
                                      help="Seconds of silence that end an utterance."),
        min_speech: float = typer.Option(0.25, "--min-speech",
                                         help="Seconds of speech an utterance needs (shorter "
                                              "noises are ignored)."),
        pad: float = typer.Option(0.25, "--pad",
                                  help="Seconds of audio kept before and after the speech."),
        max_utterance: float = typer.Option(20.0, "--max-utterance",
                                            help="Cut utterances longer than this (seconds), "
                                                 "at their quietest recent point."),
        interval: float = typer.Option(0.6, "--interval",
                                       help="Seconds of new audio between decodes of the "
                                            "growing utterance."),
        agreement: int = typer.Option(2, "--agreement",
                                      help="Hypotheses that must agree before a word is "
                                           "committed (LocalAgreement-n)."),
        prompt: bool = typer.Option(True, "--prompt/--no-prompt",
                                    help="Prompt each utterance with the dictation so far."),
        output: Optional[Path] = typer.Option(None, "--output", "-o",
                                              help="Append committed text to this file as it "
                                                   "is committed."),
        input_: Optional[Path] = typer.Option(None, "--input", "-i",
                                              help="Play this audio file through the pipeline "
                                                   "instead of the microphone."),
        speed: float = typer.Option(1.0, "--speed",
                                    help="Pace of --input: 1 is real time, 4 four times "
                                         "faster, 0 as fast as it decodes."),
        live: Optional[bool] = typer.Option(None, "--live/--no-live",
                                            help="Live view on stderr (default: when stderr "
                                                 "is a terminal)."),
        stats: bool = typer.Option(False, "--stats",
                                   help="Print latency and decoding figures at the end."),
        stats_json: Optional[Path] = typer.Option(None, "--stats-json",
                                                  help="Write those figures as JSON."),
        models_dir: Optional[Path] = typer.Option(None, "--models-dir",
                                                  envvar="AS2D_MODELS_DIR",
                                                  help="Model cache folder."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ) -> None:
        """Live dictation: speak, and committed text appears within about a second.

        Text goes to stdout (and --output) as it is committed. Ctrl-C stops after the
        utterance in progress. --input FILE plays a file as if it were the microphone.
        """
        from as2d.cli.app import run_guarded

        req = MicRequest(
            model=model, precision=precision, drafter=drafter, decoder=decoder, budget=budget,
            language=language, threads=threads, drafter_threads=drafter_threads,
            device=device, list_devices=list_devices_, vad=vad, threshold=threshold,
            silence=silence, min_speech=min_speech, pad=pad, max_utterance=max_utterance,
            interval=interval, agreement=agreement, prompt=prompt, output=output,
            input=input_, speed=speed, live=live, stats=stats, stats_json=stats_json,
            models_dir=models_dir, quiet=quiet)
        code = run_guarded(lambda: run_mic(req))
        raise typer.Exit(code or 0)
