"""web: the live web view (the relayweb package; needs the optional extra relay-bus[web])."""

from __future__ import annotations

import click

from relayd.errors import missing_extra
from relayd.records import check_agent_name

from .context import settings


@click.command()
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535), help="TCP port on 127.0.0.1; 0 picks a free one.")
@click.option("--open", "open_browser", is_flag=True, help="Also open the view in the default browser ($BROWSER), through a file only you can read.")
@click.option("--as", "human", default="human", show_default=True, metavar="NAME", help="The identity the page writes as (registered if new, so agents can answer).")
def web(port: int, open_browser: bool, human: str) -> None:
    """Serve a live view of the team on 127.0.0.1: agents, messages, threads,
    reservations, pending commands; search; and write to agents as NAME.

    Prints one URL carrying a random access token (in its #fragment, which browsers
    never send to a server); every request for data without it is refused. The token is
    never put in a cookie (other ports of 127.0.0.1 would receive it) nor on a command
    line: --open gives the browser a file only you can read. Follows relayd's event
    stream, or the store files when relayd is down. Needs the web extra:
    pip install 'relay-bus[web]' (in a checkout: pip install '.[web]').

    \b
    Examples:
      relayctl web
      relayctl web --port 8765 --open
      relayctl web --as lead
    """
    check_agent_name(human, "--as")
    try:
        # deferred imports: the web view's ASGI stack (starlette, uvicorn) loads only for `relayctl
        # web`, and a missing one is reported as the optional extra
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise missing_extra("relayctl web", "web", "Starlette and uvicorn") from None
    from relayweb.serve import serve

    s = settings()
    serve(s.dir, s.socket, human, port, open_browser)
