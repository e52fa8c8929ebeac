"""Evidence that Claude Code took relay-mcp's channel events, read from Claude Code's own log
of this server: a receipt's "announced by channel" is written only from it (DESIGN §4).

Claude Code (2.1.332, read from its installed package) answers a channel event with nothing:
when the server connects it decides by itself whether to listen -- the server declares
`experimental["claude/channel"]`, the connection is of the handshake era, the provider is
Anthropic's API, the account's channels switch is on (off for API-key users: "Channels are
not currently available"), the organization's policy allows them, and the session names the
server with `--channels` or `--dangerously-load-development-channels` -- and otherwise drops
every event unseen. What it decides, and every event it takes, it writes to its debug log of
the server, which it keeps with or without `--debug` (not with
CLAUDE_CODE_SKIP_MCP_DEBUG_LOG_FILES): one JSON object a line, `{"debug", "timestamp",
"sessionId", "cwd"}`, flushed about once a second, in

    $XDG_CACHE_HOME (or ~/.cache) /claude-cli-nodejs/<its cwd>/mcp-logs-<server name>/<its start>.jsonl

(names with every character but ASCII letters and digits made '-'). The lines read here:

    Channel notifications registered              it listens
    Channel notifications skipped: <reason>       it does not: the channel is refused
    notifications/claude/channel (<n> chars)      it took an event of n characters (UTF-16
                                                  code units) and queued it for the model

Several sessions of one project share the folder: the lines of this process's own session are
told apart by its `sessionId`, which Claude Code's session registry names for its pid
(`$CLAUDE_CONFIG_DIR` or `~/.claude`, `sessions/<pid>.json`): the pid of relay-mcp's parent.
"""

from __future__ import annotations

import json
import os
import re

SERVER_NAME = "relay"  # the name relay's MCP configurations give relay-mcp (relayctl mcp-config)
REGISTERED = "Channel notifications registered"
SKIPPED = "Channel notifications skipped: "
_TOOK = re.compile(r"^notifications/claude/channel \((\d+) chars\)$")
_NAME_MAX = 200


def folder_name(text: str) -> str:
    """A path as Claude Code names a folder after it (its cache's project and server folders)."""
    name = re.sub(r"[^a-zA-Z0-9]", lambda m: "-" * utf16_length(m.group()), text)  # one per UTF-16 unit, as JavaScript
    if len(name) <= _NAME_MAX:
        return name
    data = text.encode("utf-16-le")
    h = 0
    for i in range(0, len(data), 2):  # a 32-bit string hash over UTF-16 code units, as Claude Code's
        h = ((h << 5) - h + int.from_bytes(data[i:i + 2], "little")) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return f"{name[:_NAME_MAX]}-{_base36(abs(h))}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def utf16_length(text: str) -> int:
    """The length Claude Code logs for an event's content (a JavaScript string's)."""
    return len(text.encode("utf-16-le")) // 2


class ChannelLog:
    """Claude Code's log of this server, as far as this session's channel goes."""

    def __init__(self, env: dict[str, str] | None = None, parent: int | None = None, server: str = SERVER_NAME) -> None:
        env = dict(os.environ) if env is None else env
        self.parent = os.getppid() if parent is None else parent
        home = env.get("HOME") or os.path.expanduser("~")
        cache = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
        self.folder = os.path.join(cache, "claude-cli-nodejs", folder_name(self._parent_cwd()), f"mcp-logs-{folder_name(server)}")
        self.sessions = os.path.join(env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude"), "sessions")
        self.skipped_off = env.get("CLAUDE_CODE_SKIP_MCP_DEBUG_LOG_FILES", "") not in ("", "0", "false")
        self._session: str | None = None

    def _parent_cwd(self) -> str:
        try:
            return os.readlink(f"/proc/{self.parent}/cwd")
        except OSError:
            return os.getcwd()  # Claude Code starts its servers in its own folder

    def session(self) -> str | None:
        """The parent Claude Code's session id (None until its registry names it)."""
        if self._session is None:
            try:
                with open(os.path.join(self.sessions, f"{self.parent}.json"), encoding="utf-8") as fh:
                    found = json.load(fh).get("sessionId")
                self._session = found if isinstance(found, str) else None
            except (OSError, ValueError, AttributeError):
                return None
        return self._session

    def lines(self, since: str) -> list[str]:
        """This session's debug lines stamped at or after `since` (ISO time), oldest first."""
        session = self.session()
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return []
        found: list[tuple[str, str]] = []
        for name in names:
            if not name.endswith(".jsonl") or name[:10] < since[:10]:  # each file is named after its process's start
                continue
            try:
                with open(os.path.join(self.folder, name), encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue  # a line being written
                        if not isinstance(entry, dict) or not isinstance(entry.get("debug"), str):
                            continue
                        stamp = str(entry.get("timestamp", ""))
                        if stamp >= since and (session is None or entry.get("sessionId") == session):
                            found.append((stamp, entry["debug"]))
            except OSError:
                continue
        return [text for _, text in sorted(found)]

    def verdict(self, since: str) -> tuple[str, str | None] | None:
        """("registered", None) or ("skipped", reason): Claude Code's latest decision about the
        channel since `since`; None while it has written none."""
        decided = None
        for text in self.lines(since):
            if text == REGISTERED:
                decided = ("registered", None)
            elif text.startswith(SKIPPED):
                decided = ("skipped", text[len(SKIPPED):])
        return decided

    def took(self, chars: int, since: str) -> int:
        """How many events of `chars` characters Claude Code took since `since`."""
        return sum(1 for text in self.lines(since) if (m := _TOOK.match(text)) and int(m.group(1)) == chars)
