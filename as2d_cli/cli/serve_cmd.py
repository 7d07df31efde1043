"""``as2d serve``: an OpenAI-compatible speech server, a realtime socket and a browser page.

The models load once, while the server already answers (``/health`` says ``loading``), and
every request then reuses them: an 11-s clip costs its decode, not the ~1 s of start-up a
whole ``as2d transcribe`` process pays. The server itself is :mod:`as2d.server`.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from typing import Annotated

import typer

from as2d.cli import options as opt
from as2d.cli.command import add_command
from as2d.cli.decoding import parse_decoder
from as2d.cli.errors import UserError

HELP = """Serve OpenAI's audio API, live transcription and a browser page on this machine.

POST /v1/audio/transcriptions and /v1/audio/translations take the requests OpenAI's clients
send; /v1/realtime?intent=transcription streams live audio; http://HOST:PORT/ is a page that
transcribes a dropped file or the microphone. Loopback only unless --api-key is given.
--wyoming tcp://HOST:PORT also speaks Home Assistant's Wyoming protocol.
"""

ServeDecoder = opt.reworded(opt.DecoderName, "as2d, sd or target (all give the same text).")


@dataclass
class ServeRequest:
    """Everything ``as2d serve`` was asked; each field is also its command-line option."""

    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on (another than loopback needs --api-key).")
    ] = "127.0.0.1"
    port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")] = 8000
    model: opt.Model = "base"
    precision: opt.Precision = None
    drafter: opt.Drafter = "auto"
    decoder: ServeDecoder = "as2d"
    threads: opt.Threads = 0
    encoder: opt.Encoder = None
    llm: Annotated[str | None, typer.Option(
        "--llm", help="Also load an answering model for POST /v1/audio/ask: what `as2d "
                      "ask --llm` takes (gemma-3-270m, a GGUF file, ollama:NAME, a "
                      "folder).")] = None
    api_key: Annotated[str | None, typer.Option(
        "--api-key", envvar="AS2D_API_KEY", show_envvar=False,
        help="Require 'Authorization: Bearer KEY' (also $AS2D_API_KEY).")] = None
    max_upload_mb: Annotated[float, typer.Option(
        "--max-upload-mb", help="Largest upload accepted, in MB.")] = 25.0
    max_queue: Annotated[int, typer.Option(
        "--max-queue", help="Requests that may wait for the decoder before 429.")] = 8
    max_sessions: Annotated[int, typer.Option(
        "--max-sessions", help="Live sessions (realtime sockets, the page) open at once; "
                               "one more is refused.")] = 8
    idle_timeout: Annotated[float, typer.Option(
        "--idle-timeout", metavar="SECONDS",
        help="End a live session that sends no audio for this long, freeing its place.")
    ] = 10.0
    preload: Annotated[list[str] | None, typer.Option(
        "--preload", help="Also load this installed model at start, for requests whose "
                          "model= names it (repeat for several).")] = None
    model_ttl: Annotated[float, typer.Option(
        "--model-ttl", metavar="SECONDS",
        help="Unload a model requests chose (not --model) after this long unused (0: "
             "never).")] = 300.0
    memory_budget_mb: Annotated[float | None, typer.Option(
        "--memory-budget-mb", metavar="MB",
        help="Refuse (503) to load a model a request names when the server would pass "
             "this much resident memory.")] = None
    wyoming: Annotated[str | None, typer.Option(
        "--wyoming", metavar="tcp://HOST:PORT",
        help="Also serve Home Assistant's Wyoming protocol there (speech to text, "
             "streaming transcripts; Wyoming has no authentication).")] = None
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", help="Allow browser pages from this origin (repeat for several; "
                              "default: none).")] = None
    models_dir: opt.ModelsDir = None
    quiet: opt.Quiet = False


def register(app: typer.Typer) -> None:
    """Add ``as2d serve`` to ``app``."""
    add_command(app, "serve", ServeRequest, run_serve, HELP)


def validate(req: ServeRequest) -> None:
    from as2d.server.application import is_loopback

    req.decoder = parse_decoder(req.decoder)
    if not 1 <= req.port <= 65535:
        raise UserError(f"--port must be between 1 and 65535, not {req.port}", 2)
    if req.api_key is not None and not req.api_key.strip():
        raise UserError("--api-key is empty", 2)
    if req.api_key is not None:
        check_api_key(req.api_key)
    if not is_loopback(req.host) and not req.api_key:
        raise UserError(f"--host {req.host} is reachable from other machines: give an "
                        "--api-key (or set AS2D_API_KEY), or serve on 127.0.0.1", 2)
    if not 0 < req.max_upload_mb <= 4096:
        raise UserError("--max-upload-mb must be more than 0 and at most 4096", 2)
    if not 0 <= req.max_queue <= 1000:
        raise UserError("--max-queue must be between 0 and 1000", 2)
    if not 1 <= req.max_sessions <= 1000:
        raise UserError("--max-sessions must be between 1 and 1000", 2)
    if not 0.5 <= req.idle_timeout <= 3600:  # NaN included
        raise UserError("--idle-timeout must be between 0.5 and 3600 seconds", 2)
    if req.wyoming is not None:
        _wyoming_address(req.wyoming)
    if not 0 <= req.model_ttl <= 86400 * 365:  # NaN included
        raise UserError("--model-ttl must be between 0 and 31536000 seconds", 2)
    if req.memory_budget_mb is not None and not 0 < req.memory_budget_mb <= 1e7:
        raise UserError("--memory-budget-mb must be more than 0", 2)
    if req.threads < 0:
        raise UserError("--threads cannot be negative", 2)
    for origin in req.cors_origin or []:
        if origin != "*" and not origin.startswith(("http://", "https://")):
            raise UserError(f"--cors-origin takes an origin such as http://localhost:3000, "
                            f"not {origin!r}", 2)


def check_api_key(key: str) -> None:
    """A key a client can send: valid text (clients send it as UTF-8; bytes that are not
    UTF-8 in the command line or $AS2D_API_KEY are refused), no control characters (an HTTP
    header cannot carry them) and no spaces around it (a header's value is trimmed)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError("--api-key is not valid UTF-8 text", 2) from None
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise UserError("--api-key holds a control character, which an HTTP header cannot "
                        "carry", 2)
    if key != key.strip():
        raise UserError("--api-key starts or ends with a space, which an HTTP header loses",
                        2)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is one clear line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror or exc})", 2) \
            from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.set_inheritable(True)
    return sock


