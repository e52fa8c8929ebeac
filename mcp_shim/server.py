"""relay-mcp: the MCP stdio server one Claude Code pane starts for its role.

stdin carries JSON-RPC messages, one per line; stdout carries only replies and channel
notifications (serialized by one lock, since the inbox follower writes too); logs go to
stderr. The process ends as soon as stdin closes.

Start-up is kept lean (DESIGN §6: tools/list within 60 ms, <= 15 MiB): the store client
and the operation table load on the first tool call, inotify when a client asks for push.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, BinaryIO
import time

from relayd import __version__
from relayd.errors import RelayError, UnknownAgent

from . import logs, protocol
from .identity import Identity, IdentityError, from_env
from .protocol import ToolOutcome
from .tools import BY_NAME, NOTICE, TOOLS, Context, ToolFailed, check_arguments, delivery_warning

PUSH_OFF = ("off", "0", "no")  # RELAY_MCP_CHANNEL values that switch push off
BEAT = 60.0  # seconds between last-seen refreshes while a client is connected (a 5-minute stale threshold sees several); RELAY_MCP_BEAT sets another

CHANNEL_NOTE = """A <channel source="relay"> event means new mail: its attributes say from, message_id, priority and thread, and its text is only a preview."""


def instructions(role: str) -> str:
    """What the model is told at the start: `relayctl prompt --for mcp` for this role, and
    what a channel event is."""
    # deferred imports: relay-mcp answers `initialize` quickly: the client, the store, presence and
    # the follower load when first used
    from relayd.team.prompt import agent_prompt

    return f"{agent_prompt('mcp', 'en', role)}\n{CHANNEL_NOTE}"


def encode(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")


class Output:
    """stdout, one JSON object per line, written whole by one thread at a time."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.closed = False

    def write(self, message: dict[str, Any]) -> None:
        data = encode(message) + b"\n"
        with self.lock:
            if self.closed:
                return
            try:
                self.stream.write(data)
                self.stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.closed = True  # the client is gone; the read loop ends on EOF


