"""One key added to, or taken out of, one table of a TOML file, as a text edit that keeps
everything else (the person's formatting, comments, and every other key in its table).

TOML has no closing bracket: a table's keys are the lines after its `[header]` up to the
next header. So taking relay's line out of `[projects."/repo"]` must leave the lines the
person added below it in place and under that header; removing the header with relay's
line would move them into the table above (a `sandbox_mode` meant for one repository
becoming a global setting). The header goes only with `drop_table` (relay wrote the table)
and only when nothing but blank lines is left under it.

Every edit is checked by parsing (tomllib): the result must read as the old file with that
one key added or taken out (and the emptied table gone), and nothing else changed. When
the file is laid out so that a line edit cannot do that (the table written inline, a key
spelled as a dotted key elsewhere), the edit is refused with a `TomlEditError`.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any


class TomlEditError(ValueError):
    pass


def add_key(text: str, table: tuple[str, ...], key: str, value: str) -> tuple[str, bool]:
    """`text` with `key = "value"` in `table`: under its header when it has one, else in a
    new table at the end. Also whether the table was made."""
    lines = text.splitlines(keepends=True)
    line = f"{_key(key)} = {_string(value)}\n"
    at = _header_at(lines, table)
    if at is not None:
        new, made = "".join([*lines[:at + 1], line, *lines[at + 1:]]), False
    else:
        if table_in(_parse(text), table) is not None:
            raise TomlEditError(f"[{'.'.join(map(_key, table))}] is not written as a table of its own")
        head = text + ("\n" if text and not text.endswith("\n") else "")
        new, made = head + f"\n[{'.'.join(map(_key, table))}]\n" + line, True
    expected = _parse(text)
    _table(expected, table, create=True)[key] = value
    _check(new, expected)
    return new, made


def remove_key(text: str, table: tuple[str, ...], key: str, value: Any, drop_table: bool) -> str | None:
    """`text` without `key` (when it holds `value`) in `table`, every other line where it
    was; with `drop_table`, the header too when nothing but blank lines is left under it.
    None when the key with that value is not there."""
    lines = text.splitlines(keepends=True)
    at = _header_at(lines, table)
    if at is None:
        return None
    end = _table_end(lines, at)
    hits = [i for i in range(at + 1, end) if _line_is(lines[i], key, value)]
    if not hits:
        return None
    del lines[hits[0]]
    end -= 1
    expected = _parse(text)
    del _table(expected, table)[key]
    if drop_table and all(not line.strip() for line in lines[at + 1:end]):
        del lines[at:end]
        if at == len(lines) and at > 0 and not lines[at - 1].strip():
            del lines[at - 1]  # the blank line add_key put before a table at the end
        parent = _table(expected, table[:-1]) if len(table) > 1 else expected
        if parent.get(table[-1]) == {}:
            del parent[table[-1]]
    new = "".join(lines)
    _check(new, expected)
    return new


def table_in(data: dict[str, Any], table: tuple[str, ...]) -> dict[str, Any] | None:
    """The table at `table` in parsed TOML, or None."""
    for name in table:
        data = data.get(name) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


def _parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlEditError(f"not valid TOML ({exc})") from None


def _check(new: str, expected: dict[str, Any]) -> None:
    try:
        got = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        got = None
    if got is None or _pruned(got) != _pruned(expected):
        raise TomlEditError("its layout does not let relay change that one key alone")


def _pruned(data: Any) -> Any:
    """Tables with empty ones left out: an empty parent table is the same to every reader."""
    if not isinstance(data, dict):
        return data
    kept = {k: _pruned(v) for k, v in data.items()}
    return {k: v for k, v in kept.items() if v != {}}


def _table(data: dict[str, Any], table: tuple[str, ...], create: bool = False) -> dict[str, Any]:
    for name in table:
        data = data.setdefault(name, {}) if create else data[name]
    return data


def _header_of(line: str) -> tuple[str, ...] | None:
    """The table a `[header]` line opens (an array-of-tables header is one too: ())."""
    stripped = line.strip()
    if not stripped.startswith("["):
        return None
    try:
        data = tomllib.loads(stripped)
    except tomllib.TOMLDecodeError:
        return None
    if stripped.startswith("[["):
        return ()
    path: list[str] = []
    while isinstance(data, dict) and len(data) == 1:
        (name, data), = data.items()
        path.append(name)
    return tuple(path) if data == {} else None


def _header_at(lines: list[str], table: tuple[str, ...]) -> int | None:
    return next((i for i, line in enumerate(lines) if _header_of(line) == table), None)


def _table_end(lines: list[str], at: int) -> int:
    return next((i for i in range(at + 1, len(lines)) if _header_of(lines[i]) is not None), len(lines))


def _line_is(line: str, key: str, value: Any) -> bool:
    try:
        return tomllib.loads(line) == {key: value}
    except tomllib.TOMLDecodeError:
        return False


def _string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, \\uXXXX included)."""
    return json.dumps(value, ensure_ascii=False)


def _key(name: str) -> str:
    bare = name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    return name if bare else _string(name)
