"""The state of one relayd connection, written down, with no I/O.

Rule 1: everything that decides whether relayd reads from a connection, writes to it now
or later, or is done with it lives here. `relayd.daemon.server.Peer` moves the bytes:
it tells this object what happened (bytes arrived and were handled, a reply was queued
or written, the socket took less than it was given, the backlog went out, the peer hung
up) and does what the answer says (start or stop watching the socket, start the task that
writes the backlog). Tests drive it in memory (tests/daemon/test_peerstate.py).

Theory of operation. A connection is read while all of these hold:

* it is not finished: no EOF, no fatal protocol violation, relayd is not draining;
* no team-wide decision is pending (the next request may depend on it);
* nothing waits for the socket to take it (a backlog, or the drain task writing one);
* fewer than `outbox_limit` replies wait to be written.

So a client that sends and never reads fills its socket, then relayd's backlog, and stops
being read: back-pressure reaches it instead of relayd's memory. Writing goes straight into
the socket when nothing is ahead of it; once the socket takes less than it was given, the
rest and everything after it wait for the drain task, in order. A connection is settled
when nothing is left to write; a finished connection closes once it is settled.
"""

from __future__ import annotations

import enum


class Reading(enum.Enum):
    """What the server does with the socket's read watch after an input."""

    KEEP = "keep"
    RESUME = "resume"  # start watching the socket for input
    PAUSE = "pause"  # stop watching it


class PeerState:
    __slots__ = ("outbox_limit", "watching", "finished", "deciding", "queued", "backlog", "draining", "unanswered", "pump_waiting", "slow")

    def __init__(self, outbox_limit: int) -> None:
        self.outbox_limit = outbox_limit
        self.watching = False  # the server watches the socket for input
        self.finished = False  # EOF, a fatal violation, a failure or draining: never read again
        self.deciding = False  # a team-wide operation is being decided: later frames wait
        self.queued = 0  # replies in the outbox, not yet written
        self.backlog = 0  # chunks written but not yet taken by the socket nor by the drain task
        self.draining = False  # the drain task is writing the backlog
        self.unanswered = 0  # replies waiting for their writes to become durable
        self.pump_waiting = False  # the event pump waits on an empty queue
        self.slow = False  # a subscriber dropped for not reading

    # -- reading -------------------------------------------------------------------------
    def wants_input(self) -> bool:
        return not self.finished and not self.deciding and self.write_now() and self.queued < self.outbox_limit

    def _reading(self) -> Reading:
        want = self.wants_input()
        if want and not self.watching:
            self.watching = True
            return Reading.RESUME
        if not want and self.watching:
            self.watching = False
            return Reading.PAUSE
        return Reading.KEEP

    def start(self) -> Reading:
        """The connection is accepted: read it."""
        return self._reading()

    def finish(self) -> Reading:
        """No more input will be handled: the peer hung up, sent something fatal, reading
        failed, or relayd is draining. Final."""
        self.finished = True
        return self._reading()

    def deciding_started(self) -> Reading:
        if self.deciding:
            raise RuntimeError("a team-wide decision is already pending on this connection")
        self.deciding = True
        return self._reading()

    def deciding_done(self) -> None:
        """The decision's reply is in the outbox; the frames behind it are handled next
        and `replies_written` (which follows) resumes reading."""
        if not self.deciding:
            raise RuntimeError("no team-wide decision was pending")
        self.deciding = False

    # -- replies -------------------------------------------------------------------------
    def reply_queued(self, durable_later: bool) -> Reading:
        """A reply joined the outbox; `durable_later`: it waits for a group commit round."""
        self.queued += 1
        if durable_later:
            self.unanswered += 1
        return self._reading()

    def replies_written(self, count: int, were_waiting: int) -> Reading:
        """`count` replies left the outbox (handed to `write`), `were_waiting` of them
        had waited for durability."""
        if count > self.queued or were_waiting > self.unanswered:
            raise RuntimeError(f"{count} replies written, {self.queued} were queued")
        self.queued -= count
        self.unanswered -= were_waiting
        return self._reading()

    # -- writing -------------------------------------------------------------------------
    def write_now(self) -> bool:
        """May bytes go straight into the socket? Not while anything is ahead of them;
        if not, the caller adds them to the backlog (`backlogged`)."""
        return not self.backlog and not self.draining

    def backlogged(self) -> Reading:
        """Bytes joined the backlog behind earlier ones."""
        self.backlog += 1
        return self._reading()

    def sent_short(self) -> Reading:
        """The socket took less than it was given: the rest is the backlog, and the drain
        task (which the caller starts) writes it."""
        if self.draining:
            raise RuntimeError("the socket was written to while the drain task runs")
        self.backlog += 1
        self.draining = True
        return self._reading()

    def drain_took(self) -> Reading:
        """The drain task took the whole backlog to write it."""
        self.backlog = 0
        return self._reading()

    def drained(self) -> Reading:
        """The drain task ended: the backlog went out (or the peer is gone)."""
        self.backlog = 0
        self.draining = False
        return self._reading()

    def settled(self) -> bool:
        """Nothing is left to write."""
        return not self.queued and not self.backlog and not self.draining

    # -- events (subscribers) ------------------------------------------------------------
    def event_now(self) -> bool:
        """May an event be written at once, bypassing the subscriber's queue? Only when the
        pump is idle and nothing is ahead of it; after a refusal, later events go through
        the queue too, until the pump is idle again -- so events never overtake each other."""
        if self.pump_waiting and self.write_now():
            return True
        self.pump_waiting = False
        return False

    def drop(self) -> bool:
        """The hub dropped this subscriber; True the first time (the caller then closes its
        queue and starts the deadline)."""
        if self.slow:
            return False
        self.slow = True
        return True
