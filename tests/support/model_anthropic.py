"""The Anthropic Messages API, as the scripted model speaks it to Claude Code.

Claude Code sends POST /v1/messages (streaming, server-sent events) for the session's
turns and for side requests (titles, summaries); `messages_responder(turn)` answers every
one with the content blocks `turn(request_json)` returns: text, or a tool call that Claude
Code then runs and answers in its next request. `conversation`, `texts` and `tool_result`
read a request the way a test asserts on it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

from .scripted_model import Recorded, Reply

_ids = itertools.count(1)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name, "input": arguments}


def conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The user and assistant turns of a request. Claude Code (2.1.332) also puts `system`
    entries among the messages (reminders, a channel event that came while it worked)."""
    return [m for m in body.get("messages", []) if m.get("role") != "system"]


def texts(part: Any) -> list[str]:
    """Every text in a request or a part of one (system prompt, messages, tool results), in order."""
    if isinstance(part, str):
        return [part]
    if isinstance(part, list):
        return [t for item in part for t in texts(item)]
    if not isinstance(part, dict):
        return []
    found = [part["text"]] if part.get("type") == "text" and isinstance(part.get("text"), str) else []
    for key in ("system", "messages", "content"):
        if key in part:
            found += texts(part[key])
    return found


def tool_result(body: dict[str, Any], tool_use_id: str) -> dict[str, Any] | None:
    """The `tool_result` block a request carries for one tool call, if any."""
    for message in body.get("messages", []):
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
                return block
    return None


def _stream(model: str, blocks: list[dict[str, Any]]) -> Reply:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    events: list[tuple[str | None, Any]] = [(
        "message_start",
        {"type": "message_start", "message": {
            "id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
    )]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply.sse(events)


def messages_responder(turn: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda request: [text("OK")]) -> Callable[[Recorded], Reply]:
    def respond(request: Recorded) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith("/v1/messages/count_tokens"):
            return Reply.json({"input_tokens": 100})
        if request.method == "POST" and path.endswith("/v1/messages"):
            body = request.json()
            blocks = turn(body)
            if body.get("stream"):
                return _stream(body.get("model", "claude"), blocks)
            stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
            return Reply.json({"id": f"msg_{next(_ids):06d}", "type": "message", "role": "assistant", "model": body.get("model"),
                               "content": blocks, "stop_reason": stop, "stop_sequence": None,
                               "usage": {"input_tokens": 10, "output_tokens": 5}})
        return Reply.json({"type": "error", "error": {"type": "not_found_error", "message": f"no {path} here"}}, status=404)
    return respond
