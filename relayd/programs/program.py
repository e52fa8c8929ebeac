"""The shape of what relay knows about one agent program (`Program`), and its parts.

Plain classes with `__slots__`: no dataclasses or typing, which would load `re` into every
`relayctl hook` (tests/client/test_startup_imports.py). Each part is data, plus a few small
functions a program module passes in where the data depends on the environment (where a
settings file lives, whether a channel works). The machinery that acts on the data (editing
JSON or TOML, typing into panes) stays with its command: relayctl.hook_settings,
relayctl.team.trust, relayctl.cmd_mcp, relayctl.team.clients, relayd.arrival.
"""

from __future__ import annotations

STATES = ("idle", "working", "asking", "ended", "stopped")
SERVER_NAME = "relay"  # relay-mcp's name in every program's MCP configuration (`--channels server:relay` refers to it)


def json_servers(key: str, entry):
    """An Mcp.build for a JSON configuration: {key: {name: entry(command, args, env)}}."""

    def build(command: str, args: list[str], env: dict[str, str], name: str = SERVER_NAME) -> dict:
        return {key: {name: entry(command, args, env)}}

    build.key = key
    build.entry = entry
    return build


class Hooks:
    """The program's hook events, by what relay does with them, and the state each implies."""

    __slots__ = ("context", "stop", "state", "other", "matcher", "states", "notifications", "named_by_entry", "answer",
                 "entry_fields", "help", "start", "shown", "relayed", "failed", "failure", "stopped", "read_at", "agentless")

    def __init__(self, *, context: tuple[str, ...], stop: str, state: tuple[str, ...], other: tuple[str, ...],
                 states: dict[str, str], notifications: dict[str, str] | None = None, matcher: dict[str, str] | None = None,
                 named_by_entry: bool = False, answer: str = "hookSpecificOutput", entry_fields: dict[str, str] | None = None,
                 help: str = "", start: str | None = None, shown: str | None = None, relayed: bool = False, failed: tuple[str, ...] = (),
                 failure=None, stopped=None, read_at: str | None = None, agentless: tuple[str, ...] = ()) -> None:
        self.context = context  # events whose answer is additionalContext, in the order installed
        self.stop = stop  # the turn's end: a block decision keeps the session going
        self.state = state  # events installed only to report the session's state (relayd.arrival.program_state)
        self.other = other  # the program's events that cannot carry mail (a no-op)
        self.states = states  # event -> the state the session is in once it ran (no row: says nothing)
        self.notifications = notifications or {}  # a Notification event's notification_type -> state
        self.matcher = matcher or {}  # events whose hook entries take a tool matcher
        self.named_by_entry = named_by_entry  # the event's name is not on stdin: the entry passes it
        self.answer = answer  # where the context goes: "hookSpecificOutput" (nested) or "additionalContext" (top level)
        self.entry_fields = entry_fields or {}  # extra fields of each hook entry relay writes
        self.help = help  # `relayctl hook PROGRAM --help`: which events do what
        self.start = start  # the event that starts a session (once: not on a clear or a compaction)
        self.shown = shown  # the answer field whose text the program shows the person (not the model), if any
        # the program shows the person no hook's text at all: `shown` is a field its model reads,
        # and the model is asked to pass the text on
        self.relayed = relayed
        # events that end a turn in failure (the model call refused: "Not logged in", a lost
        # connection): mail the hook handed into that turn is unread again (relayd.arrival.program_state)
        self.failed = failed
        # (event) -> whether this run of one of those events reports the failure (Copilot's
        # errorOccurred is one for a model call, not for a tool); None: every run does
        self.failure = failure
        # (event) -> whether this run of one of the `failed` events says instead that the person
        # stopped the turn before the model saw the mail handed into it (with `read_at` only:
        # elsewhere handed mail is read at once). That
        # mail is still unread and waits for the person's next prompt; its senders are told so.
        self.stopped = stopped
        # the event that shows the model's request went out with the mail the other events
        # handed over (its `handed` field lists it): that mail counts as read only then, since
        # the program calls its hooks a while before the request (OpenCode). None: read when handed.
        self.read_at = read_at
        # events whose hook has work only in a session without an agent name (the line on how
        # to start as one): their entries run relayctl only there, and an agent's session is
        # spared the process (relayctl.hook_settings.hook_command)
        self.agentless = agentless

    @property
    def installed(self) -> tuple[str, ...]:
        """The events `hooks install` puts relay's entry under."""
        return (*self.state[:1], *self.context, self.stop, *self.state[1:])

    def known(self, name: object) -> bool:
        return name in self.context or name == self.stop or name in self.state or name in self.other or name == self.read_at


