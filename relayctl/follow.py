"""`read --tail`: keep printing new messages until Ctrl-C.

Woken by relayd's inbox events for the agent; with no daemon (or once it goes away),
by inotify on the agent's directory. Either way each wake-up runs the same `read` and
prints only messages not shown yet.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from typing import Any, Callable, Iterator

import click

from relayd import layout
from relayd.errors import Unavailable

_REMEMBER = 4096  # ids of shown messages kept to avoid repeats


def follow(s: Any, params: dict[str, Any], first: list[dict], render: Callable[[dict], str]) -> None:
    seen: OrderedDict[str, None] = OrderedDict()

    def show(messages: list[dict]) -> int:
        shown = 0
        for message in messages:
            if message["id"] in seen:
                continue
            shown += 1
            seen[message["id"]] = None
            if len(seen) > _REMEMBER:
                seen.popitem(last=False)
            if s.json:
                import json

                click.echo(json.dumps(message, ensure_ascii=False))
            else:
                click.echo(render(message))
        sys.stdout.flush()
        return shown

    show(first)
    again = dict(params)
    if again.get("unread") and again.get("mark_read"):
        again["last"] = 0  # each round shows what arrived since, and marks it read
    else:
        again["unread"] = False
        again["last"] = 100  # the newest; anything not yet shown among them is printed
    try:
        for _ in _wakeups(s, params["agent"]):
            while True:
                result = s.call("read", again)
                # One answer stops at the size budget; when marking read, take the rest now
                # (as long as each round brings something new: a filter can hold mail back).
                if not (show(result["messages"]) and again.get("mark_read") and result["unread"]):
                    break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how following ends: exit 0


def _wakeups(s: Any, agent: str) -> Iterator[None]:
    try:
        for _ in s.client().subscribe(["inbox"], agent=agent):
            yield  # the acknowledgement too: catch up on what arrived before it
    except Unavailable:
        pass
    yield from _inotify_wakeups(os.path.join(s.dir, layout.AGENTS, agent))


def _inotify_wakeups(agent_dir: str) -> Iterator[None]:
    from inotify_simple import INotify, flags

    with INotify() as watcher:
        watcher.add_watch(agent_dir, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
        yield  # catch up on what arrived before the watch
        while True:
            if any(event.name in (layout.INBOX, layout.INBOX_ROTATED) for event in watcher.read()):
                yield
