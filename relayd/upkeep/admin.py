"""Whole-store operations: init (with the team presets), reset, version."""

from __future__ import annotations

import os
import shutil
import json

import msgspec

from .. import STORE_FORMAT, __version__, layout
from ..agents.roster import RegisterParams, create_agent
from ..wire import handshake
from ..errors import StoreError, UsageError
from ..registry import operation
from ..store import Store
from ..ulid import new_ulid

PRESETS: dict[str, tuple[str, ...]] = {
    # seed 000: the six panes of the overlord team
    "overlord": ("overlord", "strategist", "inferno", "glacier", "shadow", "storm"),
    # seed 003: the IGNITE leaders, followed by `workers` IGNITIANs (ignitian_1..N)
    "ignite": ("leader", "strategist", "architect", "evaluator", "coordinator", "innovator"),
}
IGNITE_WORKERS = 3  # IGNITE's default team has three IGNITIANs
MAX_WORKERS = 64
# The preset whose team has an escalation agent: dead letters are reported to it.
ESCALATION_AGENT = {"ignite": "leader"}


class InitParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    preset: str | None = None
    workers: int | None = None  # ignite preset: how many ignitian_N agents (default 3)
    allow_new_agents: bool | None = None  # with a preset: may agent programs add names? (default: no)


class InitResult(msgspec.Struct, kw_only=True):
    dir: str
    format: int
    agents: list[str]
    created: list[str]
    escalate_to: str | None = None  # the store's escalation agent, when a preset set one
    allow_new_agents: bool = True  # false: a fixed team (config.json "team"), see relayd.config


def preset_agents(preset: str, workers: int | None) -> list[str]:
    if workers is not None and preset != "ignite":
        raise UsageError("workers: only the ignite preset has workers (ignitian_1..N)")
    if workers is not None and not 0 <= workers <= MAX_WORKERS:
        raise UsageError(f"workers: 0-{MAX_WORKERS}")
    names = list(PRESETS[preset])
    if preset == "ignite":
        names += [f"ignitian_{n}" for n in range(1, (IGNITE_WORKERS if workers is None else workers) + 1)]
    return names


def _configure(store: Store, p: InitParams) -> tuple[str | None, bool]:
    """What a preset writes into config.json: `delivery.escalate_to` (unless the person
    already chose one there) and `team` (fixed unless `allow_new_agents`; an existing
    choice is kept unless the option is given). Other keys are kept as they are; the file
    is replaced atomically. Returns (escalation agent, whether new agents are allowed)."""
    config = _config_json(store)
    before = json.dumps(config)
    escalate_to = None
    if p.preset in ESCALATION_AGENT:
        delivery = config.setdefault("delivery", {})
        delivery.setdefault("escalate_to", ESCALATION_AGENT[p.preset])
        escalate_to = str(delivery["escalate_to"])
    team = config.setdefault("team", {})
    if p.preset is not None:
        team["preset"] = p.preset
        if p.allow_new_agents is not None or "allow_new" not in team:
            team["allow_new"] = bool(p.allow_new_agents)
    elif p.allow_new_agents is not None:
        team["allow_new"] = p.allow_new_agents
    if not team:
        del config["team"]
    if json.dumps(config) != before:
        store.root_dir().replace(layout.CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode(), store.sync)
    return escalate_to, team.get("allow_new", True) is not False


def _config_json(store: Store) -> dict:
    raw = store.root_dir().read_bytes(layout.CONFIG_FILE)
    try:
        config = json.loads(raw) if raw and raw.strip() else {}
    except ValueError:
        config = None
    if not isinstance(config, dict) or not all(isinstance(config.get(key, {}), dict) for key in ("delivery", "team")):
        raise StoreError(f"{store.root}/{layout.CONFIG_FILE} is not a JSON object with 'delivery' and 'team' objects; fix it, then run init again")
    return config


def set_delivery(store: Store, values: dict[str, str]) -> None:
    """Write `values` into config.json's "delivery" (the team file's held_after and
    held_notice_after, which `up` carries over: the team file is where the person set them)."""
    config = _config_json(store)
    delivery = config.setdefault("delivery", {})
    if all(delivery.get(k) == v for k, v in values.items()):
        return
    delivery.update(values)
    store.root_dir().replace(layout.CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode(), store.sync)


