"""The routes: the page, its state (once, or as a Server-Sent Events stream), search, send,
and retrying or dropping dead letters (the same operations as `relayctl dlq retry|drop`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, AsyncIterator, Callable

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from relayd.client.full import Client
from relayd.errors import RelayError, UsageError
from relayd.inbox.search import SearchQuery, search
from relayd.store import Store

from .gate import Gate
from .guard import Guard
from .live import Live
from .snapshot import clip_messages

STATIC = os.path.join(os.path.dirname(__file__), "static")
KEEPALIVE = 15.0
STOP_CHECK = 0.25  # how often an idle event stream looks whether the server is stopping
MAX_POST = 512 * 1024
BODY_DEADLINE = 10.0  # seconds to send a POST's body
WRITE_DEADLINE = 15.0  # an event stream whose reader takes longer to accept a state is dropped
FIRST_STATE_DEADLINE = 10.0  # how long GET /api/state waits for the first reading of the store
SEND_FIELDS = ("to", "broadcast", "body", "subject", "thread", "priority")


def _error(exc: RelayError, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": exc.message, "code": exc.code}, status_code=status)


class _BadBody(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


async def _json_object(request: Request) -> dict[str, Any]:
    """A POST's body as a JSON object, read within BODY_DEADLINE and MAX_POST bytes; anything
    else is a _BadBody carrying the answer (400, 408 or 413), never a server error."""
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_POST:
                raise _BadBody(_error(UsageError(f"request too large (over {MAX_POST // 1024} KiB)"), 413))
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), BODY_DEADLINE)
    except TimeoutError:
        raise _BadBody(_error(UsageError(f"the request body did not arrive within {BODY_DEADLINE:g} s"), 408)) from None
    try:
        given = msgspec.json.decode(b"".join(chunks))
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested too deep
        raise _BadBody(_error(UsageError("the request body is not JSON"))) from None
    if not isinstance(given, dict):
        raise _BadBody(_error(UsageError("the request body must be a JSON object")))
    return given


def create_app(
    store_dir: str,
    socket_path: str | None,
    human: str,
    token: str,
    port: int,
    gate: Gate,
    stopping: Callable[[], bool] = lambda: False,
) -> Guard:
    """The guarded application; `gate` holds the connections (serve.GatedH11 puts them
    there); `stopping()` turns true when the server shuts down, and ends the event streams
    (they would otherwise hold up the exit until cancelled)."""
    live = Live(store_dir, socket_path, human)
    with open(os.path.join(STATIC, "index.html"), encoding="utf-8") as fh:
        page = fh.read()

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def state(request: Request) -> Response:
        """GET /api/state: the latest state. Asked before the first reading of the store is
        done (just after start-up, or on a busy machine), it waits for that reading rather
        than answering with an empty state the page would take for an empty team."""
        if live.version == 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.changed.wait(), FIRST_STATE_DEADLINE)
        if live.version == 0:
            return JSONResponse({"error": "the web view is still reading the store; try again"}, status_code=503)
        return Response(live.payload, media_type="application/json")

    class Events:
        """GET /api/events: Server-Sent Events, each new state once. A reader that does not
        take a state within WRITE_DEADLINE is dropped (its page reconnects), so a client
        that stops reading holds at most one state in memory, and not for long."""

        async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
            peer = tuple(scope.get("client") or ())
            for old in gate.stream(peer):
                old.drop()  # past the cap: the oldest stream goes
            gone = asyncio.Event()

            async def listen() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone.set()

            listener = asyncio.create_task(listen())
            try:
                await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream"), (b"x-accel-buffering", b"no")]})
                seen = -1
                quiet_since = time.monotonic()
                while not (stopping() or gone.is_set()):
                    changed = live.changed
                    chunk = None
                    if live.version != seen:
                        seen = live.version
                        chunk = b"event: state\ndata: " + live.payload + b"\n\n"
                    elif time.monotonic() - quiet_since >= KEEPALIVE:
                        chunk = b": still here\n\n"
                    if chunk is not None:
                        quiet_since = time.monotonic()
                        try:
                            await asyncio.wait_for(send({"type": "http.response.body", "body": chunk, "more_body": True}), WRITE_DEADLINE)
                        except TimeoutError:
                            conn = gate.drop(peer)
                            if conn is not None:
                                conn.drop()
                            await gone.wait()  # the connection is going: nothing more to send
                            return
                        continue
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), STOP_CHECK)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                listener.cancel()

    def run_search(params: dict[str, Any]) -> dict[str, Any]:
        with Store(store_dir) as store:
            result = search(store, msgspec.convert(params, SearchQuery))
        return {"messages": clip_messages(result), "more": result.more}

    async def search_route(request: Request) -> Response:
        params: dict[str, Any] = {k: v for k, v in request.query_params.items() if v.strip() and k in ("text", "from", "to", "agent", "thread", "since")}
        try:
            params["limit"] = int(request.query_params.get("limit") or 100)
            return JSONResponse(await run_in_threadpool(run_search, params))
        except ValueError:
            return _error(UsageError("limit must be a number"))
        except msgspec.ValidationError as exc:
            return _error(UsageError(str(exc)))
        except RelayError as exc:
            return _error(exc)

    def call(op: str, params: dict[str, Any]) -> Any:
        with Client(store_dir, socket_path, name="relay-web") as client:
            return client.call(op, params)

    async def send_route(request: Request) -> Response:
        try:
            given = await _json_object(request)
            params = {k: given[k] for k in SEND_FIELDS if k in given}
            params["agent"] = human  # the page always speaks as the human identity
            result = await run_in_threadpool(call, "send", params)
        except _BadBody as bad:
            return bad.response
        except RelayError as exc:
            return _error(exc)
        failed = [n for n in result.get("notifications", []) if not n.get("ok", True)]
        return JSONResponse({"sent": [{"id": m["id"], "to": m["to"]} for m in result["messages"]], "notify_failed": failed})

    async def track_route(request: Request) -> Response:
        """GET /api/track?id=ID: each recipient's way of one message (relayctl track)."""
        try:
            return JSONResponse(await run_in_threadpool(call, "track", {"id": request.query_params.get("id") or ""}))
        except RelayError as exc:
            return _error(exc)

    async def dead_letter_route(request: Request) -> Response:
        """POST /api/dlq/retry or /api/dlq/drop with {"id": ..., "to": ...}."""
        action = request.url.path.rsplit("/", 1)[1]  # "retry" or "drop": one route each
        try:
            given = await _json_object(request)
            if not isinstance(given.get("id"), str) or not isinstance(given.get("to"), (str, type(None))):
                raise UsageError("give the dead letter's id (and optionally its recipient, to)")
            params = {"id": given["id"], "to": given.get("to")}
            result = await run_in_threadpool(call, f"dlq_{action}", params)
        except _BadBody as bad:
            return bad.response
        except RelayError as exc:
            return _error(exc, 404 if exc.code == "not_found" else 400)
        return JSONResponse({"ok": True, "id": given["id"], "attempt_of": result.get("of")})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        live.start()
        try:
            yield
        finally:
            await run_in_threadpool(live.stop)

    routes = [
        Route("/", index),
        Route("/api/state", state),
        Route("/api/events", Events(), methods=["GET"]),
        Route("/api/search", search_route),
        Route("/api/send", send_route, methods=["POST"]),
        Route("/api/track", track_route),
        Route("/api/dlq/retry", dead_letter_route, methods=["POST"]),
        Route("/api/dlq/drop", dead_letter_route, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), token, port, trust=gate.trust)
