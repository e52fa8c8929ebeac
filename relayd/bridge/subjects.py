"""Every name the bridge uses on the NATS side, and what a host may do with each.

Trust rests on NATS permissions, so the subjects are laid out for them: **the host's
name is in every subject a host writes**, and each host's credentials allow writing only
there (`permissions`). A host cannot publish as another, nor change another's entries:

| what | subject (the host writing it is H) | read by |
|---|---|---|
| mail from H to host T (T one of the team's hosts) | `relay.mail.T.H` (stream RELAY_MAIL) | T only, through its consumer `mail-T` |
| H's events | `relay.events.H` | every host |
| name claims, presence | `$KV.relay-agents.H.name.<agent>`, `...H.agent.<agent>` | every host |
| reservations | `$KV.relay-reservations.H.<sha256>` | every host |
| H's lease on its name | `$KV.relay-hosts.H` | every host |
| the team reservation lock | `$KV.relay-locks.reservations` | shared: every host writes it |
| replies to H's requests | `_INBOX.H.>` | H only |

No host may create, change, purge or delete a stream or bucket: `relayctl bridge
provision` makes them with the admin key (`admin_permissions`), and every relayd checks
their settings before it trusts them (`streams`).

This module imports nothing from nats-py, so `relayctl bridge setup` can use it.
"""

from __future__ import annotations

MAIL_STREAM = "RELAY_MAIL"
MAIL_SUBJECTS = "relay.mail.*.*"  # relay.mail.<to host>.<from host>
AGENTS_BUCKET = "relay-agents"
RESERVATIONS_BUCKET = "relay-reservations"
LOCKS_BUCKET = "relay-locks"
HOSTS_BUCKET = "relay-hosts"
BUCKETS = (AGENTS_BUCKET, RESERVATIONS_BUCKET, LOCKS_BUCKET, HOSTS_BUCKET)
EVENTS_SUBJECTS = "relay.events.*"
LOCK_KEY = "reservations"
DEFAULT_MAX_QUEUED = 10_000  # messages waiting per (recipient host, sender host): `streams`


def mail_subject(to_host: str, from_host: str) -> str:
    return f"relay.mail.{to_host}.{from_host}"


def mail_filter(host: str) -> str:
    """Everything sent to `host`, from any host."""
    return f"relay.mail.{host}.*"


def sender_of(subject: str) -> str:
    """The sending host of a mail subject: NATS let only that host publish on it."""
    return subject.rsplit(".", 1)[-1]


def events_subject(host: str) -> str:
    return f"relay.events.{host}"


def consumer_name(host: str) -> str:
    return f"mail-{host}"


def inbox_prefix(host: str) -> str:
    """Replies to a host's requests (JetStream acks, fetched mail) come here, and only
    that host may subscribe to it."""
    return f"_INBOX.{host}"


def name_key(host: str, agent: str) -> str:
    """A host's claim on an agent name: written once, so its revision orders the claims."""
    return f"{host}.name.{agent}"


def presence_key(host: str, agent: str) -> str:
    return f"{host}.agent.{agent}"


def reservation_key(host: str, digest: str) -> str:
    return f"{host}.{digest}"


def kv_stream(bucket: str) -> str:
    return f"KV_{bucket}"


ADMIN_INBOX = "_INBOX._admin"  # `_admin` is no valid host name: no host's prefix covers it


def permissions(host: str, team: list[str]) -> dict[str, dict[str, list[str]]]:
    """What host `host` may publish and subscribe to (nats-server `permissions`).

    Mail only to the other hosts of `team`: a subject of no host would never be read, and
    what waits for a host is capped per sender (`streams.mail_config`), so one host cannot
    fill the server. No stream or bucket created, changed, purged or deleted: those are
    made by `relayctl bridge provision`, under the admin key (`admin_permissions`)."""
    api = "$JS.API"
    streams = [MAIL_STREAM, *(kv_stream(b) for b in BUCKETS)]
    consumer = f"{MAIL_STREAM}.{consumer_name(host)}"
    publish = [
        *(mail_subject(to, host) for to in team if to != host),
        events_subject(host),
        f"$KV.{AGENTS_BUCKET}.{host}.>",
        f"$KV.{RESERVATIONS_BUCKET}.{host}.>",
        f"$KV.{HOSTS_BUCKET}.{host}",
        f"$KV.{LOCKS_BUCKET}.{LOCK_KEY}",
        f"{api}.INFO",
        *(f"{api}.STREAM.INFO.{stream}" for stream in streams),
        # Reading the buckets (everything in them is team-visible): gets and watchers.
        *(f"{api}.STREAM.MSG.GET.{kv_stream(b)}" for b in BUCKETS),
        *(f"{api}.DIRECT.GET.{kv_stream(b)}" for b in BUCKETS),
        *(f"{api}.DIRECT.GET.{kv_stream(b)}.>" for b in BUCKETS),
        *(f"{api}.CONSUMER.CREATE.{kv_stream(b)}" for b in BUCKETS),
        *(f"{api}.CONSUMER.INFO.{kv_stream(b)}.*" for b in BUCKETS),
        *(f"$JS.FC.{kv_stream(b)}.>" for b in BUCKETS),
        # Its own mail consumer only, and only with its own mail as the filter (nats-server
        # 2.9 checks that the filter in the subject is the one in the request).
        f"{api}.CONSUMER.CREATE.{consumer}.{mail_filter(host)}",
        f"{api}.CONSUMER.INFO.{consumer}",
        f"{api}.CONSUMER.DELETE.{consumer}",
        f"{api}.CONSUMER.MSG.NEXT.{consumer}",
        f"$JS.ACK.{consumer}.>",
    ]
    subscribe = [f"{inbox_prefix(host)}.>", EVENTS_SUBJECTS]
    return {"publish": {"allow": publish}, "subscribe": {"allow": subscribe}}


def admin_permissions() -> dict[str, dict[str, list[str]]]:
    """The admin key makes and checks the streams and buckets; it sends and reads no mail."""
    api = "$JS.API"
    streams = [MAIL_STREAM, *(kv_stream(b) for b in BUCKETS)]
    publish = [f"{api}.INFO", *(f"{api}.STREAM.{verb}.{stream}" for stream in streams for verb in ("INFO", "CREATE", "UPDATE"))]
    return {"publish": {"allow": publish}, "subscribe": {"allow": [f"{ADMIN_INBOX}.>"]}}
