"""`relayctl up` and `relayctl down`: the steps, in order, for a loaded Team.

up:   the agents' programs checked (all installed, or nothing starts) -> with --trust, the
      repository recorded as trusted in each program's settings (trust.py) ->
      store (init) -> agents registered (program, model, task; the lead gets escalations)
      -> relayd started unless one serves the store -> the pre-commit guard in the team's
      repository (when it is a git work tree) -> one pane per agent (client configuration
      written, identity in the environment), registered as the agent's notify target ->
      each new pane watched until its program is ready or has exited, the start-up
      questions relay's configuration causes answered, a folder trust question named.
      Run again, it starts only what is missing and restarts panes whose program exited.
down: the session's panes and the session stopped, their processes gone; the relayd that
      `up` started stopped; notify targets cleared (nobody types into a pane that is gone).
      The store keeps everything.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Callable

from relayd import guard, layout
from relayd.errors import UsageError
from relayctl.context import installed_command

from . import clients
from .teamfile import Team
from .trust import record

PROMPT_WAIT = 40.0  # seconds to watch new panes until their program is ready
PERSON_WAIT = 300.0  # seconds to keep watching while a pane waits at the person's own question
COMMAND_SETTLE = 1.0  # seconds a command (not a known agent program) must run to count as started
LAST_LINES = 5  # of a dead pane, shown
SETTLE = 0.5  # seconds a question stays on the screen before it is answered
ANSWERED_AGAIN = 3.0  # seconds after which a question still shown is answered again
ANSWERS = 3  # at most, per question


class ProgramsMissing(UsageError):
    """Agents whose program is not installed: one line each (nothing was started)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(f"{len(lines)} agent program{'s' if len(lines) != 1 else ''} not installed; nothing was started")
        self.lines = lines


def state_dir(store_dir: str, team: Team) -> str:
    return os.path.join(store_dir, layout.TEAMS, team.name)


def require_multiplexer(team: Team) -> None:
    """Refuse before anything is written or started: without its multiplexer `up` would
    otherwise create the store, register the agents and leave a relayd running for a team
    it cannot start."""
    if team.multiplexer == "zellij":
        # deferred imports: only one multiplexer's module (zellij or tmux) loads, and the store and
        # client only for bring-up
        from .zellij import NOT_INSTALLED
    else:
        from .tmux import NOT_INSTALLED
    if shutil.which(team.multiplexer) is None:
        raise UsageError(NOT_INSTALLED)


def bring_up(s, team: Team, say: Callable[[str], None], prompt_wait: float = PROMPT_WAIT, person_wait: float = PERSON_WAIT,
             trust: bool = False) -> dict:
    require_multiplexer(team)
    missing = clients.missing_programs(team)
    if missing:
        raise ProgramsMissing(missing)
    for warning in dict.fromkeys(filter(None, map(clients.version_warning, team.agents))):  # once a program
        say(f"warning: {warning}")
    if trust:
        for line in record(team):
            say(line)
    store_dir = s.dir
    socket = os.path.abspath(s.socket) if s.socket else None
    s.call("init", {})
    for agent in team.agents:
        program = agent.program if agent.kind != "command" else os.path.basename(agent.program.split()[0])
        s.call("register", {"name": agent.name, "program": program, "model": agent.model, "task": agent.task})
    if team.delivery:
        from relayd.upkeep.admin import set_delivery
        from relayd.store import Store

        with Store(store_dir) as store:
            set_delivery(store, team.delivery)
    if team.budget or any(agent.budget for agent in team.agents):
        from relayd.upkeep.admin import set_coordination
        from relayd.store import Store

        with Store(store_dir) as store:
            set_coordination(store, team.budget, {agent.name: agent.budget for agent in team.agents if agent.budget})
    if team.lead:
        from relayd.upkeep.admin import set_escalation_agent
        from relayd.store import Store

        with Store(store_dir) as store:
            chosen = set_escalation_agent(store, team.lead.name)
        if chosen != team.lead.name:
            say(f"dead letters keep escalating to {chosen} (delivery.escalate_to in config.json), not the lead {team.lead.name}")
    state = state_dir(store_dir, team)
    os.makedirs(state, mode=0o700, exist_ok=True)
    daemon = _ensure_relayd(s, state)
    say(f"relayd: {daemon}")
    guard = _guard(team, store_dir)
    if guard:
        say(guard)

    if team.multiplexer == "zellij":
        from .zellij import bring_up as zellij_up

        return zellij_up(team, store_dir, socket, state, say) | {"relayd": daemon}

    from .tmux import TmuxTeam

    session = TmuxTeam(team.name)
    existing = session.panes()
    outcome: dict[str, str] = {}
    fresh: list[tuple[object, str]] = []  # (agent, pane id) of panes whose program just started
    for agent in team.agents:
        argv = clients.launch(agent, team, store_dir, socket, state)
        env = clients.pane_env(agent, team, store_dir, socket)
        pane = existing.get(agent.name)
        if pane is not None and not pane.dead:
            outcome[agent.name] = "running"
            pane_id = pane.pane_id
        elif pane is not None:
            session.respawn(pane, argv, env, team.repo)
            outcome[agent.name] = "restarted"
            pane_id = pane.pane_id
            fresh.append((agent, pane_id))
        else:
            pane_id = session.start(agent.name, argv, env, team.repo)
            outcome[agent.name] = "started"
            fresh.append((agent, pane_id))
        # One arrival mechanism per agent: relay-mcp's push, relay's OpenCode plugin, or a
        # trigger typed into the pane.
        arrival = clients.arrival(agent)
        target = arrival if arrival in ("channel", "hook") else f"tmux:{session.socket_path()}:{pane_id}"
        s.call("register", {"name": agent.name, "notify": target})
        say(f"{agent.name:<16} {outcome[agent.name]:<10} pane {pane_id}  ({agent.program})")
        passed = clients.passed_settings(agent)
        if passed and outcome[agent.name] != "running":
            say(f"{'':<16} from your shell: {', '.join(passed)}")  # names only, never values
    problems, failed = _watch_panes(session, team, fresh, say, prompt_wait, person_wait) if fresh else ([], False)
    say(f"attach with: tmux attach -t {team.name}    stop with: relayctl down")
    return {"team": team.name, "session": team.name, "agents": outcome, "relayd": daemon, "problems": problems, "failed": failed}


