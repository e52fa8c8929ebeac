"""relay messages <-> IGNITE message files.

IGNITE's headers carry what both sides know (From, To/Cc, X-IGNITE-Type, Priority with
critical <-> urgent, Thread-ID <-> thread, Repository/Issue <-> `repo:`/`issue:` tags); the
body is kept byte for byte. What only relay has travels in `Subject` and `X-Relay-*`
headers, which IGNITE's own parser ignores, so a relay message survives the trip to a file
and back with every field (a re-sent message gets a new id and time; the old ones stay in
`X-Relay-Id` / `X-Relay-Ts`).
"""

from __future__ import annotations

import email.utils
import json

from relayd.names import check_agent_name, normalize_priority
from relayd.timefmt import parse_iso
from relayd.errors import NotFound

from . import mime

RELAY_ID = "X-Relay-Id"
RELAY_TS = "X-Relay-Ts"
RELAY_TAGS = "X-Relay-Tags"  # JSON list: tags are free text and may hold commas
RELAY_ACK = "X-Relay-Ack"
RELAY_UNTYPED = "X-Relay-Untyped"  # the relay message had no type; the file says "message"
RELAY_SUBJECT_JSON = "X-Relay-Subject"  # a subject that one header line cannot hold as is
RELAY_THREAD_JSON = "X-Relay-Thread"  # likewise a thread id (IGNITE's Thread-ID is then left out)
UNTYPED = "message"
REPO_TAG, ISSUE_TAG = "repo:", "issue:"


def _header_safe(text: str) -> bool:
    return text == text.strip() and not any(ord(ch) < 0x20 and ch != "\t" for ch in text)


def _json_string(message: mime.MimeMessage, header: str, what: str) -> str | None:
    """A field relay wrote JSON-encoded because one header line could not hold it."""
    encoded = message.get(header)
    if not encoded:
        return None
    try:
        value = json.loads(encoded)
    except ValueError:
        value = None
    if not isinstance(value, str):
        raise mime.NotAMessage(f"{what}: {header} is not a JSON string")
    return value


def to_send_params(message: mime.MimeMessage, what: str) -> dict:
    """Parameters of relay's `send` for this file (sender, recipients, fields, body)."""
    sender = message.get("From", "") or ""
    if not sender:
        raise mime.NotAMessage(f"{what}: no From header")
    recipients = mime.split_list(message.get("To")) + mime.split_list(message.get("Cc"))
    if not recipients:
        raise mime.NotAMessage(f"{what}: no To header")
    kind = message.get(mime.PREFIX + "Type")
    if not kind:
        raise mime.NotAMessage(f"{what}: no X-IGNITE-Type header")
    check_agent_name(sender, "sender (From)")
    for name in recipients:
        check_agent_name(name, "recipient (To/Cc)")
    priority = normalize_priority(message.get(mime.PREFIX + "Priority") or "normal")
    # An IGNITE file has no subject; its type and sender say what a subject would.
    subject = message.get("Subject") or f"{kind} from {sender}"
    subject = _json_string(message, RELAY_SUBJECT_JSON, what) or subject
    thread = _json_string(message, RELAY_THREAD_JSON, what) or message.get(mime.PREFIX + "Thread-ID") or None
    tags_header = message.get(RELAY_TAGS)
    if tags_header:
        try:
            tags = json.loads(tags_header)
        except ValueError:
            tags = None
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise mime.NotAMessage(f"{what}: {RELAY_TAGS} is not a JSON list of strings")
    else:
        repo, issue = message.get(mime.PREFIX + "Repository"), message.get(mime.PREFIX + "Issue")
        tags = ([REPO_TAG + repo] if repo else []) + ([ISSUE_TAG + issue] if issue else [])
    untyped = (message.get(RELAY_UNTYPED) or "").lower() in ("yes", "true")
    return {
        "agent": sender,
        "to": list(dict.fromkeys(recipients)),
        "body": message.body,
        "subject": subject,
        "thread": thread,
        "priority": priority,
        "tags": tags,
        "type": None if untyped and kind == UNTYPED else kind,
        "ack": (message.get(RELAY_ACK) or "").lower() in ("yes", "true"),
    }


def from_message(m: dict) -> mime.MimeMessage:
    """The IGNITE file for one relay message (the dict form, as `read --json` prints it)."""
    tags = list(m.get("tags") or [])
    repo = next((tag[len(REPO_TAG) :] for tag in tags if tag.startswith(REPO_TAG)), None)
    issue = next((tag[len(ISSUE_TAG) :] for tag in tags if tag.startswith(ISSUE_TAG)), None)
    priority = m.get("priority") or "normal"
    extra: list[tuple[str, str]] = []
    subject = m.get("subject") or ""
    if _header_safe(subject):
        extra.append(("Subject", subject))
    else:
        extra.append((RELAY_SUBJECT_JSON, json.dumps(subject, ensure_ascii=True)))
    extra += [(RELAY_ID, m["id"]), (RELAY_TS, m["ts"])]
    if tags:
        extra.append((RELAY_TAGS, json.dumps(tags, ensure_ascii=False)))
    if m.get("ack"):
        extra.append((RELAY_ACK, "true"))
    if not m.get("type"):
        extra.append((RELAY_UNTYPED, "yes"))
    thread = m.get("thread")
    if thread and not _header_safe(thread):
        extra.append((RELAY_THREAD_JSON, json.dumps(thread, ensure_ascii=True)))
        thread = None
    return mime.build(
        from_=m["from"],
        to=[m["to"]],
        type_=m.get("type") or UNTYPED,
        body=m.get("body") or "",
        priority="critical" if priority == "urgent" else priority,
        thread_id=thread,
        repository=repo if repo and _header_safe(repo) else None,
        issue=issue if issue and _header_safe(issue) else None,
        message_id=mime.new_message_id(of=m["id"]),
        date=email.utils.format_datetime(parse_iso(m["ts"]).astimezone()),
        extra=extra,
    )



def find_message(store, message_id: str, agent: str | None = None) -> dict:
    """A stored message by id, from `agent`'s inbox or, without one, from every inbox."""
    # deferred imports: relayctl read loads this module to show a MIME message; msgspec and the
    # inbox only to find one
    import msgspec

    from relayd.inbox.read import read_all

    for name in [agent] if agent else store.known_agents():
        for message in read_all(store, name).messages:
            if message.id == message_id:
                return msgspec.to_builtins(message)
    where = f"the inbox of {agent}" if agent else "any inbox"
    raise NotFound(f"no message {message_id} in {where}")
