"""`relayctl up` / `down` with a team file: real tmux, real relayd, real git; zellij through
a recording stub (no zellij binary can be installed here)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from relayd import layout
from support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TRIGGER = "relay-test: new mail, call check_inbox"

# Each agent's "program": records who it runs as, then every line it is sent, in OUT/<agent>.
AGENT_PROGRAM = """
import os, sys
out = open(os.path.join(sys.argv[1], os.environ["RELAY_AGENT"]), "a", buffering=1)
out.write("started as " + os.environ["RELAY_AGENT"] + " in " + os.getcwd() + "\\n")
while True:
    try:
        out.write(input("> ") + "\\n")
    except EOFError:
        break
"""


class Team:
    def __init__(self, root: Path, relay_env: dict[str, str], relayctl) -> None:
        self.root = root
        self.out = root / "out"
        self.out.mkdir()
        self.repo = root / "repo"
        self.repo.mkdir()
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
        program = root / "agent.py"
        program.write_text(AGENT_PROGRAM)
        self.file = root / "relay-team.toml"
        command = f"{sys.executable} {program} {self.out}"
        self.file.write_text(
            'team = "crew"\nrepo = "repo"\n'
            + "".join(f'\n[[agents]]\nname = "{name}"\nprogram = "{command}"\ntask = "task of {name}"\n' + ("lead = true\n" if name == "alpha" else "")
                      for name in ("alpha", "beta", "gamma"))
        )
        self.env = dict(relay_env, TMUX_TMPDIR=str(root))  # a tmux server of this test's own
        self.env.pop("TMUX", None)
        relayctl.env = self.env
        self.relayctl = relayctl

    def tmux(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True, timeout=30)
        if check and done.returncode:
            raise AssertionError(f"tmux {args}: {done.stderr}")
        return done.stdout

    def panes(self) -> dict[str, tuple[str, str, str]]:
        """agent -> (pane id, dead flag, pane pid)"""
        out = self.tmux("list-panes", "-s", "-t", "=crew:", "-F", "#{@relay_agent} #{pane_id} #{pane_dead} #{pane_pid}")
        return {agent: (pane, dead, pid) for agent, pane, dead, pid in (line.split() for line in out.splitlines())}

    def received(self, agent: str) -> list[str]:
        path = self.out / agent
        return path.read_text().splitlines() if path.exists() else []

    def files(self) -> dict[str, bytes]:
        """Every file and folder of the repository with its bytes (git's own objects aside)."""
        skip = (".git/objects", ".git/logs", ".git/index", ".git/refs")
        return {str(p.relative_to(self.repo)): (b"<dir>" if p.is_dir() else p.read_bytes()) for p in sorted(self.repo.rglob("*"))
                if not str(p.relative_to(self.repo)).startswith(skip)}

    def git_status(self) -> str:
        return subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=self.repo, capture_output=True, text=True, check=True).stdout

    def agents(self) -> dict[str, dict]:
        return {a["name"]: a for a in json.loads(self.relayctl("--json", "status").stdout)["agents"]}


@pytest.fixture
def team(short_tmp: Path, relay_env: dict[str, str], relayctl):
    crew = Team(short_tmp, relay_env, relayctl)
    try:
        yield crew
    finally:
        crew.relayctl("down", str(crew.file), check=False)
        crew.tmux("kill-server", check=False)


def _processes_of(store_dir: Path) -> list[str]:
    """Processes whose environment or command line names this test's store."""
    found = []
    marker = str(store_dir).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in cmdline or marker + b"\0" in environ:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:120]
            found.append(f"{pid}: {shown}")
    return found


def test_up_starts_one_registered_pane_per_agent_and_down_leaves_no_process(team: Team, relayctl, store_dir: Path) -> None:
    team.file.write_text(team.file.read_text().replace('repo = "repo"\n', 'repo = "repo"\nheld_after = "45s"\nheld_notice_after = "20m"\nloop_messages = 8\n', 1)
                         .replace('name = "beta"\n', 'name = "beta"\ninterrupt_interval = "2m"\n', 1))
    started = relayctl("up", str(team.file))
    assert "attach with: tmux attach -t crew" in started.stdout
    panes = team.panes()
    assert sorted(panes) == ["alpha", "beta", "gamma"] and all(dead == "0" for _, dead, _ in panes.values())
    for name in panes:  # each pane runs its agent, in the team's repository
        assert wait_for(f"{name}'s program", lambda: team.received(name), timeout=30)[0] == f"started as {name} in {team.repo}"

    socket = team.tmux("display-message", "-p", "-t", "crew", "#{socket_path}").strip()
    agents = team.agents()
    for name, (pane, _, _) in panes.items():
        assert agents[name]["notify"] == f"tmux:{socket}:{pane}" and agents[name]["task"] == f"task of {name}"
    delivery = json.loads((store_dir / "config.json").read_text())["delivery"]
    assert (delivery["escalate_to"], delivery["held_after"], delivery["held_notice_after"]) == ("alpha", "45s", "20m")
    in_force = {a["name"]: a for a in relayctl.setup("budget")["agents"]}  # the team file's coordination budget
    assert (in_force["beta"]["interrupt_interval"], in_force["beta"]["loop_messages"], in_force["alpha"]["interrupt_interval"]) == ("2m", 8, "30s")
    assert "relayd: running" in relayctl("status").stdout
    assert "relay guard" in (team.repo / ".git" / "hooks" / "pre-commit").read_text()

    (store_dir / "config.json").write_text(json.dumps({**json.loads((store_dir / "config.json").read_text()), "notify": {"trigger": TRIGGER}}))
    relayctl("register", "boss")
    relayctl("send", "beta", "SECRET-BODY", agent="boss")
    wait_for("the trigger in beta's pane", lambda: TRIGGER in team.received("beta"), timeout=30)
    assert TRIGGER not in team.received("alpha") + team.received("gamma")

    status = relayctl("status").stdout
    assert all(f"pane {panes[name][0]} live" in status for name in panes), status

    down = relayctl("down", str(team.file))
    assert "stopped crew" in down.stdout
    assert team.tmux("has-session", "-t", "crew", check=False) == "" and not team.tmux("list-sessions", check=False).strip()
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=15)
    assert all(a["notify"] == "none" for a in team.agents().values() if a["name"] != "boss")
    stopped = team.agents()
    assert not any(stopped[name]["alive"] for name in panes), stopped  # away at once, not in 5 minutes
    assert json.loads(relayctl("--json", "read", agent="beta").stdout)[0]["body"] == "SECRET-BODY"  # the store keeps it


def test_up_and_down_run_in_a_tmux_window_named_like_the_team_act_on_the_team_session(team: Team, store_dir: Path) -> None:
    """relayctl run in a pane, as people run it, in a window named after the project (and so
    like the team): tmux took `=crew` for that window, a second `up` started every agent
    again and `down` stopped none of them."""
    team.tmux("new-session", "-d", "-s", "work", "-n", "crew", "-x", "200", "-y", "50", "-c", str(team.root), "sh")
    [(shell_pane, shell_pid, server_pid)] = [line.split() for line in team.tmux("list-panes", "-s", "-t", "=work:", "-F", "#{pane_id} #{pane_pid} #{pid}").splitlines()]
    runs = iter(range(100))

    def in_pane(*args: str) -> tuple[int, str]:
        step = team.root / f"step-{next(runs)}"
        team.tmux("send-keys", "-t", shell_pane, "-l", f"{shlex.join([sys.executable, '-m', 'relayctl', *args])} >{step}.out 2>&1; echo $? >{step}.rc\n")
        code = wait_for(f"relayctl {' '.join(args)} in the pane", lambda: (step.with_suffix(".rc").exists() and step.with_suffix(".rc").read_text().strip()), timeout=120)
        return int(code), step.with_suffix(".out").read_text()

    code, said = in_pane("up", str(team.file))
    assert code == 0, said
    panes = team.panes()
    assert sorted(panes) == ["alpha", "beta", "gamma"], panes
    for name in panes:
        wait_for(f"{name}'s program", lambda: team.received(name), timeout=30)
    code, said = in_pane("up", str(team.file))
    assert code == 0, said
    assert [line.split()[:2] for line in said.splitlines() if line.split()[:1] in (["alpha"], ["beta"], ["gamma"])] == [
        ["alpha", "running"], ["beta", "running"], ["gamma", "running"]], said
    assert team.panes() == panes  # nothing doubled, nothing restarted
    assert all(team.received(name).count(f"started as {name} in {team.repo}") == 1 for name in panes)
    socket = team.tmux("display-message", "-p", "-t", "=crew:", "#{socket_path}").strip()
    assert {name: a["notify"] for name, a in team.agents().items()} == {name: f"tmux:{socket}:{pane}" for name, (pane, _, _) in panes.items()}
    code, said = in_pane("status")
    assert code == 0 and all(f"pane {panes[name][0]} live" in said for name in panes), said

    code, said = in_pane("down", str(team.file))
    assert code == 0 and "stopped crew: alpha, beta, gamma;" in said, said
    assert team.tmux("has-session", "-t", "=crew:", check=False) == "" and team.tmux("list-sessions", "-F", "#{session_name}").split() == ["work"]
    assert team.tmux("list-panes", "-s", "-t", "=work:", "-F", "#{pane_id} #{window_name}").split() == [shell_pane, "crew"]  # the person's own window stays
    ours = (f"{shell_pid}:", f"{server_pid}:")  # the person's shell and the tmux server, both started with this test's store in their environment
    wait_for("every process of the team to end", lambda: [p for p in _processes_of(store_dir) if not p.startswith(ours)] == [], timeout=15)


