"""``as2d serve`` end to end: a live server on loopback, the official OpenAI client, a
WebSocket client replaying real recordings, and hostile requests.

One server per module (models load once, ~5 s), every face's tests on it, /v1/audio/ask's too
(it is started with an answering model where that test runs). It is started with an API key, a
2-MB upload limit and a queue of one, so the refusals (401, 413, 429) are cheap and
deterministic. The last test stops it with SIGTERM while a request is in flight.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import LIBRIVOX, ROOT
from tests.helpers import LazyModule, cli, error_line

openai = LazyModule("openai")
websockets = LazyModule("websockets")

KEY = "test-key-" + "x" * 24
LIMIT_MB = 2
LONG = ROOT / "samples" / "sense_and_sensibility.wav"  # 24.7 s
SHORT = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav"  # one 7-s sentence
BRIEF = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0880.wav"  # one 3-s sentence
BRIEF_WORDS = "young man"  # BRIEF's words in every transcript of it
ASK_TEST = "test_ask_answers_as_as2d_ask_json"

pytestmark = [pytest.mark.slow, pytest.mark.needs_models]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.wyoming: int | None = None
        self.url = f"http://127.0.0.1:{port}"

    def client(self, key: str = KEY, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0,
                             timeout=kw.pop("timeout", 180), **kw)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 120):
        """(status, headers, body) of one raw request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = {"Authorization": f"Bearer {KEY}"}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers={k: v for k, v in hdrs.items()
                                                           if v is not None})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def health(self) -> dict:
        status, _, body = self.request("GET", "/health")
        return json.loads(body)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def _start(models_root: Path, tmp: Path, *args: str, env: dict | None = None) -> Server:
    port = _free_port()
    log = tmp / f"serve-{port}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **(env or {}))
    env.pop("AS2D_API_KEY", None)
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port),
                                 "--models-dir", str(models_root), *args],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    server = Server(proc, port, log)
    deadline = time.monotonic() + 600  # a first run converts the models
    while time.monotonic() < deadline:
        assert proc.poll() is None, server.stderr()
        try:
            status = server.health()["status"]
            if status == "ok":
                return server
            if status == "loading":  # the API says so too, and when to come back
                code, hdrs, raw = server.request("GET", "/v1/models")
                if code != 200:
                    assert code == 503 and hdrs["retry-after"], raw
                    assert json.loads(raw)["error"]["code"] == "model_loading"
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the server did not get ready:\n" + server.stderr())


@pytest.fixture(scope="module")
def server(models_root, tmp_path_factory, request):
    """The module's server. --idle-timeout: the sharing test holds a live session without
    speech on purpose (tests/test_serve_hostile.py tests the timeout). --llm where the ask test
    runs (not in the serial phase, which runs only the SIGTERM test), with a transcript cache
    of its own: one server start instead of a second one for that test. Stopped with SIGTERM
    at the end (where the serial test did not), it exits 0."""
    pytest.importorskip("fastapi")
    tmp = tmp_path_factory.mktemp("serve")
    wyoming = _free_port()
    llm = ("--llm", "gemma-3-270m") if any(
        item.name == ASK_TEST for item in request.session.items) else ()
    srv = _start(models_root, tmp, "--api-key", KEY, "--max-upload-mb", str(LIMIT_MB),
                 "--max-queue", "1", "--idle-timeout", "120", "--max-sessions", "3",
                 "--wyoming", f"tcp://127.0.0.1:{wyoming}", "--model-ttl", "3", *llm,
                 env={"AS2D_TRANSCRIPT_CACHE": str(tmp / "transcripts")})
    srv.wyoming = wyoming
    yield srv
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
        try:
            assert srv.proc.wait(60) == 0, srv.stderr()
        except subprocess.TimeoutExpired:
            srv.proc.kill()
            raise
    assert "Traceback" not in srv.stderr(), srv.stderr()


@pytest.fixture(scope="module")
def two_sentences(tmp_path_factory) -> Path:
    """SHORT then BRIEF, as the recording LONG begins: two sentences (two segments) in 10 s,
    where a stream of several deltas is what a test needs, not LONG's 25 s."""
    import soundfile as sf

    first, rate = sf.read(str(SHORT), dtype="int16")
    second, _ = sf.read(str(BRIEF), dtype="int16")
    path = tmp_path_factory.mktemp("two") / "two_sentences.wav"
    sf.write(str(path), np.concatenate([first, second]), rate, subtype="PCM_16")
    return path


@pytest.fixture(scope="module")
def reference(models_root, tmp_path_factory, two_sentences):
    """``reference(clip, *flags)``: ``as2d transcribe`` of a test clip in every format (same
    machine, same options), made on first use and kept for the module: the serial phase's
    process, which runs only the SIGTERM test, transcribes only the clip that test needs. The
    two short clips asked for without flags are transcribed in one run (one model load; each
    file's documents are the tokens of a run of it alone: every decoder is lossless)."""
    out = tmp_path_factory.mktemp("reference")
    together = (BRIEF, two_sentences)
    docs: dict = {}

    def get(clip: Path, *extra: str) -> dict:
        if (clip, extra) not in docs:
            clips = together if clip in together and not extra else (clip,)
            folder = out / f"{clip.stem}{'-'.join(extra)}"
            r = cli("transcribe", *clips, "-f", "all", "-o", folder, "--no-live", "-q", *extra,
                    models_dir=models_root)
            assert r.exit_code == 0, r.output
            for c in clips:
                docs[(c, extra)] = {f: (folder / f"{c.stem}.{f}").read_text()
                                    for f in ("txt", "srt", "vtt", "json")}
        return docs[(clip, extra)]

    return get


# -- OpenAI's client -----------------------------------------------------------------------------
def test_health_models_and_the_page(server):
    h = server.health()
    assert h["status"] == "ok" and h["drafter"] and h["decoder"] == "as2d"
    client = server.client()
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == h["model"] and "tiny.en" in ids  # the server's, then the choosable
    assert client.models.retrieve("whisper-1").id == "whisper-1"
    status, headers, body = server.request("GET", "/")
    assert status == 200 and b"<title>as2d</title>" in body
    assert "default-src 'self'" in headers["content-security-policy"]
    for name in ("app.js", "pcm-worklet.js", "style.css", "index.html"):
        text = (ROOT / "as2d_cli" / "server" / "static" / name).read_text()
        # Offline: nothing is loaded from another host.
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, name
    for path in ("/app.js", "/pcm-worklet.js", "/style.css"):
        assert server.request("GET", path)[0] == 200


