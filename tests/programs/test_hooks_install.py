"""`relayctl hooks install|uninstall`: relay's entries merged into each program's project
settings, and only relay's taken out again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop

FILES = {"claude": ".claude/settings.json", "codex": ".codex/hooks.json", "gemini": ".gemini/settings.json"}
EVENTS = {
    "claude": ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "PermissionRequest", "Notification", "StopFailure", "SessionEnd"],
    "codex": ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "PermissionRequest", "Interrupt"],
    "gemini": ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent", "Notification", "SessionEnd"],
}
THEIRS = {"type": "command", "command": "notify-send 'turn done'"}


@pytest.fixture
def project(short_tmp: Path) -> Path:
    path = short_tmp / "project"
    path.mkdir()
    return path


def _settings(project: Path, program: str) -> dict:
    return json.loads((project / FILES[program]).read_text())


def _relay_commands(settings: dict) -> dict[str, list[str]]:
    return {event: [h["command"] for g in groups for h in g["hooks"] if " hook " in h["command"]] for event, groups in settings["hooks"].items()}


@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_install_merges_beside_other_hooks_and_keys_and_runs_twice_unchanged(relayctl, project: Path, program: str) -> None:
    path = project / FILES[program]
    path.parent.mkdir()
    stop = EVENTS[program][-1]
    path.write_text(json.dumps({"model": "keep-me", "hooks": {stop: [{"hooks": [THEIRS]}], "PreToolUse": [{"matcher": "Bash", "hooks": [THEIRS]}]}}))
    proc = relayctl("hooks", "install", "--for", program, "--agent", "inferno", "--project", str(project))
    assert "installed relay's hooks" in proc.stdout and f"RELAY_AGENT=inferno {program}" in proc.stdout
    settings = _settings(project, program)
    granted = settings.get("permissions", {}).get("allow", [])
    assert ("the permissions.allow rule 'mcp__relay' there" in proc.stdout) == (granted == ["mcp__relay"]) == (program == "claude")  # said when written
    assert settings["model"] == "keep-me"
    assert settings["hooks"]["PreToolUse"] == [{"matcher": "Bash", "hooks": [THEIRS]}]
    assert settings["hooks"][stop][0] == {"hooks": [THEIRS]}  # theirs first, as it was
    commands = _relay_commands(settings)
    assert sorted(e for e, c in commands.items() if c) == sorted(EVENTS[program])
    assert all(len(c) == 1 and c[0].endswith(f"relayctl --dir {relayctl.env['RELAY_DIR']} --socket {relayctl.env['RELAY_SOCKET']} hook {program}")
               for e, c in commands.items() if e in EVENTS[program])
    tool_event = EVENTS[program][2]
    assert settings["hooks"][tool_event][0]["matcher"] == "*"
    before = path.read_bytes()
    again = relayctl("hooks", "install", "--for", program, "--agent", "inferno", "--project", str(project))
    assert "nothing changed" in again.stdout and path.read_bytes() == before


@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_uninstall_takes_out_only_relays_entries(relayctl, project: Path, program: str) -> None:
    path = project / FILES[program]
    path.parent.mkdir()
    stop = EVENTS[program][-1]
    path.write_text(json.dumps({"hooks": {stop: [{"hooks": [THEIRS]}]}, "theme": "dark"}))
    relayctl("hooks", "install", "--for", program, "--agent", "inferno", "--project", str(project))
    proc = relayctl("hooks", "uninstall", "--for", program, "--project", str(project))
    assert "removed relay's hooks" in proc.stdout
    assert _settings(project, program) == {"hooks": {stop: [{"hooks": [THEIRS]}]}, "theme": "dark"}
    again = relayctl("hooks", "uninstall", "--for", program, "--project", str(project))
    assert "nothing changed" in again.stdout


def test_a_hand_written_entry_is_replaced_not_doubled(relayctl, project: Path) -> None:
    (project / ".claude").mkdir()
    pasted = {"type": "command", "command": "relayctl --agent inferno hook claude"}
    (project / FILES["claude"]).write_text(json.dumps({"hooks": {"Stop": [{"hooks": [THEIRS, pasted]}]}}))
    relayctl("hooks", "install", "--for", "claude", "--agent", "glacier", "--project", str(project))
    stop = _settings(project, "claude")["hooks"]["Stop"]
    assert len(stop) == 1 and stop[0]["hooks"][0] == THEIRS
    assert stop[0]["hooks"][1]["command"].endswith("relayctl --dir " + relayctl.env["RELAY_DIR"] + " --socket " + relayctl.env["RELAY_SOCKET"] + " hook claude")


@pytest.mark.parametrize("program", ["claude", "codex", "gemini"])
def test_the_installed_command_delivers_mail_when_run_by_a_shell(relayctl, project: Path, program: str) -> None:
    """Agent programs run the command through `sh -c` with their own environment: it
    must name this relayctl and this store itself; the agent is the session's RELAY_AGENT,
    and a session without one (not started by relay) gets nothing, silently, exit 0."""
    relayctl("init", "--preset", "overlord")
    relayctl("hooks", "install", "--for", program, "--agent", "inferno", "--project", str(project))
    relayctl("send", "inferno", "Deploy window moved to 15:00", agent="overlord")
    before_prompt = EVENTS[program][1]
    command = _relay_commands(_settings(project, program))[before_prompt][0]
    assert "inferno" not in json.dumps(_settings(project, program))  # the shared file names no agent
    event = json.dumps({"hook_event_name": before_prompt, "prompt": "go"})
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(project)}  # no RELAY_* and no venv on PATH
    nobody = subprocess.run(["sh", "-c", command], input=event, env=bare, cwd=project, capture_output=True, text=True, timeout=60)
    assert (nobody.returncode, nobody.stdout, nobody.stderr) == (0, "", "")
    proc = subprocess.run(["sh", "-c", command], input=event, env=dict(bare, RELAY_AGENT="inferno"), cwd=project, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Deploy window moved to 15:00" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


def test_once_relay_is_gone_its_hooks_do_nothing_silently(relayctl, project: Path, short_tmp: Path) -> None:
    """relay removed before `relayctl uninstall` ran (its venv deleted): the entries it left
    must not turn every prompt of every session in the project into a hook error."""
    from support.throwaway import throwaway_install

    venv = short_tmp / "venv"
    python = throwaway_install(venv)
    subprocess.run([str(python), "-m", "relayctl", "hooks", "install", "--for", "claude", "--project", str(project)],
                   env=relayctl.env, check=True, capture_output=True, timeout=60)
    command = _relay_commands(_settings(project, "claude"))["UserPromptSubmit"][0]
    event = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "go"})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project), "RELAY_AGENT": "inferno", "RELAY_DIR": relayctl.env["RELAY_DIR"]}
    relayctl("init", "--preset", "overlord")
    relayctl("send", "inferno", "still here", agent="overlord")
    there = subprocess.run(["sh", "-c", command], input=event, env=env, cwd=project, capture_output=True, text=True, timeout=60)
    assert there.returncode == 0 and "still here" in there.stdout, there.stderr  # while relay is installed, it works

    shutil.rmtree(venv)
    gone = subprocess.run(["sh", "-c", command], input=event, env=env, cwd=project, capture_output=True, text=True, timeout=60)
    assert (gone.returncode, gone.stdout, gone.stderr) == (0, "", "")
    relayctl("hooks", "uninstall", "--for", "claude", "--project", str(project))  # still recognised as relay's
    assert "hooks" not in _settings(project, "claude")


def test_gemini_entries_carry_a_name_for_its_hooks_commands(relayctl, project: Path) -> None:
    relayctl("hooks", "install", "--for", "gemini", "--agent", "inferno", "--project", str(project))
    entries = [h for groups in _settings(project, "gemini")["hooks"].values() for g in groups for h in g["hooks"]]
    assert {h["name"] for h in entries} == {"relay"}


@pytest.mark.parametrize("content", ["{\"hooks\": {", "[1, 2]", "{\"hooks\": []}", "{\"hooks\": {\"Stop\": {}}}"])
def test_a_settings_file_relay_cannot_read_is_refused_and_left_as_it_is(relayctl, project: Path, content: str) -> None:
    (project / ".claude").mkdir()
    path = project / FILES["claude"]
    path.write_text(content)
    proc = relayctl("hooks", "install", "--for", "claude", "--agent", "inferno", "--project", str(project), check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr and str(path) in proc.stderr
    assert path.read_text() == content
    assert sorted(os.listdir(path.parent)) == ["settings.json"]  # no temp file left behind


def test_a_symlinked_settings_file_stays_a_link_and_one_leaving_the_project_is_refused(relayctl, project: Path, short_tmp: Path) -> None:
    shared = project / "config" / "gemini-settings.json"
    shared.parent.mkdir()
    shared.write_text(json.dumps({"theme": "dark"}))
    (project / ".gemini").mkdir()
    (project / FILES["gemini"]).symlink_to(shared)
    relayctl("hooks", "install", "--for", "gemini", "--project", str(project))
    assert (project / FILES["gemini"]).is_symlink()
    assert json.loads(shared.read_text())["theme"] == "dark" and "AfterAgent" in json.loads(shared.read_text())["hooks"]

    dotfiles = short_tmp / "dotfiles-settings.json"
    dotfiles.write_text('{"theme": "light"}')
    (project / ".claude").mkdir()
    (project / FILES["claude"]).symlink_to(dotfiles)
    refused = relayctl("hooks", "install", "--for", "claude", "--project", str(project), check=False)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1 and "outside the project" in refused.stderr
    assert dotfiles.read_text() == '{"theme": "light"}'


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_number_json_does_not_have_is_refused_not_rewritten(relayctl, project: Path, value: str) -> None:
    (project / ".claude").mkdir()
    text = '{"cleanupPeriodDays": %s}' % value
    (project / FILES["claude"]).write_text(text)
    proc = relayctl("hooks", "install", "--for", "claude", "--project", str(project), check=False)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "is not valid JSON" in proc.stderr
    assert (project / FILES["claude"]).read_text() == text


def test_uninstall_keeps_a_users_own_command_that_mentions_relays(relayctl, project: Path) -> None:
    (project / ".claude").mkdir()
    theirs = [{"type": "command", "command": "cd tools && relayctl hook claude"},
              {"type": "command", "command": "[ -n \"$RELAY_AGENT\" ] && ~/bin/relayctl --agent me hook claude"}]
    (project / FILES["claude"]).write_text(json.dumps({"hooks": {"Stop": [{"hooks": theirs}]}}))
    relayctl("hooks", "install", "--for", "claude", "--project", str(project))
    assert _settings(project, "claude")["hooks"]["Stop"][0]["hooks"][:2] == theirs  # not taken for relay's
    relayctl("hooks", "uninstall", "--for", "claude", "--project", str(project))
    assert _settings(project, "claude") == {"hooks": {"Stop": [{"hooks": theirs}]}}


def test_relayctl_uninstall_puts_back_the_project_and_its_files_byte_for_byte(relayctl, project: Path, short_tmp: Path) -> None:
    """Everything relay writes into a project (hooks for the three programs, Gemini's
    relay-mcp server, Claude Code's allow rules for relay's tools, the pre-commit guard) goes,
    and each file gets the exact bytes it had: the person's own formatting included."""
    from relayctl import hook_settings
    from relayctl.cmd_mcp import SERVER_NAME, server

    env = dict(relayctl.env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / ".claude").mkdir()
    mine = '{\n    "permissions": {"allow": ["Bash(npm test)"]},\n    "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}\n}'
    (project / FILES["claude"]).write_text(mine)
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=project, env=env, check=True)

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(project)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(project.rglob("*"))
                if ".git/objects" not in str(p) and ".git/logs" not in str(p) and p.name not in ("index", "ORIG_HEAD")}

    (project / "opencode.json").write_text('{ "theme": "tokyonight" }\n')  # the person's OpenCode settings
    before = snapshot()
    for program in (*FILES, "copilot", "opencode"):
        relayctl("hooks", "install", "--for", program, "--project", str(project))
    hook_settings.put_server("gemini", str(project), SERVER_NAME, server("gemini", "$RELAY_AGENT", relayctl.env["RELAY_DIR"], None, None))
    hook_settings.put_server("opencode", str(project), SERVER_NAME, server("opencode", "{env:RELAY_AGENT}", relayctl.env["RELAY_DIR"], None, None))  # as `up` does
    claude = json.loads((project / FILES["claude"]).read_text())
    claude["permissions"]["allow"] += ["mcp__relay__send_message", "mcp__relay"]  # as `up` allows relay's tools
    (project / FILES["claude"]).write_text(json.dumps(claude, indent=2))
    relayctl("guard", "install", "--repo", str(project))
    assert snapshot() != before

    done = relayctl("uninstall", "--project", str(project))
    assert "guard removed" in done.stdout and done.stdout.count("relay's entries removed") == 5
    assert snapshot() == before
    assert not (Path(os.environ["XDG_STATE_HOME"]) / "relay").exists()  # the originals went with it
    again = relayctl("uninstall", "--project", str(project))
    assert "nothing of relay's" in again.stdout and snapshot() == before


