"""Who this relay-mcp speaks for, and which store: from the environment Claude Code sets.

The role: the `--role` argument, else `OVLD_ROLE` (seed 000), `RELAY_AGENT`, or
`BBS_AGENT_ROLE` (seed 002) -- the agent's name. Seed 002's own spelling names the agent
with `-sender NAME` and gives `-role ROLE` (or `BBS_AGENT_ROLE`) as what it does in the
team (`title`, shown in presence); `RELAY_DIR` or `OVLD_RELAY_DIR`, else `~/.relay`;
`OVLD_SESSION` (else zellij's own `ZELLIJ_SESSION_NAME`) optionally names the terminal
session the role runs in.
"""

from __future__ import annotations

import os

from relayd import layout
from relayd.errors import InvalidName
from relayd.names import check_agent_name


class IdentityError(Exception):
    """relay-mcp cannot start: the message is the one line printed on stderr."""


class Identity:
    __slots__ = ("role", "store_dir", "socket_path", "session", "title")

    def __init__(self, role: str, store_dir: str, socket_path: str, session: str | None, title: str | None = None) -> None:
        self.role = role  # the agent's name
        self.store_dir = store_dir
        self.socket_path = socket_path
        self.session = session
        self.title = title  # seed 002's role: what the agent does (with -sender), e.g. reviewer




def from_env(env: dict[str, str] | os._Environ[str] | None = None, role: str | None = None, sender: str | None = None) -> Identity:
    """`role` (the --role argument) wins over the environment. With `sender` (seed 002's
    -sender), that is the name and `role` (else BBS_AGENT_ROLE) the title."""
    env = os.environ if env is None else env
    title = None
    if sender:
        title = role or env.get("BBS_AGENT_ROLE") or None
        role = sender
    source = "-sender" if sender else "--role"
    if not role:
        source, role = next(((key, env[key]) for key in layout.AGENT_VARIABLES if env.get(key)), ("", ""))
    if not role:
        raise IdentityError("no role: set OVLD_ROLE (or RELAY_AGENT, BBS_AGENT_ROLE, or pass --role NAME) to this pane's agent name, e.g. OVLD_ROLE=inferno")
    try:
        check_agent_name(role, "role")
    except InvalidName as exc:
        raise IdentityError(f"{exc} (from {source})") from None
    try:
        store_dir = layout.default_store_dir(env)
    except layout.NoHome:
        raise IdentityError("no store directory: HOME is not set; set RELAY_DIR (or OVLD_RELAY_DIR)") from None
    return Identity(role=role, store_dir=store_dir, socket_path=layout.default_socket_path(store_dir, env), session=env.get("OVLD_SESSION") or env.get("ZELLIJ_SESSION_NAME") or None, title=title)
