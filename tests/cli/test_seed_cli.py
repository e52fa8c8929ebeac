"""relayctl against seeds 003 and 004: message types, the agent prompt, the identity rule,
and what the docs promise (checked against what the commands do)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from relayd import ops
from relayd.names import MESSAGE_TYPES
from relayd.team.prompt import KINDS, LANGS, TOKEN_BUDGET, agent_prompt, tokens_conservative
from relayd.store import Store
from support.paths import DOCS



@pytest.fixture
def pair(relayctl: Any) -> Any:
    relayctl("register", "alice")
    relayctl("register", "bob")
    return relayctl


# -- message types (seed 003) ------------------------------------------------------------


@pytest.mark.slow
def test_send_takes_the_19_types_quietly_and_warns_on_others(pair: Any) -> None:
    assert len(MESSAGE_TYPES) == 19
    help_text = " ".join(pair("send", "--help").stdout.split())
    assert "IGNITE's 19" in help_text and "docs/cli.md lists them" in help_text  # not all 19 in every --help
    cli_md = " ".join((DOCS / "cli.md").read_text().split())
    assert all(f"`{t}`" in cli_md for t in MESSAGE_TYPES)
    for type_ in ("task_assignment", "dead_letter"):
        proc = pair("send", "bob", "typed", "--type", type_, agent="alice")
        assert proc.stderr == ""
    odd = pair("--json", "send", "bob", "typed", "--type", "tsk_assignment", agent="alice")
    assert odd.stderr.startswith("warning: --type 'tsk_assignment' is not one of IGNITE's message types")
    assert json.loads(odd.stdout)["type"] == "tsk_assignment"  # warned, not refused
    stored = json.loads(pair("--json", "read", agent="bob").stdout)
    assert [m["type"] for m in stored] == ["task_assignment", "dead_letter", "tsk_assignment"]


# -- the agent prompt (seed 004 §5.3, seed 002 §5) -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lang", LANGS)
def test_prompt_says_what_an_agent_must_do_in_under_300_tokens(relayctl: Any, kind: str, lang: str) -> None:
    proc = relayctl("--agent", "inferno", "prompt", "--for", kind, "--lang", lang)
    text = proc.stdout.strip()
    assert text == agent_prompt(kind, lang, "inferno") and "inferno" in text
    if kind == "cli":
        steps = ["relayctl read --unread --mark-read", "relayctl reserve", "relayctl release --all", "relayctl set-status"]
    else:
        steps = ["check_inbox", "reserve_files", "release_files", "update_status"]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions)  # unread mail comes first
    assert tokens_conservative(text) < TOKEN_BUDGET and len(text) / 4 < TOKEN_BUDGET
    if lang == "ja":
        assert "未読" in text


@pytest.mark.slow
def test_prompt_json_and_bad_choices(relayctl: Any) -> None:
    shown = json.loads(relayctl("--json", "prompt").stdout)
    assert shown["for"] == "cli" and shown["lang"] == "en" and "$RELAY_AGENT" in shown["text"]
    bad = relayctl("prompt", "--lang", "fr", check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and len(bad.stderr.strip().splitlines()) == 1


# -- --agent has no hostname default (seed 004 §4, refused on purpose) ---------------------


@pytest.mark.slow
def test_no_identity_is_refused_naming_every_way_to_give_one(pair: Any) -> None:
    proc = pair("send", "bob", "who am I?", check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "--agent" in line and "RELAY_AGENT" in line and "OVLD_ROLE" in line and "hostname" in line
    assert json.loads(pair("--json", "read", agent="bob").stdout) == []
    cli_md = (DOCS / "cli.md").read_text()
    assert "no hostname default" in " ".join(cli_md.split())


@pytest.mark.slow
def test_ovld_role_names_the_agent(pair: Any, relay_env: dict[str, str]) -> None:
    relay_env["OVLD_ROLE"] = "alice"
    pair("send", "bob", "from the role variable")
    assert json.loads(pair("--json", "read", agent="bob").stdout)[0]["from"] == "alice"


# -- docs that must match what the commands do ----------------------------------------------


@pytest.mark.slow
def test_unread_count_leaves_out_a_corrupt_line(pair: Any, store_dir: Path) -> None:
    for n in range(2):
        pair("send", "bob", f"before {n}", agent="alice")
    with open(store_dir / "agents" / "bob" / "inbox.jsonl", "ab") as fh:
        fh.write(b'{"id": "garbage", "this is not a message\n')
        fh.write(b"\n")  # and an empty line
    pair("send", "bob", "after", agent="alice")
    proc = pair("read", agent="bob")
    assert proc.stdout.count(" alice → bob ") == 3
    assert proc.stdout.strip().endswith("(3 unread)"), proc.stdout
    shown = json.loads(pair("--json", "read", "--unread", "--mark-read", agent="bob").stdout)
    assert [m["body"] for m in shown] == ["before 0", "before 1", "after"]
    assert pair("read", "--unread", agent="bob").stdout.strip() == "no unread messages"


@pytest.mark.slow
def test_coordination_md_names_the_state_an_archived_agent_shows(pair: Any) -> None:
    pair("gc", "--stale", "0s")
    line = next(line for line in pair("status", "--agents").stdout.splitlines() if line.strip().startswith("alice"))
    state = line.split()[1]
    assert state == "ARCHIVED"
    gc_section = (DOCS / "coordination.md").read_text().split("## gc", 1)[1]
    claimed = re.search(r"archived agent shows as (\w+)", gc_section)
    assert claimed and claimed.group(1) == state


def test_mcp_md_inspector_example_passes_the_store_and_names_the_old_revisions() -> None:
    mcp_md = (DOCS / "mcp.md").read_text()
    inspector = [line for line in mcp_md.splitlines() if "inspector --cli" in line]
    assert inspector and all("-e RELAY_DIR=" in line for line in inspector)
    assert "2025-03-26" in mcp_md.split("## Protocol", 1)[1].split("outputSchema", 1)[0]


# -- seed 004 §5.1: the runner script, as docs/cli.md shows it ---------------------------------


@pytest.mark.slow
def test_the_runner_snippet_in_cli_md_runs_as_written(relayctl: Any, relay_env: dict[str, str], short_tmp: Path) -> None:
    import os
    import shlex
    import signal
    import subprocess
    import sys

    text = (DOCS / "cli.md").read_text()
    section = text.split("## In a runner script (seed 004 §5.1)", 1)[1]
    snippet = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "export RELAY_AGENT=" in snippet and snippet.count("relayctl ") == 6
    relayctl("register", "athena")
    repo = short_tmp / "repo"
    repo.mkdir()
    variables = {
        "SESSION_NAME": "agent-bd-42", "AGENT_TYPE": "claude", "MODEL": "opus", "PROMPT_TRUNCATED": "fix the auth flow",
        "BEAD_ID": "bd-42", "REPO_PATH": str(repo), "WATCH_TIMEOUT_SECONDS": "3600", "FILES_FROM_PROMPT": "src/auth/**",
    }  # fmt: skip
    env = {key: value for key, value in relay_env.items() if key not in ("RELAY_AGENT", "OVLD_ROLE")}
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"  # the installed relayctl
    # the runner's own variables are shell variables, not exported: the snippet must not rely on them being in the environment
    script = "set -e\n" + "".join(f"{key}={shlex.quote(value)}\n" for key, value in variables.items()) + snippet
    log = short_tmp / "runner.log"
    with open(log, "wb") as output:  # a file, not a pipe: the heartbeat loop keeps it open
        proc = subprocess.Popen(["bash", "-c", script], env=env, stdout=output, stderr=output, start_new_session=True)
    try:
        proc.wait(timeout=60)
        err = log.read_text()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the heartbeat loop
        except ProcessLookupError:
            pass
    assert proc.returncode == 0 and "error" not in err, err
    agents = {a["name"]: a for a in json.loads(relayctl("--json", "status", "--agents").stdout)["agents"]}
    me = agents["agent-bd-42"]
    assert (me["program"], me["model"], me["task"], me["bead"], me["alive"]) == ("claude", "opus", "fix the auth flow", "bd-42", True)
    assert json.loads(relayctl("--json", "reservations", "--repo", str(repo)).stdout) == []  # reserved, then released
    [done] = json.loads(relayctl("--json", "read", agent="athena").stdout)
    assert (done["from"], done["body"], done["thread"], done["priority"]) == ("agent-bd-42", "Bead bd-42 complete", "bd-42", "high")
    events = [json.loads(line) for line in (Path(relay_env["RELAY_DIR"]) / "events.jsonl").read_text().splitlines()]
    assert any(e.get("topic") == "reservation" and e.get("action") == "created" for e in events)
    assert (Path(relay_env["RELAY_DIR"]) / "wake" / "trigger").exists()


# -- seed 000: unknown roles are refused in a preset's team ----------------------------------


@pytest.mark.slow
def test_a_preset_team_is_fixed_for_agent_programs_and_open_to_register(relayctl: Any, relay_env: dict[str, str], store_dir: Path) -> None:
    from relayd.client.full import Client
    from relayd.errors import UnknownAgent

    made = relayctl("init", "--preset", "overlord").stdout
    assert "the team is fixed" in made
    assert json.loads((store_dir / "config.json").read_text())["team"] == {"preset": "overlord", "allow_new": False}
    with Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"]) as client:
        with pytest.raises(UnknownAgent) as refused:
            client.call("register", {"name": "infern", "join": True})  # what relay-mcp sends for its role
        assert "known agents: glacier, inferno, overlord, shadow, storm, strategist" in refused.value.message
        assert client.call("register", {"name": "inferno", "join": True})["name"] == "inferno"  # a member: fine
    assert not (store_dir / "agents" / "infern").exists()
    relayctl("register", "reviewer")  # a person adding an agent on purpose
    relayctl("init", "--preset", "overlord", "--allow-new-agents")
    with Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"]) as client:
        assert client.call("register", {"name": "newcomer", "join": True})["name"] == "newcomer"
    names = {a["name"] for a in json.loads(relayctl("--json", "status", "--agents").stdout)["agents"]}
    assert {"reviewer", "newcomer"} <= names and "infern" not in names


@pytest.mark.slow
def test_reset_takes_the_fixed_team_definition_with_its_agents(relayctl: Any, relay_env: dict[str, str], store_dir: Path) -> None:
    from relayd.client.full import Client
    from relayd.errors import UnknownAgent

    relayctl("init", "--preset", "overlord")
    with Store(str(store_dir)) as store:  # a store reset by an earlier relay: still fixed, nobody in it
        ops.call(store, "reset", {"confirm": True})
        (store_dir / "config.json").write_text(json.dumps({"team": {"preset": "overlord", "allow_new": False}}))
        with pytest.raises(UnknownAgent) as empty:
            ops.call(store, "register", {"name": "inferno", "join": True})
    assert empty.value.message == (
        "unknown agent 'inferno': this store's team is fixed (preset overlord) and has no agents (was it reset?); "
        "make the team again with 'relayctl init --preset overlord', or add this one with 'relayctl register inferno'"
    )
    relayctl("init", "--preset", "overlord")
    done = relayctl("reset", "--yes").stdout
    assert "the fixed team (preset overlord) went with its agents: make it again with 'relayctl init --preset overlord'" in done
    assert "team" not in json.loads((store_dir / "config.json").read_text())
    with Client(relay_env["RELAY_DIR"], relay_env["RELAY_SOCKET"]) as client:  # what relay-mcp sends for its role
        assert client.call("register", {"name": "inferno", "join": True})["name"] == "inferno"
    assert "the team is fixed" in relayctl("init", "--preset", "overlord").stdout  # made again, fixed again
    assert json.loads((store_dir / "config.json").read_text())["team"] == {"preset": "overlord", "allow_new": False}


@pytest.mark.parametrize("kind", ["cli", "mcp"])
@pytest.mark.parametrize("agent", [None, "inferno"])
def test_the_japanese_prompt_is_japanese_but_for_what_is_typed(relayctl: Any, kind: str, agent: str | None) -> None:
    """What the agent types or calls (commands in backticks, tool names, the project's name)
    stays as it is; every word of prose is Japanese, the unnamed agent too."""
    from mcp_shim.tools import BY_NAME

    text = relayctl("prompt", "--for", kind, "--lang", "ja", agent=agent).stdout
    prose = re.sub(r"`[^`]*`", "", text)
    for kept in [*BY_NAME, "$RELAY_AGENT", "relay", "MCP", "ID", *([agent] if agent else [])]:
        prose = prose.replace(kept, "")
    assert re.findall(r"[A-Za-z]+", prose) == []
