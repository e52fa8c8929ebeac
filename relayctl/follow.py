"""`read --tail`: print what `read` prints, then each new message once, in order, until Ctrl-C or SIGTERM.

Wake-ups come from `relayd.client.watch` (relayd's inbox events, else inotify). Without
--mark-read, new messages are taken from the inbox file itself (`relayd.client.tail`), opened at
its end before the first read, so nothing that arrives in between is missed and nothing
older is replayed. With --mark-read, every round is a `read --unread --mark-read`, so the
cursor moves exactly over what is printed.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from typing import Any, Callable

from relayd import layout
from relayd.client import watch
from relayd.client.tail import InboxTail

from .stopping import until_stopped
from .context import echo, json_text

_REMEMBER = 4096  # ids of shown messages kept to avoid repeats


def follow(s: Any, params: dict[str, Any], render: Callable[[dict], str], report: Callable[[dict], None], exact: bool = False) -> None:
    """`exact`: `render` makes a format for programs (MIME), written unchanged into a pipe."""
    agent = params["agent"]
    tail = None if params.get("mark_read") else InboxTail(os.path.join(s.dir, layout.AGENTS, agent))
    seen: OrderedDict[str, None] = OrderedDict()

    def show(message: dict) -> bool:
        if message["id"] in seen:
            return False
        seen[message["id"]] = None
        if len(seen) > _REMEMBER:
            seen.popitem(last=False)
        echo(json_text(message) if s.json else render(message), exact=exact)
        return True

    with until_stopped():  # Ctrl-C or SIGTERM is how following ends: exit 0
        try:
            first = s.call("read", params)
            report(first)
            for message in first["messages"]:
                show(message)
            sys.stdout.flush()
            again = dict(params, unread=True, last=0)
            wanted = _filter(params)
            with watch.Watch(s.dir, watch.inbox(s.dir, agent), s.socket, client="relayctl") as wakeups:
                for _ in wakeups:
                    if tail is not None:
                        tail.drain(lambda message: wanted(message) and show(message))
                    else:
                        while True:
                            result = s.call("read", again)
                            report(result)
                            shown = sum(show(message) for message in result["messages"])
                            # One answer stops at the size budget: take the rest now, as long as each
                            # round brings something new (a filter can hold mail back).
                            if not (shown and result["unread"]):
                                break
                    sys.stdout.flush()
        finally:
            if tail is not None:
                tail.close()

def _filter(params: dict[str, Any]) -> Callable[[dict], bool]:
    """What `read`'s --from and --thread keep (--since: anything new is newer)."""
    sender, thread = params.get("from"), params.get("thread")
    return lambda message: (sender is None or message.get("from") == sender) and (thread is None or message.get("thread") == thread)