def test_up_again_restarts_only_the_panes_whose_program_exited(team: Team, relayctl) -> None:
    relayctl("up", str(team.file))
    before = team.panes()
    for name in before:
        wait_for(f"{name}'s program", lambda: team.received(name), timeout=30)
    team.tmux("send-keys", "-t", before["beta"][0], "C-d")  # beta's program exits
    wait_for("beta's pane to be dead", lambda: team.panes()["beta"][1] == "1", timeout=30)

    again = relayctl("up", str(team.file))
    assert [line.split()[:2] for line in again.stdout.splitlines() if line.split()[:1] in (["alpha"], ["beta"], ["gamma"])] == [
        ["alpha", "running"], ["beta", "restarted"], ["gamma", "running"]]
    after = team.panes()
    assert after["alpha"] == before["alpha"] and after["gamma"] == before["gamma"]  # untouched: same pane, same process
    assert after["beta"][0] == before["beta"][0] and after["beta"][1] == "0"
    wait_for("beta's program to start again", lambda: team.received("beta").count("started as beta in " + str(team.repo)) == 2, timeout=30)


def test_up_without_tmux_says_so_in_one_line_and_starts_nothing(team: Team, relayctl, store_dir: Path) -> None:
    bin_dir = team.root / "bin-without-tmux"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))  # the guard's git is there; tmux is not
    path = team.env["PATH"]
    team.env["PATH"] = str(bin_dir)
    try:
        done = relayctl("up", str(team.file), check=False)
        zellij_file = team.root / "zellij-team.toml"
        zellij_file.write_text(team.file.read_text().replace('repo = "repo"\n', 'repo = "repo"\nmultiplexer = "zellij"\n', 1))
        no_zellij = relayctl("up", str(zellij_file), check=False)
    finally:
        team.env["PATH"] = path
    assert done.returncode != 0
    assert done.stderr.splitlines() == ['error: tmux is not installed (not on PATH); install it, or set multiplexer = "zellij"']
    assert no_zellij.returncode != 0
    assert no_zellij.stderr.splitlines() == ['error: zellij is not installed (not on PATH); install it, or set multiplexer = "tmux"']
    # Refused before anything happened: no store, no relayd, no hook in the repository.
    assert not store_dir.exists()
    assert _processes_of(store_dir) == []
    assert not (team.repo / ".git" / "hooks" / "pre-commit").exists()


def test_team_file_mistakes_are_one_line_errors(relayctl, short_tmp: Path) -> None:
    cases = {
        "team = 'x'\n[[agents]]\nname = 'a'\nprogram = 'sh'\ncolour = 'red'\n": "unknown key 'colour'",
        "team = 'x'\n[[agents]]\nname = 'a'\nprogram = 'sh'\n[[agents]]\nname = 'a'\nprogram = 'sh'\n": "listed twice",
        "team = 'x'\n[[agents]]\nname = 'a'\nprogram = 'sh'\nlead = true\n[[agents]]\nname = 'b'\nprogram = 'sh'\nlead = true\n": "only one agent can be the lead",
        "team = 'x y'\n[[agents]]\nname = 'a'\nprogram = 'sh'\n": "team must be a name",
        "team = 'x'\n": "no agents",
        "team = 'x'\n[[agents]]\nname = 'A!'\nprogram = 'sh'\n": "invalid name of agents entry 1",
        "team = 'x'\nmultiplexer = 'screen'\n[[agents]]\nname = 'a'\nprogram = 'sh'\n": "multiplexer must be one of tmux, zellij",
        "team = [\n": "not valid TOML",
        "team = 'x'\nheld_after = 'soon'\n[[agents]]\nname = 'a'\nprogram = 'sh'\n": "held_after must be a duration such as",
        "team = 'x'\nloop_messages = 0\n[[agents]]\nname = 'a'\nprogram = 'sh'\n": "loop_messages must be a whole number of at least 1",
        "team = 'x'\n[[agents]]\nname = 'a'\nprogram = 'sh'\ninterrupt_interval = 'often'\n": "agent a: interrupt_interval must be a duration",
    }
    path = short_tmp / "team.toml"
    for text, said in cases.items():
        path.write_text(text)
        done = relayctl("up", str(path), check=False)
        assert done.returncode != 0 and said in done.stderr and len(done.stderr.splitlines()) == 1, (text, done.stderr)
    missing = relayctl("up", str(short_tmp / "nowhere.toml"), check=False)
    assert missing.returncode != 0 and "relayctl up --preset overlord" in missing.stderr
    unwritable = relayctl("up", "--preset", "overlord", str(short_tmp / "no-such-dir" / "team.toml"), check=False)
    assert unwritable.returncode == 1 and unwritable.stderr.startswith("error: cannot write") and len(unwritable.stderr.splitlines()) == 1


def test_presets_write_a_team_file_that_up_reads(relayctl, short_tmp: Path) -> None:
    from relayctl.team.teamfile import load

    path = short_tmp / "relay-team.toml"
    relayctl("up", str(path), "--preset", "overlord")
    team = load(str(path))
    assert [a.name for a in team.agents] == ["overlord", "strategist", "inferno", "glacier", "shadow", "storm"]
    assert {a.program for a in team.agents} == {"claude"} and team.lead.name == "overlord" and team.name == "overlord"
    refused = relayctl("up", str(path), "--preset", "ignite", check=False)
    assert refused.returncode != 0 and "--force" in refused.stderr
    relayctl("up", str(path), "--preset", "ignite", "--workers", "2", "--team", "fire", "--force")
    team = load(str(path))
    assert team.name == "fire" and team.lead.name == "leader" and [a.name for a in team.agents][-2:] == ["ignitian_1", "ignitian_2"]


def test_zellij_team_through_the_recording_stub(relayctl, relay_env: dict[str, str], short_tmp: Path, store_dir: Path) -> None:
    """The layout's pane scripts run for real (sh, as zellij would start them); zellij itself
    is a recording stub. Run again, `up` opens a new pane only for the agent whose program
    is not running."""
    bin_dir = short_tmp / "bin"
    bin_dir.mkdir()
    log = short_tmp / "zellij.log"
    stub = bin_dir / "zellij"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    (bin_dir / "claude").write_text("#!/bin/sh\nsleep 120\n")  # beta's program: installed, as `up` checks first
    (bin_dir / "claude").chmod(0o755)
    relayctl.env = dict(relay_env, PATH=f"{bin_dir}:{relay_env['PATH']}")
    team_file = short_tmp / "team.toml"
    team_file.write_text('team = "zteam"\nmultiplexer = "zellij"\n[[agents]]\nname = "alpha"\nprogram = "sleep 120"\n[[agents]]\nname = "beta"\nprogram = "claude"\nmodel = "opus"\nnotify = "channel"\n')
    alpha = None
    try:
        relayctl("up", str(team_file))
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        layout_path = str(store_dir / layout.TEAMS / "zteam" / "layout.kdl")
        assert calls == [["attach", "--create-background", "zteam"], ["--session", "zteam", "action", "new-tab", "--layout", layout_path, "--name", "zteam"]]
        kdl = Path(layout_path).read_text()
        assert kdl.count("pane name=") == 2 and "register alpha --notify zellij:$ZELLIJ_PANE_ID" in kdl
        assert "RELAY_AGENT=beta" in kdl and "--dangerously-load-development-channels server:relay --model opus" in kdl
        assert "register beta --notify channel" in kdl

        # alpha's pane, as zellij would run it: registers pane 7, notes its pid, becomes `sleep 120`.
        script = json.loads(next(line for line in kdl.splitlines() if "register alpha" in line).split('args "-c" ', 1)[1])
        alpha = subprocess.Popen(["sh", "-c", script], env=dict(relayctl.env, ZELLIJ_PANE_ID="7"))
        wait_for("alpha's pane to register", lambda: any(
            a["name"] == "alpha" and a.get("notify") == "zellij:7" for a in relayctl.setup("status")["agents"]))
        pid_file = store_dir / layout.TEAMS / "zteam" / "alpha.pid"
        wait_for("alpha's pid file", lambda: pid_file.exists() and pid_file.read_text().strip() == str(alpha.pid))

        log.write_text("")
        again = relayctl("up", str(team_file))
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert [c[:5] for c in calls] == [["--session", "zteam", "action", "new-pane", "--name"]] and calls[0][5] == "beta", calls
        assert "alpha            running" in again.stdout and "beta             restarted" in again.stdout

        relayctl("down", str(team_file))
        assert json.loads(log.read_text().splitlines()[-1]) == ["kill-session", "zteam"]
        assert not pid_file.exists()
    finally:
        if alpha is not None:
            alpha.kill()
            alpha.wait()
        relayctl("down", str(team_file), check=False)


