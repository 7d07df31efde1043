"""Live transcription over a WebSocket, in OpenAI's realtime transcription shape.

``/v1/realtime?intent=transcription``. The client sends ``session.update`` (optional: the
input rate, 24 kHz by default or 16 kHz, and the language) and ``input_audio_buffer.append``
events with base64 PCM16 mono audio (binary frames of raw PCM16 are taken too). The audio is
pushed into the same :class:`~as2d.runtime.live.session.LiveSession` ``as2d mic`` runs (Silero
VAD, endpointing, LocalAgreement, speculative finals), and its events go back as OpenAI's:

- ``input_audio_buffer.speech_started`` / ``speech_stopped`` / ``committed`` per utterance
  (an utterance is an ``item_id``);
- ``conversation.item.input_audio_transcription.delta`` with each group of newly committed
  words — a word is sent once it is committed and never taken back — and ``.completed`` with
  the utterance's transcript once its text is settled.

as2d's own client event ``input_audio_buffer.end`` says no more audio will come: the
utterance in progress is finished, its events are sent, and the server closes the socket
(1000). A session that gets no audio for ``--idle-timeout`` seconds (10) ends the same way,
after an ``error`` event with the code ``idle_timeout``, and frees its place.

Many sessions run at once (``--max-sessions``, 8; one more is refused with the error code
``too_many_sessions`` and closed 1013). A session holds the engine only while one of its
decodes runs, taking turns with the others and the HTTP requests (see
:mod:`~as2d.runtime.live.decode_gate`): silence costs its voice detector, never a decode.

With ``?hypotheses=1`` the server also sends
``as2d.hypothesis`` (the tentative tail of each decode), ``as2d.level`` and ``as2d.note``
events, which the browser page draws.

Browsers cannot set an ``Authorization`` header on a WebSocket; as OpenAI does, the key may
come as the subprotocol ``openai-insecure-api-key.<key>``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import secrets

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect

from as2d.server.api_errors import APIError
from as2d.server.backend import Backend

RATES = (24000, 16000)
MAX_APPEND_BYTES = 15 * 1024 * 1024  # OpenAI's limit for one append


def _event_id() -> str:
    return "event_" + secrets.token_hex(8)


def _error(message: str, code: str, param: str | None = None,
           event_id: str | None = None) -> dict:
    return {"type": "error", "event_id": _event_id(),
            "error": {"type": "invalid_request_error", "code": code, "message": message,
                      "param": param, "event_id": event_id}}


class RealtimeConnection:
    """One client's socket: its session settings, its live session, and its event pump."""

    def __init__(self, ws: WebSocket, backend: Backend, hypotheses: bool) -> None:
        self.ws = ws
        self.backend = backend
        self.hypotheses = hypotheses
        self.rate = 24000
        self.language: str | None = None
        self.prompt: str | None = None
        self.id = "sess_" + secrets.token_hex(8)
        self.source = None
        self.session = None
        self.out: asyncio.Queue = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self._items: dict[int, str] = {}
        self._last_item: str | None = None
        self.ended = False
        self.last_audio = self.loop.time()

    # -- what the client sees ---------------------------------------------------------------
    def session_doc(self) -> dict:
        return {"id": self.id, "object": "realtime.transcription_session",
                "type": "transcription",
                "audio": {"input": {
                    "format": {"type": "audio/pcm", "rate": self.rate},
                    "transcription": {"model": self.backend.model_name,
                                      "language": self.language, "prompt": self.prompt},
                    "turn_detection": {"type": "server_vad", "threshold": 0.5,
                                       "prefix_padding_ms": 250, "silence_duration_ms": 500},
                    "noise_reduction": None}},
                "input_audio_format": "pcm16",
                "input_audio_transcription": {"model": self.backend.model_name,
                                              "language": self.language}}

    async def send(self, event: dict) -> None:
        event.setdefault("event_id", _event_id())
        await self.ws.send_text(json.dumps(event, ensure_ascii=False))

    def post(self, event: dict) -> None:
        """From the session's threads: queue an event for the sender."""
        self.loop.call_soon_threadsafe(self.out.put_nowait, event)

    def item(self, utterance: int) -> str:
        if utterance not in self._items:
            self._items[utterance] = f"item_{self.id[5:13]}_{utterance:04d}"
        return self._items[utterance]

    # -- the live session's events (its threads) ---------------------------------------------
    def on_event(self, event) -> None:
        from as2d.runtime.events import Note
        from as2d.runtime.live.live_events import (
            Committed,
            Hypothesis,
            ListenDone,
            UtteranceDone,
            UtteranceEnded,
            UtteranceStarted,
            VoiceLevel,
        )

        if isinstance(event, UtteranceStarted):
            self.post({"type": "input_audio_buffer.speech_started",
                       "audio_start_ms": round(event.start * 1000),
                       "item_id": self.item(event.utterance)})
        elif isinstance(event, UtteranceEnded):
            item = self.item(event.utterance)
            self.post({"type": "input_audio_buffer.speech_stopped",
                       "audio_end_ms": round(event.speech_end * 1000), "item_id": item})
            self.post({"type": "input_audio_buffer.committed",
                       "previous_item_id": self._last_item, "item_id": item})
            self._last_item = item
        elif isinstance(event, Committed):
            delta = event.text if event.first else " " + event.text
            self.post({"type": "conversation.item.input_audio_transcription.delta",
                       "item_id": self.item(event.utterance), "content_index": 0,
                       "delta": delta})
        elif isinstance(event, UtteranceDone):
            self.post({"type": "conversation.item.input_audio_transcription.completed",
                       "item_id": self.item(event.utterance), "content_index": 0,
                       "transcript": event.text})
            for later in range(event.utterance + 1, event.utterance + event.merged):
                # Decoded together with this one (the decoder was behind): its words are in
                # this transcript.
                self.post({"type": "conversation.item.input_audio_transcription.completed",
                           "item_id": self.item(later), "content_index": 0,
                           "transcript": ""})
        elif isinstance(event, ListenDone):
            if event.error:
                self.post(_error(event.error, "session_failed"))
            self.post({"type": "as2d.session.done"} if self.hypotheses else None)
            self.post(_DONE)
        elif self.hypotheses:
            if isinstance(event, Hypothesis):
                self.post({"type": "as2d.hypothesis", "item_id": self.item(event.utterance),
                           "committed": event.committed, "tentative": event.tentative,
                           "final": event.final, "audio_seconds": round(event.audio_seconds, 2),
                           "decode_seconds": round(event.decode_seconds, 3),
                           "tokens": event.tokens, "reused": event.reused})
            elif isinstance(event, VoiceLevel):
                self.post({"type": "as2d.level", "at": round(event.at, 2),
                           "probability": round(event.probability, 3),
                           "level_db": round(event.level_db, 1), "speaking": event.speaking})
            elif isinstance(event, Note) and event.level != "debug":
                self.post({"type": "as2d.note", "message": event.message})

    # -- the client's events ------------------------------------------------------------------
    async def handle(self, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            await self.append_pcm(raw, None)
            return
        try:
            event = json.loads(raw)
        except ValueError:
            await self.send(_error("the message is not JSON", "invalid_json"))
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            await self.send(_error("an event is a JSON object with a string 'type'",
                                   "invalid_event"))
            return
        kind, eid = event["type"], event.get("event_id")
        if kind in ("session.update", "transcription_session.update"):
            await self.update(event.get("session"), kind, eid)
        elif kind == "input_audio_buffer.append":
            audio = event.get("audio")
            if not isinstance(audio, str):
                await self.send(_error("input_audio_buffer.append needs 'audio': base64 PCM16",
                                       "missing_audio", "audio", eid))
                return
            if len(audio) > MAX_APPEND_BYTES * 4 // 3 + 4:
                await self.send(_error("one append carries at most 15 MB of audio",
                                       "audio_too_large", "audio", eid))
                return
            try:
                pcm = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError):
                await self.send(_error("'audio' is not valid base64", "invalid_base64",
                                       "audio", eid))
                return
            await self.append_pcm(pcm, eid)
        elif kind == "input_audio_buffer.commit":
            # Server VAD decides where utterances end; a manual commit changes nothing.
            pass
        elif kind == "input_audio_buffer.clear":
            await self.send({"type": "input_audio_buffer.cleared"})
        elif kind == "input_audio_buffer.end":
            self.ended = True
            if self.source is not None:
                self.source.end()
            else:
                self.post(_DONE)  # nothing was ever sent
        else:
            await self.send(_error(f"unknown or unsupported event type {kind!r}",
                                   "unknown_event", "type", eid))

    async def update(self, session, kind: str, eid) -> None:
        if not isinstance(session, dict):
            await self.send(_error("session.update needs a 'session' object",
                                   "invalid_session", "session", eid))
            return
        audio_in = (session.get("audio") or {}).get("input") or {} \
            if isinstance(session.get("audio"), dict) else {}
        fmt = audio_in.get("format") if isinstance(audio_in, dict) else None
        rate = self.rate
        if isinstance(fmt, dict):
            if fmt.get("type", "audio/pcm") != "audio/pcm":
                await self.send(_error(f"only audio/pcm input is supported, not "
                                       f"{fmt.get('type')!r}", "unsupported_format",
                                       "session.audio.input.format", eid))
                return
            rate = fmt.get("rate", rate)
        legacy = session.get("input_audio_format")
        if legacy is not None and legacy != "pcm16":
            await self.send(_error(f"only pcm16 input is supported, not {legacy!r}",
                                   "unsupported_format", "session.input_audio_format", eid))
            return
        if rate not in RATES or isinstance(rate, bool):
            await self.send(_error(f"the input rate must be 24000 or 16000 Hz, not {rate!r}",
                                   "invalid_rate", "session.audio.input.format.rate", eid))
            return
        if rate != self.rate and self.source is not None:
            await self.send(_error("the input rate cannot change once audio was sent",
                                   "rate_locked", "session.audio.input.format.rate", eid))
            return
        transcription = (audio_in.get("transcription") if isinstance(audio_in, dict) else None) \
            or session.get("input_audio_transcription") or {}
        language = transcription.get("language") if isinstance(transcription, dict) else None
        if language:
            from as2d.runtime.transcribe.transcribe_options import (
                TranscribeOptions,
                check_model,
            )

            try:
                language = check_model(self.backend.engine.target,
                                       TranscribeOptions(language=str(language)))
            except ValueError as exc:
                await self.send(_error(str(exc), "invalid_language",
                                       "session.audio.input.transcription.language", eid))
                return
            if self.session is not None and language != self.language:
                await self.send(_error("the language cannot change once audio was sent",
                                       "language_locked", None, eid))
                return
            self.language = language
        self.rate = rate
        reply = kind.replace(".update", ".updated")
        await self.send({"type": reply, "session": self.session_doc()})

    def idle_deadline(self) -> float | None:
        """When the session will have been idle too long (loop time; counted from the
        connection until audio comes), or None when it is already ending."""
        if self.ended:
            return None
        return self.last_audio + self.backend.settings.idle_timeout

    async def end_idle(self) -> None:
        """No audio for ``--idle-timeout`` seconds: say so, then end the session as
        ``input_audio_buffer.end`` does (what was sent is decoded and its events sent; the
        socket is then closed and the decoder freed for the requests waiting)."""
        seconds = self.backend.settings.idle_timeout
        await self.send(_error(f"no audio for {seconds:g} s: the live session ends and frees "
                               "its place for another (as2d serve --idle-timeout)",
                               "idle_timeout"))
        self.backend.log(f"as2d: live session {self.id} sent no audio for {seconds:g} s; "
                         "ending it")
        self.ended = True
        if self.source is not None:
            self.source.end()
        else:
            self.post(_DONE)

    async def append_pcm(self, pcm: bytes, eid) -> None:
        self.last_audio = self.loop.time()
        if self.ended:
            await self.send(_error("input_audio_buffer.end was sent: no more audio is taken",
                                   "input_ended", None, eid))
            return
        if len(pcm) % 2:
            await self.send(_error("PCM16 audio has an even number of bytes",
                                   "invalid_audio", "audio", eid))
            return
        if self.source is None:
            if not await self.start_session():
                return
        samples = np.frombuffer(pcm, dtype="<i2")
        self.last_audio = self.loop.time()  # again: the first audio may have waited its turn
        if not self.source.push(samples):
            await self.send(_error("the decoder is behind: audio was dropped", "audio_dropped",
                                   None, eid))

    async def start_session(self) -> bool:
        """The live session, made when the first audio comes (the rate is settled by then).
        It takes turns on the engine with the other sessions and requests (the gate)."""
        from as2d.engine import ModelError
        from as2d.runtime.live.audio_input import PushSource
        from as2d.runtime.live.session import LiveOptions

        backend = self.backend
        self.source = PushSource(self.rate, name=f"websocket {self.id}")
        options = LiveOptions(language=self.language)
        try:  # the engine makes the session's voice detector (a state of its own; ~0.1 s,
            # so not on the event loop, which serves the other sessions meanwhile)
            self.session = await self.loop.run_in_executor(None, lambda: (
                backend.engine.live_session(self.source, options, self.on_event,
                                            gate=backend.gate, owner=self.id)))
        except ModelError as exc:
            await self.send(_error(str(exc), "vad_unavailable"))
            return False
        self.session.start()
        return True

    async def release(self) -> None:
        """The client is gone or the session ended: stop decoding, free its place."""
        session = self.session
        if session is not None and not session.done:
            if self.ended:
                await asyncio.get_running_loop().run_in_executor(None, session.wait, 30)
            if not session.done:
                session.abort()
                await asyncio.get_running_loop().run_in_executor(None, session.wait, 30)
        self.backend.sessions.discard(self.id)
        self.backend.gate.forget(self.id)


