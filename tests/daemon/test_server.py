"""relayd's answers to requests and subscriptions, served in the test's own event loop.

Request/response semantics need no relayd process: the server runs in this test's loop on
a real Unix socket (tests/support/inproc.py) and a raw client speaks to it from a worker thread.
What only a process shows (signals, crashes, start-up, memory) stays in tests/daemon/test_daemon.py.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import os
import shlex
import socket
from pathlib import Path
from typing import Iterator

import anyio
import pytest

from support.inproc import InProcess, blocking, serving, snapshot
from relayd import ops
from relayd.store import Store
from support.rawclient import RawClient
from support.waiting import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def overlord_store(short_tmp: Path) -> Iterator[Path]:
    """A store with the overlord preset's agents, made directly (as `relayctl init` would)."""
    store_dir = short_tmp / "store"
    with Store(str(store_dir), fsync=False) as store:
        ops.call(store, "init", {"preset": "overlord"})
    yield store_dir


HOSTILE = {
    "invalid-utf8": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","to":["inferno"],"body":"\xff\xfe"}}\n',
    "lone-surrogate": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","to":["inferno"],"body":"\\ud800"}}\n',
    "nan": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","to":["inferno"],"body":"x","priority":NaN}}\n',
    "deep-nesting": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","body":' + b"[" * 100_000 + b"]" * 100_000 + b"}}\n",
    "two-mib-line": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","to":["inferno"],"body":"' + b"a" * (2 << 20) + b'"}}\n',
    "binary-garbage": bytes(range(256)) * 64 + b"\n",
    "unknown-op": b'{"type":"request","id":1,"op":"format_disk","params":{}}\n',
    "not-an-object": b"[1,2,3]\n",
    "wrong-params": b'{"type":"request","id":1,"op":"send","params":{"agent":"storm","to":"inferno","body":5}}\n',
}