@pytest.mark.real_program
def test_a_claude_code_pane_started_by_up_gets_past_its_question_and_its_model_gets_the_mail(team: Team, relayctl, store_dir: Path) -> None:
    """One pane runs the real Claude Code against the scripted model server (DESIGN §10);
    the scratch HOME is what a signed-in user's would be, channels switch included."""
    from support.agent_programs import claude_signed_in, program
    from support.model_anthropic import messages_responder, text
    from support.scripted_model import ScriptedModel

    claude = program("claude")
    home = team.root / "home"
    api_key = "sk-ant-relay-tests-0123456789abcdef"
    claude_signed_in(home, api_key, trusted=team.repo.resolve(), channels=True)
    debug_log = team.root / "claude-debug.log"
    text_of_file = team.file.read_text().replace('name = "alpha"\nprogram = "', f'name = "alpha"\nprogram = "claude"\nnotify = "channel"\nargs = ["--debug-file", "{debug_log}"]\n# was: "', 1)
    team.file.write_text(text_of_file)
    with ScriptedModel(messages_responder(lambda request: [text("Noted.")])) as model:
        team.env.update(HOME=str(home), ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=api_key, DISABLE_AUTOUPDATER="1",
                        PATH=f"{claude.parent}:{team.env['PATH']}", TERM="xterm-256color")
        started = relayctl("up", str(team.file))
        assert started.stderr == "", started.stderr  # the development-channel question was answered, the pane is ready
        pane = team.panes()["alpha"][0]
        screen = lambda: team.tmux("capture-pane", "-p", "-J", "-t", pane)  # noqa: E731
        wait_for("Claude Code's prompt", lambda: "❯" in screen() and "I am using this for local development" not in screen(), timeout=60)
        wait_for("relay's channel in Claude Code", lambda: debug_log.exists() and 'MCP server "relay": Channel notifications registered' in debug_log.read_text(), timeout=60)
        assert team.agents()["alpha"]["notify"] == "channel"

        relayctl("register", "boss")
        relayctl("send", "alpha", "--subject", "SUBJECT-FOR-ALPHA", "deploy the hotfix", agent="boss")
        try:
            wait_for("the mail at Claude Code's model", lambda: any("SUBJECT-FOR-ALPHA" in r.text for r in model.requests), timeout=90)
        except AssertionError:
            log = (store_dir / layout.TEAMS / "crew" / "relayd.log").read_text()[-2000:]
            raise AssertionError(f"the mail never reached the model; the pane shows:\n{screen()}\nrelayd's log:\n{log}") from None
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


def _mail_to_alpha_is_answered_as_alpha(team: Team, relayctl, ready: str) -> None:
    """Once alpha's pane shows `ready`, mail for alpha reaches its program's model (which is
    scripted to answer through relay's send_message), and the answer arrives as alpha's."""
    pane = team.panes()["alpha"][0]
    screen = lambda: team.tmux("capture-pane", "-p", "-J", "-t", pane)  # noqa: E731
    try:
        wait_for(f"{ready!r} in alpha's pane", lambda: ready in screen(), timeout=90)
    except AssertionError:
        raise AssertionError(f"{ready!r} never showed; the pane shows:\n{screen()}") from None
    relayctl.setup("register", name="boss")
    relayctl("send", "alpha", "--subject", "SUBJECT-FOR-ALPHA", "deploy the hotfix", agent="boss")
    try:  # asked in this process while it waits: a CLI start every 20 ms was most of the test's CPU
        wait_for("the model's answer in boss's inbox", lambda: relayctl.setup("read", agent="boss")["messages"], timeout=120)
    except AssertionError:
        raise AssertionError(f"no answer came through relay-mcp; the pane shows:\n{screen()}") from None
    inbox = json.loads(relayctl("--json", "read", agent="boss").stdout)
    assert [(m["from"], m["subject"]) for m in inbox] == [("alpha", "hotfix deployed")]


@pytest.mark.real_program
def test_a_gemini_pane_started_by_up_has_relay_tools_that_speak_for_its_own_agent(team: Team, relayctl, store_dir: Path) -> None:
    """Gemini CLI reads MCP servers from one project-wide settings file: `up` writes relay-mcp
    there with the role `$RELAY_AGENT`, which the real Gemini CLI fills in from the pane's
    environment. Mail for alpha reaches the pane's model (typed trigger, hooks), and the
    model's answer through relay's send_message tool arrives as alpha's: the server spoke
    for the agent of its own pane."""
    from support.agent_programs import program
    from support.model_gemini import function_call, gemini_responder, text, user_texts
    from support.scripted_model import ScriptedModel

    gemini = program("gemini")
    home = team.root / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(team.repo.resolve()): "TRUST_FOLDER"}))
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nprogram = "gemini"\nmodel = "gemini-2.5-flash"\n# was: "', 1))
    settings = json.loads((team.repo / ".gemini" / "settings.json").read_text()) if (team.repo / ".gemini" / "settings.json").exists() else {}
    assert "mcpServers" not in settings

    def turn(request: dict) -> list[dict]:
        answered = any("functionResponse" in part for content in request.get("contents", []) for part in content.get("parts", []))
        if answered or not any("SUBJECT-FOR-ALPHA" in part for part in user_texts(request)):
            return [text("Done.")]
        return [function_call("mcp_relay_send_message", {"to": "boss", "subject": "hotfix deployed", "body": "as asked"})]

    with ScriptedModel(gemini_responder(turn)) as model:
        team.env.update(HOME=str(home), GOOGLE_GEMINI_BASE_URL=model.url, GEMINI_API_KEY="scripted-key",
                        PATH=f"{gemini.parent}:{team.env['PATH']}", TERM="xterm-256color")
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen
        relayctl("up", str(team.file))
        written = json.loads((team.repo / ".gemini" / "settings.json").read_text())
        assert written["mcpServers"]["relay"]["env"]["OVLD_ROLE"] == "$RELAY_AGENT"
        _mail_to_alpha_is_answered_as_alpha(team, relayctl, ready="Type your message")
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


@pytest.mark.real_program
def test_a_codex_pane_started_by_up_has_relay_tools_that_speak_for_its_own_agent(team: Team, relayctl, store_dir: Path) -> None:
    """`up` gives a Codex pane relay-mcp as `-c mcp_servers.relay=...` and relay's hooks, and
    answers the hook review those hooks cause. Mail for alpha reaches the pane's model, and
    the model's answer through relay's send_message tool arrives as alpha's."""
    from support.agent_programs import program
    from support.model_openai import codex_config, function_call, message, responses_responder
    from support.scripted_model import ScriptedModel

    codex = program("codex")
    home = team.root / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nprogram = "codex"\n# was: "', 1))

    def turn(request: dict) -> list[dict]:
        seen = json.dumps(request.get("input", []))
        if "function_call_output" in seen or "SUBJECT-FOR-ALPHA" not in seen:
            return [message("Done.")]
        return [function_call("send_message", {"to": "boss", "subject": "hotfix deployed", "body": "as asked"}, namespace="mcp__relay")]

    with ScriptedModel(responses_responder(turn)) as model:
        # The folder trust is the person's own choice (Codex asks it of any project); it is given here.
        (codex_home / "config.toml").write_text(codex_config(model.url) + f'\n[projects."{team.repo.resolve()}"]\ntrust_level = "trusted"\n')
        team.env.update(HOME=str(home), CODEX_HOME=str(codex_home), SCRIPTED_API_KEY="sk-scripted",
                        PATH=f"{codex.parent}:{team.env['PATH']}", TERM="xterm-256color")
        started = relayctl("up", str(team.file))
        assert started.stderr == "", started.stderr  # the hook review was answered, the pane is ready
        _mail_to_alpha_is_answered_as_alpha(team, relayctl, ready="Ask Codex to do anything")
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