class Guest:
    """A program that also runs another program's project hooks (Copilot CLI runs Claude
    Code's .claude/settings.json), still reading only its own answer shape."""

    __slots__ = ("host", "calling", "event_field", "no_state")

    def __init__(self, *, host: str, calling, event_field: str, no_state: tuple[str, ...]) -> None:
        self.host = host  # the program whose hooks it runs
        self.calling = calling  # (event dict) -> whether this call of the host's hook came from the guest
        self.event_field = event_field  # where the guest names its own event when it sends one of its own
        self.no_state = no_state  # host events that say nothing of the guest's state


class Settings:
    """The project files relay writes its hook entries into, and how."""

    __slots__ = ("hooks_file", "layout", "allow", "server_file", "server_key", "note", "review")

    def __init__(self, *, hooks_file: str, layout: str, allow: tuple[str, ...] = (), server_file: str | None = None,
                 server_key: str | None = None, note: str = "", review=None) -> None:
        self.hooks_file = hooks_file  # relative to the project
        # "groups": {"hooks": {EVENT: [{"matcher"?, "hooks": [{"type": "command", "command"}]}]}} in a shared file;
        # "own-file": relay's own {"version": 1, "hooks": {EVENT: [{"type": "command", "bash"}]}};
        # "plugin": relay's plugin file (relayctl/opencode_plugin.js), written whole
        self.layout = layout
        self.allow = allow  # permission rules for relay's MCP tools relay adds to the hooks file
        self.server_file = server_file  # the project file relay's MCP server goes into (`up`), if any
        self.server_key = server_key  # the object of that file the servers are under
        self.note = note  # what the person still has to do before the hooks run ({project})
        # when the program reviews project hooks at its start: (how many hook entries the file holds
        # when every one is relay's, else None; the hooks file; the pane's env) -> the Question
        # relay answers, or None when the review is the person's
        self.review = review


class Mcp:
    """How the program is given relay-mcp."""

    __slots__ = ("build", "suffix", "given", "pane_agent", "help")

    def __init__(self, *, build, suffix: str, given: str, pane_agent: str | None = None, help: str = "") -> None:
        # (command, args, env, server name) -> the configuration `mcp-config --for` prints (a dict
        # of JSON, or TOML text); build.inline, when set, the same as one command-line value
        self.build = build
        self.suffix = suffix  # of a file `mcp-config --out-dir` writes
        self.given = given  # at `up`: "file" (a file named on its command line), "argument", or "project" (Settings.server_file)
        self.pane_agent = pane_agent  # with "project": how the shared file names each pane's own agent
        self.help = help


class Launch:
    """How `up` starts it."""

    __slots__ = ("argv", "env", "reads", "arrival", "channel")

    def __init__(self, *, argv, env=None, reads: tuple[str, ...] = (), arrival: str = "pane", channel=None) -> None:
        # (mcp: str | None, channels: bool, model: list[str], args: list[str]) -> argv; mcp is the file or the
        # inline value, as Mcp.given says
        self.argv = argv
        self.env = env  # (repo) -> what its pane's environment needs besides relay's identity
        # The calling shell's settings it reads (sign-in, endpoints, cloud provider), from its own
        # documentation and code: `up` copies the ones set into its pane, since tmux gives a new
        # pane its server's environment, not the caller's.
        self.reads = reads
        self.arrival = arrival  # how mail reaches it under notify = "auto" when it has no channel: "pane" or "hook"
        self.channel = channel  # a Channel, when relay-mcp can push mail into its session


class Channel:
    """relay-mcp's push into a running session."""

    __slots__ = ("flags", "available", "question")

    def __init__(self, *, flags: tuple[str, ...], available, question: Question) -> None:
        self.flags = flags  # on its command line
        self.available = available  # (agent env) -> whether the channel works for this person
        self.question = question  # what the flags make it ask at every start


class Trust:
    """Where the program records that the person trusts a folder, and relay's record of it."""

    __slots__ = ("file", "format", "hook_review")

    def __init__(self, *, file, format: str, hook_review: str | None = None) -> None:
        self.file = file  # (env) -> the settings file
        # the record's shape, which relayctl.team.trust writes and takes out: "projects-flag" (JSON
        # projects[repo].hasTrustDialogAccepted), "projects-table" (TOML [projects."repo"] trust_level),
        # "folder-map" (JSON {repo: "TRUST_FOLDER"}), "folder-list" (JSON trustedFolders list after // lines)
        self.format = format
        # where the same file records the hooks the person reviewed: a TOML table prefix
        # followed by "<hooks file>:" (Codex's [hooks.state."..."]), if it reviews them
        self.hook_review = hook_review


class Question:
    """A question the program asks at its start, and who answers it."""

    __slots__ = ("text", "keys", "question", "advice", "trust", "expected")

    def __init__(self, text: str, keys: list[str] | None = None, expected: bool = True, *, question: str = "",
                 advice: str = "", trust: bool = False) -> None:
        self.text = text  # on the screen while it asks
        self.keys = keys  # relay's answer; None: the person's to answer (named by `up`, never answered)
        self.expected = expected  # False: asked only sometimes; answered when seen, not missed when not
        self.question = question or text  # the question as the person reads it
        self.advice = advice  # the person's: what to do
        self.trust = trust  # the folder trust question, which `up --trust` answers ahead in the program's settings

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Question) and (self.text, self.keys, self.expected) == (other.text, other.keys, other.expected)

    def __iter__(self):
        return iter((self.text, self.keys))

    def __repr__(self) -> str:
        return f"Question({self.text!r}, {self.keys!r}, expected={self.expected})"


