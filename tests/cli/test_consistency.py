"""Small promises kept alike everywhere: --json shows what the text shows, bad input is
one line and a non-zero exit, and docs/cli.md says what --help says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli_processes import RelayCtl
from support.paths import DOCS

CLI_MD = (DOCS / "cli.md").read_text()


@pytest.mark.slow
def test_status_json_shows_only_the_sections_asked_for(relayctl: RelayCtl) -> None:
    relayctl("init", "--preset", "overlord")
    relayctl("reserve", "src/**", "--repo", "/tmp", agent="storm")
    only_agents = json.loads(relayctl("--json", "status", "--agents").stdout)
    assert "agents" in only_agents and "reservations" not in only_agents and "commands" not in only_agents
    only_reservations = json.loads(relayctl("--json", "status", "--reservations").stdout)
    assert [r["pattern"] for r in only_reservations["reservations"]] == ["src/**"]
    assert "agents" not in only_reservations and "delivery" not in only_reservations
    everything = json.loads(relayctl("--json", "status").stdout)
    assert {"agents", "reservations", "commands", "delivery", "daemon"} <= set(everything)


@pytest.mark.slow
def test_a_reservation_in_a_repo_that_does_not_exist_is_refused(relayctl: RelayCtl, short_tmp: Path) -> None:
    relayctl("init", "--preset", "overlord")
    missing = short_tmp / "no-such-repo"
    proc = relayctl("reserve", "src/**", "--repo", str(missing), agent="storm", check=False)
    assert proc.returncode == 2 and proc.stderr == f"error: --repo {missing}: no such directory (give the repository's path on this machine)\n"
    assert json.loads(relayctl("--json", "reservations").stdout) == []


def test_a_store_that_cannot_be_created_is_one_line_not_an_internal_error(relayctl: RelayCtl, short_tmp: Path) -> None:
    (short_tmp / "a-file").write_text("")
    for place, reason in ((short_tmp / "a-file" / "store", "Not a directory"), (Path("/proc/1/relay-store"), "No such file or directory")):
        proc = relayctl("--dir", str(place), "init", check=False)
        assert proc.returncode == 1 and proc.stderr == f"error: cannot create the store at {place}: {reason}\n"


def test_send_help_and_cli_md_give_the_same_backoff() -> None:
    from click.testing import CliRunner

    from relayctl.cli import cli

    help_text = " ".join(CliRunner().invoke(cli, ["send", "--help"]).output.split())
    [in_help] = re.findall(r"random\(0, min\(cap, ACK_WAIT\*2\^\(n-1\)\)\)", help_text)
    [in_docs] = re.findall(r"random\(0, min\(cap, ack_wait × 2\^\(n-1\)\)\)", CLI_MD)
    assert in_help.replace("ACK_WAIT*", "") == in_docs.replace("ack_wait × ", "")


def test_each_dlq_option_in_cli_md_belongs_to_the_subcommand_it_is_written_with() -> None:
    from click.testing import CliRunner

    from relayctl.cli import cli

    [line] = [line for line in CLI_MD.splitlines() if line.startswith("relayctl dlq [")]
    depth, end = 0, 0
    for end, char in enumerate(line):  # the bracket of subcommands, and what follows it
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "]" and depth == 0:
            break
    inside, after = line[len("relayctl dlq [") : end], line[end + 1 :]
    parts = [(["dlq", part.split()[0]], part) for part in inside.split(" | ")] + [(["dlq"], after)]
    for command, part in parts:
        help_text = CliRunner().invoke(cli, [*command, "--help"]).output
        for flag in re.findall(r"--[a-z-]+", part):
            assert re.search(rf"^\s+{flag}\b", help_text, re.M), f"docs/cli.md: {' '.join(command)} {flag}, which it does not take"


@pytest.mark.slow
def test_with_json_a_refusal_is_json_on_stdout_too(relayctl: RelayCtl) -> None:
    relayctl("init", "--preset", "overlord")
    relayctl("reserve", "src/**", "--repo", "/tmp", agent="storm")
    for args, code in (
        (("reserve", "src/**", "--repo", "/tmp"), "conflict"),  # the full CLI
        (("send", "nobody", "hi"), "unknown_agent"),  # the fast path
        (("status", "--bogus"), "invalid_argument"),  # click's own refusal
    ):
        proc = relayctl("--json", *args, agent="inferno", check=False)
        assert proc.returncode != 0 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
        assert json.loads(proc.stdout) == {"error": {"code": code, "message": proc.stderr[len("error: ") :].strip()}}
    checked = relayctl("--json", "reserve", "src/**", "--repo", "/tmp", "--check", agent="inferno", check=False)
    assert checked.returncode == 1 and json.loads(checked.stdout)["conflicts"][0]["agent"] == "storm"  # an answer, not an error


@pytest.mark.slow
def test_global_options_may_follow_the_command(relayctl: RelayCtl, short_tmp: Path) -> None:
    relayctl("init", "--preset", "overlord")
    other = short_tmp / "other-store"
    relayctl("init", "--dir", str(other))  # the full CLI
    assert (other / "agents").is_dir()
    sent = json.loads(relayctl("send", "storm", "hi", "--agent", "inferno", "--json").stdout)  # the fast path
    [got] = json.loads(relayctl("read", "--agent=storm", "--json").stdout)
    assert got["id"] == sent["id"] and got["from"] == "inferno"
    relayctl("reserve", "src/**", "--repo", "/tmp", agent="storm")
    relayctl("reserve", "docs/**", "--repo", "/tmp", agent="glacier")
    # a command's own option of that name keeps its meaning: here, a filter
    assert [r["pattern"] for r in json.loads(relayctl("--json", "reservations", "--agent", "glacier").stdout)] == ["docs/**"]


@pytest.mark.slow
def test_a_presets_agents_are_not_alive_before_they_ever_run(relayctl: RelayCtl) -> None:
    relayctl("init", "--preset", "overlord")
    relayctl("heartbeat", agent="storm")
    agents = {a["name"]: a for a in json.loads(relayctl("--json", "status").stdout)["agents"]}
    assert [name for name, a in agents.items() if a["alive"]] == ["storm"]
    assert agents["glacier"]["last_heartbeat"] is None
    shown = relayctl("status", "--agents").stdout
    assert "AGENTS (1 alive, 0 stale, 5 never seen)" in shown
    assert re.search(r"^  glacier +NEW +last heartbeat: never ", shown, re.M), shown
    relayctl("gc", "--stale", "0s")  # nothing to archive in an agent that never ran
    assert json.loads(relayctl("--json", "status").stdout)["agents"][0]["last_heartbeat"] is None


def _as_a_user_the_store_refuses(argv: list[str]) -> list[str]:
    """Root passes every permission check, so as root the command runs without the two
    capabilities that let it (the same uid, so it can still run this checkout's code)."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *argv]


@pytest.mark.slow
def test_a_store_you_cannot_read_is_said_to_be_one(relay_env: dict[str, str], relayctl: RelayCtl, store_dir: Path) -> None:
    relayctl("init", "--preset", "overlord")
    store_dir.chmod(0)
    beside_the_store = {k: v for k, v in relay_env.items() if k != "RELAY_SOCKET"}  # no XDG_RUNTIME_DIR either
    try:
        for env in (relay_env, beside_the_store):
            for args in (["status"], ["--agent", "storm", "read"], ["--agent", "storm", "send", "inferno", "hi"]):
                argv = _as_a_user_the_store_refuses([sys.executable, "-m", "relayctl", *args])
                proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
                assert proc.returncode == 1 and proc.stdout == ""
                assert re.fullmatch(rf"error: the store at {re.escape(str(store_dir))} is not readable by you \(\S+\): permission denied; use a store of your own \(--dir or RELAY_DIR\) or ask its owner\n", proc.stderr), proc.stderr
    finally:
        store_dir.chmod(0o700)


def test_help_names_relay_agent_first_and_the_other_names_as_its_aliases() -> None:
    """The README and the docs speak of RELAY_AGENT; the older names are still read, in the
    order relay-mcp reads them (relayd.layout.AGENT_VARIABLES), but only as aliases."""
    from click.testing import CliRunner

    from relayctl.cli import cli
    from relayd import layout

    [agent_help] = re.findall(r"--agent NAME\s+(.*?)\n  --dir", CliRunner().invoke(cli, ["--help"]).output, re.S)
    agent_help = " ".join(agent_help.split())
    assert agent_help.startswith("Your agent name. [env: RELAY_AGENT; aliases: ")
    assert all(name in agent_help for name in layout.AGENT_VARIABLES)
    [row] = [line for line in CLI_MD.splitlines() if line.startswith("| `--agent NAME` |")]
    assert row.split("|")[2].strip().startswith("`$RELAY_AGENT`; its aliases")


def test_the_body_limit_send_keeps_is_in_its_help_and_in_cli_md() -> None:
    from click.testing import CliRunner

    from relayctl.cli import cli
    from relayd.inbox.send import MAX_BODY, MAX_SUBJECT, MAX_TAGS

    help_text = " ".join(CliRunner().invoke(cli, ["send", "--help"]).output.split())
    assert MAX_BODY == 256 * 1024 and "up to 256 KiB (UTF-8), a longer one is refused (exit 2)" in help_text
    send_section = " ".join(CLI_MD[CLI_MD.index("### send"):].split())
    assert f"at most 256 KiB of UTF-8 (the subject {MAX_SUBJECT:,} characters, {MAX_TAGS} tags)" in send_section


@pytest.mark.slow
def test_a_body_over_the_limit_is_refused_as_the_help_says(relayctl: RelayCtl, store_dir: Path) -> None:
    from relayd.inbox.send import MAX_BODY

    relayctl.setup("init")
    relayctl.setup("register", name="bob")
    refused = relayctl("send", "bob", "-", agent="alice", input="a" * (MAX_BODY + 1), check=False)
    assert refused.returncode == 2 and refused.stderr == f"error: message body is too large ({MAX_BODY + 1} bytes, at most {MAX_BODY})\n"
    relayctl("send", "bob", "-", agent="alice", input="a" * MAX_BODY)  # exactly the limit is fine
    assert [len(m["body"]) for m in json.loads(relayctl("--json", "read", agent="bob").stdout)] == [MAX_BODY]
