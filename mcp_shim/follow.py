"""Following one agent's inbox so new mail can be pushed into the session.

Every message lands in `agents/<role>/inbox.jsonl`, whichever process wrote it, so the
inbox file is the source of what to announce (`relayd.client.tail.InboxTail`); what wakes the
follower up is `relayd.client.watch` (relayd's inbox events for this agent, else inotify).

Bursts are coalesced: after a quiet spell a new message is announced at once, but
notifications are spaced at least MIN_INTERVAL_SECONDS apart and whatever arrives in
between goes out as one, so a flood of mail costs the session a few events, not hundreds.

An event is recorded as "announced by channel" only on evidence that the client took it: a
client that declares `experimental["claude/channel"]` takes what it is sent; Claude Code,
which declares nothing, says so in its own log (mcp_shim.channel_log), read for
EVIDENCE_SECONDS after each event. When that log says Claude Code refused the channel, the
refusal is recorded as a failed announcement (the sender's `track` and `status` say why), and
mail falls back to a trigger typed into the session's tmux pane when it runs in one.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import msgspec

from relayd import layout
from relayd.client import watch
from relayd.client.tail import InboxTail
from relayd.errors import RelayError
from relayd.arrival.for_models import field, preview, short
from relayd.timefmt import now_iso

from . import logs
from .channel_log import ChannelLog, utf16_length

MIN_INTERVAL_SECONDS = 0.5  # between two notifications; what arrives meanwhile is batched
MAX_LISTED = 5  # messages described in one notification; the rest are counted
PREVIEW_CHARS = 160
BACKSTOP_SECONDS = 2.0  # re-read the inbox even without a wake-up (a lost watch, a reset store)
EVIDENCE_SECONDS = 5.0  # how long Claude Code's log is read for a sign that it took an event (it flushes about once a second)
VERDICT_SECONDS = 30.0  # how long after the start its log is read for its decision about the channel
EVIDENCE_POLL = 0.25
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


_RANK = {"low": 0, "normal": 1, "high": 2, "urgent": 3}


class Batch:
    """New messages waiting to be announced: the first few kept whole, the rest counted,
    so a flood of mail costs neither memory nor a long notification."""

    def __init__(self) -> None:
        self.listed: list[dict[str, Any]] = []
        self.total = 0
        self.priority = "low"

    def add(self, message: dict[str, Any]) -> None:
        self.total += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(message)
        priority = str(message.get("priority") or "normal")
        if _RANK.get(priority, 1) > _RANK.get(self.priority, 1):
            self.priority = priority

    def __bool__(self) -> bool:
        return self.total > 0


def channel_event(batch: Batch) -> dict[str, Any]:
    """The `notifications/claude/channel` params announcing a batch (one message or a burst).
    Every piece of a message is shown as relayd.arrival.for_models shows a model its fields:
    one line each, so no subject, sender or preview can fake a line of relay's own."""
    first = batch.listed[0]
    meta = {"from": field(first.get("from", "")), "message_id": field(first.get("id", "")), "priority": batch.priority}
    if first.get("thread"):
        meta["thread"] = field(first["thread"])
    if batch.total == 1:
        subject, body = short(first.get("subject"), 120), preview(first.get("body"), PREVIEW_CHARS)
        lines = [f"New message from {field(first.get('from'))} ({batch.priority}): {subject}"]
        if body != preview(first.get("subject"), 120):  # a subject defaulted from the body would only repeat it
            lines.append(body)
        lines.append("Call check_inbox to read it.")
        return {"content": "\n".join(lines), "meta": meta}
    meta["count"] = str(batch.total)
    lines = [f"{batch.total} new messages:"]
    for m in batch.listed:
        lines.append(f"- {field(m.get('from'))}: {short(m.get('subject'), 80)} — {preview(m.get('body'), 60)}")
    if batch.total > len(batch.listed):
        lines.append(f"(+{batch.total - len(batch.listed)} more)")
    lines.append("Call check_inbox to read them.")
    return {"content": "\n".join(lines), "meta": meta}