class Screen:
    """What its pane shows."""

    __slots__ = ("ready", "prompt", "questions", "first_start", "late", "signed_out")

    def __init__(self, *, ready: tuple[str, ...] = (), prompt: str = "", questions: tuple[str, ...] = (),
                 first_start: tuple[Question, ...] = (), late: float = 0.0, signed_out: tuple[str, ...] = ()) -> None:
        self.ready = ready  # any of these on the screen: it takes a prompt (empty: `up` watches it like any command)
        self.prompt = prompt  # its input line's marker (relayd.arrival.paneinput)
        self.questions = questions  # fixed lines of its questions: nothing is typed while one shows
        self.first_start = first_start  # the person's questions at its first start in a folder (folder trust, ...)
        # seconds a first-start question may still come after the prompt is drawn (Gemini CLI draws
        # its prompt, then its folder trust dialog over it): the prompt alone is not ready before
        self.late = late
        self.signed_out = signed_out  # on its screen when it started without a sign-in


class Door:
    """A way into a running session that types nothing (DESIGN §4, doors before keystrokes),
    which the session itself tells relay about through its hooks."""

    __slots__ = ("operation", "events", "report", "prompt")

    def __init__(self, *, operation: str, events: tuple[str, ...], report, prompt: str | None = None) -> None:
        self.operation = operation  # the store operation that records the door (e.g. claude_inbox)
        self.events = events  # the hook events at which the session reports it
        self.report = report  # (the hook's environment, its event) -> that operation's parameters, the agent's aside
        # The prompt event's field that holds the text of a turn the door started: relay's peer
        # messages (relayd.arrival.for_models.peer_carried), whose mail the prompt hook marks
        # read and does not hand over again. None: the door's notices carry no mail.
        self.prompt = prompt


class Extension:
    """relay's extension for a program that loads extensions from the project, through which
    its door (`Door`) is opened: written whole by `hooks install --extension` and by `up`
    where the team file asks for it (`extension = true`)."""

    __slots__ = ("file", "source", "flags", "help")

    def __init__(self, *, file: str, source: str, flags: tuple[str, ...], help: str) -> None:
        self.file = file  # relative to the project
        self.source = source  # relay's file it is written from (package data of relayctl)
        self.flags = flags  # what the program's command line needs for it to load at all
        self.help = help  # what those flags change besides, in the program's own words


class Program:
    """One agent program."""

    __slots__ = ("name", "title", "package", "tested", "hooks", "guest", "settings", "mcp", "launch", "trust", "screen", "door",
                 "extension")

    def __init__(self, *, name: str, title: str, package: str, tested: str, hooks: Hooks, settings: Settings, mcp: Mcp,
                 launch: Launch, screen: Screen, trust: Trust | None = None, guest: Guest | None = None, door: Door | None = None,
                 extension: Extension | None = None) -> None:
        self.name = name  # as the team file, `--for` and `relayctl hook` spell it
        self.title = title
        self.package = package  # on npm
        self.tested = tested  # the version relay's tests run (tests/agents/package.json)
        self.hooks = hooks
        self.guest = guest
        self.settings = settings
        self.mcp = mcp
        self.launch = launch
        self.trust = trust  # None: it asks no folder trust question
        self.screen = screen
        self.door = door  # None: mail reaches a running session only by its hooks, its channel or the pane
        self.extension = extension  # None: relay has no extension for it

    def turn_failed(self, event: dict) -> bool:
        """Whether the hook event `event` ends (or reports) a turn whose model call failed."""
        name = event.get("hook_event_name")
        return name in self.hooks.failed and (self.hooks.failure is None or bool(self.hooks.failure(event)))

    def turn_stopped(self, event: dict) -> bool:
        """Whether the hook event `event` says the person stopped the turn before its model saw
        the mail handed into it."""
        return self.hooks.stopped is not None and event.get("hook_event_name") in self.hooks.failed and bool(self.hooks.stopped(event))

    def state_after(self, event: dict, continued: bool = False) -> str | None:
        """The state the session is in once it has run its hook for `event`; `continued`:
        the hook's answer to a turn's end keeps the session working."""
        name = event.get("hook_event_name")
        if not isinstance(name, str):
            return None
        if name == "Notification" and self.hooks.notifications:
            kind = event.get("notification_type")
            return self.hooks.notifications.get(kind) if isinstance(kind, str) else None
        state = self.hooks.states.get(name)
        if state == "idle" and continued and name == self.hooks.stop:
            return "working"
        return state
