"""Names on the NATS side, and setting them up: the stream, the buckets, the subjects.

One NATS account (or server) per team: the names are fixed, so two teams on one server
would share a directory.
"""

from __future__ import annotations

import random

import anyio

from nats.js import api
from nats.js.errors import BucketNotFoundError, NotFoundError

MAIL_STREAM = "RELAY_MAIL"
MAIL_SUBJECTS = "relay.mail.*"
AGENTS_BUCKET = "relay-agents"
RESERVATIONS_BUCKET = "relay-reservations"
LOCKS_BUCKET = "relay-locks"
EVENTS_SUBJECTS = "relay.events.*"
DUPLICATE_WINDOW = 120.0  # seconds JetStream remembers a Nats-Msg-Id


def mail_subject(host: str) -> str:
    return f"relay.mail.{host}"


def events_subject(host: str) -> str:
    return f"relay.events.{host}"


def consumer_name(host: str) -> str:
    return f"mail-{host}"


def backoff(attempt: int, base: float = 0.2, cap: float = 5.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry `attempt` (0, 1, ...): full jitter, as the redelivery
    engine does, so hosts that lost NATS together do not return in lockstep."""
    return (rng or random).uniform(0, min(cap, base * 2**attempt))


async def ensure_stream(js) -> None:
    try:
        await js.stream_info(MAIL_STREAM)
        return
    except NotFoundError:
        pass
    # Work-queue retention: a message leaves the stream once its host acked it; each host's
    # consumer filters its own subject, so they never compete for one message.
    config = api.StreamConfig(
        name=MAIL_STREAM,
        subjects=[MAIL_SUBJECTS],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE,
        duplicate_window=DUPLICATE_WINDOW,
    )
    await js.add_stream(config)


async def bucket(js, name: str, history: int = 1):
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        pass
    return await js.create_key_value(bucket=name, history=history, storage=api.StorageType.FILE)


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
        durable_name=consumer_name(host),
        ack_policy=api.AckPolicy.EXPLICIT,
        filter_subject=mail_subject(host),
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=5.0,  # a host killed mid-batch gets its mail again this soon
        max_ack_pending=4096,
    )
    return await js.pull_subscribe(mail_subject(host), durable=consumer_name(host), stream=MAIL_STREAM, config=config)


async def finish(step) -> None:
    """Run a clean-up step (unsubscribe, unlock, close) even while being cancelled, for at
    most 2 s, and ignore its failure: NATS may be the reason we are cleaning up."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(2):
        try:
            await step()
        except Exception:
            pass
