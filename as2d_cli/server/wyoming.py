"""Home Assistant's Wyoming protocol, beside the HTTP API, on the same engine.

``as2d serve --wyoming tcp://HOST:PORT`` listens there too; each connection is handled by a
:class:`WyomingHandler` built on the ``wyoming`` library's event handler:

- ``describe`` → ``info``: one ASR program, ``as2d``, with the model the server loaded and the
  languages it knows, and ``supports_transcript_streaming``;
- ``transcribe`` (optional: ``language``, ``name`` = the model, and Home Assistant's
  ``transcript_names``/``transcript_terms``, which become ``hotwords``), then ``audio-start``,
  ``audio-chunk``s (any rate, width, channels: converted to 16-kHz mono PCM16) and
  ``audio-stop`` → ``transcript``.

Streaming, as the current protocol has it: ``transcript-start`` when the audio starts,
``transcript-chunk`` with the words a live session (the realtime socket's: VAD, LocalAgreement)
commits while the person still speaks, then the final ``transcript`` (the whole utterance
decoded at once, the words a file transcription of it gives) and ``transcript-stop``. Clients
that predate streaming ignore the events they do not know.

The decodes take their turn on the engine with the HTTP requests and the live sessions (the
preview's decodes are growing-utterance decodes: they yield to anything else). Wyoming has no
authentication: listen on loopback, or on a network you trust.
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
    from as2d import __version__

    target = backend.engine.target
    languages = sorted(target.tokenizer.languages) if target.multilingual else ["en"]
    by = Attribution(name="as2d", url="https://pypi.org/project/as2d/")
    model = AsrModel(name=backend.model_name, attribution=by, installed=True,
                     description=f"Whisper {backend.model_name}, decoded with "
                                 f"{backend.decoder_name}"
                                 + (f" (drafter {backend.drafter_name})"
                                    if backend.drafter_name else ""),
                     version=__version__, languages=languages)
    program = AsrProgram(name="as2d", attribution=by, installed=True,
                         description="AS²D speculative decoding of Whisper on the CPU",
                         version=__version__, models=[model],
                         supports_transcript_streaming=True)
    return Info(asr=[program])


class WyomingHandler(AsyncEventHandler):
    """One Wyoming connection: its options, its audio, its live preview."""

    def __init__(self, reader, writer, backend: Backend) -> None:
        super().__init__(reader, writer)
        self.backend = backend
        self.language: str | None = None
        self.hotwords: str | None = None
        self.converter = AudioChunkConverter(rate=RATE, width=2, channels=1)
        self.chunks: list[bytes] = []
        self.samples = 0
        self.started = False
        self.preview = None  # the live session whose committed words stream out
        self.source = None
        self.out: asyncio.Queue = asyncio.Queue()
        self.pump: asyncio.Task | None = None
        self.loop = asyncio.get_running_loop()
        self._chunked = False  # a transcript chunk was sent (the next one starts with " ")

    async def handle_event(self, event: Event) -> bool:
        try:
            return await self._handle(event)
        except APIError as exc:
            await self.write_event(Error(exc.message, exc.code).event())
            return False
        except ClientGone:
            return False

    async def _handle(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            self.backend.require_ready()
            await self.write_event(info(self.backend).event())
        elif Transcribe.is_type(event.type):
            self.backend.require_ready()
            self.transcribe(Transcribe.from_event(event))
        elif AudioStart.is_type(event.type):
            self.backend.require_ready()
            await self.start()
        elif AudioChunk.is_type(event.type):
            if not self.started:  # audio without audio-start: taken as its start
                self.backend.require_ready()
                await self.start()
            chunk = self.converter.convert(AudioChunk.from_event(event))
            self.samples += len(chunk.audio) // 2
            if self.samples > MAX_SECONDS * RATE:
                raise APIError(413, f"more than {MAX_SECONDS:g} s of audio in one request",
                               code="audio_too_long")
            self.chunks.append(chunk.audio)
            if self.source is not None:
                self.source.push(np.frombuffer(chunk.audio, dtype="<i2"))
        elif AudioStop.is_type(event.type):
            await self.finish()
            return False  # one request per connection, as Home Assistant makes them
        return True

    def transcribe(self, request: Transcribe) -> None:
        """The request's options, checked as the HTTP API checks them."""
        from as2d.runtime.transcribe.transcribe_options import resolve_language

        backend = self.backend
        if request.name and request.name not in (backend.model_name, "as2d"):
            raise APIError(404, f"the model {request.name!r} is not served here (this server "
                                f"serves {backend.model_name})", code="model_not_found")
        if request.language:
            try:
                self.language = resolve_language(backend.engine.target, request.language)
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
        self.chunks, self.samples, self.started = [], 0, True
        await self.write_event(TranscriptStart(language=self.language).event())
        self.pump = asyncio.ensure_future(self._pump())
        self.source = PushSource(RATE, name="wyoming")
        try:
            self.preview = self.backend.engine.live_session(
                self.source, LiveOptions(language=self.language), self._on_live,
                gate=self.backend.gate, owner=f"wyoming-{id(self)}")
        except Exception:  # noqa: BLE001 - no voice detector: the final transcript still comes
            self.source = self.preview = None
            return
        self.preview.start()

    def _on_live(self, event) -> None:
        """The preview's events (its threads): committed words become transcript chunks."""
        from as2d.runtime.live.live_events import Committed

        if isinstance(event, Committed):
            text = event.text if event.first and not self._chunked else " " + event.text
            self._chunked = True
            self.loop.call_soon_threadsafe(self.out.put_nowait, TranscriptChunk(text).event())

    async def _pump(self) -> None:
        while (event := await self.out.get()) is not None:
            await self.write_event(event)

    async def stop_preview(self) -> None:
        """End the preview (its committed words are sent), and the pump after them."""
        preview, self.preview, self.source = self.preview, None, None
        if preview is not None:
            preview.abort()
            await self.loop.run_in_executor(None, preview.wait, 30)
            self.backend.gate.forget(f"wyoming-{id(self)}")
        if self.pump is not None:
            self.out.put_nowait(None)
            await self.pump
            self.pump = None

    async def finish(self) -> None:
        """The whole utterance decoded at once → ``transcript``, then ``transcript-stop``."""
        from as2d.runtime.audio import Audio
        from as2d.runtime.transcribe.longform import TranscriptionInfo
        from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

        if not self.started:
            await self.write_event(TranscriptStart(language=self.language).event())
        await self.stop_preview()
        pcm = np.frombuffer(b"".join(self.chunks), dtype="<i2")
        audio = Audio(pcm.astype(np.float32) / 32768.0, source="wyoming")
        options = TranscribeOptions(language=self.language, hotwords=self.hotwords)
        info_ = TranscriptionInfo(None, 0.0, audio.duration)

        def decode() -> str:
            if not len(pcm):
                return ""
            return "".join(s.text for s in self.backend.transcribe(audio, options, info_))

        text = (await self.backend.run_decode(decode, self._gone)).strip()
        language = info_.language or self.language
        await self.write_event(Transcript(text=text, language=language).event())
        await self.write_event(TranscriptStop().event())

    async def _gone(self) -> bool:
        return self.reader.at_eof()

    async def disconnect(self) -> None:
        with contextlib.suppress(Exception):
            await self.stop_preview()


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
