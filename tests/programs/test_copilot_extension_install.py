"""relay's Copilot CLI extension as a file in the project: `hooks install --extension` writes
it, uninstall removes it like relay's other files, and `up` uses it only where the team
file asks (`extension = true`, with --experimental on Copilot's command line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relayd.errors import UsageError

EXTENSION = Path(".github") / "extensions" / "relay" / "extension.mjs"


@pytest.fixture
def project(short_tmp: Path) -> Path:
    path = short_tmp / "project"
    path.mkdir()
    return path


def test_install_writes_relays_extension_naming_no_agent_and_uninstall_takes_it_and_its_folders(relayctl, project: Path) -> None:
    done = json.loads(relayctl("--json", "hooks", "install", "--for", "copilot", "--extension", "--agent", "inferno",
                               "--project", str(project)).stdout)
    path = project / EXTENSION
    assert done["extension"] == {"path": str(path), "changed": True}
    text = path.read_text()
    # the project's extension names no agent: each Copilot session's RELAY_AGENT says whose mail it takes
    argv = json.loads(next(line for line in text.splitlines() if line.startswith("const RELAYCTL = ")).partition(" = ")[2])
    assert argv[-3:] == ["hook", "copilot", "sessionStart"] and argv[argv.index("--dir") + 1] == relayctl.env["RELAY_DIR"]
    assert "inferno" not in text
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    assert 'mode: "enqueue"' in code and "immediate" not in code  # never "immediate" (relayd.programs.copilot)
    again = relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project))
    assert "already there: relay's extension" in again.stdout and path.read_text() == text
    gone = json.loads(relayctl("--json", "hooks", "uninstall", "--for", "copilot", "--project", str(project)).stdout)
    assert gone["extension"] == {"path": str(path), "changed": True}
    assert list(project.iterdir()) == []  # the hooks file and the extension, with every folder relay made for them


def test_relayctl_uninstall_removes_the_extension_and_keeps_one_the_person_changed(relayctl, project: Path) -> None:
    relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project))
    done = relayctl("uninstall", "--project", str(project))
    assert "relay's extension removed" in done.stdout and list(project.iterdir()) == []
    relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project))
    path = project / EXTENSION
    path.write_text(path.read_text() + "// and a line of mine\n")
    kept = relayctl("uninstall", "--project", str(project))
    assert "kept" in kept.stdout and path.read_text().endswith("// and a line of mine\n")


def test_an_extension_file_of_someone_elses_is_refused_and_left_alone(relayctl, project: Path) -> None:
    path = project / EXTENSION
    path.parent.mkdir(parents=True)
    path.write_text("export default 1\n")
    refused = relayctl("hooks", "install", "--for", "copilot", "--extension", "--project", str(project), check=False)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1 and "not relay's extension" in refused.stderr
    relayctl("hooks", "uninstall", "--for", "copilot", "--project", str(project))
    assert path.read_text() == "export default 1\n"


def test_extension_is_refused_for_a_program_relay_has_none_for(relayctl, project: Path) -> None:
    refused = relayctl("hooks", "install", "--for", "codex", "--extension", "--project", str(project), check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "no extension for Codex CLI" in refused.stderr
    assert list(project.iterdir()) == []


def _team(project: Path, agent: str) -> Path:
    path = project / "relay-team.toml"
    path.write_text(f'team = "t"\nrepo = "."\n\n[[agents]]\n{agent}\n')
    return path


def test_up_runs_copilot_with_experimental_and_the_extension_only_where_the_team_file_asks(project: Path, store_dir: Path) -> None:
    from relayctl.team import clients, teamfile

    asked = teamfile.load(str(_team(project, 'name = "inferno"\nprogram = "copilot"\nextension = true')))
    argv = clients.launch(asked.agents[0], asked, str(store_dir), None, str(project / "state"))
    assert argv[0] == "copilot" and argv.count("--experimental") == 1
    assert (project / EXTENSION).exists()
    (project / EXTENSION).unlink()
    plain = teamfile.load(str(_team(project, 'name = "inferno"\nprogram = "copilot"')))
    argv = clients.launch(plain.agents[0], plain, str(store_dir), None, str(project / "state"))
    assert "--experimental" not in argv and not (project / EXTENSION).exists()


@pytest.mark.parametrize("agent, says", [
    ('name = "a"\nprogram = "claude"\nextension = true', 'extension = true needs program = "copilot"'),
    ('name = "a"\nprogram = "copilot"\nextension = "yes"', "extension must be true or false"),
])
def test_a_team_file_asking_for_an_extension_wrongly_is_refused_in_one_line(project: Path, agent: str, says: str) -> None:
    from relayctl.team import teamfile

    with pytest.raises(UsageError) as refused:
        teamfile.load(str(_team(project, agent)))
    assert says in str(refused.value) and "\n" not in str(refused.value)