class Follower(threading.Thread):
    """Background thread: wake-ups from `relayd.client.watch` -> coalesced channel events."""

    def __init__(self, store_dir: str, socket_path: str, agent: str, emit: Callable[[dict[str, Any]], None], evidence: ChannelLog | None = None) -> None:
        super().__init__(name="relay-follow", daemon=True)
        self.store_dir = store_dir
        self.socket_path = socket_path
        self.agent = agent
        self.agent_dir = os.path.join(store_dir, layout.AGENTS, agent)
        self.emit = emit
        self.tail: InboxTail | None = None
        # Here, not in the thread: what arrives once the client has been told push is on is
        # announced message by message, not counted as waiting from before.
        self.waiting = self._start_tail()
        self.pending = Batch()
        self.emit_at = 0.0
        self.last_emit = 0.0
        self._stopping = threading.Event()  # not `_stop`: Thread.join calls a method of that name
        self.mode = "starting"  # "daemon" or "inotify", for logs and tests
        self.channel_configured = True
        # None: the client declared the channel, an event sent is an event taken. Else Claude
        # Code's log, read for its decision and for each event it took.
        self.evidence = evidence
        self.started_at = now_iso()
        self.started = time.monotonic()
        self.decided = evidence is None
        self.refused: str | None = None  # Claude Code's reason, once it refused the channel
        self.unconfirmed: list[tuple[int, str, float]] = []  # events sent: (UTF-16 length, sent at, monotonic)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._announce_waiting()
            with watch.Watch(self.store_dir, watch.inbox(self.store_dir, self.agent), self.socket_path, client="relay-mcp") as wakeups:
                while not self._stopping.is_set():
                    self._step(wakeups)
        except Exception:  # the session must go on without push delivery rather than die
            # deferred imports: relay-mcp's start loads this module: the store (direct tail) or the
            # client (relayd up) loads only on the path taken
            import traceback

            logs.info(f"inbox follower stopped:\n{traceback.format_exc()}")

    def _announce_waiting(self) -> None:
        """Mail that arrived before push started is announced once, as a count."""
        waiting = self.waiting
        if waiting > 0 and self._arrival_is_channel():
            self.last_emit = time.monotonic()
            self._send(
                {
                    "content": f"{waiting} unread message{'s' if waiting != 1 else ''} waiting from before this session. Call check_inbox to read {'them' if waiting != 1 else 'it'}.",
                    "meta": {"count": str(waiting)},
                }
            )

    def _start_tail(self) -> int:
        """Position the tail at the inbox's end and count the unread mail before it, as one
        step: under the inbox's shared lock, which every append holds exclusively, so each
        message is either counted here or passed on by the tail, never both and never
        neither. The count is read from the files, as the tail reads them, with or without relayd."""
        from relayd import ops
        from relayd.store import Store

        try:
            with Store(self.store_dir) as store, store.agent_dir(self.agent) as agent, agent.locked(layout.INBOX_LOCK, shared=True):
                self.tail = InboxTail(self.agent_dir)
                return int(ops.call(store, "unread", {"agent": self.agent})["unread"])
        except (RelayError, OSError) as exc:  # no such agent yet: its inbox is followed from its creation
            logs.debug(f"no unread count at start: {exc}")
            if self.tail is None:
                self.tail = InboxTail(self.agent_dir)
            return 0

    def _step(self, wakeups: watch.Watch) -> None:
        now = time.monotonic()
        deadline = now + BACKSTOP_SECONDS  # a re-read even without a wake-up (a reset store)
        if self.pending:
            deadline = min(deadline, self.emit_at)
        if self.unconfirmed or not self.decided:
            deadline = min(deadline, now + EVIDENCE_POLL)
        wakeups.wait(max(0.0, deadline - now))
        self._weigh_evidence()
        if wakeups.mode != self.mode:
            if self.mode == "daemon":
                logs.info("relayd went away; falling back to inotify")
            if wakeups.mode == "daemon":
                logs.info(f"following {self.agent}'s inbox through relayd")
            elif wakeups.mode == "inotify":
                logs.info(f"following {self.agent}'s inbox with inotify (relayd is not running)")
            self.mode = wakeups.mode
        was_empty = not self.pending
        assert self.tail is not None  # positioned by _start_tail
        self.tail.drain(self.pending.add)
        if was_empty and self.pending:
            # After a quiet spell the first message goes out at once; during a burst the rest wait.
            self.emit_at = max(time.monotonic(), self.last_emit + MIN_INTERVAL_SECONDS)
        if self.pending and time.monotonic() >= self.emit_at:
            batch, self.pending = self.pending, Batch()
            self.last_emit = time.monotonic()
            if self._arrival_is_channel():
                self._send(channel_event(batch))

    def _send(self, params: dict[str, Any]) -> None:
        # The time is taken before the event goes: Claude Code's log line of it (the evidence
        # `_weigh_evidence` looks for after that time) can come within a millisecond.
        sent_at, sent = now_iso(), time.monotonic()
        self.emit(params)
        if self.evidence is None:
            self._record_channel({})
        else:
            self.unconfirmed.append((utf16_length(params["content"]), sent_at, sent))
        self._spent(len(params["content"]))

    def _weigh_evidence(self) -> None:
        """Read Claude Code's log: its decision about the channel, and the events it took."""
        if self.evidence is None:
            return
        if not self.decided:
            verdict = self.evidence.verdict(self.started_at)
            if verdict is not None or time.monotonic() - self.started > VERDICT_SECONDS:
                self.decided = True
                if verdict is None:
                    logs.info("Claude Code's log says nothing of relay's channel: channel events are recorded as announced only when it shows it took them")
                elif verdict[0] == "skipped":
                    self._refused(verdict[1] or "no reason given")
        still = []
        for chars, sent_at, sent in self.unconfirmed:
            if self.evidence.took(chars, sent_at):
                self._record_channel({})
            elif time.monotonic() - sent < EVIDENCE_SECONDS and self.refused is None:
                still.append((chars, sent_at, sent))
            else:
                logs.info("no sign that Claude Code took the channel event: not recorded as announced")
        self.unconfirmed = still

    def _refused(self, reason: str) -> None:
        """Claude Code refused the channel: say so where senders look, and fall back to a
        trigger typed into the session's tmux pane when there is one."""
        self.refused = reason
        pane, tmux = os.environ.get("TMUX_PANE"), os.environ.get("TMUX")
        fallback = None
        if pane and tmux:
            fallback = f"tmux:{tmux.split(',')[0]}:{pane}"
            how = f"mail now comes by a trigger typed into its tmux pane {pane}"
        else:
            how = "it sees mail in relay's tool results and its hooks"
        logs.info(f"Claude Code refused relay's channel ({reason}); {how}")
        self._record_channel({"ok": False, "error": f"Claude Code refused relay's channel ({reason}); {how}"})
        if fallback:
            from relayd.client.full import Client

            try:
                with Client(self.store_dir, self.socket_path, name="relay-mcp") as client:
                    client.call("register", {"name": self.agent, "notify": fallback})
            except RelayError as exc:
                logs.info(f"could not switch {self.agent} to its pane's trigger: {exc}")

    def _spent(self, chars: int) -> None:
        """What the channel event puts into the model's context (relayd.delivery.spend): a count only."""
        from relayd.delivery.spend import add_to

        add_to(self.store_dir, self.agent, chars, "channel")

    def _record_channel(self, outcome: dict[str, Any]) -> None:
        """The channel push, once known to be taken (or refused), is this agent's announcement:
        it goes to the delivery log, so the senders' `track` shows it (relayd.delivery.receipts)."""
        from relayd.client.full import Client

        try:
            with Client(self.store_dir, self.socket_path, name="relay-mcp") as client:
                client.call("announced", {"agent": self.agent, "how": "channel", **outcome})
        except RelayError as exc:
            logs.debug(f"channel announcement not recorded: {exc}")

    def _arrival_is_channel(self) -> bool:
        """DESIGN §4: an agent has one arrival mechanism. Push unless another one is set
        (`register --notify tmux:...`, `hook`, `none`, ...), so mail is not announced twice."""
        try:
            fd = os.open(os.path.join(self.agent_dir, layout.META), _O_READ)
            try:
                notify = msgspec.json.decode(os.read(fd, 1 << 20)).get("notify")
            finally:
                os.close(fd)
        except (OSError, msgspec.DecodeError, AttributeError):
            return True  # no readable meta: nothing else is configured
        wanted = notify in (None, "", "channel")
        if wanted != self.channel_configured:
            self.channel_configured = wanted
            if not wanted:
                logs.info(f"{self.agent} gets mail through notify={notify}; no channel events")
        return wanted