def test_uninstall_keeps_what_the_person_changed_since(relayctl, project: Path) -> None:
    (project / ".claude").mkdir()
    (project / FILES["claude"]).write_text('{"theme":   "dark"}')
    relayctl("hooks", "install", "--for", "claude", "--project", str(project))
    changed = _settings(project, "claude") | {"model": "opus"}
    (project / FILES["claude"]).write_text(json.dumps(changed))
    relayctl("uninstall", "--project", str(project))
    assert _settings(project, "claude") == {"theme": "dark", "model": "opus"}


def test_a_settings_file_keeps_its_permissions_and_a_new_one_gets_the_umasks(relayctl, project: Path) -> None:
    """Written as the store writes its files (relayd.fsio.replace_file: temp file, fsync,
    rename, directory fsync), with the permissions an editor saving it would keep."""
    mine = project / FILES["claude"]
    mine.parent.mkdir()
    mine.write_text(json.dumps({"theme": "dark"}))
    mine.chmod(0o640)
    relayctl("hooks", "install", "--for", "claude", "--agent", "inferno", "--project", str(project))
    relayctl("hooks", "install", "--for", "codex", "--agent", "inferno", "--project", str(project))
    assert "Stop" in _settings(project, "claude")["hooks"] and mine.stat().st_mode & 0o777 == 0o640
    umask = os.umask(0)
    os.umask(umask)
    assert (project / FILES["codex"]).stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(os.listdir(mine.parent)) == ["settings.json"] and sorted(os.listdir(project / ".codex")) == ["hooks.json"]


