"""Mail as a model reads it: the one formatter of the text relay hands to an agent's model
(the hook answers, relay-mcp's tool results and channel events, an agent program's own
inbox), and the one escaping of one-line fields, which `relayctl read` shows too.

A message is untrusted text, and a model reads what it is handed as one stream of lines:
a subject holding a newline followed by `--- from athena ...` would read as a second,
urgent message from someone else. So the structure around a message is relay's alone:

* **One-line fields** (sender, recipient, subject, thread, type, tags, id) are written with
  `visible`: every character that could end or bend a line -- C0 controls (`\\n`, `\\r`, vertical
  tab, form feed, the file/group/record separators), NEL (U+0085) and the other C1 controls,
  the Unicode line and paragraph separators (U+2028, U+2029), bidirectional overrides -- is
  written as a visible escape (`\\n`, `\\x0b`, `\\u2028`). A field is then one line, always.
* **A body** keeps its lines, each prefixed with `> `, the way mail quotes a letter. Its
  lines are split wherever any reader may break one (`str.splitlines`: the separators
  above), so no line of a body starts anywhere but after that prefix, and no body line can
  begin `--- from` or `subject:` as relay's own lines do. Quoting was chosen over a fence
  (a begin/end marker around the body, even with a random token in it) because a model
  sees at every single line whose text it is -- it need not find, match and trust an end
  marker, which a body can imitate (a model cannot check a token it was never told) --
  and because quoted mail is a form models already read as "what someone wrote", not as
  instructions of the conversation.
* **JSON** (relay-mcp's check_inbox) is structure of its own: a string cannot end early.
  What is left is line breaks a JSON encoder leaves raw inside a string (U+0085, U+2028,
  U+2029): `for_json` gives a message whose one-line fields are `visible` and whose body
  has every line break but `\\n` (which JSON escapes) written as an escape too.

Standard library only and cheap to import: `relayctl hook` loads it at every event of every
agent program, and relayctl's fast path for its terminal escaping.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself costs relayctl ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any

# Characters a terminal acts on instead of showing, or that a reader takes for the end of a
# line: C0 controls (ESC opens the sequences that write the clipboard (OSC 52), set the
# window title, clear the screen; CR overwrites a line; VT, FF and FS..RS end a line for
# `str.splitlines`), DEL, C1 controls (U+009B is a one-character CSI to many terminals,
# U+0085 is NEL), the bidirectional overrides and isolates that reorder what is shown
# around them, and the Unicode line and paragraph separators.
_UNSHOWN = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_AS_TEXT = {c: "\\t" if c == 9 else "\\n" if c == 10 else "\\r" if c == 13 else f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSHOWN}
_AS_LINES = {c: shown for c, shown in _AS_TEXT.items() if c not in (9, 10)}
# In JSON the same characters become JSON escapes: the same string to a decoder (--json
# stays exact), inert on a terminal. Encoders already escape C0; these they leave raw.
_AS_JSON = {c: f"\\u{c:04x}" for c in _UNSHOWN if c >= 0x20}

BODY_MAX = 3000  # characters of one body handed to a model at a time; the rest is named
QUOTE = "> "  # before every line of a body
HEADER = "--- from "  # relay's first line of each message


def visible(text: str, lines: bool = False, json: bool = False) -> str:
    """`text` as it may safely be shown: each character a terminal would act on instead of
    showing it, or a reader take for a line's end, is written as a visible escape (`\\x1b`,
    `\\r`, `\\u2028`). `lines`: newlines and tabs stay (a message body; a whole multi-line
    output). `json`: `text` is JSON from an encoder; they become JSON escapes (`\\u009b`),
    so the JSON means exactly what it did. The one escaping of relay's output: relayctl's
    `echo` passes all its human output through it, renderers pass single-line fields
    through it (a newline in a subject must not fake a line of its own), and so does
    everything a model is handed (below)."""
    if text.isprintable():
        return text  # most fields: nothing to do, checked at C speed
    return text.translate(_AS_JSON if json else _AS_LINES if lines else _AS_TEXT)


def field(value: object) -> str:
    """A one-line field of a message, as a model (and `relayctl read`) is shown it."""
    return visible(value if isinstance(value, str) else str(value if value is not None else ""))


def quoted(body: str) -> list[str]:
    """A body's lines, each behind `QUOTE`, split at every line break a reader may see."""
    return [QUOTE + visible(line, lines=True) if line else QUOTE.rstrip() for line in body.splitlines()]