# One request per way the server renders a response, held to what the command line writes:
# writers' documents (srt, and text; vtt goes through the same call) here, verbose_json and json
# in test_concurrent_clients_get_what_transcribe_writes.
@pytest.mark.parametrize("fmt", ["srt", "text"])
def test_every_format_is_what_transcribe_writes(server, reference, fmt):
    ref = reference(BRIEF)
    with open(BRIEF, "rb") as f:
        got = server.client().audio.transcriptions.create(file=f, model="whisper-1",
                                                          response_format=fmt)
    assert got == ref["txt" if fmt == "text" else fmt]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks translations so
def test_words_and_translation(server, reference):
    ref = json.loads(reference(SHORT, "--word-timestamps")["json"])
    client = server.client()
    with open(SHORT, "rb") as f:
        got = client.audio.transcriptions.create(
            file=f, model="whisper-1", response_format="verbose_json",
            timestamp_granularities=["word", "segment"])
    want = [(w["word"].strip(), w["start"], w["end"]) for s in ref["segments"]
            for w in s["words"]]
    assert [(w.word, w.start, w.end) for w in got.words] == want
    assert got.segments and all(s.start <= s.end for s in got.segments)
    with open(SHORT, "rb") as f:
        only_words = client.audio.transcriptions.create(
            file=f, model="whisper-1", response_format="verbose_json",
            timestamp_granularities=["word"])
    assert only_words.segments is None and len(only_words.words) == len(want)

    # verbose_json: the translation's language and text (the text format is rendered as for a
    # transcription: test_every_format_is_what_transcribe_writes), of the 3-s sentence: the
    # task, not the length, is what differs from the requests above.
    tr = reference(BRIEF, "--task", "translate")
    with open(BRIEF, "rb") as f:
        verbose = client.audio.translations.create(file=f, model="whisper-1",
                                                   response_format="verbose_json")
    assert verbose.language == "english" and verbose.text == json.loads(tr["json"])[
        "text"].strip()