class Shim:
    """The relay side of the session: identity, store access, tools and push delivery."""

    def __init__(self, identity: Identity, out: Output) -> None:
        self.identity = identity
        self.out = out
        self._client: Any = None
        self._mode = ""  # "daemon" or "direct", as last reported on stderr
        self.follower: Any = None
        self.push = os.environ.get("RELAY_MCP_CHANNEL", "auto").lower()
        self.session = protocol.Session(
            server_info={"name": "relay-mcp", "version": __version__},
            instructions=instructions(identity.role),
            list_tools=lambda structured: [tool.listing(structured) for tool in TOOLS],
            call_tool=self.call_tool,
            on_channel_support=self.start_push,
            on_start=self.arrive,
            push=self.push not in PUSH_OFF,
        )
        # `on`: treat the client as channel-capable even if it does not say so (push still
        # starts only once the client is initialized).
        self.session.channel = self.push in ("on", "1", "yes", "always")

    # -- store access ----------------------------------------------------------------
    def call(self, op: str, params: dict[str, Any]) -> Any:
        return self.ask(op, params)["result"]

    def ask(self, op: str, params: dict[str, Any], **session: Any) -> dict[str, Any]:
        """`call` with a request's session fields (relayd.client.full.Client.ask)."""
        if self._client is None:
            from relayd.client.full import Client

            self._client = Client(self.identity.store_dir, self.identity.socket_path, name="relay-mcp")
        try:
            return self._client.ask(op, params, **session)
        finally:
            if self._client.mode != self._mode:
                self._mode = self._client.mode
                logs.info("store operations go through relayd" if self._mode == "daemon" else "store operations run on the files (relayd is not running)")

    def arrive(self) -> None:
        """A client connected: the role is present from now on (seed 002 §3.1), before any
        tool call. A store that cannot be reached is logged, not fatal: tools report it."""
        from relayd.agents.presence import touch_if_registered

        try:
            if self.identity.title:
                self.seen(title=self.identity.title)  # seed 002: name and role registered (or updated) at start
            elif not touch_if_registered(self.identity.store_dir, self.identity.role):
                self.seen()  # a role the store does not know yet: register it (loads the client)
        except Exception as exc:  # the session goes on; a tool call will say what is wrong
            logs.info(f"could not register {self.identity.role} at start: {exc}")
        self._keep_present()

    def _keep_present(self) -> None:
        """Refresh last-seen every BEAT seconds while the session lasts: an agent program
        idle at its prompt is alive, never shown stale nor archived by gc, and it stops
        being seen when its session (and so this process) ends."""
        import threading

        every = float(os.environ.get("RELAY_MCP_BEAT") or BEAT)

        def beat() -> None:
            from relayd.agents.presence import touch_if_registered

            while True:
                time.sleep(every)
                try:
                    touch_if_registered(self.identity.store_dir, self.identity.role)
                except OSError:
                    pass  # the store out of reach for now: the next beat tries again

        threading.Thread(target=beat, name="relay-mcp-presence", daemon=True).start()

    def seen(self, title: str | None = None) -> None:
        """Refresh last-seen; a role nobody registered yet is registered now (seed 002).
        `title`: seed 002's role, written into the agent's presence as well."""
        try:
            self.call("touch", {"agent": self.identity.role})
            if title:
                self.call("register", {"name": self.identity.role, "role": title})
        except UnknownAgent:
            params: dict[str, Any] = {"name": self.identity.role, "program": "claude-code", "join": True}
            if title:
                params["role"] = title
            if self.follower is not None or (self.session.channel and self.push not in PUSH_OFF):
                params["notify"] = "channel"  # this session is how the new agent gets its mail
            if self.identity.session:
                params["session"] = self.identity.session
            self.call("register", params)
            logs.info(f"registered {self.identity.role} in {self.identity.store_dir}")

    def unread_notice(self, count: int | None = None) -> str | None:
        """The line telling the model about waiting mail; `count` None: ask the store."""
        if count is None:
            count = self.call("unread", {"agent": self.identity.role})["unread"]
        if count <= 0:
            return None
        return f"[relay] {count} unread message{'s' if count != 1 else ''} waiting: call check_inbox."

    # -- tools -------------------------------------------------------------------------
    def call_tool(self, name: str, arguments: Any) -> ToolOutcome:
        tool = BY_NAME.get(name)
        if tool is None:
            raise protocol.RpcError(protocol.INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(BY_NAME)}")
        try:
            args = check_arguments(tool, arguments)
            calls = ToolCall(self)
            try:
                structured = tool.run(Context(self.identity.role, calls.ask), args)
            finally:
                calls.seen()  # a tool that failed before reaching the store still counts as a sign of life
            notice = self.unread_notice(calls.unread)
        except (ToolFailed, RelayError) as exc:
            return ToolOutcome(None, f"error: {exc}", is_error=True)
        except Exception as exc:  # a bug must not end the session: report it as a failed tool
            import traceback

            logs.info(f"tool {name} failed:\n{traceback.format_exc()}")
            return ToolOutcome(None, f"error: internal error in {name}: {type(exc).__name__}: {exc}", is_error=True)
        text = encode(structured).decode()
        self.spent(len(text) + len(notice or ""), "tool")
        if notice:
            # Claude Code hands the model only structuredContent when a result has it, so the
            # notice goes in there too; clients that show the text get it as a block of its own.
            structured = {**structured, NOTICE: notice}
        return ToolOutcome(structured, text, notice=notice, warning=delivery_warning(structured))

    # -- push delivery ---------------------------------------------------------------
    def start_push(self) -> None:
        """The client takes channel events: follow the inbox and announce new mail."""
        if self.push in PUSH_OFF or self.follower is not None:
            return
        from .follow import Follower

        evidence = None
        if not self.session.channel_declared:
            from .channel_log import ChannelLog

            evidence = ChannelLog()  # Claude Code: only its own log says whether it took an event
        self.follower = Follower(self.identity.store_dir, self.identity.socket_path, self.identity.role, self.notify, evidence)
        self.follower.start()

    def notify(self, params: dict[str, Any]) -> None:
        self.out.write({"jsonrpc": "2.0", "method": protocol.CHANNEL_METHOD, "params": params})

    def spent(self, chars: int, kind: str) -> None:
        """Count what relay put into the model's context (relayd.delivery.spend), in the
        store's file itself: a tool call stays one request. (The follower counts channel events.)"""
        # deferred import: relay-mcp starts without the delivery wing
        from relayd.delivery.spend import add_to

        add_to(self.identity.store_dir, self.identity.role, chars, kind)

    # -- the read loop ---------------------------------------------------------------
    def serve(self, stream: BinaryIO) -> None:
        for line in stream:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                self.out.write(protocol.error_response(None, protocol.PARSE_ERROR, "parse error: not valid JSON"))
                continue
            if isinstance(message, list):
                replies = [r for r in (self.session.handle(m) for m in message) if r is not None]
                if replies:
                    self.out.write(replies)  # type: ignore[arg-type]
                elif not message:
                    self.out.write(protocol.error_response(None, protocol.INVALID_REQUEST, "empty batch"))
                continue
            reply = self.session.handle(message)
            if reply is not None:
                self.out.write(reply)


