"""What the shared core knows about agents on other hosts (the NATS bridge, `relayd.bridge`).

The bridge itself (NATS, asyncio) runs only inside a relayd started with `--bridge`; it
plugs into the store as `store.remote`, an object with the `Remote` interface
(`relayd.store.Remote`, given to the store when it is built). Store
operations ask this module, never the bridge directly:

* `recipient_host` — is a name a remote agent? (a send appends it to the outbox instead
  of an inbox: `relayd.inbox.append.deliver` calls `enqueue`);
* `broadcast_targets` — remote agents a broadcast also reaches;
* `refuse_unbridged` — in direct mode (relayd down) on a bridged store, what needs the
  bridge is refused with a sentence that says so, instead of an "unknown agent";
* the outbox: `bridge/outbox.jsonl`, one `OutboxEntry` per line, appended like an inbox
  (whole lines, one write under a flock, fsynced before the send is answered). The
  forwarder keeps its position in `bridge/outbox.cursor`; lines before it are forwarded.

`bridge/state.json` is written by a bridged relayd (its host name, the NATS URL and the
last directory it saw) and removed by a relayd started without `--bridge`; it is how a
client in direct mode knows the store is bridged.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from . import layout
from .errors import Unavailable, UsageError
from .fsio import append_file, blocks_forward, complete_lines
from .records import Message, json_encoder
from .store import Remote, Store


class OutboxEntry(msgspec.Struct, kw_only=True):
    """One line of `bridge/outbox.jsonl`: a message accepted here for an agent on `host`."""

    host: str
    message: Message


class OutboxCursor(msgspec.Struct, kw_only=True):
    offset: int = 0
    ino: int = 0  # the outbox file `offset` points into (a compaction replaces it)


class BridgeState(msgspec.Struct, kw_only=True):
    """`bridge/state.json`: this store is bridged as `host` (written by relayd --bridge)."""

    host: str
    url: str
    agents: dict[str, str] = msgspec.field(default_factory=dict)  # remote agent -> its host, last seen
    creds: str | None = None  # the credentials file relayd was started with (--bridge-creds)

    def start_command(self) -> str:
        how = f"--bridge-creds {self.creds}" if self.creds else f"--host-name {self.host}"
        return f"relayd --bridge {self.url} {how}"


outbox_entry_decoder = msgspec.json.Decoder(OutboxEntry)
_cursor_decoder = msgspec.json.Decoder(OutboxCursor)
_state_decoder = msgspec.json.Decoder(BridgeState)


# -- routing, asked by the send path -------------------------------------------------------


def recipient_host(store: Store, name: str, ack: bool = False) -> str | None:
    """The host of `name` when it is a remote agent this relayd can forward to.

    In direct mode on a bridged store, a name the last directory listed as remote is
    refused here (Unavailable): only relayd forwards across hosts. So is `ack` to a
    remote agent: an owed message is tracked on one host (relayd.delivery.owed), and the
    recipient's acknowledgement would be made on another.
    """
    remote: Remote | None = getattr(store, "remote", None)
    if remote is not None:
        host = remote.host_of(name)
        if host is not None and ack:
            raise _no_remote_ack([name], {name: host})
        return host
    state = read_state(store)
    if state is not None and name in state.agents:
        raise Unavailable(
            f"{name} is an agent on host {state.agents[name]}; messages to other hosts go through relayd's bridge, "
            f"and relayd is not running for {store.root} (start it: {state.start_command()})",
            agent=name,
            host=state.agents[name],
        )
    return None


def broadcast_targets(store: Store, sender: str, ack: bool = False) -> list[str]:
    """Remote agents a broadcast reaches besides the local ones (none without a bridge)."""
    remote: Remote | None = getattr(store, "remote", None)
    if remote is None:
        return []
    names = [name for name in remote.remote_names() if name != sender]
    if names and ack:
        raise _no_remote_ack(names, {name: remote.host_of(name) or "?" for name in names})
    return names


def _no_remote_ack(names: list[str], hosts: dict[str, str]) -> UsageError:
    listed = ", ".join(f"{name} (on {hosts[name]})" for name in names[:5]) + (" ..." if len(names) > 5 else "")
    return UsageError(
        f"--ack works within one host: the owed message would be tracked in this store and acknowledged in another, "
        f"and {listed} {'is' if len(names) == 1 else 'are'} on another host; send without --ack (bridged mail is delivered at least once anyway)",
        agents=names,
    )


def refuse_unbridged(store: Store, what: str) -> None:
    """Refuse an operation that must be decided team-wide when relayd's bridge is absent."""
    if getattr(store, "remote", None) is not None:
        return
    state = read_state(store)
    if state is not None:
        raise Unavailable(
            f"{what} is decided team-wide through relayd's bridge, and relayd is not running for {store.root} "
            f"(start it: {state.start_command()})"
        )


