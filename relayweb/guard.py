"""Who may talk to the web view: an ASGI middleware in front of every route.

* Host must be 127.0.0.1:PORT or localhost:PORT, so a web page that rebinds its own DNS
  name to 127.0.0.1 is refused before anything else.
* Everything with data (`/api/...`) needs the random token in the `X-Relay-Token` header.
  The token never goes into a cookie: browsers send a 127.0.0.1 cookie to every port of
  127.0.0.1, so a server another user runs on a neighbouring port would receive it. The
  page keeps it in sessionStorage, which browsers do keep apart by port (by origin).
* The page itself (`/` and `/static/...`: the files that ship in the package) holds no
  data and no token, so it is served without one; it reads the token from the address's
  fragment (`#token=...`), which browsers never send to a server.
* A state-changing request is a POST with a JSON body: a link or a form on another site
  can send neither that nor the header. Other methods: 405.
* No CORS headers at all, so other origins cannot read answers; CSP allows only this
  origin's own files (no inline script, no framing); no referrer leaves the page.
* A request that shows the token makes its connection trusted (gate.Gate): strangers'
  connections are few and short-lived.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

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


PUBLIC = ("/", "/static/")  # the page's own files: no data, no token


class Guard:
    def __init__(self, app: Callable[..., Awaitable[None]], token: str, port: int, trust: Callable[[Any], None] = lambda peer: None) -> None:
        self.app = app
        self.token = token.encode()
        self.hosts = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}
        self.trust = trust  # told the peer (host, port) of every request that showed the token

    def _valid(self, candidate: bytes | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate, self.token)

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
        token = self._valid(headers.get(TOKEN_HEADER))
        if token:
            self.trust(tuple(scope.get("client") or ()))
        if method in ("GET", "HEAD"):
            path = scope["path"]
            allowed = token or path == PUBLIC[0] or path.startswith(PUBLIC[1])
        elif method == "POST":
            allowed = token and headers.get(b"content-type", b"").split(b";")[0].strip() == b"application/json"
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
