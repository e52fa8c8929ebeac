"""Another user's socket at relayd's name (a squatter that bound it in a shared sticky
directory while relayd was stopped) gets nothing from any client: relayctl's fast path,
its full CLI, its hooks and the watcher check the socket's owner (and the peer's uid once
connected) before sending a byte, say in one line whose socket it is, and work on the
store directly, as when relayd is down. The squatter is a real process of `nobody`
(support.squatter), recording whatever reaches it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from relayd.client import watch
from relayd.wire import peer
from relayd.inbox.read import read_all
from relayd.store import Store
from support.squatter import FORGED, Squatter, wait_connected

SECRET = "SECRET deploy key hunter2"


@pytest.fixture
def squatter(relayctl, store_dir):
    relayctl.setup("init", preset="overlord")  # the real store, before anyone squats
    squatting = Squatter(str(store_dir))
    yield squatting
    squatting.stop()


@pytest.fixture
def env(relay_env, squatter) -> dict[str, str]:
    """relayctl as a program session of inferno runs it, with the socket in the shared directory."""
    return dict(relay_env, RELAY_SOCKET=squatter.socket_path, RELAY_AGENT="inferno")


def run(env: dict[str, str], *argv: str, stdin: str | None = None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "relayctl", *argv], env=env, input=stdin, capture_output=True, text=True, timeout=60)


def stored(store_dir: Path, agent: str) -> list[dict]:
    with Store(str(store_dir)) as store:
        return msgspec.to_builtins(read_all(store, agent))["messages"]


def refusal_line(stderr: str, socket_path: str) -> str:
    """The one line naming the socket and its owner (and nothing else on stderr)."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert socket_path in lines[0] and "nobody" in lines[0] and "working on the store directly" in lines[0], lines[0]
    return lines[0]


@pytest.mark.slow
def test_relayctl_send_and_read_skip_another_users_socket_and_use_the_store(env, squatter, store_dir):
    sent = run(env, "--agent", "storm", "send", "inferno", SECRET)
    assert sent.returncode == 0, sent.stderr
    assert refusal_line(sent.stderr, squatter.socket_path).startswith(f"warning: {squatter.socket_path} belongs to nobody (uid 65534)")
    assert [m["body"] for m in stored(store_dir, "inferno")] == [SECRET]

    read = run(env, "read", "--unread")
    assert read.returncode == 0, read.stderr
    refusal_line(read.stderr, squatter.socket_path)
    assert SECRET in read.stdout and FORGED not in read.stdout
    assert squatter.received() == ""  # not even a connection


@pytest.mark.slow
def test_a_full_cli_command_skips_another_users_socket(env, squatter, store_dir):
    registered = run(env, "register", "newcomer", "--program", "codex")
    assert registered.returncode == 0, registered.stderr
    refusal_line(registered.stderr, squatter.socket_path)
    assert (store_dir / "agents" / "newcomer" / "meta.json").exists()
    status = run(env, "status")
    assert status.stdout.startswith("relayd: not running (direct mode)"), status.stdout
    assert squatter.received() == ""


@pytest.mark.slow
@pytest.mark.parametrize("program, argv, event", [("claude", [], "UserPromptSubmit"), ("gemini", [], "BeforeAgent"), ("copilot", ["userPromptSubmitted"], None)])
def test_a_programs_hook_hands_over_the_real_mail_not_the_squatters(env, squatter, relayctl, program, argv, event):
    relayctl.setup("send", agent="storm", to=["inferno"], body=SECRET)  # through the store: the fixture's own socket is not the squatter's
    stdin = {"hook_event_name": event, "prompt": "go on"} if event else {"prompt": "go on", "timestamp": 1}
    answered = run(dict(env, TMUX="/tmp/tmux-0/default,1,0"), "hook", program, *argv, stdin=json.dumps(stdin))
    assert answered.returncode == 0, answered.stderr
    refusal_line(answered.stderr, squatter.socket_path)
    assert SECRET in answered.stdout and FORGED not in answered.stdout
    assert squatter.received() == ""


@pytest.mark.slow
def test_a_link_of_ours_to_another_users_socket_is_refused_by_the_peers_uid(env, squatter, short_tmp, store_dir):
    """The file check alone would pass a symbolic link the user made (or a name swapped
    after it): the peer's credentials, read once connected, refuse it before the hello."""
    link = short_tmp / "link.sock"
    link.symlink_to(squatter.socket_path)
    sent = run(dict(env, RELAY_SOCKET=str(link)), "--agent", "storm", "send", "inferno", SECRET)
    assert sent.returncode == 0, sent.stderr
    assert refusal_line(sent.stderr, str(link)).startswith(f"warning: {link} is answered by a process of nobody (uid 65534)")
    assert [m["body"] for m in stored(store_dir, "inferno")] == [SECRET]
    record = wait_connected(squatter)
    time.sleep(0.2)  # (anything the client sent would be recorded by now)
    assert [json.loads(line) for line in squatter.received().splitlines()] == [{"connected": True}], record


def test_the_watcher_waits_on_the_files_instead_of_another_users_socket(squatter, store_dir, capfd):
    with watch.Watch(str(store_dir), watch.inbox(str(store_dir), "inferno"), squatter.socket_path, client="tests") as wakeups:
        wakeups.wait(0)
        assert wakeups.mode == "inotify"
    assert squatter.received() == ""
    assert "belongs to nobody" in capfd.readouterr().err


def test_the_check_is_offered_for_any_socket_relay_connects_to(squatter, short_tmp):
    with pytest.raises(peer.ForeignSocket) as refused:
        peer.connect(squatter.socket_path, 5)
    assert (refused.value.owner, refused.value.uid) == ("nobody", 65534)
    assert str(refused.value) == f"{squatter.socket_path} belongs to nobody (uid 65534), not to you: relay does not talk to another user's socket"

    import socket

    ours = str(short_tmp / "ours.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(ours)
        listener.listen()
        connected = peer.connect(ours, 5)
        connected.close()
    with pytest.raises(FileNotFoundError):
        peer.connect(str(short_tmp / "missing.sock"), 5)


@pytest.mark.slow
def test_a_wake_sends_nothing_to_another_users_gateway_socket(relay_env, squatter, store_dir):
    """The wake gateway's socket gets the same check as relayd's: the squatter's name there is
    refused before a byte goes out, and the wake still reaches the file layer."""
    import json

    (store_dir / "config.json").write_text(json.dumps({"wake": {"gateway_socket": squatter.socket_path}}))
    woke = run(relay_env, "wake", f"bd-42 done: {SECRET}")
    assert woke.returncode == 0, woke.stderr
    assert "woke via file" in woke.stdout
    assert f"{squatter.socket_path} belongs to nobody (uid 65534), not to you" in woke.stdout + woke.stderr
    assert squatter.received() == ""  # not even a connection
    assert SECRET in (store_dir / "wake" / "last-message").read_text()
    forced = run(relay_env, "wake", "--method", "socket", "again")
    assert forced.returncode == 1 and "belongs to nobody" in forced.stderr and squatter.received() == ""
