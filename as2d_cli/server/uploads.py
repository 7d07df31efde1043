"""A multipart upload, streamed to a temporary file under a size limit.

The request body is parsed as it arrives (python-multipart's push parser): the ``file`` part
goes straight to a temporary file on disk, the other fields (short strings) are kept in
memory, and the upload is refused with 413 as soon as the body passes the limit, without
reading the rest. Nothing is buffered whole in memory, whatever the client sends.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header

from as2d.server.api_errors import APIError

MAX_FIELD_BYTES = 64 * 1024  # a prompt or a question: a few KB at most
# A known speaker's clip as a data URL (OpenAI's known_speaker_references[]: 2-10 s of audio;
# 10 s of 16-bit 16-kHz WAV is 427 KB in base64). The upload limit bounds them all together.
MAX_REFERENCE_BYTES = 2 * 1024 * 1024
LARGE_FIELDS = ("known_speaker_references[]", "known_speaker_references")
MAX_FIELDS = 64
MAX_HEADER_BYTES = 8 * 1024


@dataclass
class Upload:
    """The fields of a multipart form; ``files`` maps a field name to (temp path, filename)."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, tuple[str, str]] = field(default_factory=dict)
    size: int = 0

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None

    def get_all(self, name: str) -> list[str]:
        return self.fields.get(name, [])

    def close(self) -> None:
        for path, _ in self.files.values():
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.files.clear()


UPLOAD_PREFIX = "as2d-upload-"
_STALE = re.compile(r"as2d-upload-(\d+)-[A-Za-z0-9_]+")


def upload_prefix() -> str:
    """Temporary upload files are named ``as2d-upload-PID-XXXXXXXX``: the server's process id
    says, after a crash, whose they were (:func:`remove_stale_uploads`)."""
    return f"{UPLOAD_PREFIX}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's; a pid no system has
        return True  # either way: not ours to judge, left alone
    return True


def remove_stale_uploads(tmpdir: str | None = None) -> int:
    """Delete the upload files a server killed without its cleanup (SIGKILL, a crash) left
    in the temporary folder; how many. Only this program's files are touched: named
    ``as2d-upload-PID-…`` as :func:`upload_prefix` names them, regular files (not links),
    owned by this user, of a process that no longer runs (a live server's uploads, this
    one's included, are left alone)."""
    folder = tmpdir or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    me = os.getpid()
    uid = os.getuid() if hasattr(os, "getuid") else None
    for name in names:
        m = _STALE.fullmatch(name)
        if m is None:
            continue
        pid = int(m.group(1))
        if pid == me or _alive(pid):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
                continue
            os.unlink(path)  # a link put there meanwhile is unlinked, never followed
            removed += 1
        except OSError:
            continue
    return removed


def _limit_error(limit: int) -> APIError:
    mb = limit / (1024 * 1024)
    return APIError(413, f"the upload is larger than this server accepts ({mb:g} MB; "
                         "see --max-upload-mb)", param="file", code="file_too_large")


