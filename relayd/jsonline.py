"""JSON for the fast path's protocol lines, without the `json` package's start-up cost.

`import json` loads `re` and compiles its patterns at import: 3-12 ms here, more than
everything else a fast `relayctl send` imports (relayctl/fast.py). The parsing and string
quoting are the C functions `json` itself uses (`_json`); what `json` adds in Python is
regular expressions for whitespace and a general encoder, and a protocol line needs
neither. Where `_json` is missing (an interpreter other than CPython) this is `json`.

Only what relay puts on the wire is encoded: str keys; str, int, float, bool, None,
list, tuple and dict values. Anything else is a TypeError, as with `json.dumps`.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _quote, make_scanner as _make_scanner
except ImportError:  # pragma: no cover - CPython always has it
    from json import dumps, loads  # noqa: F401
else:
    SPACE = " \t\n\r"  # JSON's whitespace

    class _Rules:
        """What the C scanner reads from json.JSONDecoder: its defaults."""

        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__

    _scan = _make_scanner(_Rules())

    def loads(text: str | bytes) -> object:
        """One JSON value from `text` (UTF-8 if bytes); ValueError if it is not exactly one."""
        if isinstance(text, (bytes, bytearray)):
            text = text.decode()  # UnicodeDecodeError is a ValueError
        start = len(text) - len(text.lstrip(SPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration as exc:
            raise ValueError(f"expected a JSON value at {exc.value}") from None
        if text[end:].strip(SPACE):
            raise ValueError(f"extra data after the JSON value at {end}")
        return value

    def dumps(value: object) -> str:
        """`value` as one line of ASCII JSON, as json.dumps(value) reads back."""
        out: list[str] = []
        _encode(value, out)
        return "".join(out)

    def _encode(value: object, out: list[str]) -> None:
        if isinstance(value, str):
            out.append(_quote(value))
        elif value is None:
            out.append("null")
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        elif isinstance(value, int):
            out.append(int.__repr__(value))
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"{value!r} is not JSON")
            out.append(float.__repr__(value))
        elif isinstance(value, dict):
            out.append("{")
            for n, (key, item) in enumerate(value.items()):
                if not isinstance(key, str):
                    raise TypeError(f"JSON keys are strings, not {type(key).__name__}")
                out.append(("," if n else "") + _quote(key) + ":")
                _encode(item, out)
            out.append("}")
        elif isinstance(value, (list, tuple)):
            out.append("[")
            for n, item in enumerate(value):
                if n:
                    out.append(",")
                _encode(item, out)
            out.append("]")
        else:
            raise TypeError(f"{type(value).__name__} is not JSON serializable")