def test_streaming_deltas_add_up_to_the_text(server, reference, two_sentences):
    ref_json = json.loads(reference(two_sentences)["json"])
    assert len(ref_json["segments"]) >= 2  # several deltas to add up
    with open(two_sentences, "rb") as f:
        events = list(server.client().audio.transcriptions.create(
            file=f, model="whisper-1", stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    assert len(kinds) - 1 == len(ref_json["segments"])  # one delta per committed segment
    text = "".join(e.delta for e in events[:-1])
    assert text == events[-1].text == ref_json["text"].strip()


def test_extras_hotwords_vad_and_decoder(server, reference):
    client = server.client()
    # The plain text: the --word-timestamps reference's (timing the words changes no token).
    plain = json.loads(reference(SHORT, "--word-timestamps")["json"])["text"]
    with open(SHORT, "rb") as f:
        got = client.audio.transcriptions.create(
            file=f, model="whisper-1", language="en",
            extra_body={"decoder": "as2d", "vad_filter": "true", "hotwords": "Dashwood"})
    assert "Dashwood" in got.text
    assert got.text.split()[:3] == plain.split()[:3]


def test_beam_search_is_what_transcribe_beam_gives(server, models_root, tmp_path):
    """as2d's beam extras over the SDK: token for token what ``as2d transcribe --beam-size``
    writes for the same file and options on this machine. All three extras at once (each a
    field passed on as it is; a value the server refuses: test_bad_beam_options_are_json_errors
    below)."""
    beam = {"beam_size": 3, "patience": 2, "length_penalty": 0.6}
    flags = [a for k, v in beam.items() for a in ("--" + k.replace("_", "-"), str(v))]
    r = cli("transcribe", BRIEF, "-f", "json", "-o", tmp_path, "--no-live", "-q", *flags,
            models_dir=models_root)
    assert r.exit_code == 0, r.output
    ref = json.loads((tmp_path / f"{BRIEF.stem}.json").read_text())
    with open(BRIEF, "rb") as f:
        got = server.client().audio.transcriptions.create(
            file=f, model="whisper-1", response_format="verbose_json", extra_body=beam)
    assert [s.tokens for s in got.segments] == [s["tokens"] for s in ref["segments"]]
    assert got.text == ref["text"].strip()


@pytest.mark.parametrize("beam,param", [
    ({"beam_size": "five"}, "beam_size"), ({"beam_size": 0}, "beam_size"),
    ({"beam_size": 2.5}, "beam_size"), ({"beam_size": "inf"}, "beam_size"),
    ({"beam_size": 1000}, "beam_size"), ({"patience": 2}, "patience"),
    ({"length_penalty": 0.5}, "length_penalty"),
    ({"beam_size": 5, "patience": 0}, "patience"),
    ({"beam_size": 5, "patience": 0.1}, "patience"),
    ({"beam_size": 5, "patience": 1e308}, "patience"),
    ({"beam_size": 5, "length_penalty": 2}, "length_penalty"),
    ({"beam_size": 5, "length_penalty": "nan"}, "length_penalty")])
def test_bad_beam_options_are_json_errors(server, beam, param):
    with open(SHORT, "rb") as f, pytest.raises(openai.BadRequestError) as refused:
        server.client().audio.transcriptions.create(file=f, model="whisper-1",
                                                    extra_body=beam)
    err = refused.value.body
    assert refused.value.status_code == 400 and err["param"] == param, err
    assert err["message"] and "Traceback" not in err["message"]
    assert server.health()["status"] == "ok"


# -- hostile requests ---------------------------------------------------------------------------
def _multipart(fields: list[tuple[str, str | bytes, str | None]], boundary: str = "b0und4ry",
               close: bool = True) -> tuple[bytes, str]:
    """A multipart/form-data body: (name, value, filename or None) parts."""
    out = b""
    for name, value, filename in fields:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        data = value.encode() if isinstance(value, str) else value
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    if close:
        out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def _wav_bytes() -> bytes:
    """The recording of a request that only has to be answered: the 3-s sentence."""
    return BRIEF.read_bytes()


def _form(**over) -> list:
    """A valid request's parts, with some replaced (None drops one)."""
    parts = {"file": (_wav_bytes(), "clip.wav"), "model": ("whisper-1", None)}
    for k, v in over.items():
        if v is None:
            parts.pop(k, None)
        else:
            parts[k] = v if isinstance(v, tuple) else (v, None)
    return [(k, v, fn) for k, (v, fn) in parts.items()]


MALFORMED = {
    # name: (headers, body or parts, status, param)
    "no key": ({"Authorization": None}, _form(), 401, None),
    "wrong key": ({"Authorization": "Bearer nope"}, _form(), 401, None),
    "key as basic auth": ({"Authorization": f"Basic {KEY}"}, _form(), 401, None),
    "key with no scheme": ({"Authorization": KEY}, _form(), 401, None),
    "json body": ({"Content-Type": "application/json"}, b'{"model": "whisper-1"}', 415, None),
    "form-urlencoded body": ({"Content-Type": "application/x-www-form-urlencoded"},
                             b"model=whisper-1", 415, None),
    "no content type": ({"Content-Type": None}, b"garbage", 415, None),
    "multipart without boundary": ({"Content-Type": "multipart/form-data"}, b"x", 400, None),
    "garbage multipart": ({"Content-Type": "multipart/form-data; boundary=b0und4ry"},
                          b"\x00\xff" * 500, 400, None),
    "body cut before its end": ("cut", _form(), 400, None),
    "no file": ({}, _form(file=None), 400, "file"),
    "file as a text field": ({}, _form(file="not a file"), 400, "file"),
    "no model": ({}, _form(model=None), 400, "model"),
    "empty model": ({}, _form(model=""), 400, "model"),
    "model is a path": ({}, _form(model="../models/base"), 400, "model"),
    "model is an absolute path": ({}, _form(model="/etc/passwd"), 400, "model"),
    "model in the home folder": ({}, _form(model="~/m"), 400, "model"),
    "unknown response_format": ({}, _form(response_format="xml"), 400, "response_format"),
    "temperature not a number": ({}, _form(temperature="hot"), 400, "temperature"),
    "temperature too high": ({}, _form(temperature="5"), 400, "temperature"),
    "temperature nan": ({}, _form(temperature="nan"), 400, "temperature"),
    "unknown language": ({}, _form(language="klingon"), 400, "language"),
    "unknown granularity": ({}, _form(**{"timestamp_granularities[]": "sentence"}), 400,
                            "timestamp_granularities"),
    "words without verbose_json": ({}, _form(**{"timestamp_granularities[]": "word"}), 400,
                                   "timestamp_granularities"),
    "stream not a boolean": ({}, _form(stream="maybe"), 400, "stream"),
    "stream with srt": ({}, _form(stream="true", response_format="srt"), 400, "stream"),
    "unknown decoder": ({}, _form(decoder="fast"), 400, "decoder"),
    "decoder not loaded": ({}, _form(decoder="target"), 400, "decoder"),
    "vad_filter not a boolean": ({}, _form(vad_filter="perhaps"), 400, "vad_filter"),
    "prompt too long": ({}, _form(prompt="word " * 1000), 400, "prompt"),
    "field not utf-8": ({}, _form(prompt=b"\xff\xfe\xfa"), 400, "prompt"),
    "garbage audio": ({}, _form(file=(os.urandom(4096), "noise.wav")), 400, "file"),
    "empty file": ({}, _form(file=(b"", "empty.wav")), 400, "file"),
    "text named .mp3": ({}, _form(file=(b"hello, I am not audio\n" * 50, "a.mp3")), 400,
                        "file"),
    "two files": ({}, _form() + [("file", b"RIFF", "b.wav")], 400, "file"),
    "upload over the limit": ({}, _form(file=(b"\0" * (LIMIT_MB * 1024 * 1024 + 200_000),
                                              "big.wav")), 413, "file"),
    "chunked upload over the limit": ("chunked", _form(
        file=(b"\0" * (LIMIT_MB * 1024 * 1024 + 200_000), "big.wav")), 413, "file"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_one_json_error(server, case):
    headers, body, status, param = MALFORMED[case]
    mode = headers if isinstance(headers, str) else None
    headers = {} if mode else dict(headers)
    if isinstance(body, list):
        body, ctype = _multipart(body, close=mode != "cut")
        headers.setdefault("Content-Type", ctype)
    if mode == "chunked":
        got = _chunked_post(server, "/v1/audio/transcriptions", body, headers["Content-Type"])
    else:
        got = server.request("POST", "/v1/audio/transcriptions", body, headers)
    code, hdrs, raw = got
    assert code == status, (case, raw[:300])
    doc = json.loads(raw)
    err = doc["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], doc
    assert b"Traceback" not in raw
    if param is not None:
        assert err["param"] == param, doc
    if status == 401:
        assert hdrs.get("www-authenticate") == "Bearer"
    assert server.health()["status"] == "ok"


def _chunked_post(server: Server, path: str, body: bytes, ctype: str):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Authorization", f"Bearer {KEY}")
        conn.putheader("Content-Type", ctype)
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for i in range(0, len(body), 65536):
                piece = body[i:i + 65536]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:  # refused before the whole body was sent
            pass
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/v1/audio/transcriptions", 405), ("GET", "/v1/nowhere", 404),
    ("GET", "/v1/models/gpt-9", 404)])
def test_wrong_endpoints_are_json_errors(server, method, path, status):
    code, _, raw = server.request(method, path)
    assert code == status and json.loads(raw)["error"]["message"], raw


def test_slow_loris_body_is_served_when_it_completes(server):
    """A body trickling in does not stop the server from answering others meanwhile."""
    body, ctype = _multipart(_form())
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.putrequest("POST", "/v1/audio/transcriptions")
    conn.putheader("Authorization", f"Bearer {KEY}")
    conn.putheader("Content-Type", ctype)
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    conn.send(body[:100])
    assert server.health()["status"] == "ok"  # answered while the body is incomplete
    conn.send(body[100:])
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read())["text"]
    conn.close()


# -- the realtime socket -----------------------------------------------------------------------
def _pcm16(path: Path, rate: int) -> bytes:
    import soundfile as sf
    import soxr

    x, sr = sf.read(str(path), dtype="float32")
    if x.ndim > 1:
        x = x.mean(axis=1)
    y = soxr.resample(x, sr, rate) if sr != rate else x
    return (np.clip(y, -1, 1) * 32767).astype("<i2").tobytes()


async def _recv(ws, timeout: float = 120):
    """The next message; a server that never answers fails the test instead of hanging it."""
    return await asyncio.wait_for(ws.recv(), timeout)


def _ws_url(server: Server, query: str = "intent=transcription") -> str:
    return f"ws://127.0.0.1:{server.port}/v1/realtime?{query}"


async def _replay(server: Server, path: Path, rate: int = 24000, pace: float = 1.0) -> list:
    """Every event the server sends for ``path`` appended at ``pace`` × real time."""
    pcm = _pcm16(path, rate)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with websockets.connect(_ws_url(server), additional_headers=headers,
                                  max_size=None) as ws:
        events = [json.loads(await _recv(ws))]
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}}}}}))
        events.append(json.loads(await _recv(ws)))
        step = rate // 10 * 2  # 100 ms
        t0 = time.perf_counter()

        async def read():
            async for message in ws:
                events.append(json.loads(message))

        reader = asyncio.ensure_future(read())
        for n, i in enumerate(range(0, len(pcm), step)):
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(pcm[i:i + step]).decode()}))
            if pace:
                await asyncio.sleep(max(0.0, t0 + (n + 1) * 0.1 / pace - time.perf_counter()))
        await ws.send(json.dumps({"type": "input_audio_buffer.end"}))
        await asyncio.wait_for(reader, 300)
        assert ws.close_code == 1000
    return events


