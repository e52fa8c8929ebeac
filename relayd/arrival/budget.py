"""The coordination budget the person sets: how often relay may interrupt an agent, and the
loop breaker between two agents (docs/coordination.md#the-coordination-budget).

Both answer one question, `hold(store, name, agent)`, which relayd.arrival.notify asks before
it announces mail through a door or a trigger: announce now (None), or hold the announcement
back, with why in words (kept as the agent's held record, relayd.delivery.held, so the
sender's `track`, `status` and the web view say it). The mail is in the inbox either way; a
held announcement is tried again with every other held one (relayd's notifier sweeps every
few seconds), so everything that came meanwhile is announced together, once, when what held
it is over.

* **Interrupt interval** (`coordination.interrupt_interval` in config.json, per agent under
  `coordination.agents`): while an agent's program works (its hooks report a turn, relayd.
  arrival.program_state), relay announces mail to it at most once per interval, counted from
  its last announcement (`agents/<name>/announced-at`, by the store's clock); an agent at its
  prompt is interrupted by nothing, and is told at once.
  Urgent mail, mail from the person (`coordination.person`) or the team's lead
  (`delivery.escalate_to`), and relay's own notices are never held.
* **Loop breaker** (`loop_messages`, `loop_window`): two agents that have exchanged more
  than loop_messages messages back and forth within loop_window (a run of messages one way
  counts once: a reviewer's ten findings are no loop), with no message from the person or the
  lead to either of them since, are paused: `loops/<a>+<b>.json` records it (made under
  loops.lock, so it is made, and told, once), both agents and the lead get one message from
  relay saying so, and `status` and the web view list it; announcements of mail between
  the two are held while it lasts. It ends when the person resumes it (`relayctl budget
  resume A B`, the `budget_resume` operation) or loop_window after it began; only messages
  after its end count towards the next one. For a pair, the stricter of the two agents'
  settings holds: the smaller count and the longer window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec

from .. import layout
from ..config import Config, load_config
from ..delivery.log import SYSTEM_SENDER
from ..errors import NotFound, RelayError, UsageError
from ..fsio import Dir
from ..records import Message, check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import parse_duration, parse_iso, short_span, to_iso

LOOP_TAG = "loop"  # the tag of relay's notices about a paused exchange


class Rules(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's budget, in force: its own settings, else the team's."""

    interval: float  # seconds
    loop_messages: int
    loop_window: float  # seconds
    people: frozenset[str]  # whose mail is never held and resets the loop count: the person and the lead


def _config(store: Store) -> Config:
    try:
        return load_config(store)
    except RelayError:
        return Config()  # a broken config.json: the defaults (the commands that use what is broken report it)


def rules_for(store: Store, name: str, config: Config | None = None) -> Rules:
    config = config or _config(store)
    team = config.coordination
    own = team.agents.get(name)

    def pick(key: str):
        value = getattr(own, key) if own is not None else None
        return value if value is not None else getattr(team, key)

    lead = config.delivery.escalate_to
    return Rules(
        interval=parse_duration(pick("interrupt_interval")).total_seconds(),
        loop_messages=pick("loop_messages"),
        loop_window=parse_duration(pick("loop_window")).total_seconds(),
        people=frozenset([*team.person, *([lead] if lead else [])]),
    )


def never_waits(message: Message, rules: Rules) -> bool:
    return message.priority == "urgent" or message.from_ in rules.people or message.from_ == SYSTEM_SENDER


# -- the decision ------------------------------------------------------------------------------


def hold(store: Store, name: str, agent: Dir, interval: bool = True) -> str | None:
    """Why the announcement of `name`'s unread mail waits now (words after the agent's name,
    "its ..."), or None: announce it. `interval`: whether the interrupt interval applies (not
    at a turn's end, where handing mail over interrupts nothing)."""
    # deferred imports: notify loads this module only when a door or trigger would announce; the
    # inbox's reader, the program state and the inbox's writer only when a decision needs them
    from ..inbox.read import ReadParams, read

    unread = read(store, ReadParams(agent=name, unread=True, last=0)).messages
    if not unread:
        return None
    config = _config(store)
    rules = rules_for(store, name, config)
    if any(never_waits(m, rules) for m in unread):
        return None
    now = store.now()
    senders = sorted({m.from_ for m in unread})
    found = {s: _paused(store, name, s, _pair_rules(store, name, s, config), now) for s in senders if s != name and store.is_agent(s)}
    if JUST_PAUSED in found.values():
        return None  # relay's notice of it is in the inbox now, and goes out with this announcement
    paused = [s for s, state in found.items() if state]
    if paused and len(paused) == len(senders):
        partner = paused[0]
        return (f"its exchange with {', '.join(paused)} is paused by the loop breaker (too many messages between them with no word "
                f"from the person); the mail is stored. The person resumes it: relayctl budget resume {name} {partner}")
    last = last_announced(agent)
    if interval and last is not None and rules.interval > 0 and now.timestamp() - last < rules.interval and working(agent):
        until = datetime.fromtimestamp(last + rules.interval, now.tzinfo)
        return f"its interrupt interval ({short_span(rules.interval)}) holds announcements until {to_iso(until)[11:19]} UTC; what comes meanwhile is announced together then"
    return None


