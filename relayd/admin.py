"""Whole-store operations: init (with the team presets), reset, version."""

from __future__ import annotations

import os
import shutil

import msgspec

from . import STORE_FORMAT, __version__, layout
from .agents import RegisterParams, register
from .errors import StoreError, UsageError
from .registry import operation
from .store import Store
from .ulid import new_ulid

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
    """Remove every agent, message, reservation, command and event.

    The configuration file and the daemon's lock stay.
    """
    if not p.confirm:
        raise UsageError("reset deletes every message and agent; confirm it (relayctl reset --yes)")
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
        for name in (layout.EVENTS, layout.EVENTS_ROTATED):
            if root.unlink(name, missing_ok=True):
                removed.append(name)
        for tomb in trash:
            shutil.rmtree(tomb, dir_fd=root.fd)
    except OSError as exc:
        raise StoreError(f"reset of {store.root} failed: {exc.strerror or exc}") from exc
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
