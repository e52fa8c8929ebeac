"""Whole-store operations: init (with the team presets), reset, version."""

from __future__ import annotations

import os
import shutil

import msgspec

from . import STORE_FORMAT, __version__, layout
from .agents import RegisterParams, register
from .errors import UsageError
from .ops import operation
from .store import Store

PRESETS: dict[str, tuple[str, ...]] = {
    # seed 000: the six panes of the overlord team
    "overlord": ("overlord", "strategist", "inferno", "glacier", "shadow", "storm"),
    # seed 003: the IGNITE agents with queues of their own
    "ignite": (
        "leader",
        "strategist",
        "architect",
        "evaluator",
        "coordinator",
        "innovator",
        "ignitian_1",
        "ignitian_2",
        "ignitian_3",
    ),
}


class InitParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    preset: str | None = None


class InitResult(msgspec.Struct, kw_only=True):
    dir: str
    format: int
    agents: list[str]
    created: list[str]


@operation("init", InitParams)
def init(store: Store, p: InitParams) -> InitResult:
    """Create the store layout; a preset also registers its team of agents."""
    if p.preset is not None and p.preset not in PRESETS:
        raise UsageError(f"unknown preset {p.preset!r}: use one of {', '.join(PRESETS)}")
    store.root_dir()
    for name in layout.TOP_DIRS:
        store.top(name)
    created = []
    if p.preset:
        existing = set(store.known_agents())
        for name in PRESETS[p.preset]:
            if name not in existing:
                register(store, RegisterParams(name=name))
                created.append(name)
    return InitResult(dir=store.root, format=STORE_FORMAT, agents=store.known_agents(), created=created)


class ResetParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    confirm: bool = False  # the CLI asks the person; the wire must say so explicitly


class ResetResult(msgspec.Struct, kw_only=True):
    dir: str
    removed: list[str]


@operation("reset", ResetParams)
def reset(store: Store, p: ResetParams) -> ResetResult:
    """Remove every agent, message, reservation, command and event (seed 000 cleanup).

    The configuration file and the daemon's lock stay.
    """
    if not p.confirm:
        raise UsageError("reset deletes every message and agent; confirm it (relayctl reset --yes)")
    root = store.root_dir()
    removed = []
    for name in layout.TOP_DIRS:
        path = os.path.join(store.root, name)
        if os.path.lexists(path):
            opened = store._subdirs.pop(name, None)
            if opened is not None:
                opened.close()
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
            else:
                shutil.rmtree(path)
            removed.append(name)
        store.top(name)
    for name in (layout.EVENTS, layout.EVENTS_ROTATED):
        if root.unlink(name, missing_ok=True):
            removed.append(name)
    store.sync.dir(root.fd)
    store.emit(store.event("agent", action="reset"))
    return ResetResult(dir=store.root, removed=removed)


class VersionParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class VersionResult(msgspec.Struct, kw_only=True):
    version: str
    store_format: int
    protocol: int


@operation("version", VersionParams, mutates=False)
def version(store: Store, p: VersionParams) -> VersionResult:
    """relay's version, the store format and the wire protocol version."""
    return VersionResult(version=__version__, store_format=STORE_FORMAT, protocol=1)