@pytest.mark.real_program
def test_codex_hook_review_is_answered_only_for_relays_own_hooks(relayctl, short_tmp: Path, monkeypatch) -> None:
    """What `up` expects Codex to ask: the review of relay's hooks while Codex has no trust
    recorded for them, or the file changed since; nothing once it is recorded; and never an
    answer for a project whose hooks file holds someone else's hook too."""
    from relayctl.team import clients
    from relayctl.team.teamfile import Agent, Team as TeamFile

    repo = short_tmp / "repo"
    repo.mkdir()
    codex_home = short_tmp / "codex"
    codex_home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    agent = Agent(name="alpha", program="codex")
    team = TeamFile(name="crew", multiplexer="tmux", repo=str(repo.resolve()), agents=[agent], path=str(short_tmp / "relay-team.toml"))
    relayctl("hooks", "install", "--for", "codex", "--agent", "alpha", "--project", str(repo))
    hooks_file = (repo / ".codex" / "hooks.json").resolve()

    [question] = clients.startup_prompts(agent, team)
    assert question.text == "6 hooks are new or changed" and question.expected

    config = codex_home / "config.toml"
    config.write_text("".join(f'[hooks.state."{hooks_file}:{event}:0:0"]\ntrusted_hash = "sha256:00"\n\n'
                              for event in ("session_start", "user_prompt_submit", "post_tool_use", "stop", "permission_request", "interrupt")))
    os.utime(hooks_file, (1_000_000_000, 1_000_000_000))  # trusted after it was written
    [question] = clients.startup_prompts(agent, team)
    assert not question.expected

    settings = json.loads(hooks_file.read_text())
    settings["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": "./scripts/lint.sh"})
    hooks_file.write_text(json.dumps(settings))
    assert clients.startup_prompts(agent, team) == []


def test_claude_code_gets_its_channel_by_default_where_it_works_and_the_pane_elsewhere(short_tmp: Path) -> None:
    from relayctl.team import clients
    from relayctl.team.teamfile import Agent, Team as TeamFile

    home = short_tmp / "home"
    home.mkdir()
    claude = Agent(name="alpha", program="claude", env={"HOME": str(home)})
    assert claude.notify == "auto" and clients.arrival(claude) == "pane"  # never signed in: no switch known
    (home / ".claude.json").write_text(json.dumps({"cachedGrowthBookFeatures": {"tengu_harbor": True}}))
    assert clients.arrival(claude) == "channel"
    assert clients.startup_prompts(claude, TeamFile(name="crew", multiplexer="tmux", repo=str(short_tmp), agents=[claude], path="x"))[0].text == clients.program_of(claude).launch.channel.question.text
    assert clients.arrival(Agent(name="alpha", program="claude", env={"HOME": str(home), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})) == "channel"  # a proxy of the same API
    assert clients.arrival(Agent(name="alpha", program="claude", env={"HOME": str(home), "CLAUDE_CODE_USE_BEDROCK": "1"})) == "pane"
    assert clients.arrival(Agent(name="alpha", program="claude", env={"HOME": str(home)}, notify="pane")) == "pane"
    assert clients.arrival(Agent(name="beta", program="codex", env={"HOME": str(home)})) == "pane"
    (home / ".claude.json").write_text(json.dumps({"cachedGrowthBookFeatures": {"tengu_harbor": False}}))
    assert clients.arrival(claude) == "pane"


# -- a team starts on the first try, or says why not ---------------------------------------------


def _agents_run(team: Team, programs: dict[str, str]) -> None:
    """Give agents other programs than the recording script (by name: program line)."""
    text = team.file.read_text()
    for name, program in programs.items():
        text = text.replace(f'name = "{name}"\nprogram = "', f'name = "{name}"\nprogram = {json.dumps(program)}\n# was: "', 1)
    team.file.write_text(text)


def test_a_program_not_installed_is_named_with_its_package_and_nothing_starts(team: Team, relayctl, store_dir: Path, short_tmp: Path) -> None:
    from support.needed_programs import path_without

    team.env["PATH"] = path_without(("claude", "gemini"), team.env["PATH"], short_tmp / "bin")  # whatever this machine has installed
    assert shutil.which("claude", path=team.env["PATH"]) is None and shutil.which("gemini", path=team.env["PATH"]) is None
    _agents_run(team, {"alpha": "claude", "gamma": "gemini"})
    done = relayctl("up", str(team.file), check=False)
    assert done.returncode == 2 and "exit 2, nothing started" in " ".join(relayctl("up", "--help").stdout.split())  # as --help says
    assert done.stderr.splitlines() == [
        "error: alpha: claude is not installed (not on PATH): npm install -g @anthropic-ai/claude-code",
        "error: gamma: gemini is not installed (not on PATH): npm install -g @google/gemini-cli",
        "error: 2 agent programs not installed; nothing was started",
    ]
    assert not store_dir.exists() and _processes_of(store_dir) == []  # no store, no relayd
    assert team.tmux("has-session", "-t", "crew", check=False) == "" and not (team.repo / ".git" / "hooks" / "pre-commit").exists()


# A stand-in for Claude Code's command, in a package.json of the name npm gives it, of an older
# version: it records the sign-in it finds and draws what Claude Code draws without one.
STAND_IN = """#!{python}
import os
out = open(os.path.join({out!r}, os.environ["RELAY_AGENT"]), "a", buffering=1)
out.write("key " + os.environ.get("ANTHROPIC_API_KEY", "-") + " proxy " + os.environ.get("HTTPS_PROXY", "-") + "\\n")
print("Welcome back" if os.environ.get("ANTHROPIC_API_KEY") else "Not logged in \u00b7 Run /login")
print("? for shortcuts")
while True:
    try:
        input()
    except EOFError:
        break
"""


def test_up_passes_the_shells_keys_into_panes_of_a_running_tmux_server_and_names_a_pane_not_signed_in(team: Team, relayctl) -> None:
    """tmux gives a new pane its server's environment: a key exported in the shell after the
    server started never reached the program, which then said "Not logged in"."""
    package = team.root / "lib" / "node_modules" / "@anthropic-ai" / "claude-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@anthropic-ai/claude-code", "version": "2.1.197"}))
    (package / "cli.py").write_text(STAND_IN.format(python=sys.executable, out=str(team.out)))
    (package / "cli.py").chmod(0o755)
    bin_dir = team.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(package / "cli.py")
    from relayctl.team.clients import NETWORK_ENV
    from relayd.programs.registry import PROGRAMS

    for name in (*PROGRAMS["claude"].launch.reads, *NETWORK_ENV):  # only what the test sets
        team.env.pop(name, None)
    team.tmux("new-session", "-d", "-s", "work", "sh")  # the server runs, started without the key
    team.env.update(PATH=f"{bin_dir}:{team.env['PATH']}", HOME=str(team.root), ANTHROPIC_API_KEY="sk-ant-test-0123456789", HTTPS_PROXY="http://127.0.0.1:9")
    _agents_run(team, {"alpha": "claude", "beta": "claude"})

    started = relayctl("up", str(team.file))
    lines = started.stdout.splitlines()
    assert lines.count("warning: claude is 2.1.197, older than the 2.1.332 relay is tested with: npm install -g @anthropic-ai/claude-code@2.1.332") == 1
    assert sum(line.split() == ["from", "your", "shell:", "ANTHROPIC_API_KEY,", "HTTPS_PROXY"] for line in lines) == 2, started.stdout  # alpha, beta
    assert "sk-ant-test" not in started.stdout + started.stderr  # names, never values
    for name in ("alpha", "beta"):
        assert wait_for(f"{name}'s program", lambda: team.received(name), timeout=30)[0] == "key sk-ant-test-0123456789 proxy http://127.0.0.1:9"
    assert "not signed in" not in started.stderr
    relayctl("down", str(team.file))

    del team.env["ANTHROPIC_API_KEY"]
    again = relayctl("up", str(team.file))
    panes = team.panes()
    for name in ("alpha", "beta"):
        assert (f"warning: {name} (pane {panes[name][0]}): claude says 'Not logged in': it is not signed in; sign in there, or export its key "
                "(ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN) in the shell and start the team again from it (relayctl down, then relayctl up)") in again.stderr.splitlines(), again.stderr
    assert "gamma" not in again.stderr