def test_realtime_replay_commits_what_mic_commits(server, models_root):
    # Both paced at 2× real time (the same pace on both faces; a 7-s sentence keeps the decoder
    # far ahead of it even on a loaded machine), half the wall time of a real-time replay. (Not
    # the 3-s sentence: there the faces' live commits can cut a word differently.)
    events = asyncio.run(_replay(server, SHORT, pace=2.0))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["session.created", "session.updated"]
    assert "input_audio_buffer.speech_started" in kinds
    assert "input_audio_buffer.speech_stopped" in kinds
    assert "input_audio_buffer.committed" in kinds
    deltas: dict[str, str] = {}
    completed: dict[str, str] = {}
    for e in events:
        if e["type"] == "conversation.item.input_audio_transcription.delta":
            assert e["item_id"] not in completed  # nothing after an item's transcript
            deltas[e["item_id"]] = deltas.get(e["item_id"], "") + e["delta"]
        elif e["type"] == "conversation.item.input_audio_transcription.completed":
            completed[e["item_id"]] = e["transcript"]
    assert completed and all(completed[i] == deltas.get(i, "") for i in completed)
    assert "error" not in kinds, events

    mic = cli("mic", "--input", SHORT, "--speed", "2", "--no-live", "-q", models_dir=models_root)
    assert mic.exit_code == 0, mic.output
    ws_text = " ".join(t for t in completed.values() if t)
    assert ws_text.split() == mic.stdout.split()


