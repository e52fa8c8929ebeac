"""Setting up the NATS side: the stream, the buckets (settings checked, `streams`), this
host's mail consumer.

The names and subjects, and what each host may do with them, are in `subjects`. One NATS
account (or server) per team: the names are fixed, so two teams on one server would share
a directory.
"""

from __future__ import annotations

import random

import anyio

from nats.js import api
from nats.js.errors import NotFoundError

from relayd.errors import Unavailable

from .subjects import kv_stream
from .subjects import (  # noqa: F401  (the bridge's modules import the names from here)
    AGENTS_BUCKET,
    EVENTS_SUBJECTS,
    HOSTS_BUCKET,
    LOCKS_BUCKET,
    MAIL_STREAM,
    MAIL_SUBJECTS,
    RESERVATIONS_BUCKET,
    consumer_name,
    events_subject,
    mail_filter,
    mail_subject,
)
from .streams import bucket_config, check, mail_config


def backoff(attempt: int, base: float = 0.2, cap: float = 5.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry `attempt` (0, 1, ...): full jitter, as the redelivery
    engine does, so hosts that lost NATS together do not return in lockstep."""
    return (rng or random).uniform(0, min(cap, base * 2**attempt))


async def _missing(js, config) -> None:
    """A stream or bucket that is not there: made here when this client may (a server
    without authorization, as in development); a host's credentials may not."""
    try:
        await js.add_stream(config)
    except Exception as exc:
        raise Unavailable(
            f"the NATS stream {config.name} does not exist and this host may not create it ({type(exc).__name__}); "
            "the server's operator makes it: relayctl bridge provision --server URL --dir SETUP-DIR"
        ) from None


async def ensure_stream(js) -> None:
    """The mail stream, its settings checked (`streams.check`: UnsafeStream)."""
    try:
        info = await js.stream_info(MAIL_STREAM)
    except NotFoundError:
        await _missing(js, mail_config())
        info = await js.stream_info(MAIL_STREAM)
    check(info.config)


async def bucket(js, name: str):
    """The bucket `name` (made if missing and this client may), its settings checked."""
    try:
        info = await js.stream_info(kv_stream(name))
    except NotFoundError:
        await _missing(js, bucket_config(name))
        info = await js.stream_info(kv_stream(name))
    check(info.config)
    return await js.key_value(name)


async def read_bucket(js, bucket: str, keys: str = ">") -> list[tuple[str, int, bytes]]:
    """(key, revision, value) of every live entry of `bucket` whose key matches `keys`, read
    from its stream now, message by message in sequence order. A KV watcher (and nats-py's
    `keys()`, built on one) can signal "caught up" before entries already stored, so a
    decision taken on its answer could miss a claim or a reservation written just before."""
    prefix = f"$KV.{bucket}."
    live: dict[str, tuple[int, bytes]] = {}
    seq = 1
    while True:
        try:
            msg = await js.get_msg(kv_stream(bucket), seq=seq, subject=prefix + keys, next=True)
        except NotFoundError:
            break
        key = (msg.subject or "").removeprefix(prefix)
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            live.pop(key, None)
        else:
            live[key] = (msg.seq or 0, msg.data or b"")
        seq = (msg.seq or seq) + 1
    return [(key, revision, value) for key, (revision, value) in live.items()]


async def mail_consumer(js, host: str):
    """The host's pull subscription, made afresh for every session.

    Messages a previous session fetched but never acknowledged (relayd killed mid-batch,
    connection lost) would otherwise come back only after the ack wait, behind newer ones.
    The stream keeps every message until it is acknowledged (work-queue retention), so a
    new consumer that delivers all starts at the oldest unacknowledged one: mail for this
    host arrives in the order it was sent, across crashes too."""
    try:
        await js.delete_consumer(MAIL_STREAM, consumer_name(host))
    except NotFoundError:
        pass
    config = api.ConsumerConfig(
        # With a name, nats-py asks nats-server (>= 2.9) on a subject that carries the
        # name and the filter, which is what the host's permissions allow (`subjects`).
        name=consumer_name(host),
        durable_name=consumer_name(host),
        ack_policy=api.AckPolicy.EXPLICIT,
        filter_subject=mail_filter(host),
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=5.0,  # a host killed mid-batch gets its mail again this soon
        # No cap on messages handed out and not yet acknowledged: mail over its host's
        # budget stays unacknowledged (`budget`) and must not stop the others' behind it.
        # What can wait is bounded by the stream itself: --max-queued per pair of hosts.
        max_ack_pending=-1,
    )
    await js.add_consumer(MAIL_STREAM, config)
    return await js.pull_subscribe_bind(consumer_name(host), MAIL_STREAM)


async def finish(step) -> None:
    """Run a clean-up step (unsubscribe, unlock, close) even while being cancelled, for at
    most 2 s, and ignore its failure: NATS may be the reason we are cleaning up."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
        try:
            await step()
        except Exception:
            pass
