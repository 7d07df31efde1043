"""``as2d serve`` against the defects of issue #45's hostile sweep, on one server of its own
(started with a key that is not ASCII, ``--idle-timeout 2`` and a private TMPDIR):

- upload files a killed server left in TMPDIR are removed at the next start (only this
  program's, of processes that are gone);
- a key that is not ASCII matches when sent as UTF-8, and only then;
- a malformed ``Content-Length`` gets OpenAI's JSON 400, not a connection reset, and the server
  stays up;
- a realtime client that goes idle (0.3 s of audio, then nothing, the socket kept open) is
  ended after ``--idle-timeout`` and the decoder goes to the HTTP request waiting for it;
- SIGHUP stops the server as SIGTERM does: the request in flight finishes, exit 0.
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
import time
from pathlib import Path

import pytest

from tests.conftest import LIBRIVOX, ROOT

websockets = pytest.importorskip("websockets")
pytest.importorskip("fastapi")

KEY = "clé-ünïcode-" + "k" * 16
SHORT = LIBRIVOX / "sense_and_sensibility_01_austen_64kb-0870.wav"  # one 7-s sentence
LONG = ROOT / "samples" / "sense_and_sensibility.wav"

pytestmark = [pytest.mark.slow, pytest.mark.needs_models]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _auth(key: str = KEY, encoding: str = "utf-8") -> bytes:
    return b"Bearer " + key.encode(encoding)


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None, timeout: float = 120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _multipart(path: Path, **fields) -> tuple[bytes, str]:
    b = "b0und4ry"
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in dict(model="whisper-1", **fields).items()]
    parts.append(f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                 f"Content-Type: audio/wav\r\n\r\n".encode() + path.read_bytes() + b"\r\n")
    return b"".join(parts) + f"--{b}--\r\n".encode(), f"multipart/form-data; boundary={b}"


@pytest.fixture(scope="module")
def served(models_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-hostile")
    tmpdir = tmp / "tmpdir"
    tmpdir.mkdir()
    dead = _dead_pid()
    planted = {
        "stale": tmpdir / f"as2d-upload-{dead}-abc123",  # a killed server's: removed
        "live": tmpdir / f"as2d-upload-{os.getpid()}-def456",  # a live process's: kept
        "other": tmpdir / "as2d-upload-notapid",  # not this program's name: kept
        "unrelated": tmpdir / f"other-{dead}-x",
    }
    for path in planted.values():
        path.write_bytes(b"x" * 100)
    target = tmp / "not-in-tmpdir"
    target.write_text("keep")
    link = tmpdir / f"as2d-upload-{dead}-link00"  # a link: never followed nor removed
    link.symlink_to(target)
    port = _free_port()
    log = tmp / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", TMPDIR=str(tmpdir))
    env.pop("AS2D_API_KEY", None)
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "as2d", "serve", "--port", str(port),
                                 "--models-dir", str(models_root), "--api-key", KEY,
                                 "--idle-timeout", "2", "--max-queue", "2"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 600
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if json.loads(_request(port, "GET", "/health", timeout=5)[1])["status"] == "ok":
                break
        except (OSError, ValueError):
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield dict(proc=proc, port=port, log=log, planted=planted, link=link, target=target)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_stale_uploads_of_dead_servers_are_removed_at_start(served):
    planted = served["planted"]
    assert not planted["stale"].exists()
    assert all(planted[k].exists() for k in ("live", "other", "unrelated"))
    assert served["link"].is_symlink() and served["target"].read_text() == "keep"
    assert "removed 1 upload file(s)" in served["log"].read_text()


def test_a_key_that_is_not_ascii_matches_as_utf8_only(served):
    port = served["port"]
    assert _request(port, "GET", "/v1/models", headers={"Authorization": _auth()})[0] == 200
    for wrong in (_auth(encoding="latin-1"), _auth(KEY[:-1] + "K"), b"Bearer " + b"k" * 28):
        status, body = _request(port, "GET", "/v1/models", headers={"Authorization": wrong})
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("length", [b"abc", b"-5", b"1, 2", b"99999999999999999999999x"])
def test_a_malformed_content_length_is_a_json_400(served, length):
    port = served["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                  + _auth() + b"\r\nContent-Length: " + length + b"\r\n\r\n")
        for _ in range(16):  # a body still coming when the server answers
            s.sendall(b"x" * 65536)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), data[:300]
    assert json.loads(body)["error"]["code"] == "invalid_request"
    assert _request(port, "GET", "/health")[0] == 200


def test_an_idle_realtime_client_frees_the_decoder(served):
    port = served["port"]
    url = f"ws://127.0.0.1:{port}/v1/realtime?intent=transcription"
    body, ctype = _multipart(SHORT)

    async def run():
        headers = {"Authorization": _auth().decode("latin-1")}
        async with websockets.connect(url, additional_headers=headers) as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": base64.b64encode(b"\0\0" * 7200).decode()}))
            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            # The socket stays open and silent; the request waits for the decoder, then gets it.
            waiting = loop.run_in_executor(None, lambda: _request(
                port, "POST", "/v1/audio/transcriptions", body,
                {"Content-Type": ctype, "Authorization": _auth()}))
            events = []
            async for message in ws:  # the server ends the idle session and closes
                events.append(json.loads(message))
            assert ws.close_code == 1000
            assert any(e.get("type") == "error" and e["error"]["code"] == "idle_timeout"
                       for e in events), events
            status, raw = await asyncio.wait_for(waiting, 120)
            assert status == 200 and "Dashwood" in json.loads(raw)["text"], raw
            return time.monotonic() - t0

    took = asyncio.run(asyncio.wait_for(run(), 180))
    assert took < 60, took


@pytest.mark.serial
def test_sighup_finishes_the_request_in_flight_and_exits_0(served):
    proc, port = served["proc"], served["port"]
    body, ctype = _multipart(LONG, stream="true")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/audio/transcriptions", body=body,
                 headers={"Authorization": _auth(), "Content-Type": ctype})
    r = conn.getresponse()
    first = r.readline()
    assert b"transcript.text.delta" in first
    proc.send_signal(signal.SIGHUP)
    rest = r.read().decode()
    conn.close()
    events = [json.loads(line[6:]) for line in (first.decode() + rest).splitlines()
              if line.startswith("data: ")]
    assert r.status == 200 and events[-1]["type"] == "transcript.text.done", rest
    assert proc.wait(60) == 0, served["log"].read_text()
    log = served["log"].read_text()
    assert "Traceback" not in log and " 500" not in log, log
