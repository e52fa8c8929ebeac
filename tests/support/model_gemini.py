"""The Gemini API (generativelanguage v1beta), as the scripted model speaks it to Gemini CLI.

Gemini CLI reaches this server with GOOGLE_GEMINI_BASE_URL set (its "gateway" auth: an
API key in GEMINI_API_KEY, the base URL from the environment). It sends
POST /v1beta/models/MODEL:streamGenerateContent?alt=sse for the session's turns (and
:generateContent / :countTokens for side requests); `gemini_responder(turn)` answers
each with the parts `turn(request_json)` returns: text, or a function call that Gemini
CLI runs and answers in its next request as a `functionResponse` part.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from .scripted_model import Recorded, Reply

_ids = itertools.count(1)


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def function_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": arguments, "id": f"call_{next(_ids):06d}"}}


def _response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "scripted",
        "responseId": f"resp_{next(_ids):06d}",
    }


def user_texts(request: dict[str, Any]) -> list[str]:
    """Every text part the request carries in its `contents` (what the model is shown)."""
    return [part["text"] for content in request.get("contents", []) for part in content.get("parts", []) if "text" in part]


def gemini_responder(turn: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda request: [text("OK")]) -> Callable[[Recorded], Reply]:
    def respond(request: Recorded) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith(":countTokens"):
            return Reply.json({"totalTokens": 100})
        if request.method == "POST" and path.endswith(":streamGenerateContent"):
            return Reply.sse([(None, _response(turn(request.json())))])
        if request.method == "POST" and path.endswith(":generateContent"):
            return Reply.json(_response(turn(request.json())))
        return Reply.json({"error": {"code": 404, "message": f"no {request.method} {path} here", "status": "NOT_FOUND"}}, status=404)
    return respond
