"""Mail that waits says so (DESIGN §4, "never silent"): why mail is not in front of its
recipient's model yet, for its sender's `track` and `send --wait`, `status` and the web view,
and the one notice a sender gets when it waits much longer.

Mail is in front of the model once its recipient read it, or once a trigger for it was seen
to land (an `announced` receipt that worked, after it was stored). Mail that is neither
after `delivery.held_after` (config.json, the team file; default 30 s) is *held*, and says
why in words; after `delivery.held_notice_after` (default 10 minutes) each of its senders
gets one message from `relay` naming it and why (logged as a `held` receipt, so only once).

Why, comes from the agent's held record, `agents/<name>/held` ({"since", "why"}): the arrival
wing writes it when it holds a trigger back (relayd.arrival.notify: the program asks its
person a question, the pane is in copy mode, a draft stands in the input line, ...; `since`
is the first hold of a run of holds) and removes it when a trigger goes out; relay-mcp writes
it when Claude Code refuses its channel (mcp_shim.follow). Without a record, the agent's
arrival mechanism says it: none, a hook that waits for the program's next event, a channel
with no sign that the program took the event.

Time is read from the store's clock (`Store.clock`), so the tests move it in memory.
"""

from __future__ import annotations

import msgspec

from .. import layout
from ..agents.roster import arrival_mechanism, read_meta
from ..config import load_config
from ..errors import RelayError
from ..fsio import Dir
from ..store import Store
from ..timefmt import parse_duration, parse_iso

HELD_AFTER = "30s"
HELD_NOTICE_AFTER = "10m"