def test_install_names_no_agent_so_the_file_is_the_same_for_every_session(relayctl, project: Path) -> None:
    """`hooks install --agent X` then `up` (which installs with none) used to flip the file."""
    relayctl("hooks", "install", "--for", "codex", "--agent", "inferno", "--project", str(project))
    first = (project / FILES["codex"]).read_bytes()
    again = relayctl("hooks", "install", "--for", "codex", "--agent", "glacier", "--project", str(project))
    plain = relayctl("hooks", "install", "--for", "codex", "--project", str(project))
    assert "nothing changed" in again.stdout and "nothing changed" in plain.stdout
    assert (project / FILES["codex"]).read_bytes() == first and b"inferno" not in first
    assert "RELAY_AGENT=NAME codex" in plain.stdout
    bad = relayctl("hooks", "install", "--for", "gemini", "--agent", "Bad Name", "--project", str(project), check=False)
    assert bad.returncode == 1 and "invalid agent name" in bad.stderr
    assert not (project / ".gemini").exists()


def test_install_and_uninstall_are_python_functions_too(relayctl, project: Path) -> None:
    from relayctl import hook_settings

    first = hook_settings.install("codex", str(project))
    assert first.changed and first.path == str(project / FILES["codex"])
    assert hook_settings.install("codex", str(project)).changed is False
    assert hook_settings.uninstall("codex", str(project)).events == tuple(EVENTS["codex"])
    assert _settings(project, "codex") == {}


