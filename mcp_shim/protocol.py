"""MCP over JSON-RPC 2.0, without I/O: a decoded message goes in, the reply comes out.

Two protocol eras are served side by side, decided per request:
* the handshake era (2024-11-05 .. 2025-11-25): `initialize` negotiates a version once;
* 2026-07-28: no handshake; every request carries its protocol version and the client's
  capabilities in `params._meta`, and `server/discover` says what the server speaks.
A request whose `_meta` names a protocol version is served in the modern era; anything
else is served in the version `initialize` negotiated.

Which era a client ends up in is decided at its `server/discover` probe, per client: push
must work where the client runs it. Claude Code keeps channel events only on a connection
made with `initialize` (on a 2026-07-28 one it logs "Channel notifications skipped:
connection negotiated a modern protocol revision with no unsolicited notification path"),
so while push is wanted, its probe is answered with the handshake revisions alone and it
falls back to `initialize`; every other client is offered 2026-07-28.

Tool failures are results with `isError: true` (the model reads them); only faults of the
protocol itself (bad JSON, unknown method, unknown tool) are JSON-RPC errors.
"""

from __future__ import annotations

from typing import Any, Callable

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[0]
_STRUCTURED_SINCE = "2025-06-18"  # outputSchema / structuredContent exist from this revision on

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

CHANNEL_CAPABILITY = "claude/channel"
CHANNEL_METHOD = "notifications/claude/channel"
CLAUDE_CODE_CLIENT = "claude-code"  # clientInfo.name Claude Code sends

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def takes_channel_events(capabilities: Any, client_info: Any) -> bool:
    """Whether a client handles `notifications/claude/channel`.

    Either it says so, with `experimental["claude/channel"]` in its capabilities, or it is
    Claude Code, which announces nothing on its side: the channel is enabled per session
    (`--channels`, `--dangerously-load-development-channels`) and events for a session
    that did not enable it are dropped by Claude Code itself.
    """
    if isinstance(capabilities, dict):
        experimental = capabilities.get("experimental")
        if isinstance(experimental, dict) and CHANNEL_CAPABILITY in experimental:
            return True
    return is_claude_code(client_info)


def is_claude_code(client_info: Any) -> bool:
    return isinstance(client_info, dict) and client_info.get("name") == CLAUDE_CODE_CLIENT


class ToolOutcome:
    """A tool's result: the structured answer (holding the `notice` of unread mail too) and
    its text, then (each as a text block of its own) a `warning` about this call and the
    `notice`."""

    __slots__ = ("structured", "text", "is_error", "notice", "warning")

    def __init__(self, structured: dict[str, Any] | None, text: str, is_error: bool = False, notice: str | None = None, warning: str | None = None) -> None:
        self.structured = structured
        self.text = text
        self.is_error = is_error
        self.notice = notice
        self.warning = warning