class Held(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Why an agent's mail is not in front of its model, and since when."""

    why: str  # in words, naming the agent: "glacier's program is asking the person a question"
    since: str  # ISO time
    # the turn that the agent's last trigger or hook started failed (relayd.arrival.program_state):
    # mail announced before `since` is not in front of its model either
    failed: bool = False


# -- the held record, written by the arrival wing and relay-mcp ----------------------------------

_decoder = msgspec.json.Decoder(Held)


def note_held(agent: Dir, why: str, at: str, failed: bool = False) -> None:
    """Record that the agent's trigger (or channel) was held back, for `why` (words that
    follow "its ..."/"the ...": they are shown after the agent's name). A record already
    there keeps its `since`: the mail has been waiting since the first hold. A `failed` turn
    is dated by itself: the triggers that landed before it did not reach the model."""
    old = read_held(agent)
    if old is not None and old.why == why and not failed:
        return
    agent.replace(layout.HELD, msgspec.json.encode(Held(why=why, since=at if failed or old is None else old.since, failed=failed)), None)


def clear_held(agent: Dir) -> None:
    agent.unlink(layout.HELD, missing_ok=True)


def read_held(agent: Dir) -> Held | None:
    raw = agent.read_bytes(layout.HELD)
    if not raw:
        return None
    try:
        return _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a torn or foreign file: as if none (the next hold rewrites it)


# -- why, in words ---------------------------------------------------------------------------------


def explain(name: str, record: Held | None, mechanism: str) -> str:
    """Why `name`'s mail waits: its held record, else what its arrival mechanism implies."""
    if record is not None:
        return _named(name, record.why)
    kind = mechanism.partition(":")[0]
    if kind == "none":
        return f"{name} has no arrival mechanism: it sees mail only when it reads (relayctl register {name} --notify ...)"
    if kind == "hook":
        return f"{name}'s program has not reached a hook that hands mail over (its next prompt, tool's end or turn's end)"
    if kind == "channel":
        return f"{name}'s program gave no sign that it took relay's channel event (is its relay-mcp running with the channel on?)"
    return f"{name} was not told: no trigger by {kind} went out (relayctl status shows how its announcements went)"


def _named(name: str, why: str) -> str:
    """"its program is ..." -> "glacier's program is ..."; "tmux pane %3 ..." -> "glacier's tmux pane %3 ..."."""
    if why.startswith("its "):
        return f"{name}'s {why[4:]}"
    return f"{name}'s {why}" if why.startswith(("tmux pane", "zellij pane")) else f"{name}: {why}"


# -- the set times -----------------------------------------------------------------------------------


def thresholds(store: Store) -> tuple[float, float]:
    """(held_after, held_notice_after) in seconds; the defaults when config.json is broken
    (the commands that use what is broken report it)."""
    try:
        delivery = load_config(store).delivery
        return parse_duration(delivery.held_after).total_seconds(), parse_duration(delivery.held_notice_after).total_seconds()
    except RelayError:
        return parse_duration(HELD_AFTER).total_seconds(), parse_duration(HELD_NOTICE_AFTER).total_seconds()


def held_since(store: Store, name: str, stored: str) -> Held:
    """Why mail to `name` stored at `stored` waits, and since when (never before it was stored)."""
    with store.agent_dir(name) as agent:
        record = read_held(agent)
        meta = read_meta(agent)
    mechanism = arrival_mechanism(meta.notify, meta.program) if meta else "none"
    since = max(record.since, stored) if record is not None else stored
    return Held(why=explain(name, record, mechanism), since=since)


def waited(store: Store, stored: str) -> float:
    """Seconds since `stored`, by the store's clock."""
    return (store.now() - parse_iso(stored)).total_seconds()


def agent_held(store: Store, name: str, held_after: float) -> Held | None:
    """For `status`: why the agent's oldest unread mail waits, once it has waited `held_after`
    without a trigger landing for it; None when nothing of its mail is held."""
    # deferred imports: status loads this module; the inbox scans only when it runs
    from ..inbox.read import ReadParams, read

    from .log import SYSTEM_SENDER

    unread = [m for m in read(store, ReadParams(agent=name, unread=True, last=0)).messages if m.from_ != SYSTEM_SENDER]
    if not unread:
        return None
    oldest = min(m.ts for m in unread)
    if waited(store, oldest) < held_after or _told_since(store, name, oldest):
        return None
    return held_since(store, name, oldest)


def landed(how: str | None, ok: bool, at: str, record: Held | None) -> bool:
    """Whether an announcement (`how`, `ok`, at `at`) put the agent's mail in front of its
    model, given its held record. A hook's ("hook") is the hook marking that mail read, so it
    says no more than the read does; and a trigger that landed did not, when the turn it
    started then failed (a `failed` record since): that mail is unread again and waits."""
    return ok and how != "hook" and not (record is not None and record.failed and record.since >= at)


def held_record(store: Store, name: str) -> Held | None:
    with store.agent_dir(name) as agent:
        return read_held(agent)


def _told_since(store: Store, name: str, since: str) -> bool:
    """A trigger landed for the agent after `since` (its mail from then on is in front of its model)."""
    from .log import newest_first

    record = held_record(store, name)
    return any(r.step == "announced" and r.to == name and landed(r.how, r.ok, r.ts, record) and not r.note and r.ts >= since
               for r in newest_first(store, since))


# -- the one notice --------------------------------------------------------------------------------


def notice_held(store: Store) -> list[dict]:
    """Tell the senders of mail held longer than `held_notice_after`, once per message, why
    it waits: one message from relay per sender and recipient. Returns what was told
    ({"to": sender, "about": recipient, "ids": [...]}). relayd runs it on a timer."""
    from ..inbox.append import deliver
    from ..inbox.read import ReadParams, read
    from ..records import Message
    from ..timefmt import now_iso
    from ..ulid import new_ulid
    from .log import SYSTEM_SENDER, Receipt, newest_first, write

    _, notice_after = thresholds(store)
    told: list[dict] = []
    for name in store.known_agents():
        try:
            unread = [m for m in read(store, ReadParams(agent=name, unread=True, last=0)).messages if m.from_ != SYSTEM_SENDER]
        except RelayError:
            continue  # removed meanwhile
        late = [m for m in unread if waited(store, m.ts) >= notice_after]
        if not late:
            continue
        oldest = min(m.ts for m in late)
        done: set[str] = set()
        last_landed = ""  # the last trigger that landed for it: mail stored before it is in front of the model
        record = held_record(store, name)
        for r in newest_first(store, oldest):
            if r.to != name:
                continue
            if r.step == "held":
                done.update(r.ids)
            elif r.step == "announced" and landed(r.how, r.ok, r.ts, record) and not r.note and not last_landed:
                last_landed = r.ts
        by_sender: dict[str, list[Message]] = {}
        for m in late:
            if m.id not in done and m.ts > last_landed and store.is_agent(m.from_):
                by_sender.setdefault(m.from_, []).append(m)
        for sender, messages in by_sender.items():
            held = held_since(store, name, min(m.ts for m in messages))
            ids = list(dict.fromkeys(m.id for m in messages))
            listed = "\n".join(f"  {m.id}  {m.subject}" for m in messages)
            count = f"{len(ids)} message{'s' if len(ids) != 1 else ''}"
            notice = Message(
                id=new_ulid(),
                ts=now_iso(),
                from_=SYSTEM_SENDER,
                to=sender,
                subject=f"held for {name}: {count}",
                body=(
                    f"Your mail to {name} is stored in its inbox but has not reached its model since {held.since[11:19]} UTC: "
                    f"{held.why}. relay keeps trying and tells you no more about these.\n{listed}\n"
                    f"'relayctl track ID' shows each message's way; 'relayctl status' shows {name}'s."
                ),
                priority="high",
                tags=["held"],
            )
            write(store, [Receipt(ts=notice.ts, step="held", to=name, ok=False, error=held.why, ids=ids)])
            deliver(store, {sender: [notice]})
            told.append({"to": sender, "about": name, "ids": ids})
    return told

