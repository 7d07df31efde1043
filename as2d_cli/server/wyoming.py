"""Home Assistant's Wyoming protocol, beside the HTTP API, on the same engine.

``as2d serve --wyoming tcp://HOST:PORT`` listens there too; each connection is handled by a
:class:`WyomingHandler` built on the ``wyoming`` library's event handler:

- ``describe`` → ``info``: one ASR program, ``as2d``, with the model the server loaded, then
  every other installed Whisper model a request may name (the HTTP API's ``model=`` choice,
  :mod:`as2d.server.model_choice`), each with the languages it knows (``["en"]`` for an
  English-only one), and ``supports_transcript_streaming``;
- ``transcribe`` (optional: ``language``, ``name`` = the model, and Home Assistant's
  ``transcript_names``/``transcript_terms``, which become ``hotwords``), then ``audio-start``,
  ``audio-chunk``s (any rate, width, channels: converted to 16-kHz mono PCM16) and
  ``audio-stop`` → ``transcript``.

The ``transcript`` is the request's audio decoded at once, up to 0.05 s after its last voiced
frame (a satellite streams until its own VAD has heard enough silence; that trailing silence
carries no words). Because that end is known as soon as the speech stops, the decode starts
then, while the silence is still streaming in, and is kept if no speech follows before
``audio-stop``: Home Assistant gets the transcript as the audio ends rather than one decode
later. Speech that resumes makes it stale; audio that ends mid-speech is decoded whole.

Streaming, as the current protocol has it: ``transcript-start`` when the audio starts,
``transcript-chunk`` with the words a live session (the realtime socket's: VAD, LocalAgreement)
commits while the person still speaks, then the final ``transcript`` and ``transcript-stop``.
Clients that predate streaming ignore the events they do not know.

A ``name`` other than the server's own model is loaded on first use through the same registry
as HTTP's ``model=`` (``--model-ttl``, ``--preload``, ``--memory-budget-mb``: over the budget
is an ``error`` event with the 503's text), pinned while the connection's request runs, and
then unloaded after the TTL like HTTP's. Both the final decode and the streaming preview use
it; ``language`` is checked against it. A name that is no installed model is an ``error``
event (``model_not_found``), not the server's model: a satellite that asked for a model
should not silently get another.

The decodes take their turn on the engine with the HTTP requests and the live sessions, as
end-of-speech decodes (the preview's are growing-utterance decodes: they yield to anything).
Wyoming has no authentication: listen on loopback, or on a network you trust.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlparse

import numpy as np
from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioChunkConverter, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.server import AsyncEventHandler

from as2d.server.api_errors import APIError
from as2d.server.backend import Backend, ClientGone

RATE = 16000
MAX_SECONDS = 300.0  # one request's audio: a voice command, not a recording


def parse_uri(uri: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` → (host, port); a ValueError that says what is wrong."""
    parsed = urlparse(uri)
    if parsed.scheme != "tcp":
        raise ValueError(f"--wyoming takes tcp://HOST:PORT, not {uri!r}")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None or not 1 <= port <= 65535:
        raise ValueError(f"--wyoming takes tcp://HOST:PORT with a port, not {uri!r}")
    return parsed.hostname, port


def info(backend: Backend) -> Info:
    """The server's own model first, then each other installed Whisper model a request may
    name (one entry per model: ``tiny.en``, not also ``tiny.en-int8``)."""
    from as2d import __version__

    target = backend.engine.target
    languages = sorted(target.tokenizer.languages) if target.multilingual else ["en"]
    by = Attribution(name="as2d", url="https://pypi.org/project/as2d/")
    models = [AsrModel(name=backend.model_name, attribution=by, installed=True,
                       description=f"Whisper {backend.model_name}, decoded with "
                                   f"{backend.decoder_name}"
                                   + (f" (drafter {backend.drafter_name})"
                                      if backend.drafter_name else ""),
                       version=__version__, languages=languages)]
    for name, full in sorted(backend.models.listed().items()):
        models.append(AsrModel(
            name=name, attribution=by, installed=True, version=__version__,
            description=f"Whisper {full}, loaded when a request names it",
            languages=sorted(backend.models.languages(full))))
    program = AsrProgram(name="as2d", attribution=by, installed=True,
                         description="AS²D speculative decoding of Whisper on the CPU",
                         version=__version__, models=models,
                         supports_transcript_streaming=True)
    return Info(asr=[program])


