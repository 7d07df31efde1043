"""The FastAPI application: routes, the key check, CORS, the page, and how it runs.

Security by default: the server binds to loopback; another host needs an API key (checked in
constant time, ``Authorization: Bearer KEY``); CORS headers are sent only for the origins
given with ``--cors-origin``; the page and the API load nothing from anywhere else.

SIGTERM, SIGHUP (or Ctrl-C) stops taking new connections, lets the requests in flight finish,
and the process exits 0 (uvicorn's graceful shutdown; its habit of re-raising the signal afterwards
is turned off, since that would end the process with 143 after a clean stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import signal
import sys
import threading
from pathlib import Path

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from as2d.server.api_errors import APIError, error_body
from as2d.server.backend import Backend

STATIC = Path(__file__).resolve().parent / "static"
log = logging.getLogger("as2d.serve")


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_ok(expected: str | None, header: str | None) -> bool:
    """``Authorization: Bearer KEY`` matches, compared in constant time.

    ``header`` is the value as Starlette gives it, its bytes decoded as latin-1 (ASGI's
    headers are bytes); those bytes are compared with the key's UTF-8 bytes, so a key that
    is not ASCII matches when the client sends it as UTF-8 (what curl, browsers and OpenAI's
    clients send), and only then."""
    if not expected:
        return True
    if not header:
        return False
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    try:
        sent = token.strip().encode("latin-1")  # the bytes on the wire
    except UnicodeEncodeError:  # not from a header (a caller's own str): its UTF-8
        sent = token.strip().encode("utf-8", "surrogateescape")
    return hmac.compare_digest(sent, expected.encode("utf-8", "surrogateescape"))


def _ws_key(ws: WebSocket) -> str | None:
    """The key a WebSocket client gave: the header, or OpenAI's browser subprotocol."""
    header = ws.headers.get("authorization")
    if header:
        return header
    for proto in ws.headers.get("sec-websocket-protocol", "").split(","):
        proto = proto.strip()
        if proto.startswith("openai-insecure-api-key."):
            return "Bearer " + proto[len("openai-insecure-api-key."):]
    return None