def bridge_status(store: Store, stale_seconds: float) -> dict[str, Any] | None:
    """What `status` shows about the bridge: live from relayd, else from the state file."""
    bridge: Remote | None = getattr(store, "remote", None)
    if bridge is not None:
        return bridge.status(stale_seconds)
    state = read_state(store)
    if state is None:
        return None
    return {
        "host": state.host,
        "url": state.url,
        "state": "relayd not running",
        "backlog": backlog(store),
        "agents": [{"name": name, "host": host, "alive": None} for name, host in sorted(state.agents.items())],
    }


# -- the outbox ----------------------------------------------------------------------------


def bridge_dir(store: Store):
    return store.top(layout.BRIDGE)


def append_outbox(store: Store, host: str, messages: list[Message]) -> None:
    """Append messages for agents on `host` in one write; durable through `store.sync`."""
    payload = b"".join(json_encoder.encode(OutboxEntry(host=host, message=m)) + b"\n" for m in messages)
    folder = bridge_dir(store)
    with folder.locked(layout.OUTBOX_LOCK):
        append_file(folder, layout.OUTBOX, payload, store.sync)


def read_cursor(store: Store) -> OutboxCursor:
    raw = bridge_dir(store).read_bytes(layout.OUTBOX_CURSOR)
    try:
        return _cursor_decoder.decode(raw) if raw else OutboxCursor()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return OutboxCursor()  # forwarding again from the start is safe: ids are de-duplicated


def write_cursor(store: Store, cursor: OutboxCursor) -> None:
    # No fsync: a cursor lost to a crash only makes lines go out again, and both JetStream
    # (the message id) and the receiving relayd (ids it holds) drop the repeats.
    bridge_dir(store).replace(layout.OUTBOX_CURSOR, json_encoder.encode(cursor) + b"\n", None)


def _outbox_fd(store: Store) -> tuple[int, int]:
    try:
        fd = bridge_dir(store).open(layout.OUTBOX, os.O_RDONLY)
    except FileNotFoundError:
        return -1, -1
    return fd, os.fstat(fd).st_ino


def pending(store: Store, limit: int = 512) -> tuple[list[tuple[OutboxCursor, OutboxEntry]], OutboxCursor | None, int]:
    """Up to `limit` entries past the cursor, each with the cursor that passes it; the
    cursor past every line looked at (damaged ones included: they cannot be forwarded,
    and passing them keeps the rest moving), or None when there was nothing; and how
    many lines were damaged. A torn tail is not a line yet."""
    cursor = read_cursor(store)
    fd, ino = _outbox_fd(store)
    if fd < 0:
        return [], None, 0
    start = cursor.offset if cursor.ino == ino else 0
    out: list[tuple[OutboxCursor, OutboxEntry]] = []
    bad = 0
    position = start
    try:
        for end, line in complete_lines(fd, start):
            if len(out) >= limit:
                break
            position = end
            try:
                entry = outbox_entry_decoder.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError):
                bad += 1
                continue
            out.append((OutboxCursor(offset=end, ino=ino), entry))
    finally:
        os.close(fd)
    return out, (OutboxCursor(offset=position, ino=ino) if position > start else None), bad


def backlog(store: Store) -> int:
    """Messages in the outbox not yet acknowledged by JetStream."""
    cursor = read_cursor(store)
    fd, ino = _outbox_fd(store)
    if fd < 0:
        return 0
    try:
        offset = cursor.offset if cursor.ino == ino else 0
        return sum(block.count(b"\n") for _, block in blocks_forward(fd, offset))
    finally:
        os.close(fd)


def compact(store: Store) -> bool:
    """Start a new, empty outbox once everything in it is forwarded (it would grow forever).

    The new file replaces the old one (a new inode), so a crash before the cursor is
    rewritten leaves a cursor that names the old file: it is read as "from the start" of
    the new one, never as an offset into it."""
    folder = bridge_dir(store)
    with folder.locked(layout.OUTBOX_LOCK):
        cursor = read_cursor(store)
        fd, ino = _outbox_fd(store)
        if fd < 0:
            return False
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if not size or cursor.ino != ino or cursor.offset != size:
            return False
        folder.replace(layout.OUTBOX, b"", store.sync)
        _, new_ino = _outbox_fd(store)
        write_cursor(store, OutboxCursor(offset=0, ino=new_ino))
        return True


# -- bridge/state.json ----------------------------------------------------------------------


def read_state(store: Store) -> BridgeState | None:
    if not os.path.isdir(os.path.join(store.root, layout.BRIDGE)):
        return None
    raw = bridge_dir(store).read_bytes(layout.BRIDGE_STATE)
    if not raw:
        return None
    try:
        return _state_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def write_state(store: Store, state: BridgeState) -> None:
    bridge_dir(store).replace(layout.BRIDGE_STATE, json_encoder.encode(state) + b"\n", None)


def forget_state(store: Store) -> None:
    """relayd without --bridge: the store is host-local again."""
    if os.path.isdir(os.path.join(store.root, layout.BRIDGE)):
        bridge_dir(store).unlink(layout.BRIDGE_STATE, missing_ok=True)