def working(agent: Dir) -> bool:
    """Its program is known to be in a turn (its hooks say so, relayd.arrival.program_state): an
    announcement now interrupts its work. At its prompt, an announcement interrupts nothing."""
    from .program_state import read as read_program_state

    state = read_program_state(agent)
    return state is not None and state.state == "working"


def announced(store: Store, agent: Dir) -> None:
    """An announcement went out to the agent now: its interval starts again."""
    agent.replace(layout.LAST_ANNOUNCED, b"%.3f\n" % store.clock(), None)


def last_announced(agent: Dir) -> float | None:
    raw = agent.read_bytes(layout.LAST_ANNOUNCED)
    try:
        return float(raw) if raw else None
    except ValueError:
        return None  # a torn file: as if never announced (the next announcement rewrites it)


# -- the loop breaker ----------------------------------------------------------------------------


class Loop(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Two agents' exchange, paused: `loops/<a>+<b>.json`."""

    agents: list[str]  # the two, in name order
    count: int  # messages back and forth between them (a run one way counts once), when it was paused
    since: str  # the first of those
    paused: str  # when it was paused
    until: str  # when it ends by itself
    resumed: str | None = None  # when the person resumed it
    resumed_by: str | None = None


_loop_decoder = msgspec.json.Decoder(Loop)


def _key(a: str, b: str) -> str:
    first, second = sorted((a, b))
    return f"{first}+{second}.json"


def _pair_rules(store: Store, a: str, b: str, config: Config) -> Rules:
    one, other = rules_for(store, a, config), rules_for(store, b, config)
    return Rules(interval=0.0, loop_messages=min(one.loop_messages, other.loop_messages),
                 loop_window=max(one.loop_window, other.loop_window), people=one.people)


def read_loop(store: Store, a: str, b: str) -> Loop | None:
    folder = store.top_if_exists(layout.LOOPS)
    raw = folder.read_bytes(_key(a, b)) if folder is not None else None
    if not raw:
        return None
    try:
        return _loop_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a torn or foreign file: as if none


def is_active(loop: Loop, now: datetime) -> bool:
    return loop.resumed is None and now < parse_iso(loop.until)


def _ended(loop: Loop) -> str:
    return loop.resumed or loop.until


JUST_PAUSED = "just paused"  # (a true value) paused by this very look, its notices just written


def _paused(store: Store, b: str, a: str, rules: Rules, now: datetime) -> bool | str:
    """Whether the exchange of `a` and `b` is paused; counted here, and paused (and told) here
    the moment it passes the set count (JUST_PAUSED then)."""
    from ..inbox.read import stored_since

    with store.root_dir().locked(layout.LOOPS_LOCK):
        loop = read_loop(store, a, b)
        if loop is not None and is_active(loop, now):
            return True
        start = to_iso(now - timedelta(seconds=rules.loop_window))
        if loop is not None:
            start = max(start, _ended(loop))
        to_b, to_a = stored_since(store, b, start), stored_since(store, a, start)
        word = max((m.ts for m in (*to_a, *to_b) if m.from_ in rules.people), default="")
        between = sorted((m for m in (*to_b, *to_a) if m.from_ in (a, b) and m.to in (a, b) and m.from_ != m.to and m.ts > word), key=lambda m: m.ts)
        turns = exchanged(between)
        if turns <= rules.loop_messages:
            return False
        loop = Loop(agents=sorted((a, b)), count=turns, since=min(m.ts for m in between), paused=to_iso(now),
                    until=to_iso(now + timedelta(seconds=rules.loop_window)))
        store.top(layout.LOOPS).replace(_key(a, b), msgspec.json.encode(loop) + b"\n", store.sync)
    _tell(store, loop)
    return JUST_PAUSED


def exchanged(messages: list[Message]) -> int:
    """How many messages went back and forth, oldest first: a run of messages one way (a
    reviewer's ten findings) counts as one, so only answering each other adds up."""
    return sum(1 for before, after in zip([None, *messages], messages) if before is None or before.from_ != after.from_)


def _tell(store: Store, loop: Loop) -> None:
    """One message from relay to each of the two, and one to the lead."""
    from ..inbox.append import deliver
    from ..timefmt import now_iso
    from ..ulid import new_ulid

    a, b = loop.agents
    window = short_span((parse_iso(loop.until) - parse_iso(loop.paused)).total_seconds())
    resume = f"relayctl budget resume {a} {b}"

    def notice(to: str, subject: str, body: str) -> Message:
        return Message(id=new_ulid(), ts=now_iso(), from_=SYSTEM_SENDER, to=to, subject=subject, body=body, priority="high", tags=[LOOP_TAG])

    told: dict[str, list[Message]] = {}
    for me, other in ((a, b), (b, a)):
        told[me] = [notice(me, f"paused: your exchange with {other}", (
            f"You and {other} have sent each other {loop.count} messages since {loop.since[11:19]} UTC with no word from the person. "
            f"relay no longer announces mail between you two until {loop.until[11:19]} UTC, or until the person resumes it ({resume}). "
            f"Nothing is lost: the mail is stored, and read when you need it. Finish your own task, or ask the person."))]
    lead = _config(store).delivery.escalate_to
    if lead and lead not in loop.agents and store.is_agent(lead):
        told[lead] = [notice(lead, f"paused: {a} and {b} (loop breaker)", (
            f"{a} and {b} sent each other {loop.count} messages since {loop.since[11:19]} UTC with no word from the person or you; "
            f"relay holds the announcements of mail between them until {loop.until[11:19]} UTC. "
            f"A message from you to either counts as a word; the person resumes it with: {resume}"))]
    deliver(store, told)


def loops(store: Store) -> list[Loop]:
    """The exchanges paused now, for `status`, the web view and `relayctl budget`."""
    folder = store.top_if_exists(layout.LOOPS)
    if folder is None:
        return []
    now = store.now()
    found = []
    for _, raw in folder.read_listed(".json"):
        try:
            loop = _loop_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if is_active(loop, now):
            found.append(loop)
    return sorted(found, key=lambda loop: loop.paused)


# -- the person's word ------------------------------------------------------------------------------


class BudgetResumeParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agents: list[str]  # the two agents whose exchange was paused
    by: str | None = None  # who resumed it (the person's identity), for the record


class BudgetResumeResult(msgspec.Struct, kw_only=True):
    resumed: Loop


@operation("budget_resume", BudgetResumeParams)
def budget_resume(store: Store, p: BudgetResumeParams) -> BudgetResumeResult:
    """Resume two agents' exchange the loop breaker paused: their held mail is announced again."""
    if len(p.agents) != 2 or p.agents[0] == p.agents[1]:
        raise UsageError("name the two agents whose exchange was paused, e.g. relayctl budget resume coder reviewer")
    for name in p.agents:
        check_agent_name(name)
    a, b = p.agents
    now = store.now()
    with store.root_dir().locked(layout.LOOPS_LOCK):
        loop = read_loop(store, a, b)
        if loop is None or not is_active(loop, now):
            paused = ", ".join(" and ".join(x.agents) for x in loops(store)) or "none"
            raise NotFound(f"the exchange of {a} and {b} is not paused (paused now: {paused})")
        loop = msgspec.structs.replace(loop, resumed=to_iso(now), resumed_by=p.by)
        store.top(layout.LOOPS).replace(_key(a, b), msgspec.json.encode(loop) + b"\n", store.sync)
    # relayd's notifier takes these as "try the held announcements now" (relayd.daemon.notifications)
    store.emit(*(store.event("agent", action="resumed", agent=name) for name in loop.agents))
    return BudgetResumeResult(resumed=loop)


class BudgetHoldParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # whose unread mail a hook is about to hand to its model
    interval: bool = True  # false at a turn's end: only the loop breaker holds it there


class BudgetHoldResult(msgspec.Struct, kw_only=True):
    why: str | None  # None: hand it over now (counted as an announcement)


@operation("budget_hold", BudgetHoldParams)
def budget_hold(store: Store, p: BudgetHoldParams) -> BudgetHoldResult:
    """For an agent program's hooks: may the agent's unread mail be handed to its model now?"""
    from ..delivery.held import note_held
    from ..timefmt import now_iso

    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    with store.agent_dir(p.agent) as agent:
        why = hold(store, p.agent, agent, p.interval)
        if why is None:
            announced(store, agent)
        else:
            note_held(agent, why, now_iso())
    return BudgetHoldResult(why=why)


class BudgetParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class AgentRules(msgspec.Struct, kw_only=True):
    name: str
    interrupt_interval: str
    loop_messages: int
    loop_window: str


class BudgetResult(msgspec.Struct, kw_only=True):
    agents: list[AgentRules]  # each agent's budget in force
    person: list[str]
    paused: list[Loop]


@operation("budget", BudgetParams, mutates=False)
def budget(store: Store, p: BudgetParams) -> BudgetResult:
    """Each agent's coordination budget in force, and the exchanges paused now."""
    config = _config(store)
    shown = []
    for name in store.known_agents():
        rules = rules_for(store, name, config)
        shown.append(AgentRules(name=name, interrupt_interval=short_span(rules.interval), loop_messages=rules.loop_messages,
                                loop_window=short_span(rules.loop_window)))
    return BudgetResult(agents=shown, person=list(config.coordination.person), paused=loops(store))
