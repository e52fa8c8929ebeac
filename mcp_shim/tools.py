"""The tools relay-mcp offers, defined once: name, description, input and output schema,
and the store operations each one runs.

Descriptions and schemas are what a model pays for in context on every turn, so they are
kept to a few words each; `model_visible_chars()` measures them (DESIGN §6: <= 600 tokens
at 4 characters a token, for all tools together). Output schemas are not counted: Claude
Code sends its model only each tool's name, description and input schema.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from relayd.names import PRIORITIES
from relayd.errors import Conflict, NotOwner
from relayd.arrival.for_models import for_json

_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}
_PRIORITY = {"type": "string", "enum": list(PRIORITIES)}

_MESSAGE = {
    "type": "object",
    "properties": {
        "id": _STR,
        "ts": _STR,
        "from": _STR,
        "to": _STR,
        "subject": _STR,
        "body": _STR,
        "priority": _PRIORITY,
        "thread": _NULLABLE_STR,
        "tags": {"type": "array", "items": _STR},
        "type": _NULLABLE_STR,
        "ack": {"type": "boolean"},
        "attempt": {"type": ["integer", "null"]},
    },
    "required": ["id", "ts", "from", "to", "subject", "body", "priority"],
}

_ACKED = {
    "type": "object",
    "properties": {"id": _STR, "outcome": {"type": "string", "enum": ["acked", "already_acked", "dead_lettered", "not_yours", "not_owed"]}},
    "required": ["id", "outcome"],
}

_SENT = {
    "type": "object",
    "properties": {
        "sent": {
            "type": "array",
            "items": {"type": "object", "properties": {"id": _STR, "to": _STR}, "required": ["id", "to"]},
        },
        "not_notified": {
            "type": "array",
            "items": {"type": "object", "properties": {"to": _STR, "method": _STR, "error": _STR}, "required": ["to", "method", "error"]},
        },
        "announced": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"to": _STR, "how": _STR, "ok": {"type": "boolean"}, "error": _STR, "pending": {"type": "boolean"}},
                "required": ["to", "how"],
            },
        },
    },
    "required": ["sent"],
}

_AGENT = {
    "type": "object",
    "properties": {
        "name": _STR,
        "role": _NULLABLE_STR,
        "status": _NULLABLE_STR,
        "task": _NULLABLE_STR,
        "last_seen": _NULLABLE_STR,
        "alive": {"type": "boolean"},
    },
    "required": ["name", "status", "task", "last_seen", "alive"],
}


def _obj(properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return schema


class ToolFailed(Exception):
    """A tool could not do its job; the model gets an `isError` result with this text."""


class Context:
    """What a tool handler may use: the caller's role and the store operations. `ask` is
    `call` with a request's session fields (relayd.session), answering {"result": ...,
    "announced": ...}."""

    def __init__(self, role: str, ask: Callable[..., dict[str, Any]]) -> None:
        self.role = role
        self.ask = ask

    def call(self, op: str, params: dict[str, Any]) -> Any:
        return self.ask(op, params)["result"]


NOTICE = "notice"  # the unread-mail notice inside structuredContent, which is all Claude Code shows a model


class Tool:
    __slots__ = ("name", "description", "input_schema", "output_schema", "run")

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        output_schema: dict[str, Any],
        run: Callable[[Context, dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self.output_schema = {**output_schema, "properties": {**output_schema["properties"], NOTICE: _STR}}
        self.run = run

    def listing(self, structured: bool) -> dict[str, Any]:
        entry = {"name": self.name, "description": self.description, "inputSchema": self.input_schema}
        if structured:
            entry["outputSchema"] = self.output_schema
        return entry


# With relayd up, how long send_message's request asks relayd to wait for its own
# triggers (tmux, zellij, cmd) to report, so a failed one is in the tool result rather
# than only in a bounce later. A trigger normally reports within ~100 ms; a tmux one waits
# for the pane's echo (relayd.arrival.notify.ECHO_WAIT). Channel and hook announcements come from
# the recipient's own session, maybe much later: they are never waited for.
ANNOUNCE_WAIT = 3.0


def _sent(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    """Send; the stored messages, how each recipient is announced (`announced`), and the
    recipients whose notification failed (`not_notified`): their mail is in the inbox, but
    they were not told, so they see it only when they look. One request: it also carries
    the announcements (relayd.session), `pending` where not known within ANNOUNCE_WAIT."""
    answer = ctx.ask("send", params, announce=ANNOUNCE_WAIT)
    result = answer["result"]
    sent: dict[str, Any] = {"sent": [{"id": m["id"], "to": m["to"]} for m in result["messages"]]}
    announced = answer.get("announced") or []
    failed = [{"to": a["to"], "method": a["how"], "error": a.get("error") or "failed"} for a in announced if a.get("ok") is False]
    if failed:
        sent["not_notified"] = failed
    if announced:
        sent["announced"] = announced
    return sent


def delivery_warning(structured: dict[str, Any]) -> str | None:
    """One sentence for the model about recipients that were not notified."""
    failed = structured.get("not_notified")
    if not failed:
        return None
    said = "; ".join(f"{f['to']} ({f['method']}: {f['error']})" for f in failed)
    return f"[relay] Stored in the inbox, but not notified: {said}. They will see it when they next check their inbox; tell a person if it is urgent."


def _send_message(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    params = {"agent": ctx.role, "to": [args["to"]], "subject": args["subject"], "body": args["body"]}
    for optional in ("priority", "thread", "ack"):
        if args.get(optional) is not None:
            params[optional] = args[optional]
    return _sent(ctx, params)


def _broadcast(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    params = {"agent": ctx.role, "broadcast": True, "subject": args["subject"], "body": args["body"]}
    if args.get("priority") is not None:
        params["priority"] = args["priority"]
    return _sent(ctx, params)


CHECK_INBOX_BYTES = 64 * 1024


def _check_inbox(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    # Acknowledging rides on check_inbox rather than a tool of its own: a model that reads
    # its mail is where it acks, and tools/list stays small (DESIGN §6 token budget).
    ids = args.get("ack") or []
    if any(not isinstance(message_id, str) for message_id in ids):
        raise ToolFailed("check_inbox: ack takes a list of message ids")
    acked = ctx.call("ack", {"agent": ctx.role, "ids": ids})["results"] if ids else []
    # A model's context is the limit here: hand over at most ~16k tokens at a time; the
    # rest stays unread (its count is in the answer) for the next call.
    result = ctx.call("read", {"agent": ctx.role, "unread": True, "mark_read": True, "last": 0, "max_bytes": CHECK_INBOX_BYTES})
    # Each message as relayd.arrival.for_models gives a model one in JSON: its one-line fields
    # escaped as relayctl read shows them, no raw line break but JSON's own `\n` in a body.
    answer: dict[str, Any] = {"messages": [for_json(m) for m in result["messages"]], "unread": result["unread"]}
    owed = [message_id for message_id, state in result.get("delivery", {}).items() if state == "owed"]
    if owed:
        answer["owed"] = owed  # sent with ack: redelivered until passed back in `ack`
    if acked:
        answer["acked"] = [{"id": a["id"], "outcome": a["outcome"]} for a in acked]
    return answer


def _presence(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": state["name"],
        **({"role": state["role"]} if state.get("role") else {}),  # (only when set: a model pays for every key)
        "status": state.get("status"),
        "task": state.get("task"),
        "last_seen": state.get("last_heartbeat"),
        "alive": bool(state.get("alive")),
    }


def _get_status(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    role = args.get("role") or "all"
    states = ctx.call("agents", {} if role == "all" else {"name": role})
    return {"agents": [_presence(s) for s in states]}


def _update_status(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    params = {"agent": ctx.role, "status": args["status"]}
    if args.get("task") is not None:
        params["task"] = args["task"]
    meta = ctx.call("set_status", params)
    return {"name": meta["name"], "status": meta.get("status"), "task": meta.get("task")}


def _check_hub_status(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    unread = ctx.call("unread", {"agent": ctx.role})
    states = ctx.call("agents", {})
    return {
        "has_new_mention": unread["unread"] > 0,
        "unread_count": unread["unread"],
        "team_presence": [_presence(s) for s in states if s["name"] != ctx.role],
    }


_RESERVATION = {
    "type": "object",
    "properties": {
        "id": _STR,
        "agent": _STR,
        "pattern": _STR,
        "repo": _STR,
        "exclusive": {"type": "boolean"},
        "reason": _NULLABLE_STR,
        "created_at": _STR,
        "expires_at": _STR,
    },
    "required": ["agent", "pattern", "repo", "expires_at"],
}


def _repo(args: dict[str, Any]) -> str:
    """Patterns are relative to a repository; Claude Code starts its servers in the project."""
    return os.path.realpath(os.path.expanduser(args["repo"]) if args.get("repo") else os.getcwd())


def _reserve_files(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    params = {"agent": ctx.role, "pattern": args["pattern"], "repo": _repo(args)}
    for optional in ("shared", "ttl", "reason", "check"):
        if args.get(optional) is not None:
            params[optional] = args[optional]

    try:
        result = ctx.call("reserve", params)
    except Conflict as exc:
        raise ToolFailed(f"{exc} (wait for it to expire, ask the holder with send_message, or reserve a narrower pattern)") from None
    return {"reserved": result["reserved"], "reservation": result["reservation"], "conflicts": result["conflicts"]}


def _handoff(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    """The reservations move first (one operation, atomic), then the brief goes out, as `relayctl handoff` does."""
    # deferred import: relay-mcp starts without the reservations wing
    from relayd.reservations.handoff import brief

    params = {"agent": ctx.role, "to": args["to"], "patterns": args.get("patterns") or [], "all": bool(args.get("all")), "repo": _repo(args),
              "thread": args.get("thread")}
    try:
        moved = ctx.call("handoff", params)
    except NotOwner as exc:
        raise ToolFailed(f"{exc} (reserve_files shows what you hold)") from None
    text = brief(ctx.role, args["body"], moved["handed"], moved["repo"])
    subject = "handoff: " + " ".join(args["body"].split())[:70]
    sent = ctx.call("send", {"agent": ctx.role, "to": [args["to"]], "body": text, "subject": subject, "thread": args.get("thread"), "tags": ["handoff"]})
    return {"handed": moved["handed"], "to": moved["to"], "repo": moved["repo"], "brief": sent["messages"][0]["id"]}


def _release_files(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    everything = bool(args.get("all"))
    if everything == (args.get("pattern") is not None):
        raise ToolFailed("release_files: give a pattern, or all=true")
    params: dict[str, Any] = {"agent": ctx.role, "all": everything}
    if not everything:
        params.update(pattern=args["pattern"], repo=_repo(args))
    elif args.get("repo"):
        params["repo"] = _repo(args)

    try:
        return {"released": ctx.call("release", params)["released"]}
    except NotOwner as exc:
        raise ToolFailed(f"{exc} (ask the holder with send_message)") from None


TOOLS: tuple[Tool, ...] = (
    Tool(
        "send_message",
        "Send a message to another agent.",
        _obj(
            {"to": _STR, "subject": _STR, "body": _STR, "priority": _PRIORITY, "thread": _STR, "ack": {"type": "boolean", "description": "redeliver until acked"}},
            ["to", "subject", "body"],
        ),
        _SENT,
        _send_message,
    ),
    Tool(
        "check_inbox",
        "Unread mail, then marked read. Ack owed ids once handled.",
        _obj({"ack": {"type": "array", "items": _STR}}),
        _obj(
            {
                "messages": {"type": "array", "items": _MESSAGE},
                "unread": {"type": "integer"},
                "owed": {"type": "array", "items": _STR},
                "acked": {"type": "array", "items": _ACKED},
            },
            ["messages", "unread"],
        ),
        _check_inbox,
    ),
    Tool(
        "get_status",
        "Status, task, liveness of agents.",
        _obj({"role": {"type": "string", "description": "default: all"}}),
        _obj({"agents": {"type": "array", "items": _AGENT}}, ["agents"]),
        _get_status,
    ),
    Tool(
        "update_status",
        "Set your status (e.g. blocked) and task.",
        _obj({"status": _STR, "task": _STR}, ["status"]),
        _obj({"name": _STR, "status": _NULLABLE_STR, "task": _NULLABLE_STR}, ["name", "status", "task"]),
        _update_status,
    ),
    Tool(
        "broadcast",
        "Send a message to every other agent.",
        _obj({"subject": _STR, "body": _STR, "priority": _STR}, ["subject", "body"]),
        _SENT,
        _broadcast,
    ),
    Tool(
        "check_hub_status",
        "Your unread count, team presence.",
        _obj(),
        _obj(
            {
                "has_new_mention": {"type": "boolean"},
                "unread_count": {"type": "integer"},
                "team_presence": {"type": "array", "items": _AGENT},
            },
            ["has_new_mention", "unread_count", "team_presence"],
        ),
        _check_hub_status,
    ),
    Tool(
        "reserve_files",
        "Reserve a glob (e.g. src/auth/**) before editing; names any holder.",
        _obj(
            {
                "pattern": _STR,
                "repo": _STR,
                "shared": {"type": "boolean"},
                "ttl": {"type": "string", "description": "e.g. 30m, 2h"},
                "reason": _STR,
                "check": {"type": "boolean", "description": "only ask"},
            },
            ["pattern"],
        ),
        _obj(
            {
                "reserved": {"type": "boolean"},
                "reservation": {"anyOf": [_RESERVATION, {"type": "null"}]},
                "conflicts": {"type": "array", "items": _RESERVATION},
            },
            ["reserved", "reservation", "conflicts"],
        ),
        _reserve_files,
    ),
    Tool(
        "release_files",
        "Release a pattern you hold, or all.",
        _obj({"pattern": _STR, "repo": _STR, "all": {"type": "boolean"}}),
        _obj({"released": {"type": "array", "items": _RESERVATION}}, ["released"]),
        _release_files,
    ),
    Tool(
        "handoff",
        "Hand your reservations (patterns or all) and a brief to an agent.",
        _obj({"to": _STR, "body": _STR, "patterns": {"type": "array", "items": _STR}, "all": {"type": "boolean"}}, ["to", "body"]),
        _obj({"handed": {"type": "array", "items": _RESERVATION}, "to": _STR, "repo": _STR, "brief": _STR}, ["handed", "to", "repo", "brief"]),
        _handoff,
    ),
)

BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
}


def check_arguments(tool: Tool, args: Any) -> dict[str, Any]:
    """Validate `arguments` against the tool's (flat) input schema; ToolFailed says what is wrong."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolFailed(f"{tool.name}: arguments must be an object")
    properties = tool.input_schema["properties"]
    unknown = sorted(set(args) - set(properties))
    if unknown:
        raise ToolFailed(f"{tool.name}: unknown argument(s) {', '.join(unknown)}; takes {', '.join(properties) or 'none'}")
    for name in tool.input_schema.get("required", ()):
        if args.get(name) is None:
            raise ToolFailed(f"{tool.name}: missing required argument {name!r}")
    for name, value in args.items():
        if value is None:
            continue
        schema = properties[name]
        expected = _JSON_TYPES[schema["type"]]
        if not isinstance(value, expected) or (schema["type"] in ("integer", "number") and isinstance(value, bool)):
            raise ToolFailed(f"{tool.name}: {name} must be a {schema['type']}")
        if "enum" in schema and value not in schema["enum"]:
            raise ToolFailed(f"{tool.name}: {name} must be one of {', '.join(schema['enum'])}")
    return args


def model_visible(tools: tuple[Tool, ...] = TOOLS) -> list[dict[str, Any]]:
    """What a model is shown of tools/list: names, descriptions and input schemas."""
    return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]


def model_visible_chars(tools: tuple[Tool, ...] = TOOLS) -> int:
    """The one measure of the tool list's cost: characters of `model_visible()` as JSON with
    the usual separators (", " and ": ", so a little more than compact JSON) and non-ASCII
    kept; a token is about four characters."""
    return len(json.dumps(model_visible(tools), ensure_ascii=False))
