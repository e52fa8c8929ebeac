"""What `hooks install`, `hooks uninstall` and `uninstall` must never do to a person's files:
write through a symlink out of the project, cut a hard-linked settings file off from its
other names, delete relay's file once the person changed it, or move a key the person
added out of the table they put it in. Real files, the real relayctl, a scratch HOME."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a dozen relayctl processes each


@pytest.fixture
def project(short_tmp: Path, relayctl) -> Path:
    path = short_tmp / "project"
    path.mkdir()
    home = short_tmp / "home"
    home.mkdir()
    relayctl.env = dict(relayctl.env, HOME=str(home))
    return path


def _files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("program, folder", [("opencode", ".opencode"), ("copilot", ".github"), ("claude", ".claude"),
                                             ("codex", ".codex"), ("gemini", ".gemini")])
def test_a_folder_of_the_project_linked_outside_it_is_never_written_through(relayctl, project: Path, short_tmp: Path,
                                                                            program: str, folder: str) -> None:
    """A cloned repository can hold `.opencode -> ~/somewhere`: relay's install must not put
    its file there, and uninstall must not delete a file of that name there."""
    outside = short_tmp / "outside"
    (outside / "plugin").mkdir(parents=True)
    (outside / "hooks").mkdir()
    (outside / "plugin" / "relay.js").write_text("// relay's OpenCode plugin\n// theirs, outside the project\n")
    (outside / "hooks" / "relay.json").write_text('{"version": 1, "hooks": {}}\n')
    before = _files_under(outside)
    (project / folder).symlink_to(outside)

    refused = relayctl("hooks", "install", "--for", program, "--project", str(project), check=False)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "outside the project" in refused.stderr and "Traceback" not in refused.stderr
    gone = relayctl("hooks", "uninstall", "--for", program, "--project", str(project), check=False)
    if program == "opencode":  # a relay.js is there, through the link: refused, not deleted
        assert gone.returncode == 1 and "outside the project" in gone.stderr and len(gone.stderr.splitlines()) == 1
    else:  # nothing of relay's there: nothing to do
        assert gone.returncode == 0 and "nothing changed" in gone.stdout
    assert _files_under(outside) == before and sorted(os.listdir(outside)) == ["hooks", "plugin"]


def test_relayctl_uninstall_says_which_file_it_left_and_still_cleans_the_others(relayctl, project: Path, short_tmp: Path) -> None:
    relayctl("hooks", "install", "--for", "claude", "--project", str(project))
    outside = short_tmp / "outside"
    (outside / "plugin").mkdir(parents=True)
    (outside / "plugin" / "relay.js").write_text("// relay's OpenCode plugin\n")
    (project / ".opencode").symlink_to(outside)
    done = relayctl("uninstall", "--project", str(project))
    assert "left as it is: " in done.stdout and "outside the project" in done.stdout
    assert f"relay's entries removed from {project / '.claude' / 'settings.json'}" in done.stdout
    assert not (project / ".claude").exists()  # relay made it: gone
    assert (outside / "plugin" / "relay.js").read_text() == "// relay's OpenCode plugin\n"


def test_relays_plugin_the_person_changed_is_kept_by_uninstall_with_a_line(relayctl, project: Path) -> None:
    plugin = project / ".opencode" / "plugin" / "relay.js"
    relayctl("hooks", "install", "--for", "opencode", "--project", str(project))
    mine = plugin.read_text() + "// also log every prompt to ~/prompts.log\n"
    plugin.write_text(mine)

    again = relayctl("hooks", "install", "--for", "opencode", "--project", str(project), check=False)
    assert again.returncode == 1 and "has changed since relay installed it" in again.stderr and len(again.stderr.splitlines()) == 1
    assert plugin.read_text() == mine  # not overwritten either
    kept = relayctl("hooks", "uninstall", "--for", "opencode", "--project", str(project))
    assert f"kept {plugin}: it has changed since relay installed it" in kept.stdout
    assert plugin.read_text() == mine
    done = relayctl("uninstall", "--project", str(project))
    assert f"kept {plugin}" in done.stdout and plugin.read_text() == mine and "nothing of relay's" not in done.stdout


def test_relays_plugin_left_as_relay_wrote_it_goes_even_with_no_note_of_what_relay_wrote(relayctl, project: Path) -> None:
    """A plugin installed before relay noted what it wrote (or with $XDG_STATE_HOME wiped) is
    relay's when it is relay's plugin with some hook command in it."""
    plugin = project / ".opencode" / "plugin" / "relay.js"
    relayctl("hooks", "install", "--for", "opencode", "--project", str(project))
    state = Path(os.environ["XDG_STATE_HOME"]) / "relay"
    for record in (state / "originals").iterdir():
        record.unlink()
    relayctl("hooks", "uninstall", "--for", "opencode", "--project", str(project))
    assert not plugin.exists()


@pytest.mark.parametrize("program, name", [("claude", ".claude/settings.json"), ("gemini", ".gemini/settings.json")])
def test_a_hard_linked_settings_file_is_refused_with_a_line_and_keeps_its_link(relayctl, project: Path, short_tmp: Path,
                                                                               program: str, name: str) -> None:
    dotfiles = short_tmp / "dotfiles" / "settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"theme": "dark"}\n')
    settings = project / name
    settings.parent.mkdir()
    os.link(dotfiles, settings)

    refused = relayctl("hooks", "install", "--for", program, "--project", str(project), check=False)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1 and "2 hard links" in refused.stderr
    assert os.path.samefile(settings, dotfiles) and dotfiles.read_text() == '{"theme": "dark"}\n'
    assert sorted(os.listdir(settings.parent)) == ["settings.json"]  # no temp file left behind


def test_a_settings_file_hard_linked_after_install_is_left_by_uninstall_with_a_line(relayctl, project: Path, short_tmp: Path) -> None:
    relayctl("hooks", "install", "--for", "codex", "--project", str(project))
    hooks = project / ".codex" / "hooks.json"
    dotfiles = short_tmp / "codex-hooks.json"
    os.link(hooks, dotfiles)
    before = hooks.read_bytes()
    done = relayctl("uninstall", "--project", str(project))
    assert f"left as it is: {hooks} has 2 hard links" in done.stdout
    assert os.path.samefile(hooks, dotfiles) and hooks.read_bytes() == before


def test_keys_the_person_added_beside_relays_stay_in_their_table(relayctl, project: Path) -> None:
    """Tables relay made (Claude Code's "permissions", Gemini CLI's "mcpServers", the events
    under "hooks") keep what the person put in them after relay's entries go."""
    from relayctl import hook_settings
    from relayctl.cmd_mcp import SERVER_NAME, server

    relayctl("hooks", "install", "--for", "claude", "--project", str(project))
    relayctl("hooks", "install", "--for", "gemini", "--project", str(project))
    hook_settings.put_server("gemini", str(project), SERVER_NAME, server("gemini", "$RELAY_AGENT", relayctl.env["RELAY_DIR"], None, None))
    claude, gemini = project / ".claude" / "settings.json", project / ".gemini" / "settings.json"
    mine = json.loads(claude.read_text())
    mine["permissions"]["deny"] = ["Read(.env)"]
    mine["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": "notify-send done"})
    claude.write_text(json.dumps(mine))
    theirs = json.loads(gemini.read_text())
    theirs["mcpServers"]["github"] = {"command": "github-mcp"}
    gemini.write_text(json.dumps(theirs))

    relayctl("uninstall", "--project", str(project))
    assert json.loads(claude.read_text()) == {"permissions": {"deny": ["Read(.env)"]},
                                              "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
    assert json.loads(gemini.read_text()) == {"mcpServers": {"github": {"command": "github-mcp"}}}


def test_an_empty_table_the_person_had_before_relay_stays_once_relays_entries_go(relayctl, project: Path) -> None:
    """Only a table relay made goes when relay's entries leave it empty: the person's own
    `"permissions": {"allow": []}` stays, even when the file changed since (no byte-for-byte
    put-back then)."""
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"allow": []}, "theme": "dark"}))
    relayctl("hooks", "install", "--for", "claude", "--project", str(project))
    assert json.loads(settings.read_text())["permissions"]["allow"] == ["mcp__relay"]
    changed = json.loads(settings.read_text()) | {"theme": "light"}
    settings.write_text(json.dumps(changed))
    relayctl("uninstall", "--project", str(project))
    assert json.loads(settings.read_text()) == {"permissions": {"allow": []}, "theme": "light"}
