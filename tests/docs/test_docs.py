"""The protocol reference must describe the operations the code has, with their parameters:
a client written from docs/protocol.md alone would otherwise send what the daemon refuses."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

from relayd import ops
from support.paths import PACKAGES, ROOT

PROTOCOL_MD = (ROOT / "docs" / "protocol.md").read_text()


def _section(name: str) -> str:
    match = re.search(rf"^#### `{re.escape(name)}`( \(read-only\))?\n(.*?)(?=^#### |^## |\Z)", PROTOCOL_MD, re.M | re.S)
    assert match, f"docs/protocol.md has no section for the operation {name!r}"
    return match.group(2)


@pytest.mark.parametrize("name", sorted(ops.table()))
def test_every_operation_and_parameter_is_documented(name: str) -> None:
    section = _section(name)
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))
    wire_names = {field.encode_name for field in msgspec.structs.fields(ops.table()[name].params)}
    assert documented == wire_names, f"{name}: documented {sorted(documented)}, code has {sorted(wire_names)}"


def test_the_operations_section_is_what_the_table_generates() -> None:
    """Types, defaults and result records included: regenerate with `python -m tests.support.protocol_doc --write`."""
    from support.protocol_doc import current, render

    assert current() == render(), "docs/protocol.md section 8 is out of date: run python -m tests.support.protocol_doc --write"


def test_the_error_codes_are_what_the_error_table_generates() -> None:
    """Every wire code, its class and when it is raised: regenerate with `python -m tests.support.protocol_doc --write`."""
    from relayd import errors
    from support.protocol_doc import current_errors, render_errors

    assert current_errors() == render_errors(), "docs/protocol.md's error codes are out of date: run python -m tests.support.protocol_doc --write"
    for code in errors.BY_CODE:
        assert f"| `{code}` |" in current_errors()


def test_the_architecture_map_names_only_what_exists() -> None:
    """docs/architecture.md points a newcomer at files; each one it names must be there,
    and every module that registers operations must be on the map (itself, or its wing)."""
    root = ROOT
    text = (root / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:relayd|relayctl|mcp_shim|relayweb|tests|benchmarks)/[\w/.*<>-]*)`", text))
    assert len(named) > 20
    for path in named:
        if "<" in path or "*" in path:
            assert list(root.glob(path.replace("<domain>", "*").rstrip("/"))), path
        else:
            assert (root / path).exists(), f"docs/architecture.md names {path}, which does not exist"
    registering = {op.run.__module__.replace(".", "/") + ".py" for op in ops.table().values()}
    listed = re.search(r"\| what an operation does .*? \| (.*?); each registers", text)
    assert listed, "the map's row on operations"
    row = listed.group(1)  # a module is named there itself, or its wing is (the inbox and delivery wings)
    assert [m for m in sorted(registering) if f"`{m}`" not in row and f"`{m.rsplit('/', 1)[0]}/`" not in row] == []


def test_the_architecture_names_every_module() -> None:
    """A newcomer finds every module of the four packages in docs/architecture.md, and
    nothing there that is gone (the check above)."""
    root = ROOT
    text = (root / "docs" / "architecture.md").read_text()
    modules = [f.relative_to(root).as_posix() for package in PACKAGES for f in (root / package).rglob("*.py")]
    assert len(modules) > 100
    assert [m for m in sorted(modules) if f"`{m}`" not in text] == []


def test_the_docs_name_the_program_versions_the_tests_run() -> None:
    """The versions the tests drive (tests/agents/package.json) are the ones docs/mcp.md
    says were tried, and it names no other: a newer pin updates the docs with it."""
    pinned = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())["dependencies"]
    tried = {m.group(1): m.group(2) for m in re.finditer(r"Tried with (Claude Code|Codex CLI|Gemini CLI) (\d+\.\d+\.\d+)", (ROOT / "docs" / "mcp.md").read_text())}
    assert tried == {
        "Claude Code": pinned["@anthropic-ai/claude-code"],
        "Codex CLI": pinned["@openai/codex"],
        "Gemini CLI": pinned["@google/gemini-cli"],
    }
