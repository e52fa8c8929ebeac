"""The store against a simple in-memory model of every inbox (Hypothesis state machine).

The model keeps, per agent, the lines of `inbox.jsonl.1` and `inbox.jsonl` as message ids
with their sizes, plus how many of those lines have been read. Rotation follows the
documented policy: when an append would take the inbox past `rotate_bytes`, the current
file becomes `.1` and the previous `.1` leaves the inbox, read or not. When it still held
unread mail it goes to `dead_letter/`; the model records that mail in `dropped_unread` and
checks it is there, line for line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import msgspec
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule

from relayd import layout, ops
from relayd.errors import RelayError, UnknownAgent, UsageError
from relayd.records import Message, cursor_decoder, json_encoder
from relayd.store import Store

ROTATE_BYTES = 1000
NAMES = ["ann", "bo", "cy", "dee", "eve-2"]

bodies = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=300).filter(
    lambda s: s.strip() != ""
)


@dataclass
class Inbox:
    rotated: list[tuple[str, int]] = field(default_factory=list)  # (id, line bytes)
    current: list[tuple[str, int]] = field(default_factory=list)
    torn: int = 0  # bytes of a half-written line at the end of `current`
    rotated_torn: int = 0  # ... that went along into `.1` with a rotation
    read: int = 0  # lines of rotated + current already read
    dropped_unread: list[str] = field(default_factory=list)

    def visible(self) -> list[str]:
        return [i for i, _ in self.rotated] + [i for i, _ in self.current]

    def unread(self) -> list[str]:
        return self.visible()[self.read :]

    def append(self, message_id: str, size: int, rotate_bytes: int) -> None:
        on_disk = sum(n for _, n in self.current) + self.torn
        if on_disk and on_disk + size > rotate_bytes:
            gone = len(self.rotated)
            self.dropped_unread += [i for i, _ in self.rotated][self.read :]
            event("rotation" + (" dropping unread mail" if self.read < len(self.rotated) else ""))
            self.read = max(0, self.read - gone)
            self.rotated, self.current = self.current, []
            self.rotated_torn = self.torn
        self.torn = 0  # the append cuts a torn tail back (or it left with the rotation)
        self.current.append((message_id, size))


def line_size(message: dict) -> int:
    return len(json_encoder.encode(msgspec.convert(message, Message))) + 1


class StoreModel(RuleBasedStateMachine):
    agents = Bundle("agents")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="rl-model-", dir="/tmp")
        self.store = Store(os.path.join(self.tmp, "store"), fsync=False, rotate_bytes=ROTATE_BYTES)
        self.inboxes: dict[str, Inbox] = {}
        self.senders: dict[str, str] = {}  # message id -> sender

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def inbox_path(self, name: str, file: str = layout.INBOX) -> str:
        return os.path.join(self.store.root, layout.AGENTS, name, file)

    @initialize(target=agents, names=st.lists(st.sampled_from(NAMES), min_size=2, max_size=4, unique=True))
    def register_some(self, names: list[str]):
        for name in names:
            self.register_one(name)
        return multiple(*names)

    def register_one(self, name: str) -> None:
        meta = ops.call(self.store, "register", {"name": name})
        assert meta["name"] == name
        self.inboxes.setdefault(name, Inbox())

    @rule(target=agents, name=st.sampled_from(NAMES))
    def register(self, name: str):
        self.register_one(name)  # registering again keeps the inbox and cursor
        return name

    @rule(sender=agents, to=agents, body=bodies, priority=st.sampled_from(["low", "normal", "high", "urgent", "critical"]))
    def send(self, sender: str, to: str, body: str, priority: str) -> None:
        result = ops.call(self.store, "send", {"agent": sender, "to": [to], "body": body, "priority": priority})
        (message,) = result["messages"]
        assert message["to"] == to and message["from"] == sender and message["body"] == body
        assert message["priority"] == ("urgent" if priority == "critical" else priority)
        self.record(message)

    @rule(sender=agents, body=bodies)
    def broadcast(self, sender: str, body: str) -> None:
        others = sorted(name for name in self.inboxes if name != sender)
        try:
            result = ops.call(self.store, "send", {"agent": sender, "broadcast": True, "body": body})
        except UnknownAgent:
            assert not others
            return
        assert [m["to"] for m in result["messages"]] == others
        for message in result["messages"]:
            self.record(message)

    @rule(sender=agents, name=st.sampled_from(["zed", "../ann", "Ann", ""]))
    def send_to_unknown_writes_nothing(self, sender: str, name: str) -> None:
        before = {n: os.path.getsize(self.inbox_path(n)) for n in self.inboxes}
        try:
            ops.call(self.store, "send", {"agent": sender, "to": [name], "body": "lost?"})
        except RelayError:
            pass
        else:
            raise AssertionError(f"sending to {name!r} was accepted")
        assert before == {n: os.path.getsize(self.inbox_path(n)) for n in self.inboxes}

    def record(self, message: dict) -> None:
        self.inboxes[message["to"]].append(message["id"], line_size(message), ROTATE_BYTES)
        self.senders[message["id"]] = message["from"]

    @rule(agent=agents, last=st.integers(min_value=0, max_value=6), mark=st.booleans())
    def read_unread(self, agent: str, last: int, mark: bool) -> None:
        box = self.inboxes[agent]
        result = ops.call(self.store, "read", {"agent": agent, "unread": True, "last": last, "mark_read": mark})
        expected = box.unread() if last == 0 else box.unread()[:last]
        assert [m["id"] for m in result["messages"]] == expected
        assert result["corrupt"] == []
        if mark:
            box.read += len(expected)
        assert result["unread"] == len(box.unread())

    @rule(agent=agents, sender=agents, last=st.integers(min_value=0, max_value=4))
    def read_unread_from_one_sender(self, agent: str, sender: str, last: int) -> None:
        """A filter shows the matching unread mail but marks read only the unbroken run
        at the front, so nothing is marked read unseen."""
        box = self.inboxes[agent]
        unread = box.unread()
        matching = [i for i in unread if self.senders[i] == sender]
        expected = matching if last == 0 else matching[:last]
        result = ops.call(self.store, "read", {"agent": agent, "from": sender, "unread": True, "last": last, "mark_read": True})
        assert [m["id"] for m in result["messages"]] == expected
        run = 0
        while run < len(unread) and run < len(expected) and unread[run] == expected[run]:
            run += 1
        box.read += run
        assert result["unread"] == len(box.unread())

    @rule(agent=agents, last=st.integers(min_value=0, max_value=6), mark=st.booleans())
    def read_newest(self, agent: str, last: int, mark: bool) -> None:
        box = self.inboxes[agent]
        visible = box.visible()
        expected = visible if last == 0 else visible[-last:] if visible else []
        result = ops.call(self.store, "read", {"agent": agent, "last": last, "mark_read": mark})
        assert [m["id"] for m in result["messages"]] == expected
        if mark:
            shown = set(expected)
            while box.read < len(visible) and visible[box.read] in shown:
                box.read += 1
        assert result["unread"] == len(box.unread())

    @rule(agent=agents, data=st.data())
    def tear_the_tail(self, agent: str, data: st.DataObject) -> None:
        """A writer killed mid-append leaves half a line; readers must not see it."""
        box = self.inboxes[agent]
        if box.torn:
            return
        half = data.draw(st.sampled_from([b'{"id":"01J', b'{"id":"01JMHF3XYZ","ts":"2026-02-16T06:08', b"{"]))
        with open(self.inbox_path(agent), "ab") as fh:
            fh.write(half)
        box.torn = len(half)

    @rule()
    def reopen(self) -> None:
        """A new process: nothing is cached between commands."""
        self.store.close()
        self.store = Store(self.store.root, fsync=False, rotate_bytes=ROTATE_BYTES)

    @rule(agent=agents)
    def unread_count(self, agent: str) -> None:
        result = ops.call(self.store, "unread", {"agent": agent})
        assert result["unread"] == len(self.inboxes[agent].unread())

    @invariant()
    def cursors_sit_on_line_boundaries(self) -> None:
        for name in self.inboxes:
            try:
                with open(self.inbox_path(name, layout.CURSOR), "rb") as fh:
                    cursor = cursor_decoder.decode(fh.read())
            except FileNotFoundError:
                continue
            file = layout.INBOX_ROTATED if cursor.rotated else layout.INBOX
            if cursor.ino:
                assert os.stat(self.inbox_path(name, file)).st_ino == cursor.ino, f"{name}'s cursor names another file"
            if cursor.offset == 0:
                continue
            with open(self.inbox_path(name, file), "rb") as fh:
                fh.seek(cursor.offset - 1)
                assert fh.read(1) == b"\n", f"{name}'s cursor {cursor} is inside a line of {file}"

    @invariant()
    def files_hold_exactly_the_model(self) -> None:
        """Nothing lost, duplicated or reordered: the files are the model, line for line."""
        for name, box in self.inboxes.items():
            for file, lines in ((layout.INBOX_ROTATED, box.rotated), (layout.INBOX, box.current)):
                try:
                    with open(self.inbox_path(name, file), "rb") as fh:
                        raw = fh.read()
                except FileNotFoundError:
                    raw = b""
                torn = box.torn if file == layout.INBOX else box.rotated_torn
                if torn:
                    assert not raw.endswith(b"\n")
                    raw = raw[:-torn]
                assert raw == b"" or raw.endswith(b"\n")
                ids = [msgspec.json.decode(line)["id"] for line in raw.split(b"\n")[:-1]]
                assert ids == [i for i, _ in lines], f"{name}/{file}"

    @invariant()
    def unread_mail_rotated_away_is_in_dead_letter(self) -> None:
        folder = os.path.join(self.store.root, layout.DEAD_LETTER)
        for name, box in self.inboxes.items():
            kept: list[str] = []
            for file in sorted(f for f in os.listdir(folder) if f.startswith(f"{name}.")):
                with open(os.path.join(folder, file), "rb") as fh:
                    # complete lines only: a torn tail may have gone along with the file
                    kept += [msgspec.json.decode(line)["id"] for line in fh.read().split(b"\n")[:-1]]
            assert [i for i in kept if i in set(box.dropped_unread)] == box.dropped_unread, name

    @invariant()
    def per_sender_order_is_send_order(self) -> None:
        for box in self.inboxes.values():
            by_sender: dict[str, list[str]] = {}
            for message_id in box.visible():
                by_sender.setdefault(self.senders[message_id], []).append(message_id)
            for ids in by_sender.values():
                assert ids == sorted(ids)  # ULIDs of one process count up


StoreModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    # No shrinking: shrinking a store run outlasts the per-test timeout; the failing run's
    # printed steps are the reproduction.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
test_store_model = StoreModel.TestCase


def test_rotation_drops_old_unread_mail_by_design() -> None:
    """The documented policy in one picture: only one rotated file is kept, so unread mail
    older than that is gone, and the cursor moves to the oldest mail still kept."""
    tmp = tempfile.mkdtemp(prefix="rl-rot-", dir="/tmp")
    try:
        with Store(os.path.join(tmp, "store"), fsync=False, rotate_bytes=600) as store:
            for name in ("a", "b"):
                ops.call(store, "register", {"name": name})
            sent = [ops.call(store, "send", {"agent": "a", "to": ["b"], "body": f"message {n:02d}"})["messages"][0]["id"] for n in range(12)]
            unread = ops.call(store, "read", {"agent": "b", "unread": True, "last": 0})
            assert unread["corrupt"] == []
            ids = [m["id"] for m in unread["messages"]]
            assert ids == sent[len(sent) - len(ids) :], "what is kept is the newest mail, in order"
            assert 0 < len(ids) < len(sent), "with a 600-byte limit some mail must have rotated away"
            assert os.path.exists(os.path.join(store.root, "agents", "b", "inbox.jsonl.1"))
            assert not os.path.exists(os.path.join(store.root, "agents", "b", "inbox.jsonl.2"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_empty_message_is_refused_and_writes_nothing() -> None:
    tmp = tempfile.mkdtemp(prefix="rl-use-", dir="/tmp")
    try:
        with Store(os.path.join(tmp, "store"), fsync=False) as store:
            ops.call(store, "register", {"name": "a"})
            ops.call(store, "register", {"name": "b"})
            try:
                ops.call(store, "send", {"agent": "a", "to": ["b"], "body": "  "})
            except UsageError:
                pass
            else:
                raise AssertionError("an empty message was accepted")
            assert os.path.getsize(os.path.join(store.root, "agents", "b", "inbox.jsonl")) == 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
