"""Team events: this host's event log out to `relay.events.<host>`, other hosts' in.

Plain NATS publish/subscribe, not a stream: events are live news for subscribers that
asked for `scope: team` (what happened is in each host's own `events.jsonl`, and a
subscriber resumes there with `after`). While NATS is down, events of this host are not
queued for the others; an event frame from another host carries `"host": NAME`. That name
comes from the subject, which each host's NATS permissions let only that host publish on
(`subjects`), so another client cannot put events in a host's name.
"""

from __future__ import annotations

import anyio
import anyio.abc
import msgspec
import structlog

from relayd import protocol
from relayd.records import Event, event_decoder, json_encoder

from . import link

log = structlog.get_logger()

QUEUE = 4096  # events waiting to go out; more are dropped (a subscriber can replay locally)


class TeamEvents:
    def __init__(self, host: str, hub) -> None:
        self.host = host
        self.hub = hub
        self.outgoing, self._queued = anyio.create_memory_object_stream[bytes](QUEUE)
        self.dropped = 0
        self.received = 0

    def on_event(self, event: Event) -> None:
        """Every event of this host's log (called by relayd's event follower)."""
        try:
            self.outgoing.send_nowait(json_encoder.encode(event))
        except anyio.WouldBlock:
            self.dropped += 1

    async def run(self, nc, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async def arrived(msg) -> None:
            host = msg.subject.rsplit(".", 1)[-1]
            # NATS lets only host H publish on relay.events.H; what comes with a reply
            # subject or headers was not published by a relayd but delivered there by
            # JetStream or as an API reply (another client can choose where those go).
            if host == self.host or msg.reply or msg.headers or not msg.data.startswith(b"{"):
                return
            try:
                event = event_decoder.decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return
            self.received += 1
            event.host = host
            self.hub.publish_team(event, protocol.encode_event_line(json_encoder.encode(event)))

        sub = await nc.subscribe(link.EVENTS_SUBJECTS, cb=arrived)
        await nc.flush()  # the server has the subscription: from here on, nothing is missed
        task_status.started()
        try:
            subject = link.events_subject(self.host)
            async for line in self._queued:
                await nc.publish(subject, line)
        finally:
            await link.finish(sub.unsubscribe)
