"""hook claude: hand unread mail to Claude Code through its hooks.

Claude Code runs the hook with one JSON event on stdin. For SessionStart,
UserPromptSubmit and PostToolUse the answer is `hookSpecificOutput.additionalContext`;
for Stop (and SubagentStop) it is `{"decision": "block", "reason": ...}`, which keeps the
agent going with the mail as its next instruction. Messages handed over are marked read,
so the same mail is never shown twice; with nothing unread the hook prints nothing.

Exit status: 0, or 1 with one line on stderr for anything wrong (1 is a non-blocking
error for Claude Code; 2 would block the user's prompt, so it is never used).
"""

from __future__ import annotations

import json
import sys

import click

from .context import settings

CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse")
STOP_EVENTS = ("Stop", "SubagentStop")
BUDGET = 8000  # characters of context per hook call; Claude Code caps hook context at about 10k
BODY_MAX = 3000
PREVIEW = 50


@click.group(invoke_without_command=True)
@click.pass_context
def hook(ctx: click.Context) -> None:
    """Integrations that run as hooks of an agent program.

    \b
    Examples:
      relayctl --agent inferno hook claude < event.json
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@hook.command()
def claude() -> None:
    """Claude Code hook: unread messages become additional context, then count as read.

    Reads the hook event JSON on stdin (SessionStart, UserPromptSubmit, PostToolUse,
    Stop). Your agent name comes from --agent, OVLD_ROLE or RELAY_AGENT. In
    .claude/settings.json:

    \b
      {"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "relayctl --agent inferno hook claude"}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "relayctl --agent inferno hook claude"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "relayctl --agent inferno hook claude"}]}]
      }}

    \b
    Examples:
      echo '{"hook_event_name":"UserPromptSubmit","prompt":"hi"}' | relayctl --agent inferno hook claude
    """
    from relayd.errors import RelayError

    try:
        answer = _answer(sys.stdin.read())
    except RelayError as exc:
        _give_up(exc.message)
    except ValueError as exc:
        _give_up(str(exc))
    except Exception as exc:  # never a traceback into the agent's transcript
        _give_up(f"internal error: {type(exc).__name__}: {exc}")
    if answer is not None:
        click.echo(json.dumps(answer, ensure_ascii=False))


def _give_up(message: str) -> None:
    click.echo(f"error: relay hook: {' '.join(message.split())}", err=True)
    sys.exit(1)


def _answer(raw: str) -> dict | None:
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"stdin is not a hook event (bad JSON: {exc})") from None
    if not isinstance(event, dict):
        raise ValueError("stdin is not a hook event (expected a JSON object)")
    name = event.get("hook_event_name")
    if name not in CONTEXT_EVENTS + STOP_EVENTS:
        return None  # an event we cannot add context to: leave the mail unread
    s = settings()
    agent = s.require_agent("hook claude")
    text = take_unread(s, agent)
    if text is None:
        return None
    if name in STOP_EVENTS:
        return {"decision": "block", "reason": text}
    return {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}


def take_unread(s, agent: str) -> str | None:
    """The unread messages that fit the budget, rendered, and marked read."""
    preview = s.call("read", {"agent": agent, "unread": True, "last": PREVIEW})["messages"]
    if not preview:
        return None
    used, fits = 0, 0
    for message in preview:
        used += len(render(message))
        if fits and used > BUDGET:
            break
        fits += 1
    taken = s.call("read", {"agent": agent, "unread": True, "last": fits, "mark_read": True})
    messages = taken["messages"]
    if not messages:
        return None
    count = len(messages)
    head = f"relay: {count} new message{'s' if count != 1 else ''} for {agent} (now marked read; reply with send_message or `relayctl send`)."
    parts = [head, *(render(m) for m in messages)]
    if taken["unread"]:
        parts.append(f"({taken['unread']} more unread: they come with the next hook, or read them with `relayctl read --unread --mark-read`.)")
    return "\n\n".join(parts)


def render(m: dict) -> str:
    when = m["ts"][:16].replace("T", " ") + " UTC"
    extras = [m["priority"]] if m.get("priority", "normal") != "normal" else []
    if m.get("thread"):
        extras.append(f"thread {m['thread']}")
    if m.get("type"):
        extras.append(f"type {m['type']}")
    tail = f" [{', '.join(extras)}]" if extras else ""
    body = m["body"].rstrip("\n")
    if len(body) > BODY_MAX:
        body = body[:BODY_MAX] + f"\n… (cut at {BODY_MAX} characters; full text: relayctl read --from {m['from']} --last 5)"
    head = f"--- from {m['from']} at {when}{tail} (id {m['id']})\nsubject: {m['subject']}"
    return head if not body or body == m["subject"] else f"{head}\n{body}"
