"""relayctl start-up: send, read --unread, heartbeat and status as whole processes (with
relayd up also set-status and the reservation commands a script runs around an edit, and,
with relayd up, the hook an agent program runs at every prompt), with relayd up (the fast path: one JSON line each way) and down (direct mode on the store), on
a regular install (`pip install .` into a scratch venv), next to that interpreter's
`python -c pass` with both absolute times (benchmarks/common.py cli_start)."""

from __future__ import annotations

import os
import shutil
import sys
import time

from .bench_daemon import Relayd
from .bench_store import _team
from .common import Row, child_env, cli_start, median_ms, scratch_dir

AREA = "startup"


def relayd_up(quick: bool) -> list[Row]:
    daemon = Relayd()
    try:
        commands = {
            "send": ["--agent", "storm", "send", "inferno", "hello from a script"],
            "read --unread": ["--agent", "inferno", "read", "--unread"],
            "heartbeat": ["--agent", "storm", "heartbeat"],
            "status": ["status"],
            "set-status": ["--agent", "storm", "set-status", "working"],
            # What a script runs around an edit: check, take, list, give back.
            "reserve --check": ["--agent", "storm", "reserve", "src/auth/**", "--check", "--repo", "/tmp"],
            "reserve": ["--agent", "storm", "reserve", "src/auth/**", "--repo", "/tmp"],
            "reservations": ["reservations"],
            "release": ["--agent", "storm", "release", "src/auth/**", "--repo", "/tmp"],
            # What Claude Code runs at every prompt (the mail it hands over, and a trigger
            # typed into the pane, wait for it): here with nothing unread, the usual case.
            "hook claude (UserPromptSubmit)": ["--agent", "storm", "hook", "claude"],
        }
        event = {"hook claude (UserPromptSubmit)": b'{"hook_event_name": "UserPromptSubmit", "prompt": "go on", "session_id": "s"}'}
        # DESIGN §6: a send within 2x the interpreter's start; what a script calls in a loop around
        # its edits (heartbeat, set-status, the reservation commands) within 1.5x.
        targets = {name: 1.5 if name in ("heartbeat", "set-status", "reserve --check", "reserve", "reservations", "release") else 2.0 for name in commands}
        # A Python client as plain as it gets: the same heartbeat request, one line each way
        # over the socket with the standard library. relayctl's fast path starts quicker than
        # that (it loads less than `socket` does, and skips the interpreter's teardown): what a
        # writing command takes beyond heartbeat is its operation's fsyncs (_inside_relayd).
        clients = {"reference: a bare stdlib client": (_BARE_CLIENT, "the interpreter, `socket` and one heartbeat request, its answer unread")}
        rows = cli_start(AREA, daemon.env, commands, targets, "relayd up", 10 if quick else 30, event, clients)
        rows += _inside_relayd(daemon, 20 if quick else 200)
    finally:
        daemon.close()
    return rows + _team_store(quick)


_BARE_CLIENT = (
    "import os, socket; s = socket.socket(socket.AF_UNIX); s.connect(os.environ['RELAY_SOCKET']); "
    "s.sendall(b'{\"type\":\"request\",\"id\":1,\"op\":\"heartbeat\",\"params\":{\"agent\":\"storm\"}}\\n'); s.recv(65536)"
)


def _team_store(quick: bool) -> list[Row]:
    """The same commands where `up`'s panes run them: a store other than ~/.relay, whose
    socket each command finds by the name relay gives it in $XDG_RUNTIME_DIR (a SHA-256 of
    the store's path), not given RELAY_SOCKET."""
    daemon = Relayd(runtime_dir=True)
    try:
        commands = {"send": ["--agent", "storm", "send", "inferno", "hello from a script"], "heartbeat": ["--agent", "storm", "heartbeat"]}
        return cli_start(AREA, daemon.env, commands, {"send": 2.0, "heartbeat": 1.5}, "relayd up, a team's store (socket found by name)", 10 if quick else 30)
    finally:
        daemon.close()


def _inside_relayd(daemon: Relayd, count: int) -> list[Row]:
    """What the writing commands' operations take inside relayd, one persistent client
    calling them in turn: the part of the whole process that is their durable writes."""
    from relayd.client.full import Client

    calls = {
        "heartbeat": ("heartbeat", {"agent": "storm"}),
        "set-status": ("set_status", {"agent": "storm", "status": "working"}),
        "reserve": ("reserve", {"agent": "storm", "pattern": "src/auth/**", "repo": "/tmp"}),
        "release": ("release", {"agent": "storm", "pattern": "src/auth/**", "repo": "/tmp"}),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    with Client(daemon.store, daemon.socket) as client:
        for _ in range(count):
            for name, (op, params) in calls.items():  # (interleaved: the same disk, the same load)
                start = time.perf_counter()
                client.call(op, params)
                times[name].append(time.perf_counter() - start)
    writes = {
        "heartbeat": "its heartbeat file replaced, nothing fsynced: the rest of the whole process is start-up and the socket",
        "set-status": "meta.json replaced: its new content fsynced before the rename, then the directory and the event log",
        "reserve": "the reservation file written: its content fsynced before its name, then the directory and the event log",
        "release": "the reservation file removed: the directory and the event log fsynced",
    }
    return [Row(AREA, f"  {name}'s operation inside relayd, one persistent client: median", round(median_ms(samples), 3), "ms", note=writes[name])
            for name, samples in times.items()]


def relayd_down(quick: bool) -> list[Row]:
    root = scratch_dir()
    try:
        store_dir = os.path.join(root, "store")
        _team(store_dir, ["alice", "bob"])
        env = child_env(store_dir)  # a socket nobody listens on: direct mode
        commands = {
            "send": ["--agent", "alice", "send", "bob", "hello from a script"],
            "read --unread": ["--agent", "bob", "read", "--unread"],
            "heartbeat": ["--agent", "alice", "heartbeat"],
            "status": ["status"],
        }
        # The records every command reads and writes on the store are msgspec structs, so a
        # command working on the store in its own process loads msgspec first: no such
        # command starts faster than this import (relayctl loads it the lean way, load_msgspec).
        floors = {"msgspec alone": ("from relayd import load_msgspec; load_msgspec()", "the import every command with relayd down makes before any of relay's store code")}
        return cli_start(AREA, env, commands, 2.5, "relayd down (direct, durable)", 5 if quick else 30, floors=floors)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[Row]:
    rows: list[Row] = []
    for bench in (relayd_up, relayd_down):
        print(f"  {bench.__name__} ...", file=sys.stderr, flush=True)
        rows.extend(bench(quick))
    return rows
