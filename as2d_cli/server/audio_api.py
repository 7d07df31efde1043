"""OpenAI's audio API on the engine: transcriptions, translations, models; and as2d's ask.

Response bodies and content types are OpenAI's: ``json`` is ``{"text", "usage"}``,
``verbose_json`` adds ``task``, ``language`` (a name, "english"), ``duration``, whisper's
``segments`` and, when asked, top-level ``words``; ``text``, ``srt`` and ``vtt`` are the
documents :mod:`as2d.writers` writes, so they are byte for byte what ``as2d transcribe``
prints for the same file and options. ``stream=true`` answers Server-Sent Events: one
``transcript.text.delta`` per segment as it is committed (with ``diarized_json``, then one
``transcript.text.segment`` per speaker's segment), then ``transcript.text.done``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from as2d import writers
from as2d.loading import ModelError
from as2d.runtime.option_errors import OptionError
from as2d.server.api_errors import APIError
from as2d.server.backend import Backend, ClientGone, RequestJob
from as2d.server.forms import AudioRequest, parse_ask_request, parse_audio_request
from as2d.server.uploads import Upload, read_multipart

TEXT_TYPES = {"text": "text/plain; charset=utf-8", "srt": "application/x-subrip; charset=utf-8",
              "vtt": "text/vtt; charset=utf-8"}


def language_name(code: str | None) -> str:
    from as2d.runtime.whisper.languages import LANGUAGE_NAMES

    if not code:
        return "unknown"
    return LANGUAGE_NAMES.get(code, code)


def engine_options(req: AudioRequest):
    """The engine's options for a request, built as ``as2d transcribe`` builds them from the
    same settings (``--temperature T`` grows into whisper's fallback schedule, ``beam_size``
    is ``--beam-size``)."""
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    return TranscribeOptions.parse(language=req.language, multilingual=req.multilingual,
                                   task=req.task, initial_prompt=req.prompt,
                                   temperature=req.temperature,
                                   temperature_increment_on_fallback=0.2,
                                   hotwords=req.hotwords, vad_filter=req.vad_filter,
                                   word_timestamps=req.words, beam_size=req.beam_size,
                                   patience=req.patience, length_penalty=req.length_penalty)


def diarized(segments: list, info) -> dict:
    """OpenAI's ``diarized_json``: segments with ``speaker`` lettered A, B, ... in order of
    first speech, unless named from known speakers."""
    letters: dict[str, str] = {}
    unnamed = 0
    for s in segments:
        who = s.speaker or "SPEAKER_00"
        if who not in letters:
            if who.startswith("SPEAKER_"):
                letters[who], unnamed = _letter(unnamed), unnamed + 1
            else:  # named from a known speaker's clip
                letters[who] = who
    return {"task": "transcribe", "duration": round(info.duration, 3),
            "text": "".join(s.text for s in segments).strip(),
            "segments": [{"type": "transcript.text.segment", "id": f"seg_{i:03d}",
                          "start": round(s.start, 3), "end": round(s.end, 3),
                          "text": s.text.strip(),
                          "speaker": letters[s.speaker or "SPEAKER_00"]}
                         for i, s in enumerate(segments)],
            "usage": _usage(info.duration)}


def _letter(n: int) -> str:
    """A, B, ... Z, AA, AB, ..."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


def _segment(seg) -> dict:
    d = writers.segment_dict(seg)
    d.pop("words", None)
    d.pop("partial", None)
    return d


def _usage(duration: float) -> dict:
    return {"type": "duration", "seconds": math.ceil(duration)}


def render(req: AudioRequest, segments: list, info) -> Response:
    """The response body for ``req.response_format``."""
    text = "".join(s.text for s in segments).strip()
    fmt = req.response_format
    if fmt in TEXT_TYPES:
        body = {"text": writers.to_txt, "srt": writers.to_srt, "vtt": writers.to_vtt}[fmt](
            segments)
        return Response(body, media_type=TEXT_TYPES[fmt])
    if fmt == "json":
        return JSONResponse({"text": text, "usage": _usage(info.duration)})
    if fmt == "diarized_json":
        return JSONResponse(diarized(segments, info))
    doc = {"task": req.task,
           "language": "english" if req.task == "translate" else language_name(info.language),
           "duration": round(info.duration, 3), "text": text}
    if "segment" in req.granularities:
        doc["segments"] = [_segment(s) for s in segments]
    if req.words:
        doc["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end}
                        for s in segments for w in (s.words or [])]
    doc["usage"] = _usage(info.duration)
    try:
        body = writers.dumps_json(doc)
    except ValueError as exc:
        raise APIError(500, str(exc), code="not_finite") from None
    return Response(body, media_type="application/json")


