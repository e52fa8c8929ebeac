"""The OpenAI Responses API, as the scripted model speaks it to Codex CLI.

Codex sends POST {base_url}/responses (streamed as server-sent events) for each model
turn; `responses_responder(turn)` answers with the output items `turn(request_json)`
returns: an assistant message, or a function call that Codex runs and answers in its
next request as a `function_call_output` item. Codex reaches this server through a
`model_providers` entry in a scratch CODEX_HOME's config.toml (`codex_config` below).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable

from .scripted_model import Recorded, Reply

_ids = itertools.count(1)


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": f"msg_{next(_ids):06d}", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def function_call(name: str, arguments: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """A tool call; an MCP server's tools sit in a namespace (`mcp__relay` for the server `relay`)."""
    n = next(_ids)
    call = {"type": "function_call", "id": f"fc_{n:06d}", "call_id": f"call_{n:06d}", "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}
    return {**call, "namespace": namespace} if namespace else call


def _stream(model: str, items: list[dict[str, Any]]) -> Reply:
    response = {"id": f"resp_{next(_ids):06d}", "object": "response", "model": model, "status": "in_progress", "output": []}
    events: list[tuple[str | None, Any]] = [("response.created", {"type": "response.created", "response": response})]
    for index, item in enumerate(items):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": index, "item": item}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                          "output_index": index, "content_index": 0, "delta": text}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": index, "item": item}))
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    events.append(("response.completed", {"type": "response.completed",
                                          "response": {**response, "status": "completed", "output": items, "usage": usage}}))
    return Reply.sse(events)


def responses_responder(turn: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda request: [message("OK")]) -> Callable[[Recorded], Reply]:
    def respond(request: Recorded) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith("/responses"):
            body = request.json()
            return _stream(body.get("model", "gpt"), turn(body))
        if request.method == "GET" and path.endswith("/models"):
            return Reply.json({"object": "list", "data": []})
        return Reply.json({"error": {"message": f"no {request.method} {path} here", "type": "invalid_request_error"}}, status=404)
    return respond


def codex_config(base_url: str, model: str = "scripted-model") -> str:
    """config.toml for a scratch CODEX_HOME: every model request goes to `base_url`."""
    return (
        f'model = "{model}"\n'
        'model_provider = "scripted"\n'
        '\n[model_providers.scripted]\n'
        'name = "scripted"\n'
        f'base_url = "{base_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "SCRIPTED_API_KEY"\n'
        'request_max_retries = 0\n'
        'stream_max_retries = 0\n'
    )


# The Chat Completions API (POST {base_url}/chat/completions, streamed), as GitHub Copilot
# CLI (its default "completions" wire for COPILOT_PROVIDER_BASE_URL) and OpenCode (an
# OpenAI-compatible provider) speak it. `turn(request_json)` returns one assistant message
# dict: `chat_text(...)` or `chat_tool_call(...)`.

def chat_text(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def chat_tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    n = next(_ids)
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{n:06d}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _chat_stream(model: str, message: dict[str, Any]) -> Reply:
    chunk_id = f"chatcmpl-{next(_ids):06d}"

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> tuple[None, Any]:
        body: dict[str, Any] = {"id": chunk_id, "object": "chat.completion.chunk", "created": 1, "model": model,
                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage:
            body["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return (None, body)

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        events.append(chunk({"tool_calls": calls}))
        events.append(chunk({}, "tool_calls", usage=True))
    else:
        events.append(chunk({"content": message["content"]}))
        events.append(chunk({}, "stop", usage=True))
    return Reply(200, "text/event-stream", [*Reply.sse(events).chunks, b"data: [DONE]\n\n"])


def _chat_whole(model: str, message: dict[str, Any]) -> Reply:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return Reply.json({"id": f"chatcmpl-{next(_ids):06d}", "object": "chat.completion", "created": 1, "model": model,
                       "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def chat_responder(turn: Callable[[dict[str, Any]], dict[str, Any]] = lambda request: chat_text("OK")) -> Callable[[Recorded], Reply]:
    def respond(request: Recorded) -> Reply:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith("/chat/completions"):
            body = request.json()
            answer = turn(body)
            model = body.get("model", "scripted-model")
            return _chat_stream(model, answer) if body.get("stream") else _chat_whole(model, answer)
        if request.method == "GET" and path.endswith("/models"):
            return Reply.json({"object": "list", "data": [{"id": "scripted-model", "object": "model", "created": 1, "owned_by": "relay"}]})
        return Reply.json({"error": {"message": f"no {request.method} {path} here", "type": "invalid_request_error"}}, status=404)
    return respond
