"""The NATS bridge: several relayd instances, one per host, joined over NATS JetStream.

Only a relayd started with `--bridge nats://HOST:PORT` imports this package (and nats-py,
the optional extra `relay-bus[bridge]`). Each host keeps its own store and relayd; the bridge
carries only what crosses hosts. Trust is NATS's: each host connects with its own nkey
(`setup.py`, `relayctl bridge setup`), whose permissions let it write only subjects that
carry its name (`subjects.py`), and holds a lease on that name (`lease.py`).

* directory (`directory.py`): every relayd puts its agents (claims on names, presence)
  into the key-value bucket `relay-agents` under its own name and watches it. A name
  belongs to the host with the oldest claim; the cache in memory is what a send asks
  (`relayd.remote.Remote.host_of`).
* mail out (`forwarder.py`): a send to a remote agent is appended to the local outbox
  (`bridge/outbox.jsonl`, durable before the client's answer, see `relayd.remote`). The
  forwarder publishes it, in order, to the stream `RELAY_MAIL` on the subject
  `relay.mail.<to host>.<this host>` with `<recipient>/<relay id>` as `Nats-Msg-Id` (JetStream drops a repeat
  inside its de-duplication window) and moves its cursor only past what JetStream acked.
* mail in (`receiver.py`): a durable pull consumer per host; each message that passes
  the checks of a local send, from an agent of the host that published it, is appended to
  the local inbox with its id, and acknowledged to JetStream only once that append is
  fsynced. A `<recipient>/<id>` this host already holds (`bridge/received.jsonl`) is acked, not appended.
* reservations (`reservations.py`): exclusive reservations are decided team-wide under a
  lock key taken with create-only / compare-and-set writes in `relay-locks`, then held
  as entries of `relay-reservations`.
* events (`events.py`): each relayd publishes its event log on `relay.events.<host>` and
  hands other hosts' events to subscribers that asked for `scope: team`.

* trust (`streams.py`, `skipped.py`): a host's credentials are not trusted either. The
  stream and buckets are made by the operator's admin key (`relayctl bridge provision`)
  without roll-up or purge, with a cap on the mail waiting per pair of hosts; every relayd
  checks their settings at each connection and stops over one that could lose mail. What
  one host can make the others keep of it (agents, reservations, entry sizes) is capped,
  and what is skipped is counted and logged once. Its mail, too (`budget.py`): what a
  host's mail makes another store is charged to it per clock hour, and beyond that it
  waits in JetStream; its refused mail is recorded a bounded number of times.

`service.py` ties these together, keeps the connection (retrying while NATS is down:
local work never waits for it) and is what relayd's main loop starts.
"""
