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
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from relayd.client import Client
from relayd.errors import RelayError, UsageError
from relayd.search import SearchQuery, search
from relayd.store import Store

from .guard import Guard
from .live import Live
from .snapshot import clip_messages

STATIC = os.path.join(os.path.dirname(__file__), "static")
KEEPALIVE = 15.0
STOP_CHECK = 0.25  # how often an idle event stream looks whether the server is stopping
MAX_POST = 512 * 1024
SEND_FIELDS = ("to", "broadcast", "body", "subject", "thread", "priority")


def _error(exc: RelayError, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": exc.message, "code": exc.code}, status_code=status)


def create_app(
    store_dir: str,
    socket_path: str | None,
    human: str,
    token: str,
    port: int,
    once: set[str] | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Guard:
    """The guarded application; `stopping()` turns true when the server shuts down, and
    ends the event streams (they would otherwise hold up the exit until cancelled)."""
    live = Live(store_dir, socket_path, human)
    with open(os.path.join(STATIC, "index.html"), encoding="utf-8") as fh:
        page = fh.read().replace("{{TOKEN}}", token)

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def state(request: Request) -> Response:
        return Response(live.payload, media_type="application/json")

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            seen = -1
            quiet_since = time.monotonic()
            while not stopping():
                changed = live.changed
                if live.version != seen:
                    seen = live.version
                    quiet_since = time.monotonic()
                    yield b"event: state\ndata: " + live.payload + b"\n\n"
                try:
                    await asyncio.wait_for(changed.wait(), STOP_CHECK)
                except TimeoutError:
                    if time.monotonic() - quiet_since >= KEEPALIVE:
                        quiet_since = time.monotonic()
                        yield b": still here\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

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
        body = await request.body()
        if len(body) > MAX_POST:
            return _error(UsageError("request too large"), 413)
        try:
            given = msgspec.json.decode(body)
            if not isinstance(given, dict):
                raise UsageError("send takes a JSON object")
            params = {k: given[k] for k in SEND_FIELDS if k in given}
            params["agent"] = human  # the page always speaks as the human identity
            result = await run_in_threadpool(call, "send", params)
        except msgspec.DecodeError:
            return _error(UsageError("the request body is not JSON"))
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
            given = msgspec.json.decode(await request.body())
            if not isinstance(given, dict) or not isinstance(given.get("id"), str):
                raise UsageError("give the dead letter's id")
            params = {"id": given["id"], "to": given.get("to")}
            result = await run_in_threadpool(call, f"dlq_{action}", params)
        except msgspec.DecodeError:
            return _error(UsageError("the request body is not JSON"))
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
        Route("/api/events", events),
        Route("/api/search", search_route),
        Route("/api/send", send_route, methods=["POST"]),
        Route("/api/track", track_route),
        Route("/api/dlq/retry", dead_letter_route, methods=["POST"]),
        Route("/api/dlq/drop", dead_letter_route, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), token, port, once)