class ToolCall:
    """The store requests of one tool call, with the session's bookkeeping in their own
    fields (relayd.session): the first also refreshes the role's last-seen, each one answers
    the unread count after it. So a tool that makes one request costs one round trip, not
    three. An operation a bridged relayd decides team-wide (it may refuse before running
    anything) goes alone, and the bookkeeping then takes requests of its own, as before."""

    def __init__(self, shim: Shim) -> None:
        self.shim = shim
        self.touched = False
        self.unread: int | None = None  # after the latest request; None: not known

    def ask(self, op: str, params: dict[str, Any], **more: Any) -> dict[str, Any]:
        from relayd.registry import TEAM_DECIDED

        if op in TEAM_DECIDED:
            self.seen()
            self.unread = None
            return self.shim.ask(op, params, **more)
        role = self.shim.identity.role
        fields = dict(more, agent=role, touch=not self.touched, unread=True)
        try:
            answer = self.shim.ask(op, params, **fields)
        except UnknownAgent as exc:
            if self.touched or exc.details.get("agent") != role:
                self.touched = True
                raise  # (about another agent, e.g. the recipient of a send)
            self.seen()  # the role is new: register it (nothing else ran), then ask again
            answer = self.shim.ask(op, params, **dict(fields, touch=False))
        except RelayError:
            self.touched = True  # it touched before failing, or the store is out of reach: no second try
            raise
        self.touched = True
        self.unread = answer["unread"]
        return answer

    def seen(self) -> None:
        if not self.touched:
            self.shim.seen()
            self.touched = True


USAGE = """usage: relay-mcp [--role NAME]
       relay-mcp -sender NAME [-role ROLE]     (seed 002: the name, and what it does)

An MCP server on stdio for one agent of a relay team; MCP clients such as Claude Code
start it (see `relayctl mcp-config`). The role is registered (or its presence refreshed)
as soon as the client connects. Configured by the environment:
  OVLD_ROLE, RELAY_AGENT or BBS_AGENT_ROLE
                              the agent this session speaks for (required unless --role)
  RELAY_DIR or OVLD_RELAY_DIR the store (default ~/.relay)
  RELAY_SOCKET                relayd's socket
  OVLD_SESSION                the terminal session the role runs in
  RELAY_MCP_CHANNEL           auto | on | off: push new mail as channel events
"""


def _arguments(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """`--role NAME` and seed 002's `-sender NAME -role ROLE`, each also `--x`, `-x=V` or
    `--x=V`: ({"role": ..., "sender": ...} as given, other args). A flag without its value
    gives ""."""
    given: dict[str, str] = {}
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        flag, equals, value = arg.partition("=")
        name = flag.lstrip("-")
        if name in ("role", "sender") and flag in (f"-{name}", f"--{name}"):
            given[name] = value if equals else next(it, "")
        else:
            rest.append(arg)
    return given, rest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if args == ["--version"]:
        sys.stdout.write(f"relay-mcp {__version__}\n")
        return 0
    given, rest = _arguments(args)
    if rest:
        logs.info(f"error: relay-mcp takes only --role NAME, or -sender NAME -role ROLE (got {' '.join(rest)}); see relay-mcp --help")
        return 2
    for flag, example in (("role", "inferno"), ("sender", "alice")):
        if given.get(flag) == "":
            logs.info(f"error: --{flag} needs a NAME, e.g. --{flag} {example}")
            return 2
    try:
        identity = from_env(role=given.get("role"), sender=given.get("sender"))
    except IdentityError as exc:
        logs.info(f"error: {exc}")
        return 2
    shim = Shim(identity, Output(sys.stdout.buffer))
    try:
        shim.serve(sys.stdin.buffer)
    except KeyboardInterrupt:
        return 130
    finally:
        if shim.follower is not None:
            shim.follower.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