def test_claude_code_gets_relays_tools_pre_approved_beside_the_users_rules_and_uninstall_takes_only_that(relayctl, project: Path) -> None:
    path = project / FILES["claude"]
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"allow": ["Bash(npm test)"], "deny": ["Read(.env)"]}}))
    relayctl("hooks", "install", "--for", "claude", "--agent", "inferno", "--project", str(project))
    assert _settings(project, "claude")["permissions"] == {"allow": ["Bash(npm test)", "mcp__relay"], "deny": ["Read(.env)"]}
    relayctl("hooks", "install", "--for", "claude", "--agent", "inferno", "--project", str(project))
    assert _settings(project, "claude")["permissions"]["allow"] == ["Bash(npm test)", "mcp__relay"]  # once
    relayctl("hooks", "uninstall", "--for", "claude", "--project", str(project))
    assert _settings(project, "claude") == {"permissions": {"allow": ["Bash(npm test)"], "deny": ["Read(.env)"]}}


def test_copilot_gets_relays_own_hooks_file_which_uninstall_removes(relayctl, project: Path) -> None:
    path = project / ".github" / "hooks" / "relay.json"
    relayctl("hooks", "install", "--for", "copilot", "--agent", "inferno", "--project", str(project))
    written = json.loads(path.read_text())
    assert written["version"] == 1
    events = ["sessionStart", "userPromptSubmitted", "postToolUse", "agentStop", "permissionRequest", "sessionEnd", "errorOccurred"]
    assert sorted(written["hooks"]) == sorted(events)
    assert all(entries == [{"type": "command", "bash": entries[0]["bash"]}] and entries[0]["bash"].endswith(f"hook copilot {event}")
               for event, entries in written["hooks"].items())
    before = path.read_bytes()
    assert "nothing changed" in relayctl("hooks", "install", "--for", "copilot", "--agent", "inferno", "--project", str(project)).stdout
    assert path.read_bytes() == before
    relayctl("hooks", "uninstall", "--for", "copilot", "--project", str(project))
    assert not path.exists()