_DONE = {"type": "__done__"}


async def serve_realtime(ws: WebSocket, backend: Backend) -> None:
    """Run one realtime connection to its end (the caller checked the key)."""
    intent = ws.query_params.get("intent", "transcription")
    protocols = ws.headers.get("sec-websocket-protocol", "")
    offered = [p.strip() for p in protocols.split(",") if p.strip()]
    subprotocol = "realtime" if "realtime" in offered else None
    await ws.accept(subprotocol=subprotocol)
    if intent != "transcription":
        await ws.send_text(json.dumps(_error("this server only transcribes: connect with "
                                             "?intent=transcription", "unsupported_intent")))
        await ws.close(1008)
        return
    try:
        backend.require_ready()
    except APIError as exc:
        await ws.send_text(json.dumps(_error(exc.message, exc.code or "unavailable")))
        await ws.close(1013)
        return
    limit = backend.settings.max_sessions
    if len(backend.sessions) >= limit:
        await ws.send_text(json.dumps(_error(
            f"the server already runs {len(backend.sessions)} live sessions, its limit (as2d "
            "serve --max-sessions); retry later", "too_many_sessions")))
        await ws.close(1013)
        return
    hypotheses = ws.query_params.get("hypotheses", "") in ("1", "true")
    conn = RealtimeConnection(ws, backend, hypotheses)
    backend.sessions.add(conn.id)
    try:
        await conn.send({"type": "session.created", "session": conn.session_doc()})
    except BaseException:
        backend.sessions.discard(conn.id)
        raise

    async def pump() -> None:
        while True:
            event = await conn.out.get()
            if event is None:
                continue
            if event is _DONE:
                return
            await conn.send(event)

    sender = asyncio.ensure_future(pump())
    receive = None
    try:
        while True:
            if receive is None:
                receive = asyncio.ensure_future(ws.receive())
            deadline = conn.idle_deadline()
            wait = None if deadline is None else max(0.0, deadline - conn.loop.time())
            done, _ = await asyncio.wait({receive, sender}, timeout=wait,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:  # no audio for --idle-timeout seconds: free the decoder
                await conn.end_idle()
                continue
            if sender in done:
                receive.cancel()
                with contextlib.suppress(BaseException):
                    await receive
                sender.result()
                with contextlib.suppress(Exception):
                    await ws.close(1000)
                return
            message = receive.result()
            receive = None
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await conn.handle(data)
    except WebSocketDisconnect:
        return
    except Exception as exc:  # noqa: BLE001 - one line in the log and to the client
        logging.getLogger("as2d.serve").error("as2d: error: realtime session %s failed "
                                              "(%s: %s)", conn.id, type(exc).__name__, exc)
        with contextlib.suppress(Exception):
            await conn.send({"type": "error", "error": {
                "type": "server_error", "code": "session_failed", "param": None,
                "message": f"the live session failed ({type(exc).__name__})"}})
            await ws.close(1011)
    finally:
        for task in (sender, receive):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await conn.release()
