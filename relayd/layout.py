"""Where everything lives: the store's layout (DESIGN §2) and the default locations.

The one place that names a file of the store; daemon and clients both use it.
"""

from __future__ import annotations

import os

# SHA-256 without OpenSSL (sha256_hex says why): CPython's own module, 0.05 ms to load.
try:
    from _sha256 import sha256 as _sha256  # CPython 3.11
except ImportError:
    try:
        from _sha2 import sha256 as _sha256  # type: ignore[no-redef]  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256 as _sha256  # type: ignore[no-redef,assignment]

AGENTS = "agents"
RESERVATIONS = "reservations"
COMMANDS = "commands"
WAKE = "wake"
DEAD_LETTER = "dead_letter"  # exhausted owed messages (<to>.<id>.json) and rotated-out unread mail (<agent>.<ulid>.jsonl)
OWED = "owed"  # <to>.<id>.json: messages waiting for their recipient's acknowledgement
ACKED = "acked"  # <to>.<id>.json: acknowledged, kept a while so a repeated ack is answered
DUE = "due"  # <minute>.jsonl: owed records not due for a while, parked by the minute they come due (relayd.delivery.parked)
TOP_DIRS = (AGENTS, RESERVATIONS, COMMANDS, WAKE, DEAD_LETTER, OWED, ACKED, DUE)
TEAMS = "teams"  # teams/<team>/: what `relayctl up` wrote (MCP configs, relayd.pid, relayd.log)
BRIDGE = "bridge"  # only on a store relayd --bridge has served (relayd.remote, relayd.bridge)
LOOPS = "loops"  # loops/<a>+<b>.json: two agents' exchange, paused by the loop breaker (relayd.arrival.budget)
LOOPS_LOCK = "loops.lock"  # held while an exchange is counted and paused, so it is paused (and told) once
GUARD_INDEX = "guard"  # guard/<crc32 of a repo>.idx: the pre-commit guard's index of one repository's reservations, a cache (relayd.reservations.guard_index)

EVENTS = "events.jsonl"
EVENTS_ROTATED = "events.jsonl.1"
EVENTS_LOCK = "events.lock"
FORMAT_FILE = "format"  # holds the store format version, "1"
CONFIG_FILE = "config.json"  # wake gateway command and socket, notification trigger text
ANNOUNCED = "announced.json"  # how far events.jsonl and each inbox were checked for lines without their event (relayd.delivery.announce)
ANNOUNCE_LOCK = "announce.lock"  # held by the one check at a time
DELIVERY_LOG = "delivery.jsonl"  # the delivery log: receipts and bounces (relayd.delivery.receipts), owed records handed over (relayd.delivery.owed)
DELIVERY_LOG_ROTATED = "delivery.jsonl.1"  # the log before, rotated once absorbed to its end
DELIVERY_ABSORBED = "delivery.absorbed"  # how far the log and each inbox were absorbed into owed/ (relayd.delivery.owed)
DELIVERY_LOCK = "delivery.lock"  # held by every ack, redelivery sweep and dead-letter change
RESERVATIONS_LOCK = "reservations.lock"  # held around every reservation check + create
COMMAND_CLAIM_SUFFIX = ".claim"  # commands/<id>.claim: created O_EXCL by the one consumer
DAEMON_LOCK = "relayd.lock"  # flock-held by the one daemon serving this store
CLAUDE_PEER = "claude-peer"  # the reply sockets relayd made beside Claude Code sessions' (relayd.arrival.claude_peer)
SOCKET_NAME = "relayd.sock"
# How long a client waits for relayd's greeting, and for the answer to a request it may
# safely run itself (a send, which carries its id, or one that changes nothing), before it
# takes relayd as hung (stopped, or stuck) and runs that request on the store directly.
# relayd answers a greeting in well under a millisecond when it runs at all; the wait is
# long enough for a loaded machine and short enough that a hung relayd costs a script a
# few seconds, not a timeout. docs/daemon.md ("When relayd does not answer") says this.
# (Here, not in relayd.wire.handshake: relayctl's fast path sets it before it knows whether
# anything listens, and loads the handshake only once something does.)
ANSWER_WAIT = 3.0
IGNITE_QUEUE_LOCK = "ignite-queue.{}.lock"  # flock-held by the one monitor of an IGNITE queue; {}: a hash of the queue's real path