async def read_multipart(content_type: str | None, content_length: str | None,
                         body: AsyncIterator[bytes], limit: int, tmpdir: str | None = None
                         ) -> Upload:
    """Parse a ``multipart/form-data`` body. Raises :class:`APIError` (415 for another
    content type, 413 past ``limit`` bytes, 400 for a malformed body)."""
    ctype, params = parse_options_header(content_type or "")
    if ctype != b"multipart/form-data":
        raise APIError(415, "the request body must be multipart/form-data (a file upload), "
                            f"not {ctype.decode('latin-1') or 'empty'}",
                       code="unsupported_media_type")
    boundary = params.get(b"boundary")
    if not boundary:
        raise APIError(400, "the multipart/form-data content type has no boundary",
                       code="invalid_multipart")
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise APIError(400, "Content-Length is not a number",
                           code="invalid_request") from None
        if declared > limit + 64 * 1024:  # the form's own framing on top of the file
            raise _limit_error(limit)

    upload = Upload()
    state = _PartState()

    def on_part_begin() -> None:
        state.reset()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state.header_field += data[start:end]
        state.header_bytes += end - start

    def on_header_value(data: bytes, start: int, end: int) -> None:
        state.header_value += data[start:end]
        state.header_bytes += end - start
        if state.header_bytes > MAX_HEADER_BYTES:
            raise APIError(400, "a multipart part's headers are too long",
                           code="invalid_multipart")

    def on_header_end() -> None:
        state.headers[state.header_field.lower()] = state.header_value
        state.header_field, state.header_value = b"", b""

    def on_headers_finished() -> None:
        disp, opts = parse_options_header(state.headers.get(b"content-disposition", b""))
        if disp != b"form-data" or b"name" not in opts:
            raise APIError(400, "a multipart part has no form-data name",
                           code="invalid_multipart")
        state.name = opts[b"name"].decode("utf-8", "replace")
        if b"filename" in opts:
            if state.name in upload.files:
                raise APIError(400, f"more than one file in field {state.name!r}",
                               param=state.name, code="invalid_multipart")
            fd, path = tempfile.mkstemp(prefix=upload_prefix(), dir=tmpdir)
            state.file = os.fdopen(fd, "wb")
            upload.files[state.name] = (path, opts[b"filename"].decode("utf-8", "replace"))
        else:
            if sum(len(v) for v in upload.fields.values()) >= MAX_FIELDS:
                raise APIError(400, "too many form fields", code="invalid_multipart")

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if state.file is not None:
            state.file.write(data[start:end])
        else:
            state.value += data[start:end]
            most = MAX_REFERENCE_BYTES if state.name in LARGE_FIELDS else MAX_FIELD_BYTES
            if len(state.value) > most:
                raise APIError(400, f"field {state.name!r} is too long (at most "
                                    f"{most // 1024} KB)", param=state.name,
                               code="field_too_long")

    def on_part_end() -> None:
        if state.file is not None:
            state.file.close()
            state.file = None
        elif state.name is not None:
            try:
                text = state.value.decode("utf-8")
            except UnicodeDecodeError:
                raise APIError(400, f"field {state.name!r} is not UTF-8 text",
                               param=state.name, code="invalid_value") from None
            upload.fields.setdefault(state.name, []).append(text)

    def on_end() -> None:
        state.ended = True

    parser = MultipartParser(boundary, {
        "on_part_begin": on_part_begin, "on_header_field": on_header_field,
        "on_header_value": on_header_value, "on_header_end": on_header_end,
        "on_headers_finished": on_headers_finished, "on_part_data": on_part_data,
        "on_part_end": on_part_end, "on_end": on_end})
    try:
        async for chunk in body:
            upload.size += len(chunk)
            if upload.size > limit + 64 * 1024:
                raise _limit_error(limit)
            try:
                parser.write(chunk)
            except APIError:
                raise
            except Exception as exc:  # python-multipart's parse errors
                raise APIError(400, f"malformed multipart body ({exc})",
                               code="invalid_multipart") from None
        if not state.ended:
            raise APIError(400, "the multipart body ended before its closing boundary",
                           code="invalid_multipart")
        for path, _ in upload.files.values():
            if os.path.getsize(path) > limit:
                raise _limit_error(limit)
    except BaseException:
        if state.file is not None:
            state.file.close()
        upload.close()
        raise
    return upload


@dataclass
class _PartState:
    headers: dict = field(default_factory=dict)
    header_field: bytes = b""
    header_value: bytes = b""
    header_bytes: int = 0
    name: str | None = None
    value: bytes = b""
    file: object = None
    ended: bool = False

    def reset(self) -> None:
        self.headers, self.header_field, self.header_value = {}, b"", b""
        self.header_bytes, self.name, self.value, self.file = 0, None, b"", None