@pytest.mark.real_program
def test_a_key_exported_before_up_reaches_the_real_claude_code_in_a_pane_of_a_running_tmux_server(team: Team, relayctl, store_dir: Path) -> None:
    """The real Claude Code, against a scripted model that refuses any other key (as the
    vendor's does): the key exported in the calling shell after the team's tmux server
    started reaches the pane's program, which signs in with it and gets the mail."""
    from relayctl.team.clients import NETWORK_ENV
    from relayd.programs.registry import PROGRAMS
    from support.agent_programs import claude_signed_in, program
    from support.model_anthropic import messages_responder, text
    from support.scripted_model import Reply, ScriptedModel

    api_key = "sk-ant-exported-before-up-0123456789abcdef"
    home = team.root / "home"
    claude_signed_in(home, api_key, trusted=team.repo.resolve())
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nprogram = "claude"\n# was: "', 1))
    answer = messages_responder(lambda request: [text("Noted.")])
    keys: list[str | None] = []

    def respond(request):
        given = {k.lower(): v for k, v in request.headers.items()}.get("x-api-key")
        keys.append(given)
        if given != api_key:
            return Reply(401, chunks=[json.dumps({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}).encode()])
        return answer(request)

    for name in (*PROGRAMS["claude"].launch.reads, *NETWORK_ENV):
        team.env.pop(name, None)
    with ScriptedModel(respond) as model:
        team.env.update(HOME=str(home), ANTHROPIC_BASE_URL=model.url, DISABLE_AUTOUPDATER="1", TERM="xterm-256color",
                        PATH=f"{program('claude').parent}:{team.env['PATH']}", CLAUDE_CODE_HARBOR_KITE="0")
        team.tmux("new-session", "-d", "-s", "work", "sh")  # the server runs, started without the key
        team.env["ANTHROPIC_API_KEY"] = api_key  # exported in the shell afterwards, as a person does
        started = relayctl("up", str(team.file))
        assert "ANTHROPIC_API_KEY" in started.stdout and api_key not in started.stdout + started.stderr
        relayctl("register", "boss")
        relayctl("send", "alpha", "--subject", "SUBJECT-FOR-ALPHA", "deploy the hotfix", agent="boss")
        pane = team.panes()["alpha"][0]
        try:
            wait_for("the mail at Claude Code's model", lambda: any("SUBJECT-FOR-ALPHA" in r.text for r in model.requests), timeout=90)
        except AssertionError:
            raise AssertionError(f"the mail never reached the model (keys it was sent: {set(keys)}); the pane shows:\n"
                                 + team.tmux("capture-pane", "-p", "-J", "-t", pane)) from None
        assert set(keys) == {api_key}
    relayctl("down", str(team.file))
    assert "work" in team.tmux("list-sessions", "-F", "#{session_name}").split()  # the person's own session stays
    team.tmux("kill-session", "-t", "=work:")
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


def test_a_pane_whose_program_dies_at_once_makes_up_fail_with_its_cause(team: Team, relayctl) -> None:
    _agents_run(team, {"beta": "sh -c 'echo \"beta: cannot read its config file\"; exit 3'"})
    done = relayctl("up", str(team.file), check=False)
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if "beta" in line]
    assert line.startswith("error: beta (pane %") and "sh exited (status 3)" in line and "beta: cannot read its config file" in line
    assert "alpha" not in done.stderr and "gamma" not in done.stderr  # the others started
    [status] = [line for line in relayctl("status").stdout.splitlines() if line.strip().startswith("beta ") and "last heartbeat" in line]
    assert " EXITED " in status and status.endswith(" dead"), status  # status says what up said


def test_a_repository_path_with_tmux_formats_in_it_is_only_a_path(short_tmp: Path, relay_env: dict[str, str], relayctl, store_dir: Path) -> None:
    """tmux expands formats in a pane's start directory: `#(cmd)` in a folder's name ran cmd."""
    root = short_tmp / "t"
    root.mkdir()
    crew = Team(root, relay_env, relayctl)
    crew.env["HOME"] = str(root)
    odd = root / "repo #(cd;touch ran)"  # `cd` alone goes HOME: a name can hold no '/'
    subprocess.run(["git", "init", "-q", str(odd)], check=True)
    crew.repo = odd
    crew.file.write_text(crew.file.read_text().replace('repo = "repo"', f'repo = {json.dumps(str(odd))}'))
    try:
        relayctl("up", str(crew.file))
        assert wait_for("alpha's program", lambda: crew.received("alpha"), timeout=30)[0] == f"started as alpha in {odd}"
        assert not (root / "ran").exists()
    finally:
        relayctl("down", str(crew.file), check=False)
        crew.tmux("kill-server", check=False)
    # (A relayd `up` started here once outlived `down` in a full run: none may.)
    wait_for("every process of the team to end, relayd's too", lambda: not _processes_of(store_dir), timeout=15,
             explain=lambda: "\n".join(_processes_of(store_dir)))


def _claude_home(team: Team, model_url: str) -> Path:
    from support.agent_programs import claude_signed_in, program

    home = team.root / "home"
    api_key = "sk-ant-relay-tests-0123456789abcdef"
    claude_signed_in(home, api_key)  # signed in; this folder not trusted yet
    team.env.update(HOME=str(home), ANTHROPIC_BASE_URL=model_url, ANTHROPIC_API_KEY=api_key, DISABLE_AUTOUPDATER="1",
                    PATH=f"{program('claude').parent}:{team.env['PATH']}", TERM="xterm-256color")
    return home


def test_claude_codes_folder_trust_question_is_named_and_left_to_the_person(team: Team, relayctl) -> None:
    from support.model_anthropic import messages_responder, text
    from support.scripted_model import ScriptedModel

    _agents_run(team, {"alpha": "claude"})
    with ScriptedModel(messages_responder(lambda request: [text("Noted.")])) as model:
        home = _claude_home(team, model.url)
        done = relayctl("up", str(team.file), "--wait", "2")
        pane = team.panes()["alpha"][0]
        assert f"alpha (pane {pane}) waits at Claude Code's folder trust question" in done.stdout
        assert "is this a project you created or one you trust?" in done.stdout and "relayctl up --trust" in done.stdout
        assert "still waits at its folder trust question" in done.stderr and done.returncode == 0
        assert "Yes, I trust this folder" in team.tmux("capture-pane", "-p", "-J", "-t", pane)  # not answered
        projects = json.loads((home / ".claude.json").read_text()).get("projects", {})
        assert not projects.get(str(team.repo.resolve()), {}).get("hasTrustDialogAccepted")  # nor recorded behind the person's back


@pytest.mark.real_program
def test_geminis_folder_trust_question_drawn_after_its_prompt_is_named_and_left_to_the_person(team: Team, relayctl) -> None:
    """Gemini CLI draws its prompt first and its folder trust dialog over it: `up` does not
    take the prompt for ready, names the question, and leaves it unanswered."""
    from support.agent_programs import program
    from support.model_gemini import gemini_responder
    from support.scripted_model import ScriptedModel

    _agents_run(team, {"alpha": "gemini"})
    home = team.root / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    with ScriptedModel(gemini_responder()) as model:
        team.env.update(HOME=str(home), GOOGLE_GEMINI_BASE_URL=model.url, GEMINI_API_KEY="scripted-key",
                        PATH=f"{program('gemini').parent}:{team.env['PATH']}", TERM="xterm-256color")
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen
        done = relayctl("up", str(team.file), "--wait", "2", timeout=240)
        pane = team.panes()["alpha"][0]
        assert f"alpha (pane {pane}) waits at Gemini CLI's folder trust question" in done.stdout, done.stdout + done.stderr
        assert "still waits at its folder trust question" in done.stderr and done.returncode == 0
        assert "Do you trust the files in this folder?" in team.tmux("capture-pane", "-p", "-J", "-t", pane)  # not answered
        assert not (home / ".gemini" / "trustedFolders.json").exists()  # nor recorded behind the person's back
        relayctl("down", str(team.file), check=False)


