"""The stream and buckets the bridge relies on: their settings, made once and never trusted.

A host's credentials can neither make nor change a stream or bucket (`subjects`): an
operator makes them with the admin key that `relayctl bridge setup` writes, by running
`relayctl bridge provision`, which creates what is missing and updates what an older relay
made (`provision`). The settings are what keeps mail and entries from being lost or
rewritten by any one host:

* no roll-up headers (`Nats-Rollup` would let one publish erase every other host's
  directory entries or reservations) and no purge or message delete;
* mail: work-queue retention on `relay.mail.*.*`, no max age, a cap on the messages
  waiting per (recipient, sender) pair with *new* ones refused beyond it (the sender keeps
  them in its outbox), and on a message's size;
* the directory keeps claims forever (no max age: a name's oldest claim decides whose it
  is); reservations and host leases have one (what nobody rewrites leaves).

Every relayd checks these at the start of each session (`link`) and refuses to run over a
stream that could lose or rewrite mail.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import api
from nats.js.errors import NotFoundError
import nats

from relayd.errors import Conflict, UsageError

from .subjects import ADMIN_INBOX, AGENTS_BUCKET, BUCKETS, DEFAULT_MAX_QUEUED, HOSTS_BUCKET, MAIL_STREAM, MAIL_SUBJECTS, RESERVATIONS_BUCKET, kv_stream
from .setup import load_admin

DUPLICATE_WINDOW = 120.0  # seconds JetStream remembers a Nats-Msg-Id
MAX_MESSAGE_BYTES = 1 << 20  # nats-server's own default max_payload
# Entries a host no longer rewrites leave these buckets: a reservation of a host that is
# gone (or one forged for a host that never ran) after RESERVATION_TTL, a host's lease on
# its name after LEASE_TTL. Each live host rewrites its own well before that.
RESERVATION_TTL = 600.0
LEASE_TTL = 20.0
TTLS = {RESERVATIONS_BUCKET: RESERVATION_TTL, HOSTS_BUCKET: LEASE_TTL}


def mail_config(max_queued: int = DEFAULT_MAX_QUEUED) -> api.StreamConfig:
    # Work-queue retention: a message leaves the stream once its host acked it; each host's
    # consumer filters its own subject, so they never compete for one message.
    return api.StreamConfig(
        name=MAIL_STREAM,
        subjects=[MAIL_SUBJECTS],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE,
        duplicate_window=DUPLICATE_WINDOW,
        discard=api.DiscardPolicy.NEW,
        max_msgs_per_subject=max_queued,
        discard_new_per_subject=True,
        max_msg_size=MAX_MESSAGE_BYTES,
        allow_rollup_hdrs=False,
        deny_delete=True,
        deny_purge=True,
    )


def bucket_config(bucket: str, ttl: float | None = None) -> api.StreamConfig:
    """A key-value bucket as nats-py makes one (history 1), less roll-up and purge."""
    ttl = TTLS.get(bucket) if ttl is None else ttl
    return api.StreamConfig(
        name=kv_stream(bucket),
        subjects=[f"$KV.{bucket}.>"],
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_msgs_per_subject=1,
        discard=api.DiscardPolicy.NEW,
        max_age=ttl or None,
        duplicate_window=min(DUPLICATE_WINDOW, ttl) if ttl else DUPLICATE_WINDOW,
        allow_direct=True,
        allow_rollup_hdrs=False,
        deny_delete=True,
        deny_purge=True,
    )


def configs(max_queued: int = DEFAULT_MAX_QUEUED, ttls: dict[str, float] | None = None) -> list[api.StreamConfig]:
    return [mail_config(max_queued), *(bucket_config(b, (ttls or {}).get(b)) for b in BUCKETS)]


class UnsafeStream(Conflict):
    """A stream or bucket whose settings could lose or rewrite mail: relayd will not run."""


def _seconds(value) -> float:
    return float(value or 0)


def problem(config: api.StreamConfig) -> str | None:
    """What in `config` (of the mail stream or one of the buckets) could lose or rewrite
    mail or entries, naming the setting; None when nothing."""
    name = config.name
    mail = name == MAIL_STREAM
    subjects = [MAIL_SUBJECTS] if mail else [f"$KV.{name.removeprefix('KV_')}.>"]
    retention = api.RetentionPolicy.WORK_QUEUE if mail else api.RetentionPolicy.LIMITS
    limited = [f for f in ("max_msgs", "max_bytes") if (getattr(config, f) or -1) > 0]
    if list(config.subjects or []) != subjects:
        return f"has subjects {config.subjects}, not {subjects}: mail would not reach its host"
    if config.retention != retention:
        return f"has retention {_text(config.retention)}, not {_text(retention)}: messages would leave before they are read"
    if config.allow_rollup_hdrs:
        return "has allow_rollup_hdrs true: one publish with a Nats-Rollup header would erase every other host's messages"
    if not config.deny_purge:
        return "has deny_purge false: it could be emptied"
    if not config.deny_delete:
        return "has deny_delete false: messages could be deleted one by one"
    if config.storage != api.StorageType.FILE:
        return f"has storage {_text(config.storage)}: a restart of the server would lose it"
    if limited and config.discard != api.DiscardPolicy.NEW:
        return f"has discard {_text(config.discard)} with {limited[0]} set: the oldest messages would be dropped at the limit"
    if mail and _seconds(config.max_age):
        return f"has max_age {_seconds(config.max_age):g}s: mail waiting longer for its host would be deleted"
    if mail and (config.max_msgs_per_subject or -1) > 0 and not config.discard_new_per_subject:
        return f"has max_msgs_per_subject {config.max_msgs_per_subject} without discard_new_per_subject: the oldest mail would be dropped at the limit"
    if name == kv_stream(AGENTS_BUCKET) and _seconds(config.max_age):
        return f"has max_age {_seconds(config.max_age):g}s: name claims would expire and another host could take the names"
    return None


def check(config: api.StreamConfig) -> None:
    """Raise UnsafeStream (one line, naming the setting) when `problem` finds one."""
    found = problem(config)
    if found is not None:
        raise UnsafeStream(
            f"the NATS stream {config.name} {found}; relayd will not run over it. The server's operator runs relayctl bridge provision (docs/bridge.md)",
            stream=config.name,
        )


def _text(value) -> str:
    return str(getattr(value, "value", value))


@dataclass
class Outcome:
    stream: str
    action: str  # created, updated, kept


# Settings nats-server cannot change on a stream that exists.
FIXED = ("retention", "storage")
COMPARED = ("subjects", "retention", "storage", "max_age", "discard", "max_msgs_per_subject", "discard_new_per_subject", "max_msg_size", "allow_rollup_hdrs", "deny_delete", "deny_purge", "duplicate_window")


def _value(config: api.StreamConfig, field: str):
    value = getattr(config, field)
    if field in ("max_age", "duplicate_window"):
        return float(value or 0)
    if field in ("discard_new_per_subject", "allow_rollup_hdrs", "deny_delete", "deny_purge"):
        return bool(value)
    return value


async def provision(js, max_queued: int = DEFAULT_MAX_QUEUED, ttls: dict[str, float] | None = None) -> list[Outcome]:
    """Make the stream and buckets, or bring those that exist to these settings."""
    done = []
    for wanted in configs(max_queued, ttls):
        try:
            have = (await js.stream_info(wanted.name)).config
        except NotFoundError:
            await js.add_stream(wanted)
            done.append(Outcome(wanted.name, "created"))
            continue
        changed = [f for f in COMPARED if _value(have, f) != _value(wanted, f)]
        for field in FIXED:
            if field in changed:
                raise UsageError(
                    f"the NATS stream {wanted.name} has {field} {_value(have, field)}, not {_value(wanted, field)}, and nats-server cannot change that: "
                    f"once no relayd runs, delete it (nats stream rm {wanted.name}; mail still in it is lost) and run provision again"
                )
        if changed:
            await js.update_stream(wanted)
        done.append(Outcome(wanted.name, "updated" if changed else "kept"))
    return done


async def provision_server(url: str, folder: str, max_queued: int = DEFAULT_MAX_QUEUED, ttls: dict[str, float] | None = None) -> list[Outcome]:
    """`relayctl bridge provision`: connect with the admin key of the setup directory
    `folder` and provision."""
    admin = load_admin(folder)
    if max_queued < 1:
        raise UsageError("--max-queued: give at least 1")
    try:
        nc = await nats.connect(url, nkeys_seed_str=admin.seed, inbox_prefix=ADMIN_INBOX, allow_reconnect=False, max_reconnect_attempts=1, connect_timeout=5, error_cb=_quiet)
    except Exception as exc:
        raise UsageError(f"cannot connect to {url} with the admin key ({type(exc).__name__}: {exc}); is the server running with the auth.conf of {folder}?") from None
    try:
        return await provision(nc.jetstream(timeout=5.0), max_queued, ttls)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"provisioning {url} failed ({type(exc).__name__}: {exc}); was the server reloaded after relayctl bridge setup wrote auth.conf?") from None
    finally:
        await nc.close()


async def _quiet(exc: Exception) -> None:
    """nats-py prints a traceback for every error unless told otherwise; the one that
    matters is raised, and said in one line, above."""
