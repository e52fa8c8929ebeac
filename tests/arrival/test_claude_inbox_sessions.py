"""Two Claude Code sessions in one project, each a relay agent's, through relayd restarts
and a session restarted in its pane: each session's inbox gets its own agent's mail only,
each message once, and never the inbox of a session that has ended.

Each session is a real process in a pane of a real tmux server (started and respawned in
the project as a person does); its inbox is made as Claude Code 2.1.332 makes it for that
process (support.claude_session), and relay learns it from relay's own SessionStart hook,
run with the environment Claude Code gives its children. The real Claude Code's inbox is
in test_claude_inbox_real.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from support.claude_session import FakeSession
from support.relayd_proc import Daemon
from support.tmux_pane import Tmux
from support.waiting import wait_for

pytestmark = pytest.mark.slow  # relayd started three times, a tmux server, relayctl processes


# The session's process (a program, not a shell: relay takes a hook's nearest non-shell
# ancestor for its program): it waits until its inbox is made (a file named by its pid,
# holding the SessionStart event), runs relay's hook as its child with the inbox named in
# its environment, as Claude Code runs its hooks, and then stays, as the session does.
SESSION = """
import os, subprocess, sys, time
go = os.path.join(os.environ["GO"], str(os.getpid()))
while not os.path.exists(go):
    time.sleep(0.05)
env = {**os.environ, "CLAUDE_CODE_MESSAGING_SOCKET": os.path.join(os.environ["SOCKS"], f"{os.getpid()}.sock")}
with open(go) as event, open(go + ".out", "w") as out:
    rc = subprocess.run([sys.executable, "-m", "relayctl", "hook", "claude"], stdin=event, stdout=out, stderr=out, env=env).returncode
with open(go + ".rc", "w") as done:
    done.write(str(rc))
time.sleep(3600)
"""


class Pane:
    """One agent's pane: the session process running in it, and that process's inbox."""

    def __init__(self, root: Path, project: Path, agent: str, relay_env: dict[str, str]) -> None:
        self.root, self.project, self.agent = root, project, agent
        self.go = root / "go"
        self.go.mkdir(exist_ok=True)
        self.tmux = Tmux(root, agent)  # (one tmux server: every pane shares root/tmux.sock)
        env = {**relay_env, "RELAY_AGENT": agent, "CLAUDE_CONFIG_DIR": str(root / "claude"), "GO": str(self.go),
               "SOCKS": str(root / "run" / "cc-socks")}
        self.tmux.start([sys.executable, "-c", SESSION], cwd=project, env=env)
        self.session = self._inbox()

    def _pid(self) -> int:
        return int(self.tmux.run("display-message", "-p", "-t", self.agent, "#{pane_pid}") or 0)

    def _inbox(self) -> FakeSession:
        return FakeSession(self.root, pid=self._pid(), cwd=self.project)

    def restart(self) -> FakeSession:
        """A new session process in the same pane and directory; the old one's inbox is left
        listening, so that anything written to it shows."""
        old = self.session
        self.tmux.run("respawn-pane", "-k", "-t", self.agent)
        wait_for("the new process in the pane", lambda: self._pid() not in (0, old.pid))
        self.session = self._inbox()
        return old

    def session_start(self) -> None:
        """The session starts: relay's SessionStart hook runs (its child, in its pane) and tells relay its inbox."""
        pid = self.session.pid
        event = {"session_id": self.session.record["sessionId"], "transcript_path": None, "cwd": str(self.project),
                 "hook_event_name": "SessionStart", "source": "startup"}
        (self.go / f"{pid}.tmp").write_text(json.dumps(event))
        (self.go / f"{pid}.tmp").rename(self.go / str(pid))
        rc = wait_for(f"{self.agent}'s SessionStart hook", lambda: (self.go / f"{pid}.rc").exists() and (self.go / f"{pid}.rc").read_text().strip())
        assert rc == "0", (self.go / f"{pid}.out").read_text()

    def close(self) -> None:
        self.tmux.run("kill-session", "-t", self.agent)


