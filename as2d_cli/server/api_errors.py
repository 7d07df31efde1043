"""One error shape for every refusal: OpenAI's ``{"error": {message, type, param, code}}``.

Clients written for OpenAI read ``error.message`` and branch on the status, so every refusal
(a missing field, a bad key, a full queue, an upload too large, audio that cannot be decoded)
is an :class:`APIError` turned into that body with the right status, never a traceback.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

# OpenAI's ``type`` for each status the server answers with.
_TYPES = {400: "invalid_request_error", 401: "authentication_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          415: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 503: "service_unavailable"}


class APIError(Exception):
    """A refusal with its HTTP status; ``param`` names the offending field (or None)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}