@pytest.mark.real_program
def test_codex_hook_review_is_answered_after_the_person_answers_the_trust_question(team: Team, relayctl) -> None:
    from support.agent_programs import program
    from support.model_openai import codex_config, message, responses_responder
    from support.scripted_model import ScriptedModel

    codex_home = team.root / "home" / ".codex"
    codex_home.mkdir(parents=True)
    _agents_run(team, {"alpha": "codex"})
    with ScriptedModel(responses_responder(lambda request: [message("Done.")])) as model:
        (codex_home / "config.toml").write_text(codex_config(model.url))  # this folder not trusted
        team.env.update(HOME=str(team.root / "home"), CODEX_HOME=str(codex_home), SCRIPTED_API_KEY="sk-scripted",
                        PATH=f"{program('codex').parent}:{team.env['PATH']}", TERM="xterm-256color")
        out = team.root / "up.out"
        with open(out, "w") as sink:
            up = subprocess.Popen([sys.executable, "-m", "relayctl", "up", str(team.file)], env=team.env, stdout=sink, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("up to name Codex's trust question", lambda: "Codex CLI's folder trust question" in out.read_text(), timeout=90)
            pane = team.panes()["alpha"][0]
            team.tmux("send-keys", "-t", pane, "Enter")  # the person: 1. Trust and continue
            _, stderr = up.communicate(timeout=120)
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        assert up.returncode == 0 and stderr == "", stderr  # the hook review came next, and up answered it
        screen = team.tmux("capture-pane", "-p", "-J", "-t", pane)
        assert "Ask Codex to do anything" in screen and "Hooks need review" not in screen


@pytest.mark.real_program
def test_up_trust_starts_claude_codex_and_gemini_with_no_question_and_uninstall_takes_the_trust_out(team: Team, relayctl) -> None:
    from support.agent_programs import program
    from support.model_anthropic import messages_responder, text as claude_text
    from support.model_gemini import gemini_responder
    from support.model_openai import codex_config, message, responses_responder
    from support.scripted_model import ScriptedModel

    _agents_run(team, {"alpha": "claude", "beta": "codex", "gamma": "gemini"})
    team.file.write_text(team.file.read_text().replace('name = "gamma"\nprogram = "gemini"', 'name = "gamma"\nprogram = "gemini"\nmodel = "gemini-2.5-flash"', 1))
    with ScriptedModel(messages_responder(lambda request: [claude_text("Noted.")])) as anthropic, \
            ScriptedModel(responses_responder(lambda request: [message("Done.")])) as openai, ScriptedModel(gemini_responder()) as google:
        home = _claude_home(team, anthropic.url)
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(openai.url))
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        team.env.update(CODEX_HOME=str(home / ".codex"), SCRIPTED_API_KEY="sk-scripted", GOOGLE_GEMINI_BASE_URL=google.url, GEMINI_API_KEY="scripted-key",
                        PATH=f"{program('codex').parent}:{program('gemini').parent}:{team.env['PATH']}")
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen
        codex_before = (home / ".codex" / "config.toml").read_bytes()
        (team.repo / ".claude").mkdir()
        (team.repo / ".claude" / "settings.json").write_text('{\n    "permissions": {"allow": ["Bash(npm test)"]}\n}')  # the person's own
        repo_before = team.files()

        started = relayctl("up", str(team.file), "--trust")
        repo = str(team.repo.resolve())
        assert f"trusted: {repo} for claude in {home / '.claude.json'}" in started.stdout
        assert f"trusted: {repo} for codex in {home / '.codex' / 'config.toml'}" in started.stdout
        assert f"trusted: {repo} for gemini in {home / '.gemini' / 'trustedFolders.json'}" in started.stdout
        assert started.stderr == "" and "trust question" not in started.stdout  # every pane came up ready, no question
        assert json.loads((home / ".gemini" / "trustedFolders.json").read_text()) == {repo: "TRUST_FOLDER"}
        assert json.loads((home / ".claude.json").read_text())["projects"][repo]["hasTrustDialogAccepted"] is True

        relayctl("down", "--clean", str(team.file))
    assert not (home / ".gemini" / "trustedFolders.json").exists()  # relay made it: gone
    assert "hasTrustDialogAccepted" not in json.dumps(json.loads((home / ".claude.json").read_text()).get("projects", {}).get(repo, {}))
    config = (home / ".codex" / "config.toml").read_text()
    assert f'[projects."{repo}"]' not in config and config.startswith(codex_before.decode())
    assert f"{repo}/.codex/hooks.json" not in config  # Codex's trust in relay's hooks, which up gave, went with them
    assert team.files() == repo_before  # byte for byte: hooks, relay-mcp, the guard, all gone; the person's file as it was


@pytest.mark.real_program
def test_up_trust_leaves_the_persons_own_no_and_down_clean_leaves_their_keys_in_their_table(team: Team, relayctl) -> None:
    """The person said no for this repository (Claude Code's hasTrustDialogAccepted = false,
    Gemini CLI's DO_NOT_TRUST): `up --trust` says so and writes nothing there, and
    `down --clean` deletes nothing there. Under the table relay wrote in Codex's config.toml
    the person then sets a sandbox for this repository alone: `down --clean` takes out
    relay's line and the sandbox stays this repository's, not Codex's global setting (nor
    the model provider's, the table above)."""
    import tomllib

    from support.agent_programs import program
    from support.model_anthropic import messages_responder, text as claude_text
    from support.model_gemini import gemini_responder
    from support.model_openai import codex_config, message, responses_responder
    from support.scripted_model import ScriptedModel

    _agents_run(team, {"alpha": "claude", "beta": "codex", "gamma": "gemini"})
    team.file.write_text(team.file.read_text().replace('name = "gamma"\nprogram = "gemini"', 'name = "gamma"\nprogram = "gemini"\nmodel = "gemini-2.5-flash"', 1))
    repo = str(team.repo.resolve())
    with ScriptedModel(messages_responder(lambda request: [claude_text("Noted.")])) as anthropic, \
            ScriptedModel(responses_responder(lambda request: [message("Done.")])) as openai, ScriptedModel(gemini_responder()) as google:
        home = _claude_home(team, anthropic.url)
        claude_state = json.loads((home / ".claude.json").read_text())
        claude_state["projects"] = {repo: {"hasTrustDialogAccepted": False, "allowedTools": []}}
        (home / ".claude.json").write_text(json.dumps(claude_state))
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(codex_config(openai.url))
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({repo: "DO_NOT_TRUST"}, indent=2))
        gemini_before = (home / ".gemini" / "trustedFolders.json").read_bytes()
        team.env.update(CODEX_HOME=str(codex_home), SCRIPTED_API_KEY="sk-scripted", GOOGLE_GEMINI_BASE_URL=google.url, GEMINI_API_KEY="scripted-key",
                        PATH=f"{program('codex').parent}:{program('gemini').parent}:{team.env['PATH']}")
        team.env.pop("CI", None)

        started = relayctl("up", str(team.file), "--trust", "--wait", "2")
        assert f"not trusted: {repo} for claude in {home / '.claude.json'}: {home / '.claude.json'} says hasTrustDialogAccepted = false" in started.stdout
        assert f"not trusted: {repo} for gemini in {home / '.gemini' / 'trustedFolders.json'}: " in started.stdout
        assert "says DO_NOT_TRUST for " + repo in started.stdout and "that is your choice" in started.stdout
        assert f"trusted: {repo} for codex in {codex_home / 'config.toml'}" in started.stdout
        assert (home / ".gemini" / "trustedFolders.json").read_bytes() == gemini_before
        assert json.loads((home / ".claude.json").read_text())["projects"][repo]["hasTrustDialogAccepted"] is False

        config = (codex_home / "config.toml").read_text()
        relays = f'[projects."{repo}"]\ntrust_level = "trusted"\n'
        assert config.count(relays) == 1, config
        (codex_home / "config.toml").write_text(config.replace(relays, relays + 'sandbox_mode = "danger-full-access"\n'))
        relayctl("down", "--clean", str(team.file))

    parsed = tomllib.loads((codex_home / "config.toml").read_text())
    assert parsed["projects"][repo] == {"sandbox_mode": "danger-full-access"}  # still this repository's alone
    assert "sandbox_mode" not in parsed and "sandbox_mode" not in parsed["model_providers"]["scripted"]
    assert (home / ".gemini" / "trustedFolders.json").read_bytes() == gemini_before  # the person's DO_NOT_TRUST, as it was
    assert json.loads((home / ".claude.json").read_text())["projects"][repo]["hasTrustDialogAccepted"] is False


@pytest.mark.real_program
def test_up_trust_refuses_a_hard_linked_trust_file_with_a_line_and_keeps_the_link(team: Team, relayctl) -> None:
    """~/.gemini/trustedFolders.json as a hard link to the person's dotfiles: replacing it would
    leave the dotfiles copy behind without a word. `up --trust` says so in a line, writes
    nothing, and Gemini CLI asks its own question, as without relay."""
    from support.agent_programs import program
    from support.model_gemini import gemini_responder
    from support.scripted_model import ScriptedModel

    _agents_run(team, {"gamma": "gemini"})
    team.file.write_text(team.file.read_text().replace('name = "gamma"\nprogram = "gemini"', 'name = "gamma"\nprogram = "gemini"\nmodel = "gemini-2.5-flash"', 1))
    home = team.root / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    dotfiles = team.root / "dotfiles" / "trustedFolders.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"/srv/elsewhere": "TRUST_FOLDER"}))
    trusted = home / ".gemini" / "trustedFolders.json"
    os.link(dotfiles, trusted)
    repo = str(team.repo.resolve())
    with ScriptedModel(gemini_responder()) as google:
        team.env.update(HOME=str(home), GOOGLE_GEMINI_BASE_URL=google.url, GEMINI_API_KEY="scripted-key",
                        PATH=f"{program('gemini').parent}:{team.env['PATH']}", TERM="xterm-256color")
        team.env.pop("CI", None)
        started = relayctl("up", str(team.file), "--trust", "--wait", "2")
        assert f"not trusted: {repo} for gemini in {trusted}: {trusted} has 2 hard links" in started.stdout
        assert os.path.samefile(trusted, dotfiles) and json.loads(dotfiles.read_text()) == {"/srv/elsewhere": "TRUST_FOLDER"}
        relayctl("down", "--clean", str(team.file))
    assert os.path.samefile(trusted, dotfiles) and json.loads(dotfiles.read_text()) == {"/srv/elsewhere": "TRUST_FOLDER"}


