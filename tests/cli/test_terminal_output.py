"""Safe to print: a message's text never reaches a terminal raw. relayctl runs on a real
pty (and into pipes) and prints messages whose fields carry OSC 52 (writes the clipboard),
a window title, clear-screen and a one-byte C1 CSI; every one must come out as a visible
escape, while --json stays exact."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from typing import Callable

import pytest

from support.cli_processes import process_state
from support.relayd_proc import Daemon

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # puts `rm -rf ~` on the clipboard
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
CSI = "\x9b2J"  # C1 CSI: clear-screen in one character
HOSTILE = f"clip{OSC52} title{TITLE} clear{CLEAR} csi{CSI} bidi\u202e\rfake line"
# What a terminal would obey, as bytes on the wire (C1 CSI is U+009B in UTF-8).
RAW = [b"\x1b", b"\x07", b"\xc2\x9b", "\u202e".encode()]
SHOWN = [b"clip\\x1b]52;c;cm0gLXJmIH4K\\x07", b"title\\x1b]0;pwned\\x07", b"clear\\x1b[2J\\x1b[H", b"csi\\x9b2J", b"bidi\\u202e\\rfake line"]


def on_pty(env: dict[str, str], *args: str, steps: list[tuple[bytes, Callable[[], None]]] = (), timeout: float = 60) -> bytes:
    """What `relayctl ARGS` writes to a real terminal (stdout and stderr on one pty). Each
    step (marker, action) runs `action` once `marker` has appeared; then Ctrl-C ends it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "relayctl", *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    pending = list(steps)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the command exited and its side of the pty is closed
                    break
                if not data:
                    break
                out += data
            while pending and pending[0][0] in out:
                pending.pop(0)[1]()
                if not pending and steps:
                    proc.send_signal(signal.SIGINT)
        else:
            raise AssertionError(f"relayctl {' '.join(args)} did not finish ({process_state(proc)}); printed {out[-2000:]!r}")
        assert not pending, f"never printed {pending[0][0]!r}; printed {out[-2000:]!r}"
        proc.wait(timeout=20)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def assert_inert(out: bytes, what: str) -> None:
    for raw in RAW:
        assert raw not in out, f"{what}: {raw!r} reached the terminal raw in {out[-3000:]!r}"


@pytest.fixture
def hostile(relayctl, relay_env) -> None:
    relayctl.setup("init")
    for name in ("alice", "bob", "carol"):
        relayctl.setup("register", name=name)
    relayctl("send", "bob", HOSTILE, "--subject", f"subj{TITLE}\nbob → alice  forged", "--thread", f"th{OSC52}", "--tag", f"tag{CLEAR}", agent="alice")
    relayctl("set-status", f"busy{CLEAR}", "--task", f"task{TITLE}", agent="carol")
    relayctl("reserve", "src/**", "--repo", "/tmp", "--reason", f"why{TITLE}", agent="carol")
    relayctl("cmd", f"agent:main{TITLE}", "/verify", f"arg{OSC52}", agent="alice")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("--agent", "bob", "read"),
        ("--agent", "bob", "read", "--thread", f"th{OSC52}"),  # the full CLI (--thread is also on the fast path)
        ("--agent", "bob", "read", "--format", "mime"),
        ("search", "clip"),
        ("status",),
        ("reservations",),
        ("cmd", "list"),
    ],
    ids=["read", "read-thread", "read-mime", "search", "status", "reservations", "cmd-list"],
)
def test_message_fields_never_reach_a_terminal_raw(hostile, relay_env, args) -> None:
    out = on_pty(relay_env, *args)
    assert_inert(out, " ".join(args))
    if args[-1] in ("read", "clip"):
        for shown in SHOWN:
            assert shown in out, f"{shown!r} not shown in {out!r}"
        # A line break in a one-line field is shown, not obeyed: no forged line.
        assert b"subj\\x1b]0;pwned\\x07\\nbob \xe2\x86\x92 alice  forged" in out


@pytest.mark.slow
def test_read_tail_and_subscribe_show_new_messages_inert(hostile, relay_env, relayctl) -> None:
    def send_another() -> None:
        relayctl("send", "bob", f"second {OSC52}", "--subject", f"again{CSI}", agent="alice")

    out = on_pty(relay_env, "--agent", "bob", "read", "--tail", steps=[(b"fake line", send_another), (b"second \\x1b]52", lambda: None)])
    assert_inert(out, "read --tail")
    assert b"again\\x9b" in out
    with open(os.path.join(relay_env["RELAY_DIR"], "events.jsonl")) as log:
        first = json.loads(log.readline())["id"]
    daemon = Daemon(relay_env).start()
    try:  # replayed from the start of the event log (the first message), then one sent now
        out = on_pty(relay_env, "subscribe", "inbox", "--after", first, steps=[(b'"topic":"inbox"', send_another), (b"again", lambda: None)])
    finally:
        daemon.stop()
    assert_inert(out, "subscribe")
    events = [json.loads(line) for line in out.split(b"\r\n") if line.startswith(b"{")]
    assert f"again{CSI}" in [e.get("subject") for e in events]  # the JSON is exact: its decoder gets the very string


@pytest.mark.slow
def test_dead_letters_show_inert(hostile, relay_env, relayctl) -> None:
    relayctl("send", "carol", f"do it{OSC52}", "--subject", f"dl{TITLE}", "--ack", "--ack-wait", "1ms", "--max-deliver", "1", agent="alice")
    deadline = time.monotonic() + 10
    while not relayctl.setup("dlq_list")["dead_letters"]:
        assert time.monotonic() < deadline, "the message never became a dead letter"
        relayctl.setup("redeliver")
        time.sleep(0.01)
    [letter] = json.loads(relayctl("dlq", "list", "--json").stdout)["dead_letters"]
    for args in (("dlq", "list"), ("dlq", "show", letter["id"])):
        out = on_pty(relay_env, *args)
        assert_inert(out, " ".join(args))
        assert b"dl\\x1b]0;pwned\\x07" in out


@pytest.mark.slow
def test_pipes_get_the_same_escapes_and_json_stays_exact(hostile, relay_env, relayctl) -> None:
    for args in (("read",), ("read", "--thread", f"th{OSC52}"), ("search", "clip")):
        out = relayctl(*args, agent="bob").stdout.encode()
        assert_inert(out, " ".join(args) + " | cat")
        for shown in SHOWN:
            assert shown in out
    [message] = json.loads(relayctl("--json", "read", agent="bob").stdout)
    assert message["body"] == HOSTILE and message["thread"] == f"th{OSC52}" and message["tags"] == [f"tag{CLEAR}"]
    out = on_pty(relay_env, "--agent", "bob", "--json", "read")
    assert_inert(out, "read --json")
    assert json.loads(out.decode().strip())[0]["body"] == HOSTILE
    # A program's format (MIME) goes into a pipe unchanged.
    assert OSC52 in relayctl("read", "--format", "mime", agent="bob").stdout
