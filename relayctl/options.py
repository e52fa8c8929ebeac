"""click options built from relayctl.fast's declarations, for the commands the fast path
runs (send, read, heartbeat, status): the parameter name, kind and default come from
`fast.COMMANDS`, the one definition both front ends read; what only --help shows (help
text, metavar) is given here by the command.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from . import fast


def declared(command: str, spelling: str, **shown: Any) -> Callable:
    """`click.option` for `spelling` of `command`, as relayctl.fast declares it."""
    param, kind, default = fast.COMMANDS[command].declared[spelling]
    options: dict[str, Any] = dict(shown)
    if kind is fast.FLAG:
        options["is_flag"] = True
    elif kind is fast.MANY:
        options["multiple"] = True
    elif kind is fast.INT:
        options["type"] = int
    elif kind is fast.COUNT:
        options["type"] = click.IntRange(min=0)
    elif isinstance(kind, tuple):
        # Priorities are matched case-insensitively by both front ends; other choices exactly.
        options["type"] = click.Choice(list(kind), case_sensitive=kind is not fast.PRIORITIES)
    if default is not None and kind not in (fast.FLAG, fast.MANY):
        options["default"] = default
    return click.option(spelling, param, **options)