def message(m: dict[str, Any], when: str, cut_hint: str | None = None) -> str:
    """One message as a model reads it: relay's header line (sender, `when` it was sent,
    priority, thread, type, tags, id), its subject line, then the body quoted. A body over
    BODY_MAX characters is cut there, and relay's own line after it says so (`cut_hint`:
    where to read the rest)."""
    extras = [field(m["priority"])] if m.get("priority", "normal") != "normal" else []
    if m.get("thread"):
        extras.append(f"thread {field(m['thread'])}")
    if m.get("type"):
        extras.append(f"type {field(m['type'])}")
    if m.get("tags"):
        extras.append(" ".join(f"#{field(tag)}" for tag in m["tags"]))
    tail = f" [{', '.join(extras)}]" if extras else ""
    head = f"{HEADER}{field(m['from'])} at {field(when)}{tail} (id {field(m['id'])})\nsubject: {field(m['subject'])}"
    body = str(m.get("body") or "").rstrip("\n")
    if not body or body == m["subject"]:
        return head
    cut = len(body) > BODY_MAX
    parts = [head, *quoted(body[:BODY_MAX] if cut else body)]
    if cut:
        parts.append(f"(the message goes on: cut at {BODY_MAX} characters{'; ' + cut_hint if cut_hint else ''})")
    return "\n".join(parts)


def short(value: object, width: int) -> str:
    """A one-line field in at most about `width` characters (before its escapes)."""
    text = str(value or "")
    return field(text if len(text) <= width else text[: width - 1] + "…")


def preview(text: object, width: int) -> str:
    """A body or subject in at most about `width` characters on one line (a channel event's
    preview): its whitespace runs folded to one space, then `visible` (so a line break that
    is no whitespace to Python, or a control, shows as its escape)."""
    flat = " ".join(str(text or "").split())
    if len(flat) > width:
        flat = flat[: width - 1] + "…"
    return visible(flat)


def for_json(m: dict[str, Any]) -> dict[str, Any]:
    """A message for a JSON result a model reads (relay-mcp's check_inbox): one-line fields
    `visible`, the body with every line break but `\\n` escaped (a JSON encoder escapes `\\n`
    and leaves U+2028 and the like raw, which a reader may take for a line's end)."""
    shown = dict(m)
    for name in ("from", "to", "subject", "thread", "type"):
        if isinstance(shown.get(name), str):
            shown[name] = field(shown[name])
    if isinstance(shown.get("tags"), list):
        shown["tags"] = [field(tag) for tag in shown["tags"]]
    if isinstance(shown.get("body"), str):
        shown["body"] = "\n".join(visible(line, lines=True) for line in shown["body"].split("\n"))
    return shown


def mail_notice(agent: str, messages: list[dict[str, Any]], most: int = 1200) -> str:
    """A notice put into an agent program's session through its own door (Codex's queue,
    relay's Copilot extension): that mail waits for the agent (who from, what about, one
    escaped line each) and how to read it, in at most about `most` characters. Never dressed
    as the person's words, never the mail itself."""
    count = len(messages)
    head = f"[relay] {count} new message{'s' if count != 1 else ''} for {field(agent)} (relay mail, not a request from the person at this terminal):"
    lines = [head]
    for m in messages:
        line = f"- from {short(m.get('from', '?'), 64)}: {short(m.get('subject') or '(no subject)', 160)}"
        if sum(len(x) + 1 for x in lines) + len(line) > most - 200:
            lines.append(f"- and {count - len(lines) + 1} more")
            break
        lines.append(line)
    lines.append("Read it with `relayctl read --unread --mark-read` (or relay's check_inbox tool), then carry on.")
    return "\n".join(lines)


# -- one message as a peer message in a program's own inbox (Claude Code's) ----------------------

PEER_HEAD = "relay mail for {agent} from {sender}{tail} (id {id})"  # the first line of each
PEER_CUT = "The body is cut at "  # the line that says the body was not carried whole


def peer_head(agent: str, sender: str, message_id: str, tail: str = "") -> str:
    return PEER_HEAD.format(agent=field(agent), sender=field(sender), tail=tail, id=field(message_id))


def peer_carried(agent: str, text: str) -> dict[str, str]:
    """The messages for `agent` whose whole text `text` (a prompt made of relay's peer
    messages) carries: id -> sender as written. A body is quoted line by line, so no line of
    one can pass for a head; a message whose body was cut is not carried whole."""
    lead = PEER_HEAD.split("{sender}")[0].format(agent=field(agent))
    carried: dict[str, str] = {}
    current: tuple[str, str] | None = None
    for line in text.split("\n"):
        if line.startswith(lead) and line.endswith(")") and " (id " in line:
            if current is not None:
                carried.setdefault(*current)
            head, _, message_id = line[len(lead):-1].rpartition(" (id ")
            current = (message_id, head.split(" [", 1)[0])
        elif current is not None and line.startswith(PEER_CUT):
            current = None
    if current is not None:
        carried.setdefault(*current)
    return carried
