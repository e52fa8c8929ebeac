"""How the commands that run until stopped (`subscribe`, `read --tail`, `ignite watch`) end:
on SIGINT (Ctrl-C) or SIGTERM, with exit status 0.

Both signals are taken explicitly because a shell without job control (a script's
`relayctl subscribe &`) starts its background commands with SIGINT ignored, and Python
then leaves it ignored: such a follower could otherwise be stopped only with SIGKILL.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def until_stopped(on_signal: Callable[[], None] | None = None) -> Iterator[None]:
    """Run the body until SIGINT or SIGTERM. By default the signal interrupts the body
    wherever it is (KeyboardInterrupt, swallowed here); with `on_signal`, that is called
    instead, for a loop that stops itself at a safe point."""
    handler = _interrupt if on_signal is None else (lambda signum, frame: on_signal())
    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