def _hostile_exchange(relayd: InProcess, payload: bytes) -> None:
    before = snapshot(relayd.store_dir)
    bystander = RawClient(relayd.socket_path)
    hostile = RawClient(relayd.socket_path)
    try:
        bystander.subscribe(["*"])
        try:
            hostile.send_bytes(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before we finished: the 2 MiB line
        answers = []
        try:
            while (answer := hostile.line()) is not None:
                answers.append(answer)
                if answer.get("type") in ("response", "error"):
                    break
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert answers, "no error reply"
        error = answers[-1]
        assert (error.get("ok") is False) or error.get("type") == "error"
        assert error["error"]["code"] in {"protocol_error", "line_too_long", "invalid_argument"}
        probe = RawClient(relayd.socket_path)
        try:
            assert probe.request("version")["ok"]  # still serving others
        finally:
            probe.close()
        assert snapshot(relayd.store_dir) == before
        bystander.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            bystander.line()  # and no event was published
    finally:
        bystander.close()
        hostile.close()


@pytest.mark.parametrize("payload", list(HOSTILE), ids=list(HOSTILE))
async def test_hostile_input_gets_an_error_and_writes_nothing(overlord_store: Path, short_tmp: Path, payload: str) -> None:
    async with serving(str(overlord_store), str(short_tmp / "d.sock")) as relayd:
        await blocking(_hostile_exchange, relayd, HOSTILE[payload])


def _send(client: RawClient, to: str, text: str) -> None:
    assert client.request("send", {"agent": "storm", "to": [to], "subject": text, "body": text})["ok"]


def _filter_and_resume(relayd: InProcess) -> None:
    sender = RawClient(relayd.socket_path)
    first = RawClient(relayd.socket_path)
    resumed = RawClient(relayd.socket_path)
    try:
        for text in ("one", "two", "three"):
            _send(sender, "inferno", text)
            _send(sender, "glacier", text)
        first.subscribe(["inbox"], agent="inferno", after="0")  # everything still in the log
        replayed = [first.line() or {} for _ in range(3)]
        assert [e["subject"] for e in replayed] == ["one", "two", "three"]
        assert {e["agent"] for e in replayed} == {"inferno"}

        resumed.subscribe(["inbox"], agent="inferno", after=replayed[0]["id"])
        assert [(resumed.line() or {})["subject"] for _ in range(2)] == ["two", "three"]
        _send(sender, "inferno", "four")
        assert (resumed.line() or {})["subject"] == "four"  # then live, nothing doubled or lost
    finally:
        for client in (sender, first, resumed):
            client.close()


async def test_agent_filter_and_resume_after_an_event_id(overlord_store: Path, short_tmp: Path) -> None:
    async with serving(str(overlord_store), str(short_tmp / "d.sock")) as relayd:
        await blocking(_filter_and_resume, relayd)


async def test_a_round_waits_for_the_client_it_just_answered(overlord_store: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Busy clients share a round instead of taking turns: a request that arrives just
    after another client's answer waits for that client's next request, and one round
    (one set of fsyncs) makes both durable."""
    from relayd.daemon import server as module

    monkeypatch.setattr(module, "HOLD", 30.0, raising=False)  # (so the wait ends only because the client sends)
    send = {"agent": "storm", "to": ["inferno"], "body": "hello"}
    async with serving(str(overlord_store), str(short_tmp / "s.sock")) as relayd:
        committer = relayd.server.committer
        assert committer is not None
        busy, other = RawClient(relayd.socket_path), RawClient(relayd.socket_path)
        try:
            assert (await blocking(busy.request, "send", send))["ok"]  # answered: expected back
            rounds = committer.batches
            other.send_line({"type": "request", "id": 1, "op": "send", "params": send})
            with anyio.fail_after(5):
                while not relayd.server.deferred:
                    await anyio.sleep(0.001)
            await anyio.sleep(0.05)
            assert committer.batches == rounds and relayd.server.deferred  # held for the busy client
            replies = await blocking(busy.request, "send", send), await blocking(other.line)
            assert all(reply["ok"] for reply in replies)
            assert committer.batches == rounds + 1  # both sends in one round
        finally:
            busy.close()
            other.close()


def _release(fifo: Path) -> None:
    """End a trigger waiting in `cat FIFO` by opening the pipe for writing. Its `cat` may not
    have opened the pipe yet (ENXIO): on a loaded machine that comes a while after the
    trigger's `touch`, and a release tried once then left it waiting for ever."""

    def opened() -> bool:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            return False
        return True

    wait_for("the trigger's cat to open its pipe", opened)


@pytest.mark.parametrize("reporter", ["trigger", "hook", "version-2 hook"])
async def test_a_send_waiting_for_its_announcement_is_answered_when_it_is_reported(overlord_store: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, reporter: str) -> None:
    """A send that waits for its recipients' announcements (the request field `announce`:
    relay-mcp's send_message) is answered once the announcement is reported -- by relayd's
    own trigger, or by the recipient's hook through relayd -- not at the next tick of a
    timer: from just before the report the event loop's clock stands still, so no timer
    can end the wait. The tracks are read once before the report and once after it."""
    from relayd import session

    started, held = short_tmp / "started", short_tmp / "held"
    os.mkfifo(held)  # the trigger command waits on it until the test writes to it
    trigger = shlex.join(["sh", "-c", f"touch {shlex.quote(str(started))} && cat {shlex.quote(str(held))}"])
    with Store(str(overlord_store), fsync=False) as store:
        ops.call(store, "register", {"name": "inferno", "notify": f"cmd:{trigger}"})
    # The trigger ends only when the test releases it: no timeout of its own may end the wait.
    config = overlord_store / "config.json"
    settings = json.loads(config.read_text()) if config.exists() else {}
    config.write_text(json.dumps({**settings, "notify": {**settings.get("notify", {}), "timeout": "120s"}}))
    reads: list[tuple[list, bool]] = []
    read_tracks = session.announcements

    def counted(store: Store, ids: list[str]) -> tuple[list, bool]:
        reads.append(read_tracks(store, ids))
        return reads[-1]

    monkeypatch.setattr(session, "announcements", counted)
    monkeypatch.setattr(session, "ANNOUNCE_RECHECK", 60.0, raising=False)  # (no look of its own while the test sets up)
    release = functools.partial(held.write_bytes, b"")  # (opens the pipe once `cat` has: it ends, the trigger worked)
    async with serving(str(overlord_store), str(short_tmp / "a.sock"), notify=True) as relayd:
        sender, hook = RawClient(relayd.socket_path, timeout=30), RawClient(relayd.socket_path)
        loop = asyncio.get_running_loop()
        try:
            send = {"agent": "storm", "to": ["inferno"], "subject": "auth", "body": "take the auth module"}
            sender.send_line({"type": "request", "id": 1, "op": "send", "params": send, "announce": session.ANNOUNCE_MAX})
            with anyio.fail_after(20):
                while not (reads and started.exists()):  # the send waits; relayd runs inferno's trigger
                    await anyio.sleep(0.001)
            assert reads == [([{"to": "inferno", "how": "cmd", "pending": True}], False)]
            frozen = loop.time()
            loop.time = lambda: frozen  # type: ignore[method-assign]
            try:
                if reporter == "trigger":
                    await blocking(release)
                elif reporter == "hook":
                    hook.send_line({"type": "request", "id": 1, "op": "announced", "params": {"agent": "inferno", "how": "hook"}})
                else:  # a version 2 client wraps its report in session_call
                    hook.send_line({"type": "request", "id": 1, "op": "session_call",
                                    "params": {"agent": "inferno", "op": "announced", "params": {"agent": "inferno", "how": "hook"}}})
                reply = await blocking(sender.line)
            finally:
                del loop.time
            how = {"trigger": "cmd", "hook": "hook", "version-2 hook": "hook"}[reporter]
            assert reply is not None and reply["ok"] and reply["announced"] == [{"to": "inferno", "how": how, "ok": True}]
            assert len(reads) == 2 and reads[-1][1]  # before the report, and after it: settled
            if reporter != "trigger":
                assert (await blocking(hook.line) or {}).get("ok")
        finally:
            sender.close()
            hook.close()
            if started.exists() and reporter != "trigger":
                _release(held)  # the trigger still waits: relayd's shutdown would wait for it