def _references(options):
    """The known speakers' clips (bytes of any audio format) as 16-kHz samples."""
    import io
    from dataclasses import replace

    from as2d.runtime.audio import AudioError, load_audio

    refs = []
    for name, data in options.references:
        try:
            clip = load_audio(io.BytesIO(data))
        except AudioError as exc:
            raise APIError(400, f"the reference of {name!r} cannot be read as audio ({exc})",
                           param="known_speaker_references", code="invalid_value") from None
        refs.append((name, clip.samples.copy()))
        clip.close()
    return replace(options, references=tuple(refs))


def make_router(backend: Backend) -> APIRouter:
    router = APIRouter()
    limit = int(backend.settings.max_upload_mb * 1024 * 1024)

    async def read_upload(request: Request) -> Upload:
        return await read_multipart(request.headers.get("content-type"),
                                    request.headers.get("content-length"), request.stream(),
                                    limit)

    async def load(req: AudioRequest):
        from as2d.runtime.audio import AudioError, display_name, load_audio

        loop = asyncio.get_running_loop()
        try:
            audio = await loop.run_in_executor(None, load_audio, req.file)
        except AudioError as exc:
            message = str(exc).replace(display_name(req.file), req.filename or "file")
            raise APIError(400, f"the file cannot be read as audio ({message})",
                           param="file", code="invalid_file_format") from None
        return audio

    def check_language(req: AudioRequest, engine=None) -> None:
        from as2d.runtime.transcribe.transcribe_options import resolve_language

        target = (engine or backend.engine).target
        try:
            resolve_language(target, req.language)
        except ValueError as exc:
            raise APIError(400, str(exc), param="language", code="invalid_value") from None
        if req.task == "translate" and not target.multilingual:
            raise APIError(400, f"{target.name} is English-only; it cannot translate (start "
                                "the server with a multilingual model such as base)",
                           param="model", code="invalid_value")

    async def audio_endpoint(request: Request, task: str) -> Response:
        upload = await read_upload(request)
        try:
            req = parse_audio_request(upload, task, backend.settings.decoder)
            backend.require_ready()
            engine = await backend.models.engine(req.model)  # a model the request names
            check_language(req, engine)
            audio = await load(req)  # from here the decode's cleanup closes it
            if req.stream:
                return await stream(request, req, audio, engine)
            segments, info = await backend.run_decode(
                lambda: decode(req, audio, engine), request.is_disconnected,
                cleanup=audio.close, engine=engine)
            return render(req, segments, info)
        except ClientGone:
            return Response(status_code=499)
        finally:
            upload.close()  # the audio is decoded from memory by now

    def decode(req: AudioRequest, audio, engine=None):
        from as2d.runtime.transcribe.longform import TranscriptionInfo

        info = TranscriptionInfo(None, 0.0, audio.duration)
        options = engine_options(req)
        beside = None
        if req.speakers is not None:
            from dataclasses import replace

            options = replace(options, word_timestamps=True)
            beside = backend.engine.diarize_beside(audio.samples, _references(req.speakers))
        try:
            try:
                segments = list(backend.transcribe(audio, options, info, engine))
            except BaseException:  # cancelled (the client went) or failed: the slot is freed
                if beside is not None:  # now, not after the whole file's diarization
                    beside.stop()
                raise
            if beside is not None:
                from as2d.runtime.speakers.assign import assign_speakers

                segments = assign_speakers(segments, beside.result().turns)
        except ModelError as exc:  # the speaker models are missing or damaged
            raise APIError(503, str(exc), code="model_unavailable") from None
        except ValueError as exc:  # options the model cannot honour, a clip with no speech
            param = exc.option if isinstance(exc, OptionError) else None
            if beside is not None and param is None:
                param = "known_speaker_references"
            raise APIError(400, str(exc), param=param, code="invalid_value") from None
        return segments, info

    async def stream(request: Request, req: AudioRequest, audio, engine=None) -> Response:
        """Server-Sent Events, one delta per committed segment. The decode slot is taken
        before the answer starts, so a full queue is still a 429.

        ``diarized_json`` (OpenAI's diarized stream): the deltas come as the segments are
        decoded, then, once the speakers are known, one ``transcript.text.segment`` per
        diarized segment (the fields and ids of the non-streamed ``diarized_json``), then
        ``transcript.text.done``. Speakers are clustered over the whole recording, so no
        segment's speaker (nor where a segment splits between two) is known before the end:
        the deltas carry no ``segment_id``."""
        from as2d.runtime.transcribe.longform import TranscriptionInfo

        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        info = TranscriptionInfo(None, 0.0, audio.duration)
        done = object()
        options, speakers = engine_options(req), None
        if req.speakers is not None:  # checked before the stream starts: a 400, not an event
            from dataclasses import replace

            from as2d.runtime.speakers.pipeline import MIN_SAMPLES

            if len(audio.samples) < MIN_SAMPLES:
                audio.close()
                raise APIError(400, f"the audio is {audio.duration:.2f} s long, too short to "
                                    "tell speakers apart (a word takes at least 0.25 s)",
                               param="file", code="invalid_value")
            try:  # (decoded off the event loop, as every upload is)
                speakers = await loop.run_in_executor(None, _references, req.speakers)
            except APIError:
                audio.close()
                raise
            options = replace(options, word_timestamps=True)

        def work() -> None:
            beside = None
            try:
                if speakers is not None:
                    beside = backend.engine.diarize_beside(audio.samples, speakers)
                segments = []
                for seg in backend.transcribe(audio, options, info, engine):
                    segments.append(seg)
                    loop.call_soon_threadsafe(events.put_nowait, seg)
                if beside is not None:
                    from as2d.runtime.speakers.assign import assign_speakers

                    turns = beside.result().turns
                    beside = None
                    labelled = diarized(assign_speakers(segments, turns), info)["segments"]
                    loop.call_soon_threadsafe(events.put_nowait, labelled)
            except BaseException as exc:  # noqa: BLE001 - handed to the event stream
                loop.call_soon_threadsafe(events.put_nowait, exc)
            finally:
                if beside is not None:  # cancelled or failed: nobody waits for the rest
                    beside.stop()
                loop.call_soon_threadsafe(events.put_nowait, done)

        job = await backend.start(work, request.is_disconnected, cleanup=audio.close,
                                  engine=engine)

        async def body():
            text = ""
            while True:
                # uvicorn drops what is sent to a client that went away without saying
                # so: look for the disconnect, and stop the decode when it comes.
                try:
                    item = await asyncio.wait_for(events.get(), 0.25)
                except TimeoutError:
                    item = None
                if await request.is_disconnected():
                    return
                if item is None:
                    f = job.future
                    if f.done() and (f.cancelled() or isinstance(f.exception(), ClientGone)):
                        return  # stopped before it began (the server is stopping)
                    continue
                if item is done:
                    break
                if isinstance(item, BaseException):
                    message = str(item) if isinstance(item, ValueError | ModelError) else \
                        f"decoding failed ({type(item).__name__})"
                    param = item.option if isinstance(item, OptionError) else None
                    yield _sse({"type": "error", "error": {
                        "message": message, "type": "server_error", "param": param,
                        "code": "decode_failed"}})
                    return
                if isinstance(item, list):  # the diarized segments, speakers known
                    for segment in item:
                        yield _sse(segment)
                    continue
                delta = item.text if text else item.text.lstrip()
                text += delta
                if delta:
                    yield _sse({"type": "transcript.text.delta", "delta": delta})
            yield _sse({"type": "transcript.text.done", "text": text.strip(),
                        "usage": _usage(info.duration)})

        return _JobStream(backend, job, body(), media_type="text/event-stream",
                          headers={"Cache-Control": "no-cache"})

    @router.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await audio_endpoint(request, "transcribe")

    @router.post("/v1/audio/translations")
    async def translations(request: Request) -> Response:
        return await audio_endpoint(request, "translate")

    @router.post("/v1/audio/ask")
    async def ask(request: Request) -> Response:
        if not backend.settings.llm:
            raise APIError(404, "this server has no answering model (start it with --llm "
                                "gemma-3-270m)", code="llm_not_loaded")
        upload = await read_upload(request)
        try:
            req = parse_ask_request(upload, backend.settings.decoder)
            backend.require_ready()
            check_language(req)
            audio = await load(req)
            doc = await backend.run_decode(lambda: answer(req, audio),
                                           request.is_disconnected, cleanup=audio.close)
            return Response(json.dumps(doc, ensure_ascii=False, allow_nan=False),
                            media_type="application/json")
        except ClientGone:
            return Response(status_code=499)
        except ValueError as exc:  # NaN in the answer's numbers
            raise APIError(500, str(exc), code="not_finite") from None
        finally:
            upload.close()

    transcripts: list = []  # the transcript cache, made on the first question

    def transcript_cache():
        """The server's transcript cache: the one ``as2d ask`` and the API use (the models
        folder's), the most recent also in memory; None when ``$AS2D_TRANSCRIPT_CACHE`` is
        off."""
        if not transcripts:
            from as2d.models.bundle import models_dir
            from as2d.runtime.ask.transcripts import default_cache

            transcripts.append(default_cache(models_dir(backend.settings.models_dir)))
        return transcripts[0]

    def answer(req: AudioRequest, audio) -> dict:
        """What ``as2d ask --json`` prints for the same file and question: the same options,
        the same pipeline (:meth:`Engine.ask`), the same document; a recording asked about
        before is not transcribed again (the transcript cache)."""
        from as2d.engine import AnswerError
        from as2d.runtime.ask.answer import AskOptions
        from as2d.runtime.ask.transcripts import file_digest

        cache = transcript_cache()
        try:
            digest = file_digest(req.file) if cache is not None else None
        except OSError:
            digest = None
        try:
            result = backend.engine.ask(audio, req.question, AskOptions(),
                                        engine_options(req), source=req.filename,
                                        cancelled=backend.cancelled, cache=cache,
                                        digest=digest)
        except AnswerError as exc:
            if exc.stage != "answer":
                raise exc.error from None
            raise APIError(422, str(exc), param="question", code="invalid_value") from None
        except ValueError as exc:  # options the model cannot honour
            param = exc.option if isinstance(exc, OptionError) else None
            raise APIError(400, str(exc), param=param, code="invalid_value") from None
        if backend.cancelled():  # the client went away: no answer to make for anyone
            raise ClientGone
        if result.answer is None:
            raise APIError(422, "no speech found: there is nothing to answer from",
                           param="file", code="no_speech")
        return result.to_dict()

    def model_card(name: str) -> dict:
        created = int(time.time() - (time.monotonic() - backend.started_monotonic))
        return {"id": name, "object": "model", "created": created, "owned_by": "as2d"}

    @router.get("/v1/models")
    async def models() -> JSONResponse:
        backend.require_ready()
        data = [model_card(backend.model_name)]
        # the other installed Whisper models a request may name (loaded on first use)
        data += [model_card(n) for n in sorted(backend.models.choosable())
                 if backend.models.canonical(n) is not None]
        if backend.settings.llm:
            data.append(model_card(os.path.basename(str(backend.settings.llm))))
        return JSONResponse({"object": "list", "data": data})

    @router.get("/v1/models/{name}")
    async def model(name: str) -> JSONResponse:
        backend.require_ready()
        names = {backend.model_name, "whisper-1", *backend.models.choosable()}
        if name not in names:
            raise APIError(404, f"the model {name!r} does not exist here (this server serves "
                                f"{backend.model_name})", param="model",
                           code="model_not_found")
        return JSONResponse(model_card(name))

    return router


class _JobStream(StreamingResponse):
    """A streamed answer that stops its decode when it ends before the decode does (the
    client went away, or the body was never sent), from a ``finally`` that needs no await
    (a cancelled task may not await anything more). The slot and the audio are freed when
    the worker is done (:meth:`Backend.start`)."""

    def __init__(self, backend: Backend, job: RequestJob, content, **kw) -> None:
        super().__init__(content, **kw)
        self._backend, self._job = backend, job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._backend.cancel(self._job)  # nothing when it has finished


def _sse(event: dict) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"
