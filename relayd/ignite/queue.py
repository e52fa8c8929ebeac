"""Serving an IGNITE queue directory: the monitor's job, done by relay.

The layout is IGNITE's, unchanged:

    DIR/<agent>/*.mime            new messages for <agent>
    DIR/<agent>/processed/*.mime  taken by the monitor; the agent deletes a file when done
    DIR/dead_letter/*.mime        messages whose agent never finished them
    DIR/<agent>/malformed/        files that are not messages, moved aside (never deleted)

A file's state is its place and its headers, so every step is written down before the
next begins and a restart picks up where a crash left off:

    DIR/a/X.mime ──link+unlink──> processed/X.mime  (no status yet)
      -> Status: processing, Processed-At            (then relay `send` to agent a: a notice
                                                      naming the file, tagged ignite:X#n)
      -> Status: delivered, Processed-At, X-Relay-Notice: <message id>
      -> not deleted `timeout` after Processed-At:
           Retry-Count < max_deliver: Status retrying, Retry-Count + 1,
                                      X-IGNITE-Next-Retry-At = now + policy.wait(...)
                                      -> when due: processing -> delivered again
           otherwise:                 Status dead_letter, X-IGNITE-Error-Reason,
                                      X-IGNITE-Escalation: escalation_<usec>.mime
                                      -> moved to DIR/dead_letter/, then the escalation
                                      file written to DIR/<escalation agent>/, then
                                      X-IGNITE-Escalated-At on the dead letter.

A new file is taken only once its writer is done: IGNITE's tools create the file in the
queue and then write it, so a file still open for writing is left until it is closed
(the close is an inotify event that wakes the monitor); where the filesystem cannot say
whether a file is open, it must have been unchanged for `QUIET` seconds. A closed file
that is not (yet) a valid message is moved to `malformed/` only after it has been
unchanged for `SETTLE` seconds, so a writer that closes and reopens loses nothing.

A file found `processing` after a restart is looked for in the agent's inbox by its tag
before it is sent again, so a crash between the send and the `delivered` mark does not
deliver it twice. Waiting uses `relayd.client.watch` (inotify on DIR, each agent directory and its
processed/); the monitor itself never polls. The monitor's lock file keeps a removed DIR alive, so
inotify never says DIR itself is gone: the watch finds a DIR made again by its identity instead.
Shared core: no anyio; relayd runs `serve` in a thread.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import stat
import threading
import time
from dataclasses import dataclass, field
import fcntl
from typing import Callable

import msgspec

from relayd import layout
from relayd.errors import QueueBusy, RelayError, UsageError
from relayd.names import AGENT_NAME_RE, MESSAGE_TYPES, normalize_priority
from relayd.owing import Policy, policy_for  # the shared backoff: wait(delivered, rand), max_deliver
from relayd.config import load_config
from relayd.inbox.read import read_all
from relayd.client import watch

from . import files, mime
from .files import DEAD_LETTER, MALFORMED, PROCESSED
from .mirror import TAG, Mirror

MONITOR = "queue_monitor"  # the sender IGNITE's own monitor uses for what it writes
DEFAULT_TIMEOUT = 300.0  # IGNITE's task_timeout: how long an agent may take before a retry
QUIET = 2.0  # unchanged this long = written, where open-for-writing cannot be told
SETTLE = 10.0  # a closed file that is no valid message yet is set aside after this long unchanged
H = mime.PREFIX
# Seed 003's required headers: a file without one is logged and set aside, never delivered.
REQUIRED = ("MIME-Version", "Message-ID", "From", "To", "Date", H + "Type", H + "Priority", "Content-Type", "Content-Transfer-Encoding")
STATUS, PROCESSED_AT, RETRY_COUNT = H + "Status", H + "Processed-At", H + "Retry-Count"
NEXT_RETRY_AT, ERROR_REASON = H + "Next-Retry-At", H + "Error-Reason"
ESCALATION, ESCALATED_AT = H + "Escalation", H + "Escalated-At"
NOTICE = "X-Relay-Notice"  # the id of the relay message that announced this delivery
LOCK = ".relay-monitor.lock"  # flock-held by the one monitor serving a queue directory
_QUOTE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})

Log = Callable[..., None]


def _no_log(event: str, **fields: object) -> None:
    pass


def yaml_str(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return '"' + str(text).translate(_QUOTE) + '"'


def usec_name(kind: str, moment: float) -> str:
    """`{type}_{16-digit microsecond timestamp}.mime`, IGNITE's file naming."""
    return f"{kind}_{int(moment * 1_000_000):016d}.mime"