# Inside agents/<name>/
INBOX = "inbox.jsonl"
INBOX_ROTATED = "inbox.jsonl.1"
INBOX_LOCK = "inbox.lock"
META = "meta.json"
HEARTBEAT = "heartbeat"
HEARTBEAT_STALE = "heartbeat.stale"
CURSOR = "cursor"
PENDING = "pending"
TRIGGER_MISSES = "trigger-misses"  # triggers in a row that the program did not take (relayd.arrival.notify)
HELD = "held"  # why its latest trigger was held back, and since when (relayd.delivery.held)
PROGRAM_STATE = "program-state"  # what its program is doing, from its hooks (relayd.arrival.program_state)
LAST_ANNOUNCED = "announced-at"  # when relay last announced mail to it, by the store's clock (relayd.arrival.budget)
SPENT = "context-spent"  # what relay put into its model's context: "<time> <chars> <kind>" lines (relayd.delivery.spend)
SPENT_ROTATED = "context-spent.1"  # the lines before, rotated once the file passed a few KiB
SPENT_LOCK = "context-spent.lock"

# Inside bridge/
OUTBOX = "outbox.jsonl"  # messages for agents on other hosts, until JetStream has them
OUTBOX_CURSOR = "outbox.cursor"  # how far the outbox is forwarded
OUTBOX_LOCK = "outbox.lock"
BRIDGE_STATE = "state.json"  # this store is bridged: host name, NATS URL, last directory
RECEIVED = "received.jsonl"  # ids of messages that came in over the bridge (no duplicates)
RECEIVED_ROTATED = "received.jsonl.1"
UNDELIVERABLE = "undeliverable.jsonl"  # bridge mail refused here, each line with its reason
UNDELIVERABLE_ROTATED = "undeliverable.jsonl.1"  # the one older file of it that is kept
STORE_ID = "store-id"  # a random id of this store: whose lease on the host name (relayd.bridge.lease)

WAKE_TRIGGER = "trigger"
WAKE_LAST_MESSAGE = "last-message"

ROTATE_BYTES = 10 * 1024 * 1024


class NoHome(Exception):
    """Neither a store directory was given nor HOME is set."""


# The environment every client reads, first one set wins; relayctl (both front ends) and
# relay-mcp read these very tuples. The agent: seed 000's per-pane OVLD_ROLE comes first.
# A pane's launcher sets it for that one agent, while RELAY_AGENT is often exported once
# for a whole shell; an agent whose relay-mcp speaks as OVLD_ROLE must not send as
# someone else when it runs relayctl in the same pane.
AGENT_VARIABLES = ("OVLD_ROLE", "RELAY_AGENT", "BBS_AGENT_ROLE")
STORE_VARIABLES = ("RELAY_DIR", "OVLD_RELAY_DIR")


def default_store_dir(env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """`$RELAY_DIR`, then `$OVLD_RELAY_DIR`, then `~/.relay`."""
    env = os.environ if env is None else env
    for key in STORE_VARIABLES:
        if env.get(key):
            return os.path.abspath(os.path.expanduser(env[key]))
    home = env.get("HOME")
    if not home:
        raise NoHome("HOME is not set; give the store directory with --dir or RELAY_DIR")
    return os.path.join(home, ".relay")


def default_socket_path(store_dir: str, env: dict[str, str] | os._Environ[str] | None = None) -> str:
    """`$RELAY_SOCKET`; else `$XDG_RUNTIME_DIR/relay/relayd.sock`; else `<store>/relayd.sock`.

    Never a world-writable shared directory such as /tmp. A store other than `~/.relay`
    gets its own socket name in the runtime dir (`relayd-<hash>.sock`), so two stores
    never share a daemon by accident.
    """
    env = os.environ if env is None else env
    if env.get("RELAY_SOCKET"):
        return os.path.abspath(env["RELAY_SOCKET"])
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "relay", runtime_socket_name(store_dir, env.get("HOME")))
    return os.path.join(store_dir, SOCKET_NAME)


# sun_path holds 108 bytes including the final NUL: no daemon can listen at a longer path
# (a store deep in a directory tree, with no XDG_RUNTIME_DIR to put the socket in).
MAX_SOCKET_PATH = 107


def socket_path_fits(path: str) -> bool:
    """Whether a Unix socket can exist at `path`; clients take one that cannot as "no daemon"."""
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH


def runtime_socket_name(store_dir: str, home: str | None) -> str:
    """The socket's name in `$XDG_RUNTIME_DIR/relay/`: `relayd.sock` for `~/.relay`,
    `relayd-<hash>.sock` for any other store."""
    if home and os.path.abspath(store_dir) == os.path.join(os.path.abspath(home), ".relay"):
        return SOCKET_NAME
    return f"relayd-{sha256_hex(os.path.abspath(store_dir).encode())[:12]}.sock"


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 of `data`, of which relay makes names (a store's socket, a
    reservation's file, a Claude Code key file) and marks. CPython's own implementation
    where it has one: hashlib loads OpenSSL, 3.5-4 ms and 4 MiB, into every command of a
    store other than ~/.relay with a runtime directory (its socket's name), more than the
    rest of relayctl's fast path loads."""
    return _sha256(data).hexdigest()