class Session:
    """One client connection's protocol state.

    `call_tool(name, arguments)` runs a tool and returns a ToolOutcome; it raises
    RpcError(INVALID_PARAMS) for a tool that does not exist. `on_start()` is called once,
    when a client first speaks: at `initialize`, or at its first 2026-07-28 request. `on_channel_support()`
    is called once, when a client that takes channel events is ready for
    notifications: after `notifications/initialized` in the handshake era, at its first
    request in the 2026-07-28 era.
    """

    def __init__(
        self,
        server_info: dict[str, str],
        instructions: str,
        list_tools: Callable[[bool], list[dict[str, Any]]],
        call_tool: Callable[[str, Any], ToolOutcome],
        on_channel_support: Callable[[], None] = lambda: None,
        on_start: Callable[[], None] = lambda: None,
        push: bool = True,
    ) -> None:
        self.server_info = server_info
        self.instructions = instructions
        self.list_tools = list_tools
        self.call_tool = call_tool
        self.on_channel_support = on_channel_support
        self.on_start = on_start
        self.push = push  # False: channel events are switched off (RELAY_MCP_CHANNEL=off)
        self._started = False
        self.version: str | None = None  # negotiated by initialize; None until then
        self.channel = False
        self.channel_declared = False  # the client itself declared experimental["claude/channel"]
        self._announced = False
        self._handlers: dict[str, Callable[[dict[str, Any], bool], dict[str, Any]]] = {
            "initialize": self._initialize,
            "server/discover": self._discover,
            "ping": lambda params, modern: {},
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }

    # -- entry point -----------------------------------------------------------------
    def handle(self, message: Any) -> dict[str, Any] | None:
        """The reply to one decoded JSON-RPC message; None for notifications and replies."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return error_response(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        method = message.get("method")
        if "id" not in message:
            if method == "notifications/initialized":
                self._ready()
            return None  # a notification (initialized, cancelled, ...): nothing to answer
        request_id = message["id"]
        if not isinstance(method, str):
            if "result" in message or "error" in message:
                return None  # a reply to a request we never send
            return error_response(request_id, INVALID_REQUEST, "request without a method")
        if request_id is None or isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            return error_response(None, INVALID_REQUEST, "request id must be a string or an integer")
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return error_response(request_id, INVALID_PARAMS, "params must be an object")
        try:
            if method == "server/discover" and self._steer_to_handshake(params):
                # Only the handshake revisions, so the client finds no 2026-07-28 in common and
                # falls back to `initialize` (which is where this session starts).
                result = self._discover_result(HANDSHAKE_VERSIONS)
                result["resultType"] = "complete"
                return {"jsonrpc": "2.0", "id": request_id, "result": result}
            modern = self._era(method, params)
            handler = self._handlers.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")
            result = handler(params, modern)
        except RpcError as exc:
            return error_response(request_id, exc.code, exc.message, exc.data)
        if modern:
            result.setdefault("resultType", "complete")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _era(self, method: str, params: dict[str, Any]) -> bool:
        """True for a 2026-07-28 request (checked here: its envelope), False for the handshake era."""
        meta = params.get("_meta")
        if method == "initialize" or not isinstance(meta, dict) or META_PROTOCOL_VERSION not in meta:
            return False
        requested = meta[META_PROTOCOL_VERSION]
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, f"_meta {META_PROTOCOL_VERSION} must be a string")
        if requested not in MODERN_VERSIONS:
            raise RpcError(
                UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                {"supported": list(MODERN_VERSIONS), "requested": requested},
            )
        if META_CLIENT_CAPABILITIES not in meta:
            raise RpcError(INVALID_PARAMS, f"params._meta is missing the required envelope key {META_CLIENT_CAPABILITIES}")
        self._note_client(meta[META_CLIENT_CAPABILITIES], meta.get(META_CLIENT_INFO))
        self._start()
        self._ready()
        return True

    def _steer_to_handshake(self, params: dict[str, Any]) -> bool:
        """Whether this probe comes from a client whose channel events need the `initialize`
        handshake while push is wanted: Claude Code (2.1.332 gates its channel handler on the
        connection's era, and declares nothing that would tell a later version apart)."""
        meta = params.get("_meta")
        return self.push and isinstance(meta, dict) and is_claude_code(meta.get(META_CLIENT_INFO))

    def _note_client(self, capabilities: Any, client_info: Any) -> None:
        if takes_channel_events(capabilities, client_info):
            self.channel = True
            experimental = capabilities.get("experimental") if isinstance(capabilities, dict) else None
            # Declared: the client says it takes them. Claude Code declares nothing; whether it
            # took an event only its own log says (mcp_shim.channel_log).
            self.channel_declared = isinstance(experimental, dict) and CHANNEL_CAPABILITY in experimental

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self.on_start()

    def _ready(self) -> None:
        if self.channel and not self._announced:
            self._announced = True
            self.on_channel_support()

    def structured(self, modern: bool) -> bool:
        return modern or (self.version or LATEST_HANDSHAKE) >= _STRUCTURED_SINCE

    def capabilities(self) -> dict[str, Any]:
        return {"tools": {"listChanged": False}, "experimental": {CHANNEL_CAPABILITY: {}}}

    # -- methods -----------------------------------------------------------------------
    def _initialize(self, params: dict[str, Any], modern: bool) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, "initialize: protocolVersion is required")
        # A version we know is echoed; for anything else we offer our newest and the client decides.
        self.version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
        self._note_client(params.get("capabilities"), params.get("clientInfo"))
        self._start()
        return {
            "protocolVersion": self.version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info,
            "instructions": self.instructions,
        }

    def _discover(self, params: dict[str, Any], modern: bool) -> dict[str, Any]:
        return self._discover_result(MODERN_VERSIONS)

    def _discover_result(self, versions: tuple[str, ...]) -> dict[str, Any]:
        return {
            "supportedVersions": list(versions),
            "capabilities": self.capabilities(),
            "instructions": self.instructions,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {META_SERVER_INFO: self.server_info},
        }

    def _tools_list(self, params: dict[str, Any], modern: bool) -> dict[str, Any]:
        result: dict[str, Any] = {"tools": self.list_tools(self.structured(modern))}
        if modern:
            result.update(ttlMs=0, cacheScope="private")
        return result

    def _tools_call(self, params: dict[str, Any], modern: bool) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call: name is required")
        outcome = self.call_tool(name, params.get("arguments"))
        content = [{"type": "text", "text": outcome.text}]
        if outcome.warning:
            content.append({"type": "text", "text": outcome.warning})
        if outcome.notice:
            content.append({"type": "text", "text": outcome.notice})
        result: dict[str, Any] = {"content": content, "isError": outcome.is_error}
        if outcome.structured is not None and not outcome.is_error and self.structured(modern):
            result["structuredContent"] = outcome.structured
        return result