@dataclass
class Outcome:
    """What one pass did (for logs and tests)."""

    taken: list[str] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    retrying: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    escalations: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # left for their writers (still being written)
    mirrored: list[str] = field(default_factory=list)  # relay messages written out as files
    next_due: float | None = None  # the wall-clock time the next timer runs out


class QueueMonitor:
    """One IGNITE queue directory served through relay.

    `send(params)` is relay's `send` operation (a client's `call("send", ...)`);
    `is_agent(name)` says whether relay knows the agent; `inbox(name)` lists the messages
    in its inbox (dicts), used only to recover files a crash left `processing`.
    `clock` (epoch seconds) and `rand` (0..1) are injectable for exact tests.
    """

    def __init__(
        self,
        root: str,
        *,
        send: Callable[[dict], dict],
        is_agent: Callable[[str], bool],
        inbox: Callable[[str], list[dict]],
        policy: Policy,
        timeout: float = DEFAULT_TIMEOUT,
        escalate_to: str = "leader",
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        log: Log = _no_log,
        inbox_dir: Callable[[str], str] | None = None,
        lock_dir: str | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        # Late-bound clock and log: whoever swaps them on the monitor swaps them for the mirror too.
        self.mirror = Mirror(self.root, inbox_dir, lambda: self.clock(), lambda *a, **k: self.log(*a, **k)) if inbox_dir is not None else None
        self.lock_dir = lock_dir  # where the lock that outlives the queue directory lives (the store)
        self.send = send
        self.is_agent = is_agent
        self.inbox = inbox
        self.policy = policy
        self.timeout = timeout
        self.escalate_to = escalate_to
        self.clock = clock
        self.rand = rand
        self.log = log
        self._first_pass = True
        self._handled: set[str] = set()  # processed/ files this run has sent (or tried to)
        self._told: set[str] = set()  # agents already reported as unknown
        self._waiting: set[str] = set()  # files reported as not written yet (logged once each)
        self._cache: dict[str, tuple[tuple[int, int, int], mime.MimeMessage]] = {}

    # -- the pass ------------------------------------------------------------------
    def agents(self) -> list[str]:
        """Queue directories under the root that can be relay agents."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            raise RelayError(f"queue directory {self.root} does not exist") from None
        except OSError as exc:
            raise RelayError(f"cannot read queue directory {self.root}: {exc.strerror or exc}") from None
        found = []
        for name in names:
            if name == DEAD_LETTER or not AGENT_NAME_RE.fullmatch(name):
                continue
            if stat.S_ISDIR(files.lstat_mode(os.path.join(self.root, name))):
                found.append(name)
        return found

    def run_once(self) -> Outcome:
        """Take new files, deliver, retry and dead-letter what is due; never raises for
        one bad file (it is logged and moved aside), only for an unusable queue root."""
        out = Outcome()
        agents = self.agents()
        if self._first_pass:
            self._sweep_temp_files(agents)
            self._finish_escalations(out)
        for agent in agents:
            if not self.is_agent(agent):
                if agent not in self._told:
                    self._told.add(agent)
                    self.log("queue_agent_unknown", agent=agent, queue=os.path.join(self.root, agent), hint=f"relayctl register {agent}")
                continue
            self._told.discard(agent)
            if not self._real_directory(agent):
                continue
            if self.mirror is not None:
                out.mirrored += self.mirror.pass_for(agent)
            self._agent_pass(agent, out)
        if self.mirror is not None:
            self.mirror.save()
        self._first_pass = False
        return out

    def _real_directory(self, agent: str) -> bool:
        """The agent's queue and its processed/ are directories in the queue, not symlinks
        to somewhere else: a planted link is never followed (logged and left alone)."""
        try:
            files.mkdir(os.path.join(self.root, agent, PROCESSED), self.root)
        except RelayError as exc:
            self.log("queue_agent_refused", agent=agent, error=exc.message)
            return False
        return True

    def _agent_pass(self, agent: str, out: Outcome) -> None:
        folder = os.path.join(self.root, agent)
        processed = os.path.join(folder, PROCESSED)
        files.mkdir(processed, self.root)
        new = files.mime_files(folder)
        # Forget waiting files that are gone (taken, renamed away): a long run must not grow.
        present = {os.path.join(folder, name) for name in new} | {os.path.join(processed, name) for name in files.mime_files(processed)}
        self._waiting = {p for p in self._waiting if not p.startswith(folder + os.sep) or p in present}
        for name in new:
            try:
                self._take(agent, name, out)
            except RelayError as exc:
                self.log("queue_file_failed", file=os.path.join(folder, name), error=exc.message)
        recovering: set[str] | None = None
        names = files.mime_files(processed)
        # Forget files that are gone (finished, dead-lettered): a long run must not grow.
        present = {os.path.join(processed, name) for name in names}
        prefix = processed + os.sep
        self._handled = {p for p in self._handled if not p.startswith(prefix) or p in present}
        for gone in [p for p in self._cache if p.startswith(prefix) and p not in present]:
            del self._cache[gone]
        for name in names:
            path = os.path.join(processed, name)
            try:
                message = self._read(path)
                if message is None:
                    continue
                status = (message.get(STATUS) or "").lower()
                if status in ("", "queued"):  # written here by an IGNITE tool, perhaps still being written
                    if self._unfinished(agent, path, out):
                        continue
                    self._check_message(message, path)
                if status == "processing" and path not in self._handled and not self._timed_out(message):
                    if recovering is None:
                        recovering = self._tags_in_inbox(agent)
                    self._recover(agent, path, message, recovering, out)
                else:
                    self._advance(agent, path, message, status, out)
            except mime.NotAMessage as exc:
                if not self._unfinished(agent, path, out, invalid=exc.message):
                    self._set_aside(agent, path, exc.message, out)
            except RelayError as exc:
                self.log("queue_file_failed", file=path, error=exc.message)

    # -- new files -------------------------------------------------------------------
    def _take(self, agent: str, name: str, out: Outcome) -> None:
        folder = os.path.join(self.root, agent)
        source = os.path.join(folder, name)
        if self._unfinished(agent, source, out):
            return
        try:
            message = mime.read_file(source, follow=False)
            self._check_message(message, source)
        except mime.NotAMessage as exc:
            if not self._unfinished(agent, source, out, invalid=exc.message):
                self._set_aside(agent, source, exc.message, out)
            return
        except RelayError:
            if not os.path.lexists(source):
                return  # taken away meanwhile (by its writer, or an IGNITE tool)
            raise
        target = files.move(source, os.path.join(folder, PROCESSED), name)
        if target is None:
            return
        out.taken.append(target)
        self._deliver(agent, target, mime.read_file(target, follow=False), out)

    def _check_message(self, message: mime.MimeMessage, path: str) -> None:
        """Seed 003's error handling: a file missing a required header, or of a type IGNITE
        does not define, is logged and skipped (here: set aside in malformed/, kept)."""
        missing = [header for header in REQUIRED if not message.get(header)]
        if missing:
            raise mime.NotAMessage(f"{path}: no {', '.join(missing)} header{'s' if len(missing) > 1 else ''}")
        kind = message.get(H + "Type") or ""
        if kind not in MESSAGE_TYPES:
            raise mime.NotAMessage(f"{path}: unknown {H}Type {kind!r} (IGNITE's types: {', '.join(MESSAGE_TYPES)})")

    def _unfinished(self, agent: str, path: str, out: Outcome, invalid: str | None = None) -> bool:
        """True while the file's writer may not be done: it is open for writing (its close
        wakes the monitor), or it changed less than QUIET seconds ago where that cannot be
        told, or (`invalid`: why it is no message yet) less than SETTLE seconds ago."""
        busy = files.being_written(path)
        due = None
        if not busy:
            changed = _mtime(path)
            if (busy is False and not invalid) or changed is None or self.clock() >= changed + (SETTLE if invalid else QUIET):
                self._waiting.discard(path)
                return False
            due = changed + (SETTLE if invalid else QUIET)
            out.next_due = _min(out.next_due, due)
        out.waiting.append(path)
        if path not in self._waiting:
            self._waiting.add(path)
            self.log("queue_waiting", file=path, agent=agent, reason="open for writing" if busy else invalid or "changed just now", until=None if due is None else mime.iso_seconds(due))
        return True

    def _deliver(self, agent: str, path: str, message: mime.MimeMessage, out: Outcome) -> None:
        """processing -> relay send -> delivered (each written before the next step)."""
        now = self.clock()
        self._handled.add(path)
        message.set(STATUS, "processing")
        message.set(PROCESSED_AT, mime.iso_seconds(now))
        message.remove(NEXT_RETRY_AT)
        self._write(path, message)
        try:
            result = self.send(self._notice(agent, path, message))
        except RelayError as exc:
            # Left `processing`: the timeout retries it, as IGNITE's monitor does.
            self.log("queue_delivery_failed", file=path, agent=agent, error=exc.message)
            return
        sent = result.get("messages") or [{}]
        self._mark_delivered(path, message, sent[0].get("id", ""))
        out.delivered.append(path)
        self.log("queue_delivered", file=path, agent=agent, retry=_int(message.get(RETRY_COUNT)), message_id=sent[0].get("id"))

    def _mark_delivered(self, path: str, message: mime.MimeMessage, notice_id: str) -> None:
        message.set(STATUS, "delivered")
        message.set(PROCESSED_AT, mime.iso_seconds(self.clock()))
        if notice_id:
            message.set(NOTICE, notice_id)
        self._write(path, message)

    def _notice(self, agent: str, path: str, message: mime.MimeMessage) -> dict:
        """The relay message announcing a file: it names the file and never carries the body
        (the agent reads the file, as IGNITE agents do)."""
        kind = message.get(H + "Type") or "message"
        sender = message.get("From") or MONITOR
        if not AGENT_NAME_RE.fullmatch(sender):
            sender = MONITOR
        try:
            priority = normalize_priority(message.get(H + "Priority") or "normal")
        except UsageError:
            priority = "normal"
        retry = _int(message.get(RETRY_COUNT))
        again = f" (retry {retry})" if retry else ""
        tags = [self.tag(path, retry)]
        for header, prefix in ((H + "Repository", "repo:"), (H + "Issue", "issue:")):
            value = message.get(header)
            if value and len(prefix + value) <= 128:
                tags.append(prefix + value)
        thread = message.get(H + "Thread-ID") or None
        return {
            "agent": sender,
            "to": [agent],
            "subject": f"{kind} from {message.get('From') or '?'}{again}: {path}"[:1024],
            "body": f"New message{again}: {path}\nRead it, do what it asks, then delete the file (relayctl mime parse shows its headers).\n",
            "thread": thread[:256] if thread else None,
            "priority": priority,
            "tags": tags,
            "type": kind[:128],
        }

    @staticmethod
    def tag(path: str, retry: int) -> str:
        """`ignite:<file>#<retry>`: finds a delivery in the inbox after a crash."""
        name = os.path.basename(path)
        if len(name) > 100:
            name = layout.sha256_hex(name.encode())[:32]
        return f"{TAG}{name}#{retry}"

    # -- files already taken ---------------------------------------------------------
    def _timed_out(self, message: mime.MimeMessage) -> bool:
        since = mime.parse_iso_seconds(message.get(PROCESSED_AT))
        return since is None or self.clock() >= since + self.timeout

    def _recover(self, agent: str, path: str, message: mime.MimeMessage, tags: set[str], out: Outcome) -> None:
        """A file left `processing` by an earlier run: sent already (its tag is in the
        inbox), or not; only the second is sent now."""
        self._handled.add(path)
        tag = self.tag(path, _int(message.get(RETRY_COUNT)))
        if tag in tags:
            self._mark_delivered(path, message, "")
            self.log("queue_recovered", file=path, agent=agent, already_delivered=True)
            out.next_due = _min(out.next_due, self.clock() + self.timeout)
            return
        self.log("queue_recovered", file=path, agent=agent, already_delivered=False)
        self._deliver(agent, path, message, out)
        out.next_due = _min(out.next_due, self.clock() + self.timeout)

    def _tags_in_inbox(self, agent: str) -> set[str]:
        try:
            return {tag for m in self.inbox(agent) for tag in m.get("tags", ()) if tag.startswith(TAG)}
        except RelayError as exc:
            self.log("queue_inbox_unreadable", agent=agent, error=exc.message)
            return set()

    def _advance(self, agent: str, path: str, message: mime.MimeMessage, status: str, out: Outcome) -> None:
        now = self.clock()
        if status in ("", "queued"):
            # Written straight into processed/ (as IGNITE's own examples do) and never announced.
            self._deliver(agent, path, message, out)
            out.next_due = _min(out.next_due, now + self.timeout)
        elif status in ("processing", "delivered"):
            since = mime.parse_iso_seconds(message.get(PROCESSED_AT))
            due = now if since is None else since + self.timeout
            if now >= due:
                self._timeout(agent, path, message, out)
            else:
                out.next_due = _min(out.next_due, due)
        elif status == "retrying":
            due = mime.parse_iso_seconds(message.get(NEXT_RETRY_AT)) or now
            if now >= due:
                self._deliver(agent, path, message, out)
                out.next_due = _min(out.next_due, now + self.timeout)
            else:
                out.next_due = _min(out.next_due, due)
        elif status == "dead_letter":
            self._dead_letter(agent, path, message, out)  # a crash came between its steps
        # completed and anything unknown: the agent's business; left alone

    def _timeout(self, agent: str, path: str, message: mime.MimeMessage, out: Outcome) -> None:
        retries = _int(message.get(RETRY_COUNT))
        if retries >= self.policy.max_deliver:
            self._dead_letter(agent, path, message, out, reason=f"not finished {int(self.timeout)}s after each of {retries + 1} deliveries")
            return
        now = self.clock()
        due = math.ceil(now + self.policy.wait(retries + 1, self.rand()))
        message.set(STATUS, "retrying")
        message.set(RETRY_COUNT, str(retries + 1))
        message.set(NEXT_RETRY_AT, mime.iso_seconds(due))
        self._write(path, message)
        out.retrying.append(path)
        out.next_due = _min(out.next_due, due)
        self.log("queue_retrying", file=path, agent=agent, retry=retries + 1, of=self.policy.max_deliver, at=mime.iso_seconds(due))

    # -- dead letters ----------------------------------------------------------------
    def _dead_letter(self, agent: str, path: str, message: mime.MimeMessage, out: Outcome, reason: str | None = None) -> None:
        if message.get(STATUS) != "dead_letter":
            message.set(STATUS, "dead_letter")
            message.set(ERROR_REASON, reason or "timeout")
            if (message.get(H + "Type") or "") != "escalation":  # never an escalation about an escalation
                message.set(ESCALATION, self._escalation_name())
            self._write(path, message)
        folder = os.path.join(self.root, DEAD_LETTER)
        files.mkdir(folder, self.root)
        target = files.move(path, folder, os.path.basename(path))
        if target is None:
            return
        self._cache.pop(path, None)
        out.dead_lettered.append(target)
        self.log("queue_dead_letter", file=target, agent=agent, reason=message.get(ERROR_REASON))
        self._escalate(target, message, out)

    def _escalation_name(self) -> str:
        moment = self.clock()
        folder = os.path.join(self.root, self.escalate_to)
        while True:
            name = usec_name("escalation", moment)
            if not any(os.path.lexists(os.path.join(folder, sub, name)) for sub in ("", PROCESSED)):
                return name
            moment += 1e-6

    def _escalate(self, dead: str, message: mime.MimeMessage, out: Outcome) -> None:
        name = message.get(ESCALATION)
        if not name or message.get(ESCALATED_AT):
            return
        folder = os.path.join(self.root, self.escalate_to)
        files.mkdir(os.path.join(folder, PROCESSED), self.root)
        target = os.path.join(folder, os.path.basename(name))
        if not any(os.path.lexists(os.path.join(folder, sub, os.path.basename(name))) for sub in ("", PROCESSED)):
            body = _escalation_body(dead, message, self.policy.max_deliver)
            escalation = mime.build(from_=MONITOR, to=[self.escalate_to], type_="escalation", priority="critical", body=body)
            try:
                mime.write_atomic(target, escalation, exclusive=True)
            except RelayError as exc:
                if not os.path.lexists(target):
                    raise
                self.log("queue_escalation_exists", file=target, error=exc.message)
            out.escalations.append(target)
            self.log("queue_escalated", file=target, dead_letter=dead, to=self.escalate_to)
        message.set(ESCALATED_AT, mime.iso_seconds(self.clock()))
        self._write(dead, message)

    def _finish_escalations(self, out: Outcome) -> None:
        """After a restart: dead letters whose escalation a crash interrupted."""
        folder = os.path.join(self.root, DEAD_LETTER)
        for name in files.mime_files(folder):
            path = os.path.join(folder, name)
            try:
                message = mime.read_file(path, follow=False)
            except RelayError:
                continue
            if message.get(ESCALATION) and not message.get(ESCALATED_AT):
                try:
                    self._escalate(path, message, out)
                except RelayError as exc:
                    self.log("queue_file_failed", file=path, error=exc.message)

    # -- helpers ---------------------------------------------------------------------
    def _set_aside(self, agent: str, path: str, why: str, out: Outcome) -> None:
        """Malformed: logged, moved to <agent>/malformed/, never deleted."""
        folder = os.path.join(self.root, agent, MALFORMED)
        files.mkdir(folder, self.root)
        target = files.move(path, folder, os.path.basename(path))
        self._cache.pop(path, None)
        if target is not None:
            out.malformed.append(target)
            self.log("queue_malformed", file=path, moved_to=target, error=why)

    def _read(self, path: str) -> mime.MimeMessage | None:
        """The parsed file, re-read only when it changed (a pass looks at every file)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RelayError(f"cannot read {path}: {exc.strerror or exc}") from None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            message = mime.read_file(path, follow=False)
        except RelayError:
            if not os.path.lexists(path):
                return None  # the agent finished it just now
            raise
        self._cache[path] = (key, message)
        return message

    def _write(self, path: str, message: mime.MimeMessage) -> None:
        if not os.path.lexists(path):
            # The agent deleted it (finished) while we worked: writing would bring it back.
            self._cache.pop(path, None)
            raise RelayError(f"{path} was removed by its agent meanwhile; nothing more to do")
        mime.write_atomic(path, message)
        self._cache.pop(path, None)

    def _sweep_temp_files(self, agents: list[str]) -> None:
        folders = [os.path.join(self.root, DEAD_LETTER)]
        for agent in agents:
            folders += [os.path.join(self.root, agent), os.path.join(self.root, agent, PROCESSED)]
        files.sweep_temp_files(folders)

    def watched(self) -> list[str]:
        """The directories whose changes can mean work: the root, each agent's queue and its
        processed/ (IGNITE's tools write some files straight there) and, when mirroring,
        each queue agent's inbox directory in the store."""
        agents = self.agents()
        found = [self.root] + [os.path.join(self.root, agent) for agent in agents]
        found += [path for path in (os.path.join(self.root, agent, PROCESSED) for agent in agents) if os.path.isdir(path)]
        if self.mirror is not None:
            found += self.mirror.directories(agents)
        return found

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()

    def lock(self) -> contextlib.ExitStack:
        """Become the one monitor of this queue (two would both take the same file): two
        exclusive flocks, held until the returned stack is closed (or the process dies).
        One lives in the store, named after the queue's real path, so it outlives the queue
        directory (`rm -rf queue && mkdir queue` must not let a second monitor in beside
        this one); the one in the queue directory is seen by monitors of other stores too."""
        paths = [os.path.join(self.root, LOCK)]
        if self.lock_dir is not None:
            key = layout.sha256_hex(os.path.realpath(self.root).encode())[:32]
            paths.insert(0, os.path.join(self.lock_dir, layout.IGNITE_QUEUE_LOCK.format(key)))
        held = contextlib.ExitStack()
        try:
            for path in paths:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                except OSError as exc:
                    raise RelayError(f"cannot open {path}: {exc.strerror or exc}") from None
                held.callback(os.close, fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise QueueBusy(f"another monitor serves {self.root} (relayd --ignite-queue or relayctl ignite watch); stop it first") from None
        except BaseException:
            held.close()
            raise
        return held

    def serve(self, stop: threading.Event | None = None, watch_socket: str | None = None, *, wait_for_lock: bool = False) -> None:
        """Run passes until `stop` is set: after every change in a queue directory (inotify,
        through relayd.client.watch) and whenever a timer runs out. With `wait_for_lock`, a queue
        another monitor serves is waited for (logged once) instead of refused."""
        stop = stop or threading.Event()
        told = False
        while True:
            try:
                held = self.lock()
                break
            except QueueBusy as exc:
                if not wait_for_lock:
                    raise
                if not told:
                    self.log("queue_busy", queue=self.root, error=exc.message)
                    told = True
                if stop.wait(watch.RETRY_SECONDS):
                    return
        current: list[str] = []
        waiter: watch.Watch | None = None
        run = True  # a pass is owed: something changed, a timer ran out, or we just started
        next_due: float | None = None
        try:
            while not stop.is_set():
                if run:
                    try:
                        next_due = self.run_once().next_due
                        dirs = self.watched()
                    except RelayError as exc:
                        self.log("queue_pass_failed", error=exc.message)
                        next_due, dirs = self.clock() + watch.RETRY_SECONDS, current or [self.root]
                    if dirs != current or waiter is None:
                        # A new set of directories (an agent's queue appeared): watch them all,
                        # and the new watch's first wake-up makes the pass that catches up.
                        if waiter is not None:
                            waiter.close()
                        current = dirs
                        waiter = watch.Watch(self.root, watch.directories(dirs), watch_socket, client="relay-ignite")
                wait_for = 1.0  # looks at `stop` at least this often
                if next_due is not None:
                    wait_for = max(0.0, min(wait_for, next_due - self.clock()))
                assert waiter is not None
                changed = waiter.wait(wait_for)
                run = changed or (next_due is not None and self.clock() >= next_due)
        finally:
            if waiter is not None:
                waiter.close()
            self.close()
            held.close()


def _escalation_body(dead: str, message: mime.MimeMessage, max_retries: int) -> str:
    body = message.body
    task_id = _yaml_field(body, "task_id")
    title = _yaml_field(body, "title")
    lines = [
        f"task_id: {yaml_str(task_id or 'unknown')}",
        f"title: {yaml_str(title or 'unknown')}",
        f"original_file: {yaml_str(os.path.basename(dead))}",
        f"original_assignee: {yaml_str(', '.join(mime.split_list(message.get('To'))) or 'unknown')}",
        f"original_type: {yaml_str(message.get(H + 'Type') or '')}",
        f"original_message_id: {yaml_str(message.get('Message-ID') or '')}",
        f"failure_reason: {yaml_str(message.get(ERROR_REASON) or 'timeout')}",
        f"retry_count: {_int(message.get(RETRY_COUNT))}",
        f"max_retries: {max_retries}",
        'recommended_action: "manual_review"',
        f"dlq_path: {yaml_str(dead)}",
    ]
    return "\n".join(lines) + "\n"


def _yaml_field(body: str, key: str) -> str | None:
    match = re.search(rf"^\s*{key}:\s*(.*)$", body, re.M)
    if not match:
        return None
    return match.group(1).strip().strip("\"'") or None


def _int(text: str | None) -> int:
    try:
        return max(0, int((text or "0").strip()))
    except ValueError:
        return 0


def _mtime(path: str) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def monitor_for(client, root: str, *, timeout: float = DEFAULT_TIMEOUT, log: Log = _no_log) -> QueueMonitor:
    """A monitor for `root` that delivers through `client` (relayd when it runs, else
    directly), with the store's delivery policy and escalation agent (config.json)."""
    store = client.store()
    store.require_existing()
    policy = policy_for(store, None, None)
    escalate_to = load_config(store).delivery.escalate_to or "leader"

    def inbox(agent: str) -> list[dict]:
        return [msgspec.to_builtins(m) for m in read_all(store, agent).messages]

    return QueueMonitor(
        root,
        send=lambda params: client.call("send", params),
        is_agent=store.is_agent,
        inbox=inbox,
        policy=policy,
        timeout=timeout,
        escalate_to=escalate_to,
        clock=store.clock,
        rand=store.rand,
        log=log,
        inbox_dir=lambda agent: os.path.join(store.root, layout.AGENTS, agent),
        lock_dir=store.root,
    )