class Guard:
    """The API key check, and the last resort for an error no handler took: one log line and
    OpenAI's JSON 500, not re-raised (Starlette's own last resort logs a whole traceback).
    Plain ASGI, so a streamed answer runs in the request's own task."""

    def __init__(self, app, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path.startswith("/v1/") and method != "OPTIONS" and not key_ok(
                self.api_key, Headers(scope=scope).get("authorization")):
            refused = JSONResponse(error_body(401, "a valid API key is required "
                                                   "(Authorization: Bearer KEY)",
                                              code="invalid_api_key"),
                                   status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await refused(scope, receive, send)
            return
        started = False

        async def watch(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:  # noqa: BLE001 - one line in the log, a JSON 500 to the client
            log.error("as2d: error: %s %s failed (%s: %s)", method, path, type(exc).__name__,
                      exc)
            if not started:
                await JSONResponse(error_body(500, f"internal error ({type(exc).__name__})"),
                                   status_code=500)(scope, receive, send)


def create_app(backend: Backend, wyoming_sock=None) -> FastAPI:
    from as2d.server.audio_api import make_router
    from as2d.server.realtime import serve_realtime

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        backend.bind()  # the decode slot lives on this event loop
        if backend.state == "loading" and not backend.load_started:
            backend.start_loading()
        reaper = asyncio.ensure_future(backend.models.reaper())  # unloads idle models
        wyoming = None
        if wyoming_sock is not None:  # Home Assistant's protocol, on this loop too
            from as2d.server.wyoming import serve_wyoming

            wyoming = await serve_wyoming(backend, wyoming_sock)
        try:
            yield
        finally:
            reaper.cancel()
            if wyoming is not None:
                wyoming.close()
                for task in list(wyoming.as2d_tasks):
                    task.cancel()

    app = FastAPI(title="as2d", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    settings = backend.settings

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such endpoint: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(422, "the request does not have the expected shape"),
                            status_code=422)

    # The key check and the last-resort 500: plain ASGI (no BaseHTTPMiddleware, whose task
    # group cancels a streamed body's task mid-answer).
    app.add_middleware(Guard, api_key=settings.api_key)

    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.get("/health")
    async def health() -> JSONResponse:
        doc = {"status": {"ready": "ok"}.get(backend.state, backend.state),
               "model": backend.model_name if backend.state == "ready" else settings.model,
               "drafter": backend.drafter_name,
               "decoder": backend.decoder_name, "llm": settings.llm,
               "busy": bool(backend.slot and backend.slot.busy) or backend.gate.holder is not None,
               "queued": backend.slot.waiting if backend.slot else 0,
               "live_sessions": len(backend.sessions),
               "decoding": backend.gate.holder, "waiting_decodes": backend.gate.waiting,
               "loaded": ([backend.model_name] if backend.engine is not None else [])
               + sorted(backend.models.loaded)}
        if backend.state == "failed":
            doc["error"] = backend.error
        if backend.stopping:
            doc["status"] = "stopping"
        return JSONResponse(doc, status_code=200 if doc["status"] == "ok" else 503)

    app.include_router(make_router(backend))

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        if not key_ok(settings.api_key, _ws_key(ws)):
            # Refused at the handshake, with the same 401 body as HTTP (or a policy close
            # where the server cannot send an HTTP answer to a WebSocket request).
            denial = JSONResponse(error_body(401, "a valid API key is required "
                                                  "(Authorization: Bearer KEY)",
                                             code="invalid_api_key"), status_code=401)
            try:
                await ws.send_denial_response(denial)
            except RuntimeError:
                await ws.close(1008, "a valid API key is required")
            return
        await serve_realtime(ws, backend)

    pages = {"/": ("index.html", "text/html; charset=utf-8"),
             "/app.js": ("app.js", "text/javascript; charset=utf-8"),
             "/pcm-worklet.js": ("pcm-worklet.js", "text/javascript; charset=utf-8"),
             "/style.css": ("style.css", "text/css; charset=utf-8")}

    def page_route(path: str, name: str, media: str) -> None:
        async def serve_file() -> Response:
            return FileResponse(STATIC / name, media_type=media,
                                headers={"Cache-Control": "no-cache",
                                         "Content-Security-Policy": _CSP})

        app.add_api_route(path, serve_file, methods=["GET"], include_in_schema=False)

    for path, (name, media) in pages.items():
        page_route(path, name, media)
    return app


# The page may talk to this server only: no other origin for scripts, styles or connections.
_CSP = ("default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data: blob:; "
        "media-src 'self' blob:; style-src 'self'; script-src 'self'; worker-src 'self' blob:")


DRAIN_SECONDS = 2.0  # how long a connection refused with 400 is read (and dropped) before closing


def http_protocol() -> type:
    """uvicorn's h11 protocol, less two habits of its answer to a request h11 cannot parse (a
    malformed ``Content-Length``, a bad request line): that 400 is OpenAI's JSON error like
    every other refusal, not a plain-text line, and the connection is half-closed and its
    remaining input read and dropped for up to :data:`DRAIN_SECONDS` before it is closed.
    uvicorn closes at once, and a socket closed with the client's body still arriving is
    reset (RST), so the client saw "connection reset" instead of the 400. The refusal happens
    inside uvicorn, below the application, which never sees the request."""
    import json

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    body = json.dumps(error_body(400, "the request is not valid HTTP/1.1 (a malformed "
                                      "header, such as Content-Length, or request line)",
                                 code="invalid_request")).encode()

    class JSONErrorH11Protocol(H11Protocol):
        draining = False

        def send_400_response(self, msg: str) -> None:
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            try:
                out = self.conn.send(h11.Response(status_code=400, headers=headers,
                                                  reason=b"Bad Request"))
                out += self.conn.send(h11.Data(data=body)) or b""
                out += self.conn.send(h11.EndOfMessage()) or b""
            except h11.LocalProtocolError:  # h11 cannot answer in this state: uvicorn's way
                super().send_400_response(msg)
                return
            self.transport.write(out)
            self.draining = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            loop = asyncio.get_running_loop()
            loop.call_later(DRAIN_SECONDS, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if not self.draining:
                super().data_received(data)

        def eof_received(self) -> None:
            if self.draining:
                self.transport.close()

    return JSONErrorH11Protocol


def run(backend: Backend, sock, log_level: str = "info", wyoming_sock=None) -> int:
    """Serve on the listening socket ``sock`` (and Wyoming on ``wyoming_sock``) until
    SIGTERM/SIGINT; the exit code (1 when the models failed to load)."""
    import uvicorn
    import uvicorn.server

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            backend.stopping = True
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            """uvicorn's, less raising the signal again once stopped (a clean stop exits 0,
            not 143)."""
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            originals = {sig: signal.signal(sig, self.handle_exit)
                         for sig in _stop_signals(uvicorn.server.HANDLED_SIGNALS)}
            try:
                yield
            finally:
                for sig, handler in originals.items():
                    signal.signal(sig, handler)

    # python-multipart logs each malformed body it meets; the client gets the 400 already.
    logging.getLogger("python_multipart").setLevel(logging.CRITICAL)
    app = create_app(backend, wyoming_sock)
    config = uvicorn.Config(app, log_level=log_level, access_log=True,
                            lifespan="on", timeout_graceful_shutdown=300,
                            http=http_protocol(),
                            ws_max_size=24 * 1024 * 1024, server_header=False,
                            log_config=_log_config())
    server = Server(config)
    failed: list[str] = []

    def on_failed(message: str) -> None:
        failed.append(message)
        server.should_exit = True

    backend.on_failed = on_failed

    try:
        server.run(sockets=[sock])
    finally:
        backend.close()
    if failed:
        print(f"as2d: error: {failed[0]}", file=sys.stderr)
        return 1
    return 0 if server.started else 1


def _stop_signals(handled) -> list:
    """The signals that stop the server gracefully: uvicorn's (SIGINT, SIGTERM) and SIGHUP,
    the terminal closed, which would otherwise reach the command line's handler and end the
    requests in flight with a 500; a SIGHUP ignored when the process started (``nohup``)
    stays ignored."""
    sigs = list(handled)
    hup = getattr(signal, "SIGHUP", None)
    if hup is not None and hup not in sigs and signal.getsignal(hup) is not signal.SIG_IGN:
        sigs.append(hup)
    return sigs


def _log_config() -> dict:
    """uvicorn's access log on stdout, everything else on stderr, plain lines."""
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(message)s"},
            "access": {"()": "uvicorn.logging.AccessFormatter", "use_colors": False,
                       "fmt": '%(client_addr)s - "%(request_line)s" %(status_code)s'}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                       "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "access",
                       "stream": "ext://sys.stdout"}},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
            "as2d.serve": {"handlers": ["stderr"], "level": "INFO", "propagate": False}}}
