"""``as2d serve``: the engine behind OpenAI's audio API, a realtime socket and a browser page.

The server is a face like the command line: it builds the engine once through its front door
and turns HTTP requests into engine calls. The engine (``as2d.runtime``) knows nothing of HTTP.

- :mod:`as2d.server.application` assembles the FastAPI application (security, CORS, the page);
- :mod:`as2d.server.backend` holds the loaded engine and the one decode slot every request
  queues for;
- :mod:`as2d.server.audio_api` answers ``/v1/audio/*`` and ``/v1/models`` in OpenAI's shapes;
- :mod:`as2d.server.realtime` speaks OpenAI's realtime transcription protocol over a WebSocket,
  driven by the same live session as ``as2d mic``;
- :mod:`as2d.server.uploads` streams a multipart upload to a temporary file under a size limit;
- :mod:`as2d.server.api_errors` is the one JSON error shape every refusal takes.
"""