def take_down(s, team: Team, say: Callable[[str], None]) -> dict:
    store_dir = s.dir
    state = state_dir(store_dir, team)
    stopped: list[str] = []
    if team.multiplexer == "zellij":
        from .zellij import take_down as zellij_down

        zellij_down(team, state)
    else:
        from .tmux import TmuxTeam

        session = TmuxTeam(team.name)
        panes = session.panes()
        groups = [p.pid for p in panes.values() if p.pid and not p.dead]
        session.kill()
        _wait_gone(groups)
        stopped = sorted(panes)
    names = {agent.name for agent in team.agents}
    for state_of in s.call("agents", {}):
        if state_of["name"] not in names:
            continue
        if str(state_of.get("notify") or "").partition(":")[0] in ("tmux", "zellij"):
            s.call("register", {"name": state_of["name"], "notify": "none"})
        s.call("program_state", {"agent": state_of["name"], "state": "stopped", "event": "relayctl down"})  # away now, not in 5 minutes
    daemon = _stop_relayd(state)
    say(f"stopped {team.name}: {', '.join(stopped) or 'no panes were running'}; relayd: {daemon}")
    return {"team": team.name, "stopped": stopped, "relayd": daemon}


# -- relayd ---------------------------------------------------------------------------------


def _ensure_relayd(s, state: str) -> str:
    from relayd.client.full import Client

    def serving() -> bool:
        with Client(s.dir, s.socket) as client:
            client.call("version")
            return client.mode == "daemon"

    if serving():
        return "already running"

    argv = [*installed_command("relayd", "relayd.daemon"), "--dir", s.dir]
    if s.socket:
        argv += ["--socket", os.path.abspath(s.socket)]
    with open(os.path.join(state, "relayd.log"), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 15
    while not serving():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise UsageError(f"relayd did not start (exit {proc.poll()}); see {os.path.join(state, 'relayd.log')}")
        time.sleep(0.05)
    with open(os.path.join(state, "relayd.pid"), "w") as fh:
        fh.write(f"{proc.pid}\n")
    return f"started (pid {proc.pid}, log {os.path.join(state, 'relayd.log')})"


def _stop_relayd(state: str) -> str:
    """Stop the relayd that `up` started (a relayd someone else runs is theirs)."""
    path = os.path.join(state, "relayd.pid")
    try:
        with open(path) as file:
            pid = int(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return "left as it was (not started by relayctl up)"
    os.unlink(path)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if b"relayd" not in fh.read():
                return "already stopped"
        os.kill(pid, signal.SIGTERM)
    except OSError:  # no such file, or the process gone as it was read (ESRCH)
        return "already stopped"
    _wait_gone([pid])
    return f"stopped (pid {pid})"


def _wait_gone(pids: list[int], timeout: float = 10.0) -> None:
    """Wait for processes to exit; what is left at the deadline gets SIGKILL (with its group)."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if _alive(pid)]
        time.sleep(0.05)
    for pid in left:
        for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass


def _alive(pid: int) -> bool:
    # A process being reaped as it is read answers ESRCH (ProcessLookupError), not ENOENT:
    # either way it is gone (an uncaught one made `down` fail with an internal error).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# -- the guard ---------------------------------------------------------------------------------


def _guard(team: Team, store_dir: str) -> str | None:
    try:
        done = guard.install(team.repo, store_dir)
    except UsageError as exc:  # not a git work tree, or hooks relay must not write (guard._check_hooks_dir)
        return f"no pre-commit guard: {exc.message}"
    return f"pre-commit guard: {done['hook']}" + (f" (chained: {done['chained']})" if done["chained"] else "")


# -- watching the new panes --------------------------------------------------------------------


class _Pane:
    """What `up` knows of one new pane while it watches it."""

    def __init__(self, agent, pane_id: str, started: float) -> None:
        self.agent, self.pane_id, self.started = agent, pane_id, started
        self.state = "starting"  # then "ready", "dead", or "asking" (the person's question on the screen)
        self.said: set[str] = set()  # the person's questions named so far
        self.asking = None  # the person's question on the screen (a relayd.programs Question)
        self.window = started  # the start window runs from here: the start, or the person's last answer
        self.asked_at: float | None = None  # when it began to wait at the person's question on the screen
        self.prompt_since: float | None = None  # when its prompt showed, with no question, since
        self.last_screen = ""


def _watch_panes(session, team: Team, fresh: list[tuple[object, str]], say: Callable[[str], None], start_wait: float,
                 person_wait: float, clock: Callable[[], float] = time.monotonic) -> tuple[list[str], bool]:
    """Watch each new pane until its program is ready for a prompt or has exited, answering
    on the way the questions relay's own configuration makes it ask (clients.startup_prompts),
    in whatever order they come. The person's questions at a first start (folder trust, and
    the others of `Screen.first_start`) are named, with what to do, never answered; while one
    waits, `up` keeps watching (up to `person_wait` seconds), and once it is answered the
    pane gets its whole start window again, so that relay's own question after it (Codex's
    hook review) is answered however late the person answers.
    The problems found, one line each (a pane whose program exited, a relay question left
    unanswered, a pane not ready in time), and whether a pane's program exited (`up` fails)."""
    panes = [_Pane(agent, pane_id, clock()) for agent, pane_id in fresh]
    waiting = {(pane, q.text): q for agent, pane in fresh for q in clients.startup_prompts(agent, team)}
    seen: dict[tuple[str, str], float] = {}
    sent: dict[tuple[str, str], list[float]] = {}
    while True:
        now = clock()
        open_panes = [p for p in panes if p.state in ("starting", "asking")]
        if not open_panes:
            break
        if all(now > p.asked_at + person_wait if p.state == "asking" else now > p.window + start_wait for p in open_panes):
            break  # each pane past its start window, or waiting at the person's question for `person_wait`
        for p in open_panes:
            dead, status = session.exit_status(p.pane_id)
            screen = session.capture(p.pane_id)
            p.last_screen = screen or p.last_screen
            if dead:
                p.state, p.status = "dead", status
                for _ in range(20):  # tmux may mark the pane dead before it has drawn the program's last output
                    if any(line.strip() and not line.startswith("Pane is dead") for line in p.last_screen.splitlines()):
                        break
                    time.sleep(0.05)
                    p.last_screen = session.capture(p.pane_id, history=200) or p.last_screen
                continue
            _answer(session, p.pane_id, screen, waiting, seen, sent, now)
            spec = clients.program_of(p.agent)
            if spec is None or not spec.screen.ready:  # any other command: running a moment after its start is all there is to see
                if now - p.started >= COMMAND_SETTLE:
                    p.state = "ready"
                continue
            asking = next((q for q in spec.screen.first_start if q.text in screen), None)
            if asking is not None:
                if asking.text not in p.said:
                    say(_named(p, spec, asking, team, person_wait))
                    p.said.add(asking.text)
                if p.state != "asking":
                    p.asked_at = now
                p.state, p.asking, p.prompt_since = "asking", asking, None
                continue
            if p.state == "asking":
                p.window = now  # answered: the program starts now, and relay's own questions may follow
            p.asking, p.asked_at = None, None
            # A question relay expects may come after the prompt is drawn (Codex shows its hook
            # review over its prompt): ready only once none is still to come or on the screen;
            # and a program that draws its own first-start question after its prompt (Gemini's
            # folder trust) is ready only once its prompt has stood `Screen.late` seconds alone.
            pending = any(key[0] == p.pane_id and (key[1] in screen or question.expected) for key, question in waiting.items())
            prompt = any(mark in screen for mark in spec.screen.ready)
            p.prompt_since = (p.prompt_since if p.prompt_since is not None else now) if prompt else None
            if prompt and not pending and now - p.prompt_since >= spec.screen.late:
                p.state = "ready"
            else:
                p.state = "starting"
        time.sleep(0.2)
    problems = []
    for p in panes:
        if p.state == "dead":
            last = [line for line in p.last_screen.splitlines() if line.strip() and not line.startswith("Pane is dead")][-LAST_LINES:]
            problems.append(f"{p.agent.name} (pane {p.pane_id}): {clients.executable(p.agent)} exited ({p.status}); it last showed: "
                            + (" | ".join(line.strip() for line in last) or "nothing"))
        elif p.state == "asking" and p.asking is not None and p.asking.trust:
            problems.append(f"{p.agent.name} (pane {p.pane_id}) still waits at its folder trust question: answer it there")
        elif p.state == "asking":
            problems.append(f"{p.agent.name} (pane {p.pane_id}) still waits at the question {p.asking.question!r}: answer it there")
        elif p.state == "starting":
            problems.append(f"{p.agent.name} (pane {p.pane_id}) showed no prompt within {int(start_wait)} s; it shows: "
                            + " | ".join(line.strip() for line in p.last_screen.splitlines() if line.strip())[-300:])
        said = clients.signed_out(p.agent, p.last_screen) if p.state != "dead" else None
        if said:
            problems.append(f"{p.agent.name} (pane {p.pane_id}): {clients.executable(p.agent)} says {said!r}: it is not signed in; "
                            f"sign in there, or export its key ({', '.join(clients.program_of(p.agent).launch.reads[:2])}) in the shell "
                            "and start the team again from it (relayctl down, then relayctl up)")
    for (pane_id, text), question in waiting.items():
        if question.expected and (pane_id, text) in seen:
            problems.append(f"pane {pane_id} still shows {text!r}: answer it there")
    return problems, any(p.state == "dead" for p in panes)


