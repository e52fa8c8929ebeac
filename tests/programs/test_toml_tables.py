"""relayctl.toml_tables, the text edit behind relay's line in Codex's config.toml: the
person's keys stay in the table they were written in, as Codex (and tomllib) read it."""

from __future__ import annotations

import tomllib

import pytest

from relayctl.toml_tables import TomlEditError, add_key, remove_key

TABLE = ("projects", "/home/ana/oathkeeper")
HEADER = '[projects."/home/ana/oathkeeper"]'
MINE = 'model = "o3"  # mine\n\n[model_providers.scripted]\nbase_url = "http://localhost:9/v1"\n'


@pytest.mark.parametrize("text", [MINE, MINE.rstrip("\n"), ""])
def test_relays_table_added_then_removed_gives_back_the_same_bytes(text: str) -> None:
    added, made = add_key(text, TABLE, "trust_level", "trusted")
    assert made and tomllib.loads(added)["projects"][TABLE[1]] == {"trust_level": "trusted"}
    assert added.startswith(text) and added.endswith(f'{HEADER}\ntrust_level = "trusted"\n')
    assert remove_key(added, TABLE, "trust_level", "trusted", drop_table=True) == text + ("\n" if text and not text.endswith("\n") else "")


def test_a_key_the_person_put_under_relays_table_stays_in_it() -> None:
    added, _ = add_key(MINE, TABLE, "trust_level", "trusted")
    theirs = added + 'sandbox_mode = "danger-full-access"\n\n[tools]\nweb_search = true\n'
    left = remove_key(theirs, TABLE, "trust_level", "trusted", drop_table=True)
    parsed = tomllib.loads(left)
    assert parsed["projects"][TABLE[1]] == {"sandbox_mode": "danger-full-access"}
    assert "sandbox_mode" not in parsed and "sandbox_mode" not in parsed["model_providers"]["scripted"]
    assert parsed["tools"] == {"web_search": True} and HEADER in left


def test_in_a_table_of_the_persons_relay_adds_its_line_and_takes_out_only_that() -> None:
    text = f'{HEADER}  # the repository at work\nsandbox_mode = "workspace-write"\n\n[tools]\nweb_search = true\n'
    added, made = add_key(text, TABLE, "trust_level", "trusted")
    assert not made and tomllib.loads(added)["projects"][TABLE[1]] == {"trust_level": "trusted", "sandbox_mode": "workspace-write"}
    assert remove_key(added, TABLE, "trust_level", "trusted", drop_table=made) == text
    emptied = f'a = 1\n\n{HEADER}\ntrust_level = "trusted"\n\n[tools]\nweb_search = true\n'
    assert remove_key(emptied, TABLE, "trust_level", "trusted", drop_table=False) == f'a = 1\n\n{HEADER}\n\n[tools]\nweb_search = true\n'
    assert remove_key(emptied, TABLE, "trust_level", "trusted", drop_table=True) == 'a = 1\n\n[tools]\nweb_search = true\n'


def test_a_value_the_person_changed_is_theirs_and_stays() -> None:
    text = f'{HEADER}\ntrust_level = "untrusted"\n'
    assert remove_key(text, TABLE, "trust_level", "trusted", drop_table=True) is None


@pytest.mark.parametrize("text", [
    'projects = { "/home/ana/oathkeeper" = { sandbox_mode = "read-only" } }\n',  # the table written inline
    'projects = {}\n',  # its parent inline: a [header] below it would not parse
])
def test_a_layout_a_line_edit_cannot_keep_is_refused(text: str) -> None:
    with pytest.raises(TomlEditError):
        add_key(text, TABLE, "trust_level", "trusted")


def test_a_look_alike_header_inside_a_string_is_not_edited() -> None:
    text = f'notes = """\n{HEADER}\ntrust_level = "trusted"\n"""\n\n{HEADER}\ntrust_level = "trusted"\n'
    with pytest.raises(TomlEditError):
        remove_key(text, TABLE, "trust_level", "trusted", drop_table=True)