def test_copilots_session_start_runs_relayctl_only_in_a_session_without_an_agent_name(relayctl, project: Path) -> None:
    """Copilot runs sessionStart before its first prompt's hook, and in an agent's session it
    has nothing to do there (no state; the door is reported at the prompt): its entry starts
    no relayctl then. A session without an agent name still gets relay's line on how to start as one."""
    relayctl("init", "--preset", "overlord")
    relayctl("hooks", "install", "--for", "copilot", "--project", str(project))
    hooks = json.loads((project / ".github" / "hooks" / "relay.json").read_text())["hooks"]
    start, prompt = hooks["sessionStart"][0]["bash"], hooks["userPromptSubmitted"][0]["bash"]
    event = json.dumps({"timestamp": 1764000000000, "cwd": str(project), "source": "new"})
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(project)}

    nobody = subprocess.run(["bash", "-c", start], input=event, env=bare, cwd=project, capture_output=True, text=True, timeout=60)
    assert nobody.returncode == 0, nobody.stderr
    assert "has no agent name" in json.loads(nobody.stdout)["additionalContext"]

    door = Path(relayctl.env["RELAY_DIR"]) / "agents" / "inferno" / "copilot-extension"
    agent = dict(bare, RELAY_AGENT="inferno")
    started = subprocess.run(["bash", "-c", start], input=event, env=agent, cwd=project, capture_output=True, text=True, timeout=60)
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    assert not door.exists()  # relayctl did not run: it reports the session's door at every event it is given
    subprocess.run(["bash", "-c", prompt], input=json.dumps({"timestamp": 1764000000001, "cwd": str(project), "prompt": "go"}),
                   env=agent, cwd=project, capture_output=True, text=True, timeout=60)
    assert "extension is not installed" in json.loads(door.read_text())["unusable"]  # the prompt's hook reports it, and why not
    assert "nothing changed" in relayctl("hooks", "install", "--for", "copilot", "--project", str(project)).stdout  # still relay's entry


def test_opencode_gets_relays_plugin_and_a_file_of_someone_elses_is_left_alone(relayctl, project: Path) -> None:
    path = project / ".opencode" / "plugin" / "relay.js"
    relayctl("hooks", "install", "--for", "opencode", "--agent", "inferno", "--project", str(project))
    text = path.read_text()
    # the project's plugin names no agent: each OpenCode session's RELAY_AGENT says whose mail it carries
    assert f'"hook", "opencode"' in text and f'"--dir", "{relayctl.env["RELAY_DIR"]}"' in text and "const AGENT = null" in text and "inferno" not in text
    relayctl("hooks", "uninstall", "--for", "opencode", "--project", str(project))
    assert not path.exists() and not (project / ".opencode").exists()  # with the folders relay made for it
    path.parent.mkdir(parents=True)
    path.write_text("export const Mine = async () => ({})\n")
    refused = relayctl("hooks", "install", "--for", "opencode", "--agent", "inferno", "--project", str(project), check=False)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1 and "not relay's plugin" in refused.stderr
    relayctl("hooks", "uninstall", "--for", "opencode", "--project", str(project))
    assert path.read_text() == "export const Mine = async () => ({})\n"
