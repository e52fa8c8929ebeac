"""Who may talk to the web view: an ASGI middleware in front of every route.

* Host must be 127.0.0.1:PORT or localhost:PORT, so a web page that rebinds its own DNS
  name to 127.0.0.1 is refused before anything else (the token would stop it too).
* A random token: `GET /?token=T` sets an HttpOnly SameSite=Strict cookie and redirects to
  `/`, so the token leaves the address bar and history; after that the cookie (or the
  `X-Relay-Token` header) must come with every request.
* A state-changing request is a POST carrying the token in the `X-Relay-Token` header and a
  JSON body: a link or a form on another site can send neither. Other methods: 405.
* No CORS headers at all, so other origins cannot read answers; CSP allows only this
  origin's own files (no inline script, no framing); no referrer leaves the page.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

TOKEN_HEADER = b"x-relay-token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def cookie_name(port: int) -> str:
    return f"relay_web_{port}"  # cookies ignore ports: two views on one machine must not clash


class Guard:
    def __init__(self, app: Callable[..., Awaitable[None]], token: str, port: int, once: set[str] | None = None) -> None:
        self.app = app
        self.token = token.encode()
        # Tokens good for one entry only: the URL handed to a browser's command line (--open),
        # where other local users could read it in the process list.
        self.once = {t.encode() for t in once or ()}
        self.cookie = cookie_name(port)
        self.hosts = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}

    def _valid(self, candidate: bytes | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate, self.token)

    def _cookie_token(self, headers: dict[bytes, bytes]) -> bytes | None:
        for part in headers.get(b"cookie", b"").split(b";"):
            name, _, value = part.strip().partition(b"=")
            if name == self.cookie.encode():
                return value
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the connection is refused by not accepting it
        headers = dict(scope["headers"])
        if headers.get(b"host") not in self.hosts:
            await _plain(send, 403, "forbidden: this view answers only at 127.0.0.1 (or localhost) on its own port")
            return
        method = scope["method"]
        if method in ("GET", "HEAD"):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = query.get("token", [None])[0]
            if scope["path"] == "/" and given is not None and (self._valid(given.encode()) or self._spend(given.encode())):
                await self._enter(send)
                return
            allowed = self._valid(self._cookie_token(headers)) or self._valid(headers.get(TOKEN_HEADER))
        elif method == "POST":
            allowed = self._valid(headers.get(TOKEN_HEADER)) and headers.get(b"content-type", b"").split(b";")[0].strip() == b"application/json"
        else:
            await _plain(send, 405, "method not allowed")
            return
        if not allowed:
            await _plain(send, 403, "forbidden: open the URL that 'relayctl web' printed (it carries the access token)")
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _spend(self, candidate: bytes) -> bool:
        for once in self.once:
            if hmac.compare_digest(candidate, once):
                self.once.discard(once)
                return True
        return False

    async def _enter(self, send: Send) -> None:
        """Trade the token in the URL for a cookie, and take it out of the address bar."""
        cookie = f"{self.cookie}={self.token.decode()}; HttpOnly; SameSite=Strict; Path=/"
        await send({"type": "http.response.start", "status": 303, "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode()), (b"content-length", b"0"), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": b""})


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})