def _mail(session: FakeSession) -> list[tuple[str, str]]:
    """(agent, relay id) of each relay message written into the session's inbox."""
    found = []
    for line in list(session.received):
        if line.get("type") == "user":
            head = re.match(r"relay mail for (\S+) from \S+ .*\(id (\S+)\)", line["message"]["content"])
            assert head, line
            found.append((head[1], head[2]))
    return found


@pytest.fixture
def panes(relayctl, short_tmp: Path, relay_env):
    project = short_tmp / "oathkeeper"
    project.mkdir()
    relayctl.setup("init")
    # Each message announced as it comes (no interrupt interval, relayd.arrival.budget): none
    # is held back past the moment a door could be the wrong one.
    (Path(relay_env["RELAY_DIR"]) / "config.json").write_text(json.dumps({"coordination": {"interrupt_interval": "0s"}}))
    relayctl.setup("register", name="sender")
    made = {name: Pane(short_tmp, project, name, relay_env) for name in ("alpha", "beta")}
    try:
        for pane in made.values():
            relayctl.setup("register", name=pane.agent, program="claude-code", notify=f"tmux:{pane.tmux.target()}")
        yield made
    finally:
        for pane in made.values():
            pane.session.close()
            pane.close()


def test_two_sessions_in_one_project_get_only_their_own_agents_mail_through_restarts(panes, relayctl, relay_env) -> None:
    alpha, beta = panes["alpha"], panes["beta"]
    for pane in (alpha, beta):
        pane.session_start()

    def send(to: str, text: str) -> str:
        sent = json.loads(relayctl("--json", "send", to, text, agent="sender").stdout)
        return (sent[0] if isinstance(sent, list) else sent)["id"]

    def arrived(pane: Pane, *ids: str) -> None:
        wait_for(f"{ids} in {pane.agent}'s session", lambda: {i for _, i in _mail(pane.session)} >= set(ids))

    daemon = Daemon(relay_env).start()
    try:
        first = {"alpha": send("alpha", "one for alpha"), "beta": send("beta", "one for beta")}
        arrived(alpha, first["alpha"])
        arrived(beta, first["beta"])
        daemon.stop()

        daemon = Daemon(relay_env).start()  # relayd restarted between sends: nothing written twice, nothing crossed
        second = {"alpha": send("alpha", "two for alpha"), "beta": send("beta", "two for beta")}
        arrived(alpha, second["alpha"])
        arrived(beta, second["beta"])

        relayctl.setup("read", agent="alpha", unread=True, mark_read=True)  # its model read what it was given
        old = alpha.restart()  # alpha's session restarted in its pane: a new process, a new inbox
        waited = send("alpha,beta", "three for both, while alpha's new session starts")
        arrived(beta, waited)  # relayd has announced it to alpha too (a send's recipients go in turn)
        daemon.stop()

        daemon = Daemon(relay_env).start()  # a relayd that starts while alpha's door is the ended session's
        alpha.session_start()  # the new session's hook: the mail that waited goes in now
        arrived(alpha, waited)
        last = {"alpha": send("alpha", "four for alpha"), "beta": send("beta", "four for beta")}
        arrived(alpha, last["alpha"])
        arrived(beta, last["beta"])
        shown = {a["name"]: a for a in relayctl.setup("status")["agents"]}
        assert [shown[n]["arrives_by"] for n in ("alpha", "beta")] == ["claude-inbox"] * 2 and not shown["alpha"].get("door_unusable")
    finally:
        daemon.stop()
    print("OLD", _mail(old), "NEW", _mail(alpha.session), waited); assert _mail(old) == [("alpha", first["alpha"]), ("alpha", second["alpha"])]  # never written to after it ended
    assert _mail(alpha.session) == [("alpha", waited), ("alpha", last["alpha"])]
    assert _mail(beta.session) == [("beta", first["beta"]), ("beta", second["beta"]), ("beta", waited), ("beta", last["beta"])]
    old.close()
