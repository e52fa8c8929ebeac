"""Section 8 of docs/protocol.md, written from the operation table itself, and §4's
error codes, written from the error table (`relayd.errors.BY_CODE`).

    python -m tests.support.protocol_doc          # print the section
    python -m tests.support.protocol_doc --write  # replace it in docs/protocol.md

tests/docs/test_docs.py checks that the file holds exactly what this produces, so adding an
operation, a parameter or an error code means running `--write` (and reading the diff). Prose written by
hand after an operation's `Result: Type` is kept.
"""

from __future__ import annotations

import json
import re
import sys
import typing

import msgspec

from relayd import errors, ops

from .paths import DOCS

DOC = DOCS / "protocol.md"
HEADING = "## 8. Operations\n"
INTRO = """
Every operation of the store, generated from `relayd.ops.table()` (parameter names are
exactly the `params` keys; "read-only" operations write nothing). Results are JSON
objects or lists of the records listed after the operations.
"""


def _type(t: object, records: set[type]) -> str:
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Union or type(t).__name__ == "UnionType":
        return " \\| ".join(_type(a, records) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' for a in sorted(args))
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(args[0], records)}"
    if origin is dict:
        return "object"
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        records.add(t)
        return t.__name__
    return {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", type(None): "null"}.get(t, "object")  # type: ignore[arg-type]


def _hints(struct: type) -> dict[str, object]:
    return typing.get_type_hints(struct, include_extras=False)


def _default(field: msgspec.structs.FieldInfo) -> str:
    if field.required:
        return "**required**"
    value = field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
    return f"`{json.dumps(value)}`"


def _hand_written() -> dict[str, str]:
    """Per operation, what the doc says after its generated `Result: Type`."""
    kept = {}
    for match in re.finditer(r"^#### `([a-z_]+)`.*?^Result: [A-Za-z| \\]+?(?=[.\n])(.*?)(?=^#### |^### |\Z)", current(), re.M | re.S):
        extra = match.group(2).rstrip("\n")
        if extra:
            kept[match.group(1)] = extra
    return kept


def render() -> str:
    kept = _hand_written() if DOC.exists() else {}
    records: set[type] = set()
    parts = [HEADING, INTRO]
    table = ops.table()
    for name in sorted(table):
        op = table[name]
        parts.append(f"\n#### `{name}`{'' if op.mutates else ' (read-only)'}\n\n{op.summary}\n\n")
        fields = msgspec.structs.fields(op.params)
        if fields:
            hints = _hints(op.params)
            parts.append("| param | type | default |\n|---|---|---|\n")
            for f in fields:
                parts.append(f"| `{f.encode_name}` | {_type(hints[f.name], records)} | {_default(f)} |\n")
        else:
            parts.append("Params: none (`{}`).\n")
        result = typing.get_type_hints(op.run).get("return")
        parts.append(f"\nResult: {_type(result, records)}{kept.get(name, '')}\n")
    parts.append("\n### Result records\n\n")
    seen: set[type] = set()
    while records - seen:
        for struct in sorted(records - seen, key=lambda s: s.__name__):
            seen.add(struct)
            hints = _hints(struct)
            for f in msgspec.structs.fields(struct):
                _type(hints[f.name], records)
    for struct in sorted(seen, key=lambda s: s.__name__):
        hints = _hints(struct)
        described = ", ".join(f"`{f.encode_name}`{'' if f.required else '?'} ({_type(hints[f.name], records)})" for f in msgspec.structs.fields(struct))
        parts.append(f"* **{struct.__name__}**: {described}\n")
    return "".join(parts)


ERRORS_HEADING = "### Error codes\n"
ERRORS_INTRO = """
`error` is `{"code": <string>, "message": <one sentence for a person>, "details": <object, optional>}`.
Codes are stable; messages are not. Each code is one class in `relayd/errors.py`, whose
docstring is the "when" below; a client turns a code back into its class.

| code | class | when | relayctl exit status |
|---|---|---|---|
"""


def render_errors() -> str:
    rows = [ERRORS_HEADING, ERRORS_INTRO]
    for code, cls in sorted(errors.BY_CODE.items(), key=lambda item: item[1] is errors.RelayError):  # `error` last
        when = " ".join((cls.__doc__ or "").split()).replace("|", "\\|")
        rows.append(f"| `{code}` | `{cls.__name__}` | {when} | {cls.exit_status} |\n")
    return "".join(rows) + "\n"


def current(heading: str = HEADING) -> str:
    """The text from `heading` up to the next section (`## `)."""
    text = DOC.read_text()
    start = text.index(heading)
    following = re.search(r"^## ", text[start + len(heading) :], re.M)
    end = start + len(heading) + following.start() if following else len(text)
    return text[start:end]


def current_errors() -> str:
    return current(ERRORS_HEADING)


def write() -> None:
    text = DOC.read_text()
    text = text.replace(current_errors(), render_errors(), 1)
    DOC.write_text(text.replace(current(), render() + ("\n" if not text.endswith(current()) else ""), 1))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        sys.stdout.write(render())
