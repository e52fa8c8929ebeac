"""One spelling for each thing: every `relayctl ...` and `relayd ...` command line that
README.md and docs/ show names commands and options the programs really have (a renamed
option otherwise lives on in the docs), and every program reports errors as `error:`."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from support.paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TYPOS_SHOWN = {"sned"}  # docs/cli.md shows what a mistyped command gets
_SHELL_END = re.compile(r"\s(?:\||&&|\|\||>|>>|2>|#|&)(?:\s|$)|\s&$|[`;)]")


def _command_lines(text: str) -> list[str]:
    """`relayctl ...` / `relayd ...` as code spans and code-block lines show them, cut at the
    end of the shell command (a pipe, `&&`, a comment)."""
    found = []
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    prose = re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.M | re.S)
    pieces = re.findall(r"`([^`\n]+)`", prose) + [re.split(r"(?:^|\s)#", line.removeprefix("$ "))[0] for block in blocks for line in block.splitlines()]
    for piece in pieces:
        for match in re.finditer(r"(?:^|[\s(])((?:relayctl|relayd)(?: [^\n]*)?)$", piece):
            line = match.group(1)
            end = _SHELL_END.search(line)
            found.append(line[: end.start()] if end else line)
    return found


def _resolve(argv: list[str]) -> tuple[click.Command, list[str]] | None:
    """The click command an argv names, and the rest of the argv; None when it names no
    command (`relayctl ...` as a placeholder, or prose)."""
    from relayctl.cli import cli
    from relayd.daemon.cli import daemon

    if argv[0] == "relayd":
        return daemon, argv[1:]
    ctx = click.Context(cli)
    rest = argv[1:]
    while rest and rest[0].startswith("-"):  # the global options before the command
        flag = rest.pop(0).split("=", 1)[0]
        assert flag in {o for p in cli.params for o in p.opts + p.secondary_opts} | {"--help", "-h", "--version"}, f"relayctl has no global option {flag}"
        if flag in ("--agent", "--dir", "--socket") and rest:
            rest.pop(0)
    if not rest or not re.fullmatch(r"[a-z][a-z-]*", rest[0]) or rest[0] in TYPOS_SHOWN:
        return None
    command = cli.get_command(ctx, rest[0])
    assert command is not None, f"relayctl has no command {rest[0]!r}"
    rest = rest[1:]
    if isinstance(command, click.Group) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    elif command.name == "cmd" and rest:
        command = command.commands["post"]  # `cmd SESSION COMMAND` posts
    return command, rest


def _documented_options() -> list[tuple[str, str, str]]:
    """(file, command line, option) for every long option shown after a command."""
    found = []
    for path in DOCS:
        for line in _command_lines(path.read_text()):
            try:
                argv = shlex.split(line)
            except ValueError:
                argv = line.split()
            if len(argv) < 2 or any(ch in line for ch in "[]|{}<>…") or "..." in line:
                continue  # a usage synopsis ([--opt X]) or a placeholder, not a command line
            resolved = _resolve(argv)
            if resolved is None:
                continue
            for token in resolved[1]:
                if token.startswith("--") and len(token) > 2:
                    found.append((str(path.relative_to(ROOT)), line, token.split("=", 1)[0]))
    return found


def test_the_docs_show_many_command_lines_with_options() -> None:
    assert len(_documented_options()) > 100


def test_every_option_the_docs_show_is_an_option_of_that_command() -> None:
    wrong = []
    for path, line, option in _documented_options():
        resolved = _resolve(shlex.split(line) if "'" not in line and '"' not in line else line.split())
        command = resolved[0] if resolved else None
        names = {o for p in command.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])} | {"--help"} if command else set()
        if option not in names:
            wrong.append(f"{path}: {line!r}: {option}")
    assert wrong == [], "options the docs show that the command does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("argv", [["--bogus"], ["--gc-interval", "x"], ["--ignite-queue", "/nonexistent-dir"]])
def test_relayd_says_error_as_every_other_program_does(argv: list[str], relay_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "relayd.daemon", *argv], env=relay_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_an_extra_is_installed_one_way_everywhere() -> None:
    """`pip install 'relay-bus[web]'`, or from a checkout `pip install '.[web]'`: not four
    variants across the README, docs and --help (the test extra's editable install is the
    README's test command)."""
    from relayctl.cli import cli

    texts = {str(p.relative_to(ROOT)): p.read_text() for p in DOCS}
    ctx = click.Context(cli)
    for name in ("web", "bridge"):
        texts[f"relayctl {name} --help"] = cli.get_command(ctx, name).get_help(ctx)
    from relayd.daemon.cli import daemon

    texts["relayd --help"] = daemon.get_help(click.Context(daemon))
    odd = [
        f"{where}: {found}"
        for where, text in texts.items()
        for found in re.findall(r"pip install [^\n`]*?\[[a-z,]+\]['\"]?", text)
        if not re.fullmatch(r"pip install '(relay-bus|\.)\[(web|bridge)\]'", found) and found != "pip install -e '.[test]'"
    ]
    assert odd == [], odd