def _chat_answering_alpha_with(tool: str):
    """A Chat Completions model that answers mail for alpha through relay's send_message
    (named `tool` in the program) and says "Done." to everything else."""
    from support.model_openai import chat_responder, chat_text, chat_tool_call

    def turn(request: dict) -> dict:
        messages = request.get("messages", [])
        answered = any(m.get("role") == "tool" for m in messages)
        if answered or "SUBJECT-FOR-ALPHA" not in json.dumps(messages):
            return chat_text("Done.")
        return chat_tool_call(tool, {"to": "boss", "subject": "hotfix deployed", "body": "as asked"})

    return chat_responder(turn)


@pytest.mark.real_program
def test_an_opencode_pane_started_by_up_has_relay_tools_and_its_plugin_that_speak_for_its_own_agent(team: Team, relayctl, store_dir: Path) -> None:
    """OpenCode reads MCP servers from the project's opencode.json: `up` adds relay-mcp there
    with the role `{env:RELAY_AGENT}`, and relay's plugin in .opencode/plugin. Mail for the
    idle alpha starts a turn (the plugin), and the model's answer through relay's
    send_message arrives as alpha's."""
    from support.agent_programs import opencode_config, opencode_env, program
    from support.scripted_model import ScriptedModel

    opencode = program("opencode")
    home = team.root / "home"
    home.mkdir()
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nprogram = "opencode"\n# was: "', 1))
    with ScriptedModel(_chat_answering_alpha_with("relay_send_message")) as model:
        opencode_config(team.repo, model.url)
        env = opencode_env(team.repo, home)
        env.pop("PWD")  # `up` sets it for the pane
        team.env.update(HOME=str(home), PATH=f"{opencode.parent}:{team.env['PATH']}", TERM="xterm-256color", **env)
        relayctl("up", str(team.file))
        written = json.loads((team.repo / "opencode.json").read_text())
        assert written["mcp"]["relay"]["environment"]["OVLD_ROLE"] == "{env:RELAY_AGENT}" and "provider" in written
        assert (team.repo / ".opencode" / "plugin" / "relay.js").exists()
        _mail_to_alpha_is_answered_as_alpha(team, relayctl, ready="Ask anything")
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


@pytest.mark.real_program
def test_a_copilot_pane_started_by_up_has_relay_tools_and_hooks_that_speak_for_its_own_agent(team: Team, relayctl, store_dir: Path) -> None:
    """Copilot CLI gets relay-mcp from `--additional-mcp-config` (its tools allowed with
    --allow-tool relay) and relay's hooks in .github/hooks/relay.json; in a folder the person
    trusted, mail for alpha reaches its model and the answer arrives as alpha's."""
    from support.agent_programs import copilot_env, program
    from support.scripted_model import ScriptedModel

    copilot = program("copilot")
    home = team.root / "home"
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nprogram = "copilot"\n# was: "', 1))
    with ScriptedModel(_chat_answering_alpha_with("relay-send_message")) as model:
        team.env.update(HOME=str(home), PATH=f"{copilot.parent}:{team.env['PATH']}", TERM="xterm-256color",
                        **copilot_env(home, model.url, trusted=team.repo.resolve()))
        relayctl("up", str(team.file))
        hooks = json.loads((team.repo / ".github" / "hooks" / "relay.json").read_text())
        assert "userPromptSubmitted" in hooks["hooks"]
        _mail_to_alpha_is_answered_as_alpha(team, relayctl, ready="/ commands")
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


@pytest.mark.real_program
def test_a_copilot_agent_whose_team_file_asks_for_the_extension_gets_its_mail_with_nothing_typed(team: Team, relayctl, store_dir: Path) -> None:
    """`extension = true`: `up` writes relay's Copilot extension and starts `copilot
    --experimental`; the extension reports itself, and mail for alpha is enqueued into the
    session (relayd.arrival.copilot_extension), whose answer arrives as alpha's."""
    from support.agent_programs import copilot_env, program
    from support.scripted_model import ScriptedModel

    copilot = program("copilot")
    home = team.root / "home"
    runtime = team.root / "run"
    runtime.mkdir(mode=0o700)
    team.file.write_text(team.file.read_text().replace('name = "alpha"\nprogram = "', 'name = "alpha"\nextension = true\nprogram = "copilot"\n# was: "', 1))
    with ScriptedModel(_chat_answering_alpha_with("relay-send_message")) as model:
        team.env.update(HOME=str(home), PATH=f"{copilot.parent}:{team.env['PATH']}", TERM="xterm-256color", XDG_RUNTIME_DIR=str(runtime),
                        **copilot_env(home, model.url, trusted=team.repo.resolve()))
        relayctl("up", str(team.file))
        assert (team.repo / ".github" / "extensions" / "relay" / "extension.mjs").exists()
        door = store_dir / "agents" / "alpha" / "copilot-extension"
        found = wait_for("relay's extension reporting itself", lambda: door.exists() and json.loads(door.read_text()), timeout=90)
        assert found.get("unusable") is None, found
        _mail_to_alpha_is_answered_as_alpha(team, relayctl, ready="/ commands")
        alpha = next(a for a in json.loads(relayctl("--json", "status").stdout)["agents"] if a["name"] == "alpha")
        assert alpha["arrives_by"] == "copilot-extension"
        # What the model was told, not what the pane shows: the timeline scrolls and redraws
        # while the answer's turn goes on, so a screen taken then can miss the notice.
        told = json.dumps([m for r in model.requests for m in (r.json() or {}).get("messages", []) if m.get("role") == "user"])
        assert "[relay] 1 new message for alpha" in told and "New message waiting" not in told, told  # the notice, and no trigger typed
    relayctl("down", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=20)


# -- a team of all five programs ---------------------------------------------------------------

FIVE = ("claude", "codex", "gemini", "opencode", "copilot")


def _hop(src: str, dst: str) -> str:
    return f"HOP-{src}-to-{dst}"  # no '>' or '<': some programs' JSON escapes them


def _model_passing_hops(me: str):
    """The scripted model of the agent `me` (named after its program, one server each): once
    its conversation holds the test's order, it sends one hop to every other agent through
    relay-mcp's send_message, one tool call per request, then says "Done." to everything."""
    from support.hook_sessions import PROGRAMS
    from support.model_anthropic import messages_responder, text as claude_text, tool_use
    from support.model_gemini import function_call as gemini_call, gemini_responder, text as gemini_text
    from support.model_openai import chat_responder, chat_text, chat_tool_call, function_call as codex_call, message, responses_responder

    calls = {
        "claude": lambda args: [tool_use("mcp__relay__send_message", args)],
        "codex": lambda args: [codex_call("send_message", args, namespace="mcp__relay")],
        "gemini": lambda args: [gemini_call("mcp_relay_send_message", args)],
        "opencode": lambda args: chat_tool_call("relay_send_message", args),
        "copilot": lambda args: chat_tool_call("relay-send_message", args),
    }
    texts = {"claude": lambda s: [claude_text(s)], "codex": lambda s: [message(s)], "gemini": lambda s: [gemini_text(s)],
             "opencode": chat_text, "copilot": chat_text}
    responders = {"claude": messages_responder, "codex": responses_responder, "gemini": gemini_responder,
                  "opencode": chat_responder, "copilot": chat_responder}

    def turn(body: dict):
        seen = json.dumps(body)
        if f"ORDER-FOR-{me}" in seen:
            for dst in FIVE:
                if dst != me and _hop(me, dst) not in seen:
                    return calls[me]({"to": dst, "subject": _hop(me, dst), "body": f"from {me}'s model"})
        return texts[me]("Done.")

    answer_turn = responders[me](turn)
    answer_aside = responders[me](lambda body: texts[me]("ok"))
    is_turn = PROGRAMS[me].is_turn
    return lambda request: answer_turn(request) if is_turn(request) else answer_aside(request)