def _wyoming_address(uri: str) -> tuple[str, int]:
    from as2d.server.wyoming import parse_uri

    try:
        return parse_uri(uri)
    except ValueError as exc:
        raise UserError(str(exc), 2) from None


def _check_installed(wyoming: bool = False) -> None:
    import importlib.util

    needed = [("fastapi", "fastapi"), ("uvicorn", "uvicorn"),
              ("python-multipart", "python_multipart"), ("websockets", "websockets")]
    if wyoming:
        needed.append(("wyoming", "wyoming"))
    missing = [name for name, module in needed if importlib.util.find_spec(module) is None]
    if missing:
        raise UserError(f"as2d serve needs {', '.join(missing)}: pip install 'as2d[serve]'")


def run_serve(req: ServeRequest) -> int:
    _check_installed(req.wyoming is not None)
    validate(req)
    from as2d.server.application import run
    from as2d.server.backend import Backend, ServeSettings

    sock = listen(req.host, req.port)
    wyoming_sock = None
    if req.wyoming is not None:
        try:
            wyoming_sock = listen(*_wyoming_address(req.wyoming))
        except BaseException:
            sock.close()
            raise
    settings = ServeSettings(
        model=req.model, drafter=req.drafter, decoder=req.decoder, precision=req.precision,
        threads=req.threads, encoder=req.encoder,
        models_dir=str(req.models_dir) if req.models_dir else None, llm=req.llm,
        max_upload_mb=req.max_upload_mb, max_queue=req.max_queue, api_key=req.api_key,
        idle_timeout=req.idle_timeout, max_sessions=req.max_sessions,
        preload=tuple(req.preload or ()), model_ttl=req.model_ttl,
        memory_budget_mb=req.memory_budget_mb,
        cors_origins=tuple(req.cors_origin or ()))

    def note(message: str) -> None:
        if not req.quiet:
            print(message, file=sys.stderr, flush=True)

    backend = Backend(settings, log=note)
    from as2d.server.uploads import remove_stale_uploads

    stale = remove_stale_uploads()
    if stale:
        note(f"as2d: removed {stale} upload file(s) a stopped server left in "
             f"{tempfile.gettempdir()}")
    shown = f"[{req.host}]" if ":" in req.host else req.host
    note(f"as2d: serving on http://{shown}:{req.port} (pid {os.getpid()}); loading "
         f"{req.model}" + (f" + {req.drafter}" if req.decoder != "target" else "")
         + (f" and {req.llm}" if req.llm else "") + "...")
    if wyoming_sock is not None:
        note(f"as2d: Wyoming (Home Assistant) on {req.wyoming}")
    return run(backend, sock, log_level="warning" if req.quiet else "info",
               wyoming_sock=wyoming_sock)