def set_coordination(store: Store, team: dict, agents: dict[str, dict]) -> None:
    """Write the team file's coordination budget into config.json's "coordination" (`up`
    carries it over, as it does held_after: the team file is where the person set it); an
    agent's own settings go under "agents"."""
    config = _config_json(store)
    coordination = config.setdefault("coordination", {})
    before = json.dumps(coordination, sort_keys=True)
    coordination.update(team)
    for name, own in agents.items():
        coordination.setdefault("agents", {}).setdefault(name, {}).update(own)
    if json.dumps(coordination, sort_keys=True) != before:
        store.root_dir().replace(layout.CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode(), store.sync)


def set_escalation_agent(store: Store, agent: str) -> str:
    """`delivery.escalate_to` in config.json unless the person already chose one there
    (`relayctl up` makes a team's lead the escalation agent); returns the one in force."""
    config = _config_json(store)
    delivery = config.setdefault("delivery", {})
    if not delivery.get("escalate_to"):
        delivery["escalate_to"] = agent
        store.root_dir().replace(layout.CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode(), store.sync)
    return str(delivery["escalate_to"])


@operation("init", InitParams)
def init(store: Store, p: InitParams) -> InitResult:
    """Create the store layout; a preset also registers its team of agents (ignite: `workers` IGNITIANs, and leader as the escalation agent)."""
    if p.preset is not None and p.preset not in PRESETS:
        raise UsageError(f"unknown preset {p.preset!r}: use one of {', '.join(PRESETS)}")
    if p.workers is not None and p.preset is None:
        raise UsageError("workers: give a preset (ignite)")
    team = preset_agents(p.preset, p.workers) if p.preset else []
    store.root_dir()
    for name in layout.TOP_DIRS:
        store.top(name)
    created = []
    existing = set(store.known_agents())
    for name in team:
        if name not in existing:
            create_agent(store, RegisterParams(name=name), seen=False)  # not alive before it runs
            created.append(name)
    escalate_to, allow_new = _configure(store, p)
    return InitResult(dir=store.root, format=STORE_FORMAT, agents=store.known_agents(), created=created, escalate_to=escalate_to, allow_new_agents=allow_new)


class ResetParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    confirm: bool = False  # the CLI asks the person; the wire must say so explicitly


class ResetResult(msgspec.Struct, kw_only=True):
    dir: str
    removed: list[str]
    unfixed: str | None = None  # the preset of the fixed team whose definition went with its agents


@operation("reset", ResetParams)
def reset(store: Store, p: ResetParams) -> ResetResult:
    """Remove every agent, message, reservation, command and event.

    The configuration file and the daemon's lock stay, except its fixed-team definition
    (`team`): with the agents gone it would refuse every name, so it goes with them
    (`unfixed` says which preset; `init --preset` makes the team again).
    """
    if not p.confirm:
        raise UsageError("reset deletes every message and agent; confirm it (relayctl reset --yes)")
    unfixed = _forget_fixed_team(store)
    root = store.root_dir()
    removed = []
    trash = []
    try:
        # Swap each directory for an empty one first (renames are atomic), then delete the
        # old contents: a crash or a read-only store never leaves a directory half-emptied.
        for name in layout.TOP_DIRS:
            if root.exists(name):
                tomb = f".{name}.{new_ulid()}.trash"
                root.rename(name, tomb)
                store.forget(name)
                trash.append(tomb)
                removed.append(name)
            store.top(name)
        for name in (layout.EVENTS, layout.EVENTS_ROTATED, layout.DELIVERY_LOG, layout.DELIVERY_LOG_ROTATED, layout.DELIVERY_ABSORBED):
            if root.unlink(name, missing_ok=True):
                removed.append(name)
        for tomb in trash:
            shutil.rmtree(tomb, dir_fd=root.fd)
    except OSError as exc:
        raise StoreError(f"reset of {store.root} failed: {exc.strerror or exc}") from exc
    store.sync.dir(root.fd)
    store.emit(store.event("agent", action="reset"))
    return ResetResult(dir=store.root, removed=removed, unfixed=unfixed)


def _forget_fixed_team(store: Store) -> str | None:
    """Drop config.json's `team` when it fixes the team; the preset it named, or None."""
    config = _config_json(store)
    team = config.get("team", {})
    if team.get("allow_new", True) is not False:
        return None
    del config["team"]
    store.root_dir().replace(layout.CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode(), store.sync)
    return str(team.get("preset") or "none")


class VersionParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class VersionResult(msgspec.Struct, kw_only=True):
    version: str
    store_format: int
    protocol: int


@operation("version", VersionParams, mutates=False)
def version(store: Store, p: VersionParams) -> VersionResult:
    """relay's version, the store format and the wire protocol version."""
    return VersionResult(version=__version__, store_format=STORE_FORMAT, protocol=handshake.VERSION)