class WyomingHandler(AsyncEventHandler):
    """One Wyoming connection: its options, its audio, its live preview."""

    def __init__(self, reader, writer, backend: Backend) -> None:
        super().__init__(reader, writer)
        self.backend = backend
        self.engine = None  # the model the request named (None: the server's own)
        self.language: str | None = None
        self.hotwords: str | None = None
        self.converter = AudioChunkConverter(rate=RATE, width=2, channels=1)
        self.chunks: list[bytes] = []
        self.samples = 0
        self.speech = None  # where the speech ends (_SpeechEnd)
        self.ahead: tuple[int, asyncio.Task, list] | None = None  # (end, decode, stale flag)
        self.started = False
        self.preview = None  # the live session whose committed words stream out
        self.source = None
        self.out: asyncio.Queue = asyncio.Queue()
        self.pump: asyncio.Task | None = None
        self.loop = asyncio.get_running_loop()
        self._chunked = False  # a transcript chunk was sent (the next one starts with " ")
        self._chunked_done = False  # the final transcript is coming: no more chunks
        self._winding_down: list = []  # previews aborted, their threads not yet ended

    async def handle_event(self, event: Event) -> bool:
        """One event; whatever goes wrong is an ``error`` event, and the connection closes
        (the server and its other connections go on)."""
        try:
            return await self._handle(event)
        except ClientGone:
            return False
        except APIError as exc:
            error = Error(exc.message, exc.code)
        except (KeyError, TypeError, ValueError) as exc:  # a malformed event's fields
            error = Error(f"a malformed {event.type} event ({type(exc).__name__}: {exc})",
                          "invalid_event")
        except Exception as exc:  # noqa: BLE001 - never out of the handler
            error = Error(f"the server failed ({type(exc).__name__}: {exc})", "server_error")
        with contextlib.suppress(Exception):
            await self.write_event(error.event())
        return False

    async def _handle(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            self.backend.require_ready()
            await self.write_event(info(self.backend).event())
        elif Transcribe.is_type(event.type):
            self.backend.require_ready()
            await self.transcribe(Transcribe.from_event(event))
        elif AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            _check_format(start.rate, start.width, start.channels)
            self.backend.require_ready()
            await self.start()
        elif AudioChunk.is_type(event.type):
            raw = AudioChunk.from_event(event)
            _check_format(raw.rate, raw.width, raw.channels, raw.audio)
            if not self.started:  # audio without audio-start: taken as its start
                self.backend.require_ready()
                await self.start()
            chunk = self.converter.convert(raw)
            self.samples += len(chunk.audio) // 2
            if self.samples > MAX_SECONDS * RATE:
                raise APIError(413, f"more than {MAX_SECONDS:g} s of audio in one request",
                               code="audio_too_long")
            self.chunks.append(chunk.audio)
            if self.speech is not None:
                end, resumed = self.speech.feed(np.frombuffer(chunk.audio, dtype="<i2"))
                if resumed:
                    self.drop_ahead()  # more speech: what was decoded ahead is stale
                if end is not None:
                    self.decode_ahead(end)
            if self.source is not None:
                self.source.push(np.frombuffer(chunk.audio, dtype="<i2"))
        elif AudioStop.is_type(event.type):
            await self.finish()
            return False  # one request per connection, as Home Assistant makes them
        return True

    async def transcribe(self, request: Transcribe) -> None:
        """The request's options, checked as the HTTP API checks them. ``name``: the model,
        loaded now if it is not (the HTTP API's registry: it stays pinned until this
        connection's task ends, so not unloaded while its request runs)."""
        from as2d.runtime.transcribe.transcribe_options import TranscribeOptions, check_model

        backend = self.backend
        name = request.name
        own = (backend.model_name, backend.settings.model, "as2d")
        if name and name not in own and name not in backend.models.choosable():
            served = ", ".join([backend.model_name, *sorted(backend.models.listed())])
            raise APIError(404, f"the model {name!r} is not installed here (this server "
                                f"serves {served}; as2d models install NAME adds one)",
                           code="model_not_found")
        engine = await backend.models.engine(name) if name and name not in own else None
        self.engine = None if engine is backend.engine else engine
        self.language = None
        if request.language:
            try:
                self.language = check_model((engine or backend.engine).target,
                                            TranscribeOptions(language=request.language))
            except ValueError as exc:
                raise APIError(400, str(exc), code="invalid_language") from None
        words = [w.strip() for w in (request.transcript_names or [])
                 + (request.transcript_terms or []) if w and w.strip()]
        self.hotwords = ", ".join(dict.fromkeys(words))[:1000] or None

    async def start(self) -> None:
        """A new utterance: the stream's first event, and the live preview."""
        from as2d.runtime.live.audio_input import PushSource
        from as2d.runtime.live.session import LiveOptions

        await self.stop_preview()
        self.drop_ahead()
        self.chunks, self.samples, self.started = [], 0, True
        self._chunked = self._chunked_done = False
        await self.write_event(TranscriptStart(language=self.language).event())
        self.pump = asyncio.ensure_future(self._pump())
        # Voice detectors take ~0.1 s to make: not on the event loop, which serves everyone.
        try:
            self.speech = await self.loop.run_in_executor(
                None, lambda: _SpeechEnd(self.backend.engine.new_voice_detector()))
        except Exception:  # noqa: BLE001 - no voice detector: decode at audio-stop
            self.speech = None
        backend, me = self.backend, f"wyoming-{id(self)}"
        if len(backend.sessions) >= backend.settings.max_sessions:
            raise APIError(503, f"the server already runs {len(backend.sessions)} live "
                                "sessions, its limit (as2d serve --max-sessions); retry later",
                           code="too_many_sessions")
        backend.sessions.add(me)  # the preview is a live session (freed in stop_preview)
        self.source = PushSource(RATE, name="wyoming")
        try:
            # The decode at the end of speech is ours (decode_ahead): the preview does not
            # make one of its own.
            self.preview = await self.loop.run_in_executor(None, lambda: (
                (self.engine or self.backend.engine).live_session(
                    self.source, LiveOptions(language=self.language, speculative_final=False),
                    self._on_live, gate=self.backend.gate, owner=f"wyoming-{id(self)}")))
        except Exception:  # noqa: BLE001 - no voice detector: the final transcript still comes
            self.source = self.preview = None
            backend.sessions.discard(me)
            return
        self.preview.start()

    def _on_live(self, event) -> None:
        """The preview's events (its threads): committed words become transcript chunks."""
        from as2d.runtime.live.live_events import Committed

        if isinstance(event, Committed) and not self._chunked_done:
            text = event.text if event.first and not self._chunked else " " + event.text
            self._chunked = True
            self.loop.call_soon_threadsafe(self.out.put_nowait, TranscriptChunk(text).event())

    async def _pump(self) -> None:
        while (event := await self.out.get()) is not None:
            await self.write_event(event)

    async def stop_preview(self, wait: bool = True) -> None:
        """End the preview: its decodes stop (a running one after its current pass), the
        words it committed are sent, nothing after them. ``wait=False``: its threads wind
        down while the final decode waits its turn on the gate (they hold nothing else)."""
        preview, self.preview, self.source = self.preview, None, None
        self._chunked_done = True
        self.backend.sessions.discard(f"wyoming-{id(self)}")
        if preview is not None:
            preview.abort()
            self._winding_down.append(preview)
        if self.pump is not None:
            self.out.put_nowait(None)
            await self.pump
            self.pump = None
        if wait:
            await self.wind_down()

    async def wind_down(self) -> None:
        while self._winding_down:
            preview = self._winding_down.pop()
            await self.loop.run_in_executor(None, preview.wait, 30)
        self.backend.gate.forget(f"wyoming-{id(self)}")

    def _pcm(self, end: int | None = None) -> np.ndarray:
        pcm = np.frombuffer(b"".join(self.chunks), dtype="<i2")
        return pcm if end is None else pcm[:end]

    def _decode(self, pcm: np.ndarray, stale: list | None = None):
        """The transcription of ``pcm`` as a task on the gate: (text, language)."""
        from as2d.runtime.audio import Audio
        from as2d.runtime.live.decode_gate import FINAL
        from as2d.runtime.transcribe.longform import TranscriptionInfo
        from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

        audio = Audio(pcm.astype(np.float32) / 32768.0, source="wyoming")
        options = TranscribeOptions(language=self.language, hotwords=self.hotwords)
        info_ = TranscriptionInfo(None, 0.0, audio.duration)

        def decode():
            if not len(pcm):
                return "", self.language
            text = "".join(s.text for s in self.backend.transcribe(audio, options, info_,
                                                                  self.engine))
            return text.strip(), info_.language or self.language

        async def gone() -> bool:
            return bool(stale) or self.reader.at_eof()

        return asyncio.ensure_future(self.backend.run_decode(decode, gone, kind=FINAL,
                                                             engine=self.engine))

    def decode_ahead(self, end: int) -> None:
        """The speech seems to have ended at sample ``end``: decode up to there now."""
        if self.ahead is not None and self.ahead[0] == end:
            return
        self.drop_ahead()
        stale: list = []
        task = self._decode(self._pcm(end), stale)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self.ahead = (end, task, stale)

    def drop_ahead(self) -> None:
        if self.ahead is not None:
            self.ahead[2].append(True)  # its decode stops after the current pass
            self.ahead = None

    async def finish(self) -> None:
        """The audio up to its speech's end decoded → ``transcript``, ``transcript-stop``."""
        if not self.started:
            await self.write_event(TranscriptStart(language=self.language).event())
        await self.stop_preview(wait=False)
        end = self.speech.finish(self.samples) if self.speech is not None else None
        if self.ahead is not None and end is not None and self.ahead[0] == end:
            task = self.ahead[1]  # decoded while the silence came in
            self.ahead = None
        else:
            self.drop_ahead()
            task = self._decode(self._pcm(end))
        text, language = await task
        await self.write_event(Transcript(text=text, language=language).event())
        await self.write_event(TranscriptStop().event())
        await self.wind_down()

    async def _gone(self) -> bool:
        return self.reader.at_eof()

    async def disconnect(self) -> None:
        self.drop_ahead()
        with contextlib.suppress(Exception):
            await self.stop_preview()


def _check_format(rate, width, channels, audio: bytes | None = None) -> None:
    """400 ``invalid_audio`` for a format the converter cannot take, or a chunk that is not
    whole frames."""
    ok = (isinstance(rate, int) and 8000 <= rate <= 192000 and isinstance(width, int)
          and 1 <= width <= 4 and isinstance(channels, int) and 1 <= channels <= 2)
    if not ok:
        raise APIError(400, f"audio of rate {rate!r}, width {width!r}, channels {channels!r} "
                            "is not supported (rate 8000..192000 Hz, width 1..4 bytes, "
                            "channels 1..2)", code="invalid_audio")
    if audio is not None and (not isinstance(audio, bytes) or len(audio) % (width * channels)):
        raise APIError(400, f"an audio chunk of {len(audio or b'')} bytes is not whole frames "
                            f"of {width * channels} bytes", code="invalid_audio")


class _SpeechEnd:
    """Where the request's speech ends: Silero frame by frame and the live endpointer (the
    utterance audio ends ``tail``, 0.05 s, after the last voiced frame)."""

    def __init__(self, vad) -> None:
        from as2d.runtime.live.endpoint import Endpointer

        self.vad = vad
        self.endpointer = Endpointer(frame=self.vad.frame_samples, rate=RATE)
        self.rest = np.zeros(0, np.float32)
        self.end: int | None = None  # the end of the speech so far (None: none yet)

    def feed(self, pcm: np.ndarray) -> tuple[int | None, bool]:
        """Take the next samples: (the end of speech when one was just found (a pause
        began), else None; whether speech resumed after a pause)."""
        x = np.concatenate([self.rest, pcm.astype(np.float32) / 32768.0])
        f = self.vad.frame_samples
        found, resumed = None, False
        n = len(x) // f
        for i in range(n):
            for b in self.endpointer.push(self.vad(x[i * f:(i + 1) * f])):
                if b.kind in ("tentative", "end"):
                    self.end = found = b.end
                elif b.kind in ("resume", "start"):
                    found, resumed = None, True
        self.rest = x[n * f:]
        return found, resumed

    def finish(self, total: int) -> int | None:
        """The end of the request's audio to decode: None (all of it) when there was no
        speech or it goes on to the last frame."""
        ep = self.endpointer
        if ep.speaking:
            return None
        for b in ep.finish():
            if b.kind == "end":
                self.end = b.end
        return None if self.end is None else min(self.end, total)


async def serve_wyoming(backend: Backend, sock) -> asyncio.AbstractServer:
    """Serve Wyoming on the listening socket ``sock`` (on the running loop) until closed."""
    tasks: set[asyncio.Task] = set()

    async def connected(reader, writer) -> None:
        handler = WyomingHandler(reader, writer, backend)
        task = asyncio.current_task()
        tasks.add(task)
        try:
            await handler.run()
        finally:
            tasks.discard(task)

    server = await asyncio.start_server(connected, sock=sock)
    server.as2d_tasks = tasks  # type: ignore[attr-defined]
    return server