@pytest.mark.real_program
def test_up_starts_all_five_programs_and_mail_between_their_models_makes_every_round_trip(team: Team, relayctl, store_dir: Path) -> None:
    """One pane each of Claude Code, Codex CLI, Gemini CLI, OpenCode and Copilot CLI, started
    by `up --trust`, each against a scripted model server of its own. Every ordered pair of
    the 20: the test tells each agent (by mail) to pass a hop to every other; its model sends
    the four through relay-mcp's send_message, and each hop must reach the receiving
    program's model (in a request of that program's own server, as relay renders mail).
    All 20 rather than a cycle and its reverse: the five start once whichever is chosen, and
    the hops then travel at the same time, so all pairs cost little more than ten."""
    from contextlib import ExitStack

    from support.agent_programs import copilot_env, opencode_config, opencode_env, program
    from support.hook_sessions import PROGRAMS
    from support.model_openai import codex_config
    from support.scripted_model import ScriptedModel

    team.file.write_text('team = "crew"\nrepo = "repo"\n' + "".join(
        f'\n[[agents]]\nname = "{name}"\nprogram = "{name}"\n' + ('model = "gemini-2.5-flash"\n' if name == "gemini" else "")
        + ('lead = true\n' if name == "claude" else "") for name in FIVE))
    with ExitStack() as stack:
        models = {name: stack.enter_context(ScriptedModel(_model_passing_hops(name))) for name in FIVE}
        home = _claude_home(team, models["claude"].url)
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(models["codex"].url))
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        opencode_config(team.repo, models["opencode"].url)
        opencode = opencode_env(team.repo, home)
        opencode.pop("PWD")  # `up` sets it for the pane
        team.env.update(CODEX_HOME=str(home / ".codex"), SCRIPTED_API_KEY="sk-scripted", GOOGLE_GEMINI_BASE_URL=models["gemini"].url,
                        GEMINI_API_KEY="scripted-key", **opencode, **copilot_env(home, models["copilot"].url),
                        PATH=":".join([*{str(program(name).parent) for name in FIVE}, team.env["PATH"]]))
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen

        started = relayctl("up", "--trust", str(team.file), timeout=240)
        assert started.stderr == "", started.stderr
        repo = str(team.repo.resolve())
        assert f"trusted: {repo} for copilot in {home / '.copilot' / 'config.json'}" in started.stdout  # (OpenCode asks none)
        assert "trust question" not in started.stdout
        panes = team.panes()
        assert sorted(panes) == sorted(FIVE)
        screen = lambda name: team.tmux("capture-pane", "-p", "-J", "-t", panes[name][0])  # noqa: E731
        for name, ready in (("opencode", "Ask anything"), ("copilot", "/ commands")):  # `up` waits for the others
            try:
                wait_for(f"{name}'s prompt", lambda: ready in screen(name), timeout=90)
            except AssertionError:
                raise AssertionError(f"{ready!r} never showed; {name}'s pane shows:\n{screen(name)}") from None

        relayctl("register", "boss")
        for name in FIVE:
            relayctl("send", name, "--subject", f"ORDER-FOR-{name}", "send a hop to every other agent", agent="boss")
        pairs = [(src, dst) for src in FIVE for dst in FIVE if src != dst]

        def missing() -> list[tuple[str, str]]:
            return [(src, dst) for src, dst in pairs
                    if not any(PROGRAMS[dst].is_turn(r) and f"subject: {_hop(src, dst)}" in r.text for r in list(models[dst].requests))]

        try:
            wait_for("every hop at its receiver's model", lambda: not missing(), timeout=150, every=0.5)
        except AssertionError:
            shown = "\n".join(f"--- {name}:\n{screen(name)}" for name in FIVE)
            raise AssertionError(f"hops that never reached the receiving model: {missing()}\n{shown}") from None

    for dst in FIVE:  # each hop was sent once, by its own agent's relay-mcp, and relay says it was read
        inbox = json.loads(relayctl("--json", "read", agent=dst).stdout)
        hops = sorted((m["from"], m["subject"]) for m in inbox if m["subject"].startswith("HOP-"))
        assert hops == sorted((src, _hop(src, dst)) for src in FIVE if src != dst), (dst, hops)
        assert json.loads(relayctl("--json", "read", "--unread", agent=dst).stdout) == [], dst
    relayctl("down", "--clean", str(team.file))
    wait_for("every process of the team to end", lambda: not _processes_of(store_dir), timeout=30)
    config = (home / ".copilot" / "config.json").read_text()  # Copilot writes `//` comment lines above the JSON
    assert "firstLaunchAt" in config and repo not in config, config  # Copilot's own keys kept; the trust gone with the team


# `up`, `down`, `up` again in one project: `down` records every agent as stopped, and Codex
# CLI, Copilot CLI and OpenCode report nothing when they start, so a state that outlived its
# program held every trigger back. A state belongs to its program process now
# (relayd.arrival.program_state): the new processes' panes are judged afresh.

UP_AGAIN_WITHIN = 10.0  # seconds from the send to the first request carrying the mail at the program's model server


def _answering_done(name: str):
    from support.hook_sessions import PROGRAMS
    from support.model_anthropic import messages_responder, text as claude_text
    from support.model_gemini import gemini_responder, text as gemini_text
    from support.model_openai import chat_responder, chat_text, message, responses_responder

    texts = {"claude": lambda s: [claude_text(s)], "codex": lambda s: [message(s)], "gemini": lambda s: [gemini_text(s)],
             "opencode": chat_text, "copilot": chat_text}
    responders = {"claude": messages_responder, "codex": responses_responder, "gemini": gemini_responder,
                  "opencode": chat_responder, "copilot": chat_responder}
    answer = responders[name](lambda body: texts[name]("Done."))
    return answer, PROGRAMS[name].is_turn


def _up_and_at_prompts(team: Team, relayctl, screen) -> None:
    started = relayctl("up", "--trust", str(team.file), timeout=240)
    assert started.stderr == "", started.stderr
    for name, ready in (("opencode", "Ask anything"), ("copilot", "/ commands")):  # `up` waits for the others
        try:
            wait_for(f"{name}'s prompt", lambda: ready in screen(name), timeout=90)
        except AssertionError:
            raise AssertionError(f"{ready!r} never showed; {name}'s pane shows:\n{screen(name)}") from None


@pytest.mark.real_program
@pytest.mark.timeout(600)
def test_up_down_up_again_every_programs_model_gets_idle_mail_within_ten_seconds(team: Team, relayctl) -> None:
    from support.agent_programs import copilot_env, opencode_config, opencode_env, program
    from support.model_openai import codex_config
    from support.scripted_model import ScriptedModel

    team.file.write_text('team = "crew"\nrepo = "repo"\n' + "".join(
        f'\n[[agents]]\nname = "{name}"\nprogram = "{name}"\n' + ('model = "gemini-2.5-flash"\n' if name == "gemini" else "")
        + ('lead = true\n' if name == "claude" else "") for name in FIVE))
    with ExitStack() as stack:
        answers = {name: _answering_done(name) for name in FIVE}
        seen_at: dict[int, float] = {}

        def timed(answer):
            def respond(request):
                seen_at[id(request)] = time.monotonic()
                return answer(request)
            return respond

        models = {name: stack.enter_context(ScriptedModel(timed(answers[name][0]))) for name in FIVE}
        home = _claude_home(team, models["claude"].url)
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(models["codex"].url))
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        opencode_config(team.repo, models["opencode"].url)
        opencode = opencode_env(team.repo, home)
        opencode.pop("PWD")  # `up` sets it for the pane
        team.env.update(CODEX_HOME=str(home / ".codex"), SCRIPTED_API_KEY="sk-scripted", GOOGLE_GEMINI_BASE_URL=models["gemini"].url,
                        GEMINI_API_KEY="scripted-key", **opencode, **copilot_env(home, models["copilot"].url),
                        PATH=":".join([*{str(program(name).parent) for name in FIVE}, team.env["PATH"]]))
        team.env.pop("CI", None)  # a person's terminal: with CI set, Gemini CLI draws no interactive screen

        def screen(name: str) -> str:
            return team.tmux("capture-pane", "-p", "-J", "-t", team.panes()[name][0])

        _up_and_at_prompts(team, relayctl, screen)
        relayctl("down", str(team.file))
        _up_and_at_prompts(team, relayctl, screen)
        time.sleep(2)  # at rest at their prompts: idle mail, not mail at start-up

        relayctl("register", "boss")
        sent_at = {}
        for name in FIVE:
            relayctl("send", name, "--subject", f"AFTER-RESTART-{name}", "anything new?", agent="boss")
            sent_at[name] = time.monotonic()

        def arrived(name: str, turn: bool = False) -> float | None:
            is_turn = answers[name][1]
            return next((seen_at[id(r)] for r in list(models[name].requests) if (is_turn(r) or not turn) and f"AFTER-RESTART-{name}" in r.text), None)

        try:
            wait_for("the mail in a turn of every model", lambda: all(arrived(name, turn=True) for name in FIVE), timeout=60, every=0.25)
        except AssertionError:
            shown = "\n".join(f"--- {name} ({'arrived' if arrived(name) else 'missing'}):\n{screen(name)}" for name in FIVE)
            raise AssertionError(f"mail after a second up never reached some models\n{shown}") from None
        late = {name: round(arrived(name) - sent_at[name], 1) for name in FIVE if arrived(name) - sent_at[name] > UP_AGAIN_WITHIN}
        assert not late, f"mail took longer than {UP_AGAIN_WITHIN}s after the second up: {late}"
        by = {a["name"]: a.get("arrives_by") for a in json.loads(relayctl("--json", "status").stdout)["agents"]}
        assert by["claude"] == "claude-inbox", by  # started by `up`, Claude Code's mail comes through its own inbox