def test_realtime_16khz_and_hostile_events(server):
    async def run():
        headers = {"Authorization": f"Bearer {KEY}"}
        async with websockets.connect(_ws_url(server), additional_headers=headers) as ws:
            assert json.loads(await _recv(ws))["type"] == "session.created"
            bad = [
                ("not json", "invalid_json"),
                (json.dumps([1, 2]), "invalid_event"),
                (json.dumps({"type": "response.create"}), "unknown_event"),
                (json.dumps({"type": "input_audio_buffer.append"}), "missing_audio"),
                (json.dumps({"type": "input_audio_buffer.append", "audio": "@@not base64@@"}),
                 "invalid_base64"),
                (json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"}),
                 "invalid_audio"),  # 3 bytes: not whole PCM16 samples
                (json.dumps({"type": "session.update", "session": "x"}), "invalid_session"),
                (json.dumps({"type": "session.update", "session": {
                    "audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}}}),
                 "invalid_rate"),
                (json.dumps({"type": "session.update", "session": {
                    "input_audio_format": "g711_ulaw"}}), "unsupported_format"),
                (json.dumps({"type": "session.update", "session": {
                    "input_audio_transcription": {"language": "klingon"}}}),
                 "invalid_language"),
            ]
            for message, code in bad:
                await ws.send(message)
                event = json.loads(await _recv(ws))
                assert event["type"] == "error" and event["error"]["code"] == code, event
            # Still usable: a 16-kHz session transcribes.
            await ws.send(json.dumps({"type": "session.update", "session": {
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                    "transcription": {"language": "en"}}}}}))
            assert json.loads(await _recv(ws))["type"] == "session.updated"
            pcm = _pcm16(BRIEF, 16000)
            for i in range(0, len(pcm), 32000):
                await ws.send(pcm[i:i + 32000])  # raw PCM16 binary frames
            await ws.send(json.dumps({"type": "input_audio_buffer.end"}))
            texts = []
            async for message in ws:
                e = json.loads(message)
                if e["type"].endswith("transcription.completed"):
                    texts.append(e["transcript"])
            assert BRIEF_WORDS in " ".join(texts)

    asyncio.run(asyncio.wait_for(run(), 300))


def test_realtime_refuses_a_wrong_key_and_intent(server):
    async def run():
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(_ws_url(server), additional_headers={
                "Authorization": "Bearer wrong"})
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
        # The browser's way: the key as a subprotocol.
        async with websockets.connect(_ws_url(server), subprotocols=[
                "realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
            assert json.loads(await _recv(ws))["type"] == "session.created"
        async with websockets.connect(_ws_url(server, "intent=conversation"),
                                      additional_headers={"Authorization": f"Bearer {KEY}"}
                                      ) as ws:
            assert json.loads(await _recv(ws))["error"]["code"] == "unsupported_intent"

    asyncio.run(asyncio.wait_for(run(), 300))


# -- many clients --------------------------------------------------------------------------------
def test_live_sessions_share_the_engine_with_requests(server):
    """Two people dictate at once while a third socket stays open and silent and an HTTP
    request comes in: both get their text, the request is answered meanwhile, the silent
    session caused no decode (with ``hypotheses=1`` each decode is an ``as2d.hypothesis``),
    and a fourth socket is refused (--max-sessions 3)."""
    headers = {"Authorization": f"Bearer {KEY}"}

    async def run():
        loop = asyncio.get_running_loop()
        async with websockets.connect(_ws_url(server, "intent=transcription&hypotheses=1"),
                                      additional_headers=headers) as idle:
            assert json.loads(await _recv(idle))["type"] == "session.created"
            await idle.send(json.dumps({"type": "input_audio_buffer.append",
                                        "audio": base64.b64encode(b"\0\0" * 24000).decode()}))
            # 2× real time: the request below still comes in while both are dictating
            speakers = [asyncio.ensure_future(_replay(server, SHORT, pace=2.0))
                        for _ in range(2)]
            while server.health()["live_sessions"] < 3:
                await asyncio.sleep(0.05)
            async with websockets.connect(_ws_url(server), additional_headers=headers) as extra:
                refused = json.loads(await _recv(extra))
                assert refused["error"]["code"] == "too_many_sessions", refused
                with pytest.raises(websockets.ConnectionClosed):
                    await _recv(extra, 30)
                assert extra.close_code == 1013
            body, ctype = _multipart(_form())
            t0 = time.perf_counter()
            code, _, raw = await loop.run_in_executor(None, lambda: server.request(
                "POST", "/v1/audio/transcriptions", body, {"Content-Type": ctype}))
            answered = time.perf_counter() - t0
            assert code == 200 and BRIEF_WORDS in json.loads(raw)["text"], raw
            done = await asyncio.gather(*speakers)
            await idle.send(json.dumps({"type": "input_audio_buffer.end"}))
            seen = [json.loads(m) async for m in idle]
        return answered, done, seen

    answered, done, seen = asyncio.run(asyncio.wait_for(run(), 300))
    for events in done:
        text = " ".join(e["transcript"] for e in events if e["type"].endswith(
            "transcription.completed"))
        assert "Dashwood" in text and not [e for e in events if e["type"] == "error"], events
    assert not [e for e in seen if e["type"] == "as2d.hypothesis"], seen
    assert answered < 60


async def _wyoming(server: Server, events: list, until: str = "transcript-stop") -> list:
    """Send ``events`` with the wyoming library's own client; what comes back, to ``until``."""
    from wyoming.client import AsyncTcpClient

    got = []
    async with AsyncTcpClient("127.0.0.1", server.wyoming) as client:
        for event in events:
            await client.write_event(event)
        while (event := await asyncio.wait_for(client.read_event(), 120)) is not None:
            got.append(event)
            if event.type in (until, "error"):
                break
    return got


def test_wyoming_describe_and_transcribe(server, reference):
    """Home Assistant's protocol, through the wyoming library's client: ``info`` names the
    model; a 44.1-kHz stereo recording (then silence) comes back as the words ``as2d
    transcribe`` writes for the recording, streamed (transcript-start, the final transcript,
    transcript-stop); a language the model does not know is an ``error`` event."""
    pytest.importorskip("wyoming")
    import soundfile as sf
    import soxr
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.info import Describe, Info

    (info,) = asyncio.run(_wyoming(server, [Describe().event()], until="info"))
    program = Info.from_event(info).asr[0]
    assert program.supports_transcript_streaming
    assert program.models[0].name == server.health()["model"]
    assert {"en", "de"} <= set(program.models[0].languages)

    x, rate = sf.read(str(SHORT), dtype="float32")
    # a second of silence after the speech, as a satellite sends before its VAD ends the
    # command: the transcript decoded when the speech ended is the one kept
    y = np.concatenate([soxr.resample(x, rate, 44100), np.zeros(44100, np.float32)])
    pcm = (np.clip(np.stack([y, y], axis=1), -1, 1) * 32767).astype("<i2").tobytes()
    step = 44100 * 4 // 10
    chunks = [AudioChunk(44100, 2, 2, pcm[i:i + step]).event()
              for i in range(0, len(pcm), step)]
    got = asyncio.run(_wyoming(server, [Transcribe(language="en").event(),
                                        AudioStart(44100, 2, 2).event(), *chunks,
                                        AudioStop().event()]))
    kinds = [e.type for e in got]
    assert kinds[0] == "transcript-start" and kinds[-2:] == ["transcript", "transcript-stop"]
    assert set(kinds[1:-2]) <= {"transcript-chunk"}, kinds
    want = json.loads(reference(SHORT, "--word-timestamps")["json"])["text"].strip()
    assert got[-2].data["text"] == want and got[-2].data["language"] == "en"

    bad = asyncio.run(_wyoming(server, [Transcribe(language="klingon").event()]))
    assert bad[-1].type == "error" and bad[-1].data["code"] == "invalid_language"


def test_wyoming_bad_audio_is_an_error_event_and_the_server_goes_on(server):
    """A chunk that is not whole frames, a rate of 0, a chunk without its width: each an
    ``error`` event (not an exception that drops the connection unanswered), and the server
    answers the next connection."""
    pytest.importorskip("wyoming")
    from wyoming.audio import AudioChunk, AudioStart
    from wyoming.event import Event
    from wyoming.info import Describe

    for events, code in [
        ([AudioStart(16000, 2, 1).event(), AudioChunk(16000, 2, 1, b"\0" * 3201).event()],
         "invalid_audio"),
        ([AudioChunk(0, 2, 1, b"\0" * 3200).event()], "invalid_audio"),
        ([Event("audio-chunk", {"rate": 16000, "channels": 1}, b"\0" * 3200)], "invalid_event"),
    ]:
        got = asyncio.run(_wyoming(server, events))
        assert got[-1].type == "error" and got[-1].data["code"] == code, got
    (info,) = asyncio.run(_wyoming(server, [Describe().event()], until="info"))
    assert info.type == "info"
    assert server.health()["status"] == "ok"


def test_a_request_names_an_installed_model_over_http_and_wyoming(server, models_root):
    """Both faces that name a model, in one test. Wyoming's ``info`` lists the server's
    model, then each other installed one with its languages (``tiny.en``: English only);
    ``transcribe`` naming ``tiny.en`` loads it and is decoded by it; unloaded after
    --model-ttl (3 s), it is loaded again by HTTP's ``model="tiny.en"``, which it decodes too:
    both give the text ``as2d transcribe --model tiny.en`` writes. A language tiny.en cannot
    transcribe and a name that is not installed are ``error`` events, and the server answers
    the next request; unused for the TTL, tiny.en is unloaded again."""
    pytest.importorskip("wyoming")
    import soundfile as sf
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.info import Describe, Info

    (info,) = asyncio.run(_wyoming(server, [Describe().event()], until="info"))
    models = {m.name: m for m in Info.from_event(info).asr[0].models}
    own = server.health()["model"]
    assert list(models)[0] == own and len(models) >= 2 and "tiny.en-int8" not in models
    assert models["tiny.en"].languages == ["en"] and models["tiny.en"].installed
    for name, model in models.items():  # read from the manifests: as the tokenizer has them
        if name.startswith("base"):
            assert model.languages == models[own].languages, name

    missing = asyncio.run(_wyoming(server, [Transcribe(name="no-such-model").event()]))
    assert missing[-1].type == "error" and missing[-1].data["code"] == "model_not_found"
    assert "tiny.en" in missing[-1].data["text"]  # says what is served
    deadline = time.monotonic() + 30  # (if loaded before: unloaded after the TTL)
    while "tiny.en-int8" in server.health()["loaded"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    x, rate = sf.read(str(SHORT), dtype="int16")
    pcm = x.astype("<i2").tobytes()
    step = rate // 5 * 2
    chunks = [AudioChunk(rate, 2, 1, pcm[i:i + step]).event() for i in range(0, len(pcm), step)]
    got = asyncio.run(_wyoming(server, [Transcribe(name="tiny.en").event(),
                                        AudioStart(rate, 2, 1).event(), *chunks,
                                        AudioStop().event()]))
    assert [e.type for e in got][-2:] == ["transcript", "transcript-stop"], got
    assert "tiny.en-int8" in server.health()["loaded"]
    german = asyncio.run(_wyoming(server, [Transcribe(name="tiny.en", language="de").event()]))
    assert german[-1].type == "error" and german[-1].data["code"] == "invalid_language"

    deadline = time.monotonic() + 30  # unloaded again, so that HTTP's request must load it
    while "tiny.en-int8" in server.health()["loaded"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with open(SHORT, "rb") as f:
        http = server.client().audio.transcriptions.create(file=f, model="tiny.en").text
    assert "tiny.en-int8" in server.health()["loaded"]
    r = cli("transcribe", SHORT, "--model", "tiny.en", "-f", "json", "--no-live", "-q",
            models_dir=models_root)
    assert r.exit_code == 0, r.output
    want = json.loads(r.stdout)["text"].strip()
    assert got[-2].data["text"] == http == want
    deadline = time.monotonic() + 30
    while "tiny.en-int8" in server.health()["loaded"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert server.health()["loaded"] == [server.health()["model"]]


def test_full_queue_is_429(server):
    """One request decodes, one may wait (--max-queue 1), the next is refused with 429 and
    Retry-After; the waiting one is then served."""
    async def run():
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 120
        long_body, long_type = _multipart(_form(file=(LONG.read_bytes(), LONG.name)))
        first = loop.run_in_executor(None, lambda: server.request(
            "POST", "/v1/audio/transcriptions", long_body, {"Content-Type": long_type}))
        while not server.health()["busy"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        body, ctype = _multipart(_form())
        waiting = loop.run_in_executor(None, lambda: server.request(
            "POST", "/v1/audio/transcriptions", body, {"Content-Type": ctype}))
        while server.health()["queued"] < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        code, hdrs, raw = server.request("POST", "/v1/audio/transcriptions", body,
                                         {"Content-Type": ctype})
        assert code == 429 and int(hdrs["retry-after"]) >= 1, raw
        assert json.loads(raw)["error"]["type"] == "rate_limit_error"
        for pending, words in ((first, "Dashwood"), (waiting, BRIEF_WORDS)):
            code, _, raw = await pending
            assert code == 200 and words in json.loads(raw)["text"]

    asyncio.run(asyncio.wait_for(run(), 300))


def test_concurrent_clients_get_what_transcribe_writes(server, reference):
    """Two clients at once (one decodes, one waits), each answered with what ``as2d
    transcribe`` writes, in the two JSON formats (the two other renderings of a response,
    besides test_every_format_is_what_transcribe_writes' documents): verbose_json token for
    token and segment for segment, with the language, the duration and no words unless asked;
    json (the SDK's default) the text, and the recording's seconds rounded up as its usage."""
    ref_json = json.loads(reference(BRIEF)["json"])
    results: dict = {}

    def one(fmt):
        with open(BRIEF, "rb") as f:
            results[fmt] = server.client().audio.transcriptions.create(
                file=f, model="whisper-1", **({"response_format": fmt} if fmt else {}))

    threads = [threading.Thread(target=one, args=(fmt,)) for fmt in ("verbose_json", None)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    got = results["verbose_json"]
    assert got.language == "english" and got.duration == pytest.approx(2.99, abs=0.01)
    assert got.text == ref_json["text"].strip()
    # Token for token, segment for segment.
    assert [s.tokens for s in got.segments] == [s["tokens"] for s in ref_json["segments"]]
    assert [(s.start, s.end, s.text) for s in got.segments] == \
        [(s["start"], s["end"], s["text"]) for s in ref_json["segments"]]
    assert got.words is None
    assert (results[None].text, results[None].usage.seconds) == (
        ref_json["text"].strip(), 3)  # 2.99 s


def test_client_dropping_mid_stream_stops_its_decode(server, reference, tmp_path):
    """Four 30-s windows: the client leaves after the first window's text, while the
    others are still to decode; a second client leaves while it waits for the decoder. The
    next request, sent at once, waits for the stopped decode to end (never decodes beside it
    on the same engine) and gets the whole text; then the decoder is free, nobody queued."""
    import soundfile as sf

    want = json.loads(reference(BRIEF)["json"])["text"].strip()  # before: no decode below
    x, rate = sf.read(str(LONG), dtype="float32")
    sf.write(str(tmp_path / "four.flac"), np.concatenate([x] * 4), rate)
    body, ctype = _multipart(_form(file=((tmp_path / "four.flac").read_bytes(), "four.flac"),
                                   stream="true"))
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": ctype}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("content-type").startswith("text/event-stream")
    first = r.readline()
    assert first.startswith(b"data: ") and b"transcript.text.delta" in first
    # A second client queues for the decoder, then leaves while it waits.
    short, short_type = _multipart(_form())
    waiter = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    waiter.request("POST", "/v1/audio/transcriptions", body=short,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": short_type})
    deadline = time.monotonic() + 60
    while server.health()["queued"] < 1:
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.05)
    waiter.sock.shutdown(socket.SHUT_RDWR)
    waiter.close()
    while server.health()["queued"]:  # its place in the queue is given up, not kept
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.05)
    assert server.health()["busy"]
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    # At once: the server is free again (once the stopped decode ends) and gives the whole
    # text to the next client.
    with open(BRIEF, "rb") as f:
        assert server.client().audio.transcriptions.create(file=f, model="x").text == want
    assert "client went away" in server.stderr()
    h = server.health()
    assert not h["busy"] and h["queued"] == 0, h


def test_ask_answers_as_as2d_ask_json(server, models_root):
    """/v1/audio/ask (on the module's server, started with --llm for this test) gives the
    document `as2d ask --json` prints for the same file and question, statistics aside; the
    same file asked again is answered from the server's transcript cache, with the same
    answer; no question, or one with no words, is a 400 naming ``question``. (A server without
    --llm: test_ask_without_an_answering_model_is_a_json_404.)"""
    question = "Who had leisure to consider?"
    ref = cli("ask", SHORT, question, "--json", "--no-live", "-q", models_dir=models_root)
    assert ref.exit_code == 0, ref.output
    want = json.loads(ref.stdout)
    body, ctype = _multipart([("file", SHORT.read_bytes(), SHORT.name),
                              ("question", question, None)])
    code, _, raw = server.request("POST", "/v1/audio/ask", body, {"Content-Type": ctype})
    assert code == 200, raw
    got = json.loads(raw)
    # The one-shot command transcribes this one-window clip with the target alone (a
    # drafter's load would not pay); the server's loaded drafter drafts: the same text,
    # said in "models".
    assert want["models"]["decoder"] == "target" and want["models"]["drafter"] is None
    assert got["models"]["decoder"] == "as2d" and got["models"]["drafter"]
    for doc in (got, want):
        doc.pop("stats")
        doc.pop("source")
        doc["models"] = {k: v for k, v in doc["models"].items()
                         if k not in ("decoder", "drafter")}
    assert got == want and got["transcript"] == "transcribed"
    body, ctype = _multipart([("file", SHORT.read_bytes(), "again.wav"),
                              ("question", question, None)])
    code, _, raw = server.request("POST", "/v1/audio/ask", body, {"Content-Type": ctype})
    again = json.loads(raw)
    assert code == 200 and again["transcript"] == "cache", raw
    assert again["models"]["decoder"] is None  # nothing was decoded for it
    assert (again["answer"], again["evidence"]) == (want["answer"], want["evidence"])
    body, ctype = _multipart([("file", SHORT.read_bytes(), SHORT.name)])
    code, _, raw = server.request("POST", "/v1/audio/ask", body, {"Content-Type": ctype})
    assert code == 400 and json.loads(raw)["error"]["param"] == "question"
    body, ctype = _multipart([("file", SHORT.read_bytes(), SHORT.name),
                              ("question", " ?! ", None)])
    code, _, raw = server.request("POST", "/v1/audio/ask", body, {"Content-Type": ctype})
    err = json.loads(raw)["error"]
    assert code == 400 and err["param"] == "question" and "no words" in err["message"]


async def _asgi_post(app, path: str) -> tuple[int, dict]:
    """(status, JSON body) of an empty POST with the key, handed straight to an ASGI
    application: no socket, and no lifespan (so nothing is loaded)."""
    sent: list = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
               "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
               "root_path": "", "query_string": b"", "server": ("127.0.0.1", 80),
               "client": ("127.0.0.1", 1), "headers": [(b"authorization",
                                                        f"Bearer {KEY}".encode())]},
              receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body)


def test_ask_without_an_answering_model_is_a_json_404():
    """/v1/audio/ask on a server started without --llm is a JSON 404 saying how to start one.
    Asked of the server's own application in this process (the module's server has an
    answering model, for test_ask_answers_as_as2d_ask_json): the check comes before the
    upload is read or any model is needed."""
    pytest.importorskip("fastapi")
    from as2d.server.application import create_app
    from as2d.server.backend import Backend, ServeSettings

    backend = Backend(ServeSettings(api_key=KEY), log=lambda message: None)
    try:
        status, doc = asyncio.run(_asgi_post(create_app(backend), "/v1/audio/ask"))
    finally:
        backend.pool.shutdown()
        backend.final_pool.shutdown()
    assert status == 404 and doc["error"]["code"] == "llm_not_loaded", doc
    assert "--llm" in doc["error"]["message"]


# -- the page in a real browser ---------------------------------------------------------------
def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


async def _cdp_page(port: int):
    """A DevTools connection to the browser's first page."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/json/list")
    targets = json.loads(conn.getresponse().read())
    page = next(t for t in targets if t["type"] == "page")
    return await websockets.connect(page["webSocketDebuggerUrl"], max_size=None)


class _CDP:
    def __init__(self, ws) -> None:
        self.ws, self.n = ws, 0

    async def call(self, method: str, **params):
        self.n += 1
        await self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == self.n:
                assert "error" not in msg, msg
                return msg["result"]

    async def js(self, expression: str):
        r = await self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                            returnByValue=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")


def _browser(profile: Path, *flags: str, size: str = "1100,1000") -> subprocess.Popen:
    """Headless Chromium with ``flags``, its DevTools port written into ``profile``."""
    return subprocess.Popen([
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        *flags, f"--user-data-dir={profile}", "--remote-debugging-port=0",
        f"--window-size={size}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _devtools(profile: Path, browser: subprocess.Popen) -> _CDP:
    """A DevTools connection to ``browser``'s first page, once it has written its port."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not port_file.is_file() or not port_file.read_text().strip():
        assert time.monotonic() < deadline and browser.poll() is None
        await asyncio.sleep(0.1)
    return _CDP(await _cdp_page(int(port_file.read_text().split()[0])))


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt)")
def test_the_page_records_the_fake_microphone_in_chromium(server, reference, tmp_path):
    """Headless Chromium, the microphone faked from a real recording: the page streams it over
    the socket and shows the committed words; a screenshot goes to docs/."""
    profile = tmp_path / "profile"
    browser = _browser(profile, "--use-fake-ui-for-media-stream",
                       "--use-fake-device-for-media-stream",
                       f"--use-file-for-fake-audio-capture={LONG}",
                       "--autoplay-policy=no-user-gesture-required")

    async def run() -> str:
        cdp = await _devtools(profile, browser)
        ws = cdp.ws
        try:
            await cdp.call("Page.enable")
            await cdp.call("Page.navigate", url=server.url + "/")
            while await cdp.js("document.readyState") != "complete":
                await asyncio.sleep(0.1)
            while await cdp.js("document.getElementById('status').textContent") != "ready":
                await asyncio.sleep(0.1)
            await cdp.js(f"state.key = {json.dumps(KEY)}; document.getElementById('record')"
                         ".click(); true")
            deadline = time.monotonic() + 120
            text = ""
            while "Dashwood" not in text or "leisure" not in text:
                assert time.monotonic() < deadline, text
                await asyncio.sleep(0.25)
                text = await cdp.js("document.getElementById('transcript').textContent")
            shot = base64.b64decode((await cdp.call("Page.captureScreenshot",
                                                    format="png"))["data"])
            assert shot.startswith(b"\x89PNG")
            # AS2D_DOCS_SCREENSHOT=1 refreshes the README's picture.
            out = ROOT / "docs" if os.environ.get("AS2D_DOCS_SCREENSHOT") else tmp_path
            (out / "serve-page.png").write_bytes(shot)
            await cdp.js("document.getElementById('record').click(); true")  # stop

            # A file given to the page: its segments, and the srt it offers to download is
            # the server's own srt for that file (which is ``as2d transcribe``'s:
            # test_every_format_is_what_transcribe_writes).
            doc = await cdp.call("DOM.getDocument")
            node = await cdp.call("DOM.querySelector", nodeId=doc["root"]["nodeId"],
                                  selector="#picker")
            await cdp.call("DOM.setFileInputFiles", files=[str(BRIEF)], nodeId=node["nodeId"])
            while not await cdp.js("state.segments !== null && state.segments.length > 0"):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            return text, await cdp.js("writers.srt(state.segments)")
        finally:
            await ws.close()

    try:
        text, page_srt = asyncio.run(run())
    finally:
        browser.terminate()
        browser.wait(30)
    assert "Mr. John Dashwood" in text
    assert page_srt == reference(BRIEF)["srt"]
    # The socket is let go: the decoder is free for the next client.
    deadline = time.monotonic() + 60
    while server.health()["busy"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_push_source_resamples_bounds_and_ends():
    from as2d.runtime.live.audio_input import PushSource

    src = PushSource(24000, queue_seconds=1.0)
    tone = (np.sin(np.arange(2400) / 5) * 8000).astype(np.int16)  # 0.1 s at 24 kHz
    assert all(src.push(tone) for _ in range(10))  # 1 s: the bound
    assert not src.push(tone) and src.dropped_seconds == pytest.approx(0.1)
    assert src.queued_seconds == pytest.approx(1.0)
    src.end()
    assert not src.push(tone)
    got = []
    with pytest.raises(EOFError):
        while True:
            chunk = src.read(1.0)
            got.append(chunk.samples)
    samples = np.concatenate(got)
    assert samples.dtype == np.float32 and np.abs(samples).max() <= 0.3
    assert 15000 <= len(samples) <= 16000  # 1 s at 16 kHz, less the resampler's delay
    with pytest.raises(EOFError):
        src.read(0.1)


# -- the command line --------------------------------------------------------------------------
def test_serve_refuses_bad_settings_in_one_line(tmp_path):
    r = cli("serve", "--host", "0.0.0.0")
    error_line(r, 2, "--api-key")
    error_line(cli("serve", "--port", "70000"), 2, "--port")
    error_line(cli("serve", "--max-upload-mb", "0"), 2, "--max-upload-mb")
    error_line(cli("serve", "--decoder", "fast"), 2, "--decoder")
    error_line(cli("serve", "--cors-origin", "evil"), 2, "--cors-origin")
    error_line(cli("serve", "--idle-timeout", "0"), 2, "--idle-timeout")
    error_line(cli("serve", "--idle-timeout", "nan"), 2, "--idle-timeout")
    error_line(cli("serve", "--max-sessions", "0"), 2, "--max-sessions")
    error_line(cli("serve", "--model-ttl", "-1"), 2, "--model-ttl")
    error_line(cli("serve", "--memory-budget-mb", "0"), 2, "--memory-budget-mb")
    error_line(cli("serve", "--wyoming", "udp://127.0.0.1:1"), 2, "--wyoming")
    error_line(cli("serve", "--wyoming", "tcp://127.0.0.1"), 2, "--wyoming")
    error_line(cli("serve", "--api-key", "two\nlines"), 2, "--api-key")
    error_line(cli("serve", "--api-key", " padded"), 2, "--api-key")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        error_line(cli("serve", "--port", str(s.getsockname()[1])), 1, "cannot listen")


def test_a_model_that_cannot_load_ends_the_server_in_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "as2d", "serve", "--port", str(_free_port()),
                        "--model", str(tmp_path / "no-such-model")], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.startswith("as2d: error:")]
    assert len(lines) == 1 and "no-such-model" in lines[0], p.stderr


# -- last: SIGTERM with a request in flight -----------------------------------------------------
@pytest.mark.serial
def test_sigterm_finishes_the_request_in_flight_and_exits_0(server, reference):
    want = json.loads(reference(LONG)["json"])["text"].strip()
    body, ctype = _multipart(_form(file=(LONG.read_bytes(), "long.wav"), stream="true"))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", "/v1/audio/transcriptions", body=body,
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": ctype})
    r = conn.getresponse()
    first = r.readline()
    assert b"transcript.text.delta" in first
    server.proc.send_signal(signal.SIGTERM)
    rest = r.read().decode()
    conn.close()
    events = [json.loads(line[6:]) for line in (first.decode() + rest).splitlines()
              if line.startswith("data: ")]
    assert events[-1]["type"] == "transcript.text.done" and events[-1]["text"] == want
    assert server.proc.wait(60) == 0, server.stderr()
    with pytest.raises(OSError):
        server.request("GET", "/health", timeout=5)
