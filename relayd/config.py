"""`config.json` in the store: how to wake the orchestrator, what a pane trigger says, and
how long read mail is kept.

    {
      "wake":   {"gateway_command": ["/home/me/athena/scripts/wake-gateway.sh"],
                 "gateway_socket": "/run/user/1000/openclaw/gateway.sock",
                 "timeout": "5s", "retries": 2},
      "notify": {"trigger": "[relay] New message. Call check_inbox.", "timeout": "5s",
                 "prompt": "(?:[>❯›»]+|\\S*[$#%])"},
      "delivery": {"ack_wait": "5s", "cap": "300s", "max_deliver": 3,
                   "escalate_to": "leader", "keep_acked": "7d",
                   "held_after": "30s", "held_notice_after": "10m"},
      "gc":     {"keep": "30d", "dead_letter_keep": "30d", "dead_letter_mib": 256},
      "bridge": {"url": "nats://10.0.0.5:4222", "host": "gpu-box",
                 "budget": {"messages_per_hour": 5000, "mib_per_hour": 64, "refusals_per_hour": 200}},
      "dedup":  {"window": "10m"},
      "coordination": {"interrupt_interval": "30s", "loop_messages": 20, "loop_window": "10m",
                       "person": ["human"], "agents": {"coder": {"interrupt_interval": "5m"}}},
      "team":   {"preset": "overlord", "allow_new": false}
    }

`team`: written by `relayctl init --preset`. With `allow_new` false the preset's team is
fixed: an agent program that names itself (relay-mcp's role) is refused unless the name
is registered; `relayctl register NAME` still adds an agent on purpose.

`bridge.budget`: what each other bridged host may make this one store per clock hour
(docs/bridge.md, "A host's share of this host's disk"); relayd reads it when it starts.
`gc.dead_letter_*`: how long, and up to how many MiB, rotated-out unread mail is kept in
dead_letter/ (docs/coordination.md#gc).
`delivery.held_after`: mail not in front of its recipient's model this long (not read, no
trigger seen to land) is *held*: the sender's `track` and `send --wait`, `status` and the web
view say why, in words. `delivery.held_notice_after`: held this long, each sender gets one
message from relay naming the mail and why (relayd.delivery.held). The team file sets both.

`coordination`: the person's budget on how much agents may interrupt each other
(relayd.arrival.budget, docs/coordination.md#the-coordination-budget): how often relay may
announce mail to an agent, and the loop breaker between two agents; `agents` sets them for
one agent. The team file sets them too.

`dedup.window`: how long a send's id is remembered per recipient inbox; a send repeating
an id seen within it (a retry after a crash) returns the original message instead of
appending a second copy. Longer windows cost relayd memory and direct-mode retries a
longer scan; relayd reads it when it starts.

Every key is optional. A missing file means the defaults: no gateway, no socket (so
`wake` falls through to the file trigger), the default trigger line, and no retention
limit (gc drops no messages).
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from . import layout
from .errors import RelayError, StoreError
from .arrival.paneinput import DEFAULT_PROMPT
from .store import Store
from .timefmt import parse_duration

DEFAULT_TRIGGER = "[relay] New message waiting. Call check_inbox (or: relayctl read --unread --mark-read)."
MAX_TRIGGER = 200
DEFAULT_DEDUP_WINDOW = 600.0


class WakeConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    gateway_command: list[str] | str | None = None  # argv (or one shell-like string, split with shlex); TEXT is appended
    gateway_socket: str | None = None  # a Unix stream socket that accepts one JSON line
    timeout: str = "5s"
    retries: int = 2  # more tries of a gateway that fails as if restarting (0.1 s, then 0.3 s later)


class NotifyConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    trigger: str = DEFAULT_TRIGGER  # the line typed into a pane: short, fixed, never a message body
    timeout: str = "5s"  # per tmux / zellij / cmd invocation
    # What an empty input line of the pane's program looks like left of the cursor (a
    # regex, matched whole after borders and blanks are dropped): relayd.arrival.paneinput.
    prompt: str = DEFAULT_PROMPT


class DeliveryConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Defaults for messages sent with `ack` (relayd.delivery); a send may override the first three."""

    ack_wait: str = "5s"  # the backoff base: a redelivery comes random(0, min(cap, ack_wait * 2**n)) later
    cap: str = "300s"
    max_deliver: int = 3  # redeliveries after the first delivery, then dead_letter/
    escalate_to: str | None = None  # an agent told of every dead letter, besides the sender
    keep_acked: str = "7d"  # how long an acknowledgement is remembered (a repeated ack says "already")
    held_after: str = "30s"  # mail not in front of the model this long says why (relayd.delivery.held)
    held_notice_after: str = "10m"  # held this long: its sender gets one notice


class GcConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    keep: str | None = None  # drop read messages older than this from rotated inboxes (gc --keep)
    # Rotated-out unread mail in dead_letter/ (relayd.inbox.dead_letters): deleted past this
    # age (null: never by age), and the oldest first while the files pass this many MiB.
    dead_letter_keep: str | None = "30d"
    dead_letter_mib: Annotated[int, msgspec.Meta(ge=1)] = 256


class BudgetConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What each other bridged host may make this one store per clock hour (relayd.bridge.budget)."""

    messages_per_hour: Annotated[int, msgspec.Meta(ge=1)] = 5000
    mib_per_hour: Annotated[int, msgspec.Meta(ge=1)] = 64
    refusals_per_hour: Annotated[int, msgspec.Meta(ge=0)] = 200  # records of its refused mail; more are counted only

    @property
    def bytes_per_hour(self) -> int:
        return self.mib_per_hour << 20


class BridgeConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str | None = None  # nats://HOST:PORT of the team's NATS server (relayd --bridge)
    host: str | None = None  # this host's name in the team (relayd --host-name)
    creds: str | None = None  # this host's credentials file (relayd --bridge-creds)
    budget: BudgetConfig = msgspec.field(default_factory=BudgetConfig)


class DedupConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    window: str = "10m"  # how long a message id is remembered per inbox (idempotent sends)


class AgentBudget(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One agent's own coordination budget; what it leaves out is the team's."""

    interrupt_interval: str | None = None
    loop_messages: Annotated[int, msgspec.Meta(ge=1)] | None = None
    loop_window: str | None = None


class CoordinationConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The coordination budget (relayd.arrival.budget): the defaults and why are in docs/coordination.md."""

    interrupt_interval: str = "30s"  # announcements to one agent at most this often; urgent mail and the person's never wait
    loop_messages: Annotated[int, msgspec.Meta(ge=1)] = 20  # two agents exchanging more than this ...
    loop_window: str = "10m"  # ... within this, with no word from the person or the lead, are paused
    person: list[str] = msgspec.field(default_factory=lambda: ["human"])  # the person's identities (the web view writes as "human")
    agents: dict[str, AgentBudget] = msgspec.field(default_factory=dict)


class TeamConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    preset: str | None = None  # the preset the store was made with (init --preset)
    allow_new: bool = True  # may an agent program register a name of its own choosing?


class Config(msgspec.Struct, kw_only=True):
    wake: WakeConfig = msgspec.field(default_factory=WakeConfig)
    notify: NotifyConfig = msgspec.field(default_factory=NotifyConfig)
    delivery: DeliveryConfig = msgspec.field(default_factory=DeliveryConfig)
    gc: GcConfig = msgspec.field(default_factory=GcConfig)
    bridge: BridgeConfig | None = None
    dedup: DedupConfig = msgspec.field(default_factory=DedupConfig)
    coordination: CoordinationConfig = msgspec.field(default_factory=CoordinationConfig)
    team: TeamConfig = msgspec.field(default_factory=TeamConfig)


_decoder = msgspec.json.Decoder(Config)


def load_config(store: Store) -> Config:
    raw = store.root_dir().read_bytes(layout.CONFIG_FILE)
    if not raw or not raw.strip():
        return Config()
    try:
        config = _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE} is not valid: {exc}") from None
    trigger = " ".join(config.notify.trigger.split())
    if not trigger or len(trigger) > MAX_TRIGGER:
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: notify.trigger must be 1-{MAX_TRIGGER} characters on one line")
    config.notify.trigger = trigger
    try:
        re.compile(config.notify.prompt)
    except re.error as exc:
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: notify.prompt is not a valid regular expression: {exc}") from None
    try:
        window = parse_duration(config.dedup.window).total_seconds()
    except RelayError as exc:
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: dedup.window: {exc.message}") from None
    if window <= 0:
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: dedup.window must be longer than zero")
    for key in ("held_after", "held_notice_after"):
        try:
            parse_duration(getattr(config.delivery, key))
        except RelayError as exc:
            raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: delivery.{key}: {exc.message}") from None
    coordination = config.coordination
    for where, rules in [("coordination", coordination), *((f"coordination.agents.{name}", rules) for name, rules in coordination.agents.items())]:
        for key in ("interrupt_interval", "loop_window"):
            value = getattr(rules, key)
            try:
                if value is not None:
                    parse_duration(value)
            except RelayError as exc:
                raise StoreError(f"{store.root}/{layout.CONFIG_FILE}: {where}.{key}: {exc.message}") from None
    return config


def dedup_window(store: Store) -> float:
    """Seconds a message id is remembered per inbox (read once per Store handle)."""
    kept = store.remembered
    if kept.dedup_window is None:
        try:
            kept.dedup_window = parse_duration(load_config(store).dedup.window).total_seconds()
        except RelayError:
            # A broken config.json is reported by the commands that use what is broken
            # (wake, notify); sends keep working with the default window.
            kept.dedup_window = DEFAULT_DEDUP_WINDOW
    return kept.dedup_window
