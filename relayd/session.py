"""A request's session fields: an agent's bookkeeping around any operation (protocol 3).

relay-mcp does the same around every tool call: refresh the agent's last-seen before the
operation (seed 002: a tool call is a sign of life), tell the model afterwards how many
messages are waiting, and after a send say how each recipient is being told. These are
fields of the request itself (`agent`, `touch`, `unread`, `announce`: relayd.protocol.Request),
which the dispatcher honours for any operation, through relayd or directly on the store
alike, so a tool call is one request; a send that carries them is batched like any other.

An unknown `agent` is reported (UnknownAgent) by `touch`, before the operation ran, so the
caller registers it and asks again.

Version 2 clients asked for the same with the operation `session_call`, whose params held a
whole request of their own; relayd still takes it (`legacy`) and answers in its shape. It is
no operation of the table: it runs one, and the table must not import what runs it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import ops
from .errors import RelayError, UsageError
from .registry import TEAM_DECIDED, Operation
from .store import Store

ANNOUNCE_MAX = 10.0  # seconds: the longest wait for announcements a request may ask for
# Seconds between looks at the tracks of a request waiting for announcements when nothing
# said they changed. relayd hears of what it records itself (its triggers' outcomes, the
# operations in SETTLING); this look is for reports it never sees: written by a client that
# went direct while relayd runs (relayd did not answer it in time, or it was pointed at
# another socket), such as a hook's or a channel push's `announced`.
ANNOUNCE_RECHECK = 1.0
# Operations that may settle a waited announcement: a hook's or channel's report
# (`announced`), an agent's arrival mechanism changed to one relayd does not trigger (`register`).
SETTLING = frozenset({"announced", "register"})


def before(store: Store, agent: str | None, touch: bool) -> None:
    """Refresh the agent's last-seen (UnknownAgent for an agent the store does not know)."""
    if touch:
        ops.run(store, ops.lookup("touch"), {"agent": _needed(agent, "touch")})


def after(store: Store, agent: str | None, unread: bool) -> int | None:
    """The agent's unread count now, when asked."""
    if not unread:
        return None
    return ops.run(store, ops.lookup("unread"), {"agent": _needed(agent, "unread")}).unread


def run(store: Store, op: Operation, params: object, agent: str | None, touch: bool, unread: bool) -> tuple[Any, int | None]:
    """`op` with the bookkeeping asked for around it: (its result, the unread count or None)."""
    before(store, agent, touch)
    result = ops.run(store, op, params)
    return result, after(store, agent, unread)


def _needed(agent: str | None, field: str) -> str:
    if not agent:
        raise UsageError(f"a request with {field!r} needs the request's 'agent' (whose session it is)", field=field)
    return agent


# -- announcements -----------------------------------------------------------------------


def message_ids(result: Any) -> list[str]:
    """The ids of the messages an operation's result says it stored (send, dlq_retry, ...)."""
    messages = getattr(result, "messages", None) if not isinstance(result, dict) else result.get("messages")
    if not isinstance(messages, list):
        return []
    return list(dict.fromkeys(m["id"] if isinstance(m, dict) else m.id for m in messages))


def announcements(store: Store, ids: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """How each recipient of the messages `ids` is being told, as far as is known now, and
    whether that is final: no trigger relayd runs itself (tmux, zellij, cmd) is still to
    report. A channel or hook announcement comes from the recipient's own session, maybe
    much later, so it is never waited for."""
    # deferred imports: the pane triggers (relayd.arrival.notify) only when announcements are
    # reported; a direct read loads this module without them
    from .arrival.notify import TRIGGERS

    out: list[dict[str, Any]] = []
    settled = True
    for message_id in ids:
        try:
            ways = msgspec.to_builtins(ops.run(store, ops.lookup("track"), {"id": message_id})).get("recipients", [])
        except RelayError:
            continue  # a report, not the send: the mail is stored either way
        for way in ways:
            told = way.get("announced")
            if told:
                out.append({"to": way["to"], "how": told["how"], "ok": told["ok"], **({"error": told["error"]} if told.get("error") else {})})
            else:
                out.append({"to": way["to"], "how": way["mechanism"], "pending": True})
                settled = settled and way["mechanism"] not in TRIGGERS
    return out, settled


def notified(notifications: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same report from a direct-mode send's own `notifications` (it announced itself)."""
    return [{"to": n.get("agent"), "how": n.get("method"), "ok": bool(n.get("ok", True)), **({"error": n["error"]} if n.get("error") else {})} for n in notifications]


# -- version 2: session_call ---------------------------------------------------------------

LEGACY = "session_call"


class SessionCallParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # whose session this is
    op: str  # the operation to run
    params: msgspec.Raw = msgspec.Raw(b"{}")  # its parameters, as in a request of its own
    touch: bool = True  # refresh the agent's last-seen first
    unread: bool = True  # count the agent's unread messages afterwards


_legacy_decoder = msgspec.json.Decoder(SessionCallParams)


def legacy(store: Store, params: msgspec.Raw) -> tuple[dict[str, Any], str]:
    """A version 2 `session_call`: ({"result": what the operation answers, "unread": count},
    the operation it ran). As in version 2, an operation a bridged relayd decides team-wide
    is refused (it travels on its own), and so is a session_call inside one."""
    try:
        p = _legacy_decoder.decode(params)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{LEGACY}: {exc}") from None
    if p.op in TEAM_DECIDED or p.op == LEGACY:
        raise UsageError(f"{LEGACY} cannot run {p.op}: send it as a request of its own", op=p.op)
    op = ops.lookup(p.op)
    result, count = run(store, op, p.params, p.agent, p.touch, p.unread)
    return {"result": result, "unread": count}, op.name