def _named(p: _Pane, spec, question, team: Team, person_wait: float) -> str:
    """What `up` says of a pane waiting at the person's question: which, and what to do."""
    watching = f"watching for up to {int(person_wait)} s to answer relay's own questions after it"
    if question.trust:
        return (f"{p.agent.name} (pane {p.pane_id}) waits at {spec.title}'s folder trust question, {question.question!r}: "
                f"that answer is yours. Answer it in the pane (tmux attach -t {team.name}), or stop the team and start it "
                f"with `relayctl up --trust`; {watching}")
    return (f"{p.agent.name} (pane {p.pane_id}) waits at {spec.title}'s question {question.question!r}: that answer is yours"
            + (f" ({question.advice})" if question.advice else "") + f". Answer it in the pane (tmux attach -t {team.name}); {watching}")


def _answer(session, pane_id: str, screen: str, waiting: dict, seen: dict, sent: dict, now: float) -> None:
    """Answer relay's questions on this pane's screen. A question is answered once it has
    stayed on the screen for SETTLE seconds (a program draws a dialog before it reads keys),
    and again if it is still there ANSWERED_AGAIN seconds later (keys a busy program
    dropped), at most ANSWERS times; gone from the screen after an answer, it is done."""
    for key, question in list(waiting.items()):
        if key[0] != pane_id:
            continue
        if key[1] not in screen:
            if key in sent:
                del waiting[key]
            seen.pop(key, None)
            continue
        seen.setdefault(key, now)
        times = sent.setdefault(key, [])
        due = seen[key] + SETTLE if not times else times[-1] + ANSWERED_AGAIN
        if now >= due and len(times) < ANSWERS:
            session.send_keys(pane_id, *question.keys)
            times.append(now)
