"""A scripted model server on 127.0.0.1 for the real agent programs (DESIGN.md §10).

No model API is reachable here, so tests point Claude Code, Codex CLI and Gemini CLI at
this server and assert on what the *model is sent*: every request is recorded whole.
The wire format of each vendor's API lives in a responder (a callable that takes the
recorded request and returns a Reply); this module only serves, records and waits.

    with ScriptedModel(responder) as model:
        env["ANTHROPIC_BASE_URL"] = model.url
        ...
        request = model.wait_for(lambda r: "subject-1" in r.text, timeout=60)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable


class Recorded:
    """One request an agent program made: method, path (with query), headers, body."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.text = body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def __repr__(self) -> str:
        return f"<{self.method} {self.path} {len(self.body)} bytes>"


class Reply:
    """What a responder answers: a status, a content type and the body in chunks (an SSE
    stream is a list of event chunks; each is written and flushed as it comes)."""

    def __init__(self, status: int = 200, content_type: str = "application/json", chunks: Iterable[bytes] = (), headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.content_type = content_type
        self.chunks = chunks
        self.headers = headers or {}

    @classmethod
    def json(cls, value: Any, status: int = 200) -> "Reply":
        return cls(status, "application/json", [json.dumps(value).encode()])

    @classmethod
    def sse(cls, events: Iterable[tuple[str | None, Any]]) -> "Reply":
        """Server-sent events from (event name or None, JSON data) pairs."""
        def chunks() -> Iterable[bytes]:
            for name, data in events:
                head = f"event: {name}\n" if name else ""
                yield f"{head}data: {json.dumps(data)}\n\n".encode()
        return cls(200, "text/event-stream", chunks())


Responder = Callable[[Recorded], Reply]


class ScriptedModel:
    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[Recorded] = []
        self._changed = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                recorded = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._changed:
                    server.requests.append(recorded)
                    server._changed.notify_all()
                reply = server.responder(recorded)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                # No length: the body ends when the connection closes (fine for SSE and JSON).
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in reply.chunks:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "ScriptedModel":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def wait_for(self, predicate: Callable[[Recorded], bool], timeout: float) -> Recorded:
        """The first recorded request that satisfies `predicate`, waiting up to `timeout` s."""
        with self._changed:
            found = self._changed.wait_for(lambda: next((r for r in self.requests if predicate(r)), None), timeout)
        if found is None:
            seen = "\n".join(f"  {r!r}: {r.text[:300]}" for r in self.requests[-5:])
            raise AssertionError(f"no request to the scripted model matched within {timeout} s; the last ones:\n{seen}")
        return found
