"""relayctl's fast path (relayctl.fast) against the click CLI it stands in for.

The fast path parses argv itself for send, read, heartbeat and status, then runs the same
command functions (relayctl.actions) as the click commands. So what must hold is:
* whatever argv it accepts, click accepts too and hands the command exactly the same
  settings and parameters (checked in-process for generated argv, click's own parser as
  the reference);
* everything else goes to click (help, other options, errors);
* end to end, with relayd up and down, both entry points print the same bytes and exit
  with the same status;
* with relayd up it loads neither click nor msgspec nor the store code.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import subprocess
import sys

import click
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from relayctl import actions, cli, context, fast
from relayd import ops
from relayd.registry import REGISTERED

from support.relayd_proc import Daemon

ENV_NAMES = ("RELAY_AGENT", "OVLD_ROLE", "BBS_AGENT_ROLE", "RELAY_DIR", "OVLD_RELAY_DIR", "RELAY_SOCKET")


# -- the parser, against click's ---------------------------------------------------------


def click_parse(argv: list[str]) -> tuple[str, dict, dict] | None:
    """(command, settings fields, parameters) as the click CLI hands them to relayctl.actions;
    None when click refuses argv or does not reach one of those functions."""
    seen: list[tuple[str, dict, dict]] = []
    patched = {name: getattr(actions, fast.operation(name)) for name in fast.COMMANDS}

    def recorder(name: str):
        names = list(inspect.signature(patched[name]).parameters)[1:]

        def record(s: context.Settings, *args, **kwargs) -> None:
            fields = {"agent": s.agent, "store_dir": s.store_dir, "socket": s.socket, "json": s.json, "quiet": s.quiet}
            seen.append((name, fields, {**dict(zip(names, args)), **kwargs}))

        return record

    try:
        for name in fast.COMMANDS:
            setattr(actions, fast.operation(name), recorder(name))
        try:
            cli.cli.main(args=list(argv), prog_name="relayctl", standalone_mode=False)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            return None
    finally:
        for name, func in patched.items():
            setattr(actions, fast.operation(name), func)
    return seen[0] if seen else None


def fast_parse(argv: list[str], environ: dict[str, str]) -> tuple[str, dict, dict] | None:
    try:
        command, fields, params = fast.parse(list(argv), environ)
    except fast._Declined:
        return None
    # Settings gets `value or None`, on both paths (cli.cli and fast._fast).
    fields = dict(fields, agent=fields["agent"] or None, store_dir=fields["store_dir"] or None, socket=fields["socket"] or None)
    return command, fields, params


WORDS = st.sampled_from(["bob", "bob,carol", " carol , ", "-", "", "hello there", "héllo ✓", "--x", "-5", "5", "1h", "HIGH", "Critical", "normal", "=", "a=b", "\x1b[31mred\x1b[0m"])
GLOBAL_TOKENS = st.sampled_from(["--agent", "--dir", "--socket", "--json", "--quiet", "-q", "--agent=alice", "--dir=/tmp/x", "--json=1", "-qq", "--help", "--version", "--nope"])
COMMAND_TOKENS = st.sampled_from(sorted({*fast.COMMANDS, "register", "sned", "--help"}))
OPTION_TOKENS = st.sampled_from(
    sorted(
        {opt for spec in fast.COMMANDS.values() for opt in spec.options}
        | {f"{opt}=" for spec in fast.COMMANDS.values() for opt in spec.options}
        | {"--json", "--quiet", "-q", "--wake", "--tail", "--help", "-h", "--", "--last=-1", "--last=007", "--max-deliver=x", "--priority=LOW", "--unread=yes", "--nope"}
    )
)
ENVIRONMENTS = st.fixed_dictionaries({}, optional={name: st.sampled_from(["", "alice", "/tmp/env-store", "/tmp/env.sock"]) for name in ENV_NAMES})


NUMBERS = st.sampled_from(["0", "3", "20", "-2", "x", "+7", " 5 ", "1_0", "٣", "2.5", ""])
CHOICES = st.sampled_from(["low", "HIGH", "Critical", "urgent", "asap", "normal", "ＨＩＧＨ", ""])


@st.composite
def argvs(draw) -> list[str]:
    """Mostly well-formed invocations of the fast commands, with junk mixed in."""
    head: list[str] = []
    for _ in range(draw(st.integers(0, 2))):
        option = draw(st.sampled_from(sorted(fast.GLOBAL)))
        head += [option] if fast.GLOBAL[option][1] is fast.FLAG else [option, draw(WORDS)]
    if draw(st.integers(0, 9)) == 0:
        head.append(draw(st.one_of(GLOBAL_TOKENS, WORDS)))
    command = draw(st.sampled_from(sorted(fast.COMMANDS)) if draw(st.integers(0, 9)) else COMMAND_TOKENS)
    spec = fast.COMMANDS.get(command)
    tail: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        pick = draw(st.integers(0, 9))
        if spec is not None and pick < 6:
            option = draw(st.sampled_from(sorted(spec.options)))
            kind = spec.options[option][1]
            if kind is fast.FLAG:
                tail.append(option)
                continue
            value = draw(NUMBERS if kind in (fast.INT, fast.COUNT) else CHOICES if isinstance(kind, tuple) else WORDS)
            tail += [f"{option}={value}"] if draw(st.booleans()) else [option, value]
        elif pick < 8:
            tail.append(draw(WORDS))
        else:
            tail.append(draw(OPTION_TOKENS))
    return head + [command] + tail


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=argvs(), environ=ENVIRONMENTS)
@example(argv=["--agent", "alice", "send", "bob", "hi", "--tag", "a", "--tag=b", "--priority", "URGENT", "--json"], environ={})
@example(argv=["read", "--unread", "--mark-read", "--last", "0", "-q", "--from", "alice"], environ={"RELAY_AGENT": "", "OVLD_ROLE": "bob"})
@example(argv=["-q", "--json", "status", "--stale=2m", "--agents"], environ={"RELAY_DIR": "/tmp/env-store"})
@example(argv=["heartbeat", "--task", "--json"], environ={})
@example(argv=["send", "--broadcast", "-", "--max-deliver", "3", "--ack", "--ack-wait", "30s", "--type", "task"], environ={})
def test_what_the_fast_path_accepts_click_parses_the_same(argv: list[str], environ: dict[str, str]) -> None:
    with pytest.MonkeyPatch.context() as env:
        for name in ENV_NAMES:
            env.delenv(name, raising=False)
        for name, value in environ.items():
            env.setenv(name, value)
        ours = fast_parse(argv, environ)
        if ours is None:
            return  # the full CLI takes it, whatever it is
        assert click_parse(argv) == ours


def test_the_fast_path_takes_the_usual_invocations() -> None:
    """The examples scripts and hooks actually run (and --help, which it leaves to click)."""
    taken = [
        ["--agent", "alice", "send", "bob", "Done with the parser, tests pass"],
        ["send", "athena", "Need review", "--thread", "bd-42", "--priority", "high"],
        ["send", "--broadcast", "Rebasing main", "--priority", "urgent"],
        ["send", "glacier", "-", "--subject", "what changed"],
        ["--agent", "agent-2", "read", "--unread", "--mark-read"],
        ["read", "--since", "1h", "--json"],
        ["heartbeat", "--task", "Now working on tests"],
        ["status"],
        ["--json", "status"],
        ["status", "--agents", "--stale", "2m"],
        ["set-status", "reviewing", "--task", "review the API"],
        ["reserve", "src/auth/**", "--reason", "bd-42 auth refactor"],
        ["reserve", "/README.md", "--check"],
        ["release", "src/auth/**"],
        ["release", "--all", "--repo", "/tmp/repo"],
        ["reservations", "--agent", "inferno", "--expired"],
        ["--json", "reservations", "--repo", "."],
    ]
    for argv in taken:
        assert fast_parse(argv, {}) is not None, argv
        assert click_parse(argv) == fast_parse(argv, {}), argv
    for argv in (["send", "--help"], ["--help"], ["send", "bob", "hi", "--wake"], ["read", "--tail"], ["register", "dave"], ["--version"], ["send", "bob", "hi", "--priority", "asap"],
                 ["reserve"], ["reserve", "a", "b"], ["set-status"], ["release", "a", "b"]):
        assert fast_parse(argv, {}) is None, argv


def test_the_fast_table_matches_the_click_commands() -> None:
    """Every option the fast path takes exists in click with the same kind, and every
    parameter's default is click's (a changed default must change both)."""
    for name, spec in fast.COMMANDS.items():
        command = cli.cli.get_command(click.Context(cli.cli), name)
        by_name = {param.name: param for param in command.params if param.name and param.expose_value}
        passed = command.make_context(name, [], resilient_parsing=True).params  # what click hands the command when nothing is given
        assert spec.defaults == {key: value for key, value in passed.items() if key != spec.positional}, name
        for spelled, (param_name, kind) in spec.options.items():
            param = by_name[param_name]
            assert spelled in param.opts, (name, spelled)
            if kind is fast.FLAG:
                assert param.is_flag and not param.multiple
            elif kind is fast.MANY:
                assert param.multiple and not param.is_flag
            elif kind is fast.INT:
                assert isinstance(param.type, click.types.IntParamType) and not isinstance(param.type, click.IntRange)
            elif kind is fast.COUNT:
                assert isinstance(param.type, click.IntRange) and param.type.min == 0 and param.type.max is None
            elif isinstance(kind, tuple):
                assert isinstance(param.type, click.Choice) and tuple(param.type.choices) == kind and not param.type.case_sensitive
            else:
                assert kind is fast.TEXT and param.type is click.STRING and not param.is_flag and not param.multiple
        # Which of its operations change the store decides what happens when relayd
        # vanishes mid-call; the module registers the operation for direct mode.
        assert ops.table()[fast.operation(name)].mutates == spec.mutates
        assert REGISTERED[fast.operation(name)].run.__module__ == spec.module


UNSHOWN = {*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))} - {"\n", "\t"}


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(["a", "é", "✓", "\x1b", "[", "31", "m", ";", "?", "0", "K", "\n", "\t", " ", "\r", "\x07", "\x9b", "\u202e", "\x7f"]), max_size=30).map("".join), err=st.booleans(), nl=st.booleans(), exact=st.booleans())
def test_echo_prints_nothing_a_terminal_would_act_on(text: str, err: bool, nl: bool, exact: bool) -> None:
    """In a pipe as on a terminal; only `exact` output (MIME, a raw body) into a pipe is left unchanged."""
    for tty in (False, True):
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        stream.isatty = lambda: tty  # type: ignore[method-assign]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "stderr" if err else "stdout", stream)
            context.echo(text, err=err, nl=nl, exact=exact)
        shown = raw.getvalue().decode()
        if exact and not tty:
            assert shown == text + ("\n" if nl else "")
            continue
        assert not UNSHOWN & set(shown), repr(shown)
        assert shown.replace("\\x1b", "\x1b").replace("\\r", "\r").replace("\\x07", "\x07").replace("\\x9b", "\x9b").replace("\\u202e", "\u202e").replace("\\x7f", "\x7f") == text + ("\n" if nl else "")


def test_json_output_is_exact_and_inert() -> None:
    data = {"body": "\x1b]52;c;ZXZpbA==\x07 \x9b2J \u202e \x7f\n", "n": [1, None]}
    text = context.json_text(data)
    assert json.loads(text) == data and not UNSHOWN & set(text) and "\n" not in text


# -- end to end: the fast entry point and the full click CLI side by side ----------------

FULL = "import sys; from relayctl.cli import main; main(sys.argv[1:])"
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
AGE = re.compile(rb'"age_seconds": [0-9.]+')
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def both(relay_env: dict[str, str], *argv: str, input: bytes | None = None, agent: str | None = None) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = dict(relay_env, **({"RELAY_AGENT": agent} if agent else {}))
    fast_run = subprocess.run([sys.executable, "-m", "relayctl", *argv], env=env, input=input, capture_output=True, timeout=60)
    full_run = subprocess.run([sys.executable, "-c", FULL, *argv], env=env, input=input, capture_output=True, timeout=60)
    return fast_run, full_run


def same(fast_run: subprocess.CompletedProcess, full_run: subprocess.CompletedProcess, mask_ids: bool = False) -> None:
    """Same exit status and bytes; `mask_ids` for commands that write: each run makes its
    own message id and timestamp."""
    def shown(data: bytes) -> bytes:
        data = AGE.sub(b'"age_seconds": <age>', data)  # status --json: seconds since each heartbeat
        return STAMP.sub("<ts>", ULID.sub("<id>", data.decode())).encode() if mask_ids else data

    assert (fast_run.returncode, shown(fast_run.stdout), shown(fast_run.stderr)) == (full_run.returncode, shown(full_run.stdout), shown(full_run.stderr))


READS = [
    ("read",),
    ("read", "--json"),
    ("read", "--last", "2", "-q"),
    ("read", "--unread", "--from", "alice"),
    ("read", "--thread", "bd-7"),
    ("read", "--since", "1h"),
    ("read", "--since", "yesterday"),  # refused by the store: same error, same status
    ("--agent", "nobody", "read"),
    ("--agent", "Bad Name", "read"),
    ("status", "--reservations", "--commands"),
    ("--json", "status", "--commands"),
    ("status", "--stale", "soon"),
]
SENDS = [
    ("send", "bob", "hi"),
    ("--json", "send", "bob", "json please", "--tag", "x", "--priority", "HIGH"),
    ("send", "bob,carol", "to two", "--subject", "two"),
    ("send", "--broadcast", "everyone"),
    ("send", "bob", "owed", "--ack", "--ack-wait", "30s", "--max-deliver", "2"),
    ("send", "nobody", "refused"),
    ("send", "bob"),  # no message and no pipe... stdin is a pipe here: an empty body
    ("send", "bob", "x", "--ack-wait", "soon", "--ack"),
    ("send",),
    ("send", "bob", "too", "many"),
    ("--quiet", "heartbeat", "--task", "tests"),
    ("set-status", "reviewing", "--task", "the API"),
    ("set-status",),
]
# As bob, while alice holds src/auth/** (in this checkout, the runs' working directory).
RESERVATIONS = [
    ("reserve", "docs/**", "--check"),
    ("reserve", "src/auth/login.py", "--check"),  # a conflict: exit 1, the holder named
    ("--json", "reserve", "src/**", "--check"),
    ("reserve", "src/auth/**"),  # refused: alice holds it
    ("reserve",),
    ("reserve", "x", "--repo", "/no/such/repo"),
    ("reservations",),
    ("--json", "reservations", "--agent", "alice", "--expired"),
    ("release", "src/auth/**"),  # not bob's
    ("release",),
    ("release", "--all"),
]


def _team(relayctl, colour: str = "\x1b[31mred\x1b[0m") -> None:
    relayctl("init")
    for name in ("alice", "bob", "carol"):
        relayctl("register", name)
    relayctl("send", "bob", "plain", agent="alice")
    relayctl("send", "bob", f"{colour} and ünïcode ✓\nsecond line", "--thread", "bd-7", "--tag", "t", agent="carol")
    relayctl("send", "bob", "urgent one", "--priority", "urgent", "--ack", "--ack-wait", "1h", agent="alice")  # no redelivery mid-test


@pytest.mark.slow
@pytest.mark.parametrize("up", [True, False], ids=["relayd-up", "relayd-down"])
def test_fast_and_full_cli_print_the_same(relayctl, relay_env: dict[str, str], up: bool) -> None:
    _team(relayctl)
    daemon = Daemon(relay_env).start() if up else None
    try:
        for argv in READS:
            same(*both(relay_env, *argv, agent="bob"))
        for argv in SENDS:
            same(*both(relay_env, *argv, agent="alice", input=b""), mask_ids=True)
        same(*both(relay_env, "send", "bob", "-", agent="alice", input=b"piped\nbody\n"), mask_ids=True)
        relayctl("reserve", "src/auth/**", "--reason", "bd-7", agent="alice")
        for argv in RESERVATIONS:
            same(*both(relay_env, *argv, agent="bob"), mask_ids=True)
        relayctl("read", "--unread", "--mark-read", "--last", "0", agent="carol")
        same(*both(relay_env, "read", "--unread", "--mark-read", agent="carol"))  # nothing left unread: both say so
        # No identity: the same refusal and exit status.
        same(*both(relay_env, "heartbeat"))
        same(*both(relay_env, "send", "bob", "who am I"))
    finally:
        if daemon is not None:
            daemon.stop()


MODULES_PROBE = """
import sys
from relayctl.fast import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("LOADED:" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("click", "msgspec", "anyio", "structlog") or m in ("relayd.store", "relayd.inbox", "relayd.ops", "relayd.client.full"))), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["--agent", "alice", "send", "bob", "hi"],
        ["--agent", "bob", "read", "--unread", "--mark-read"],
        ["--agent", "alice", "heartbeat"],
        ["status"],
        ["--json", "status"],
        ["--agent", "alice", "set-status", "reviewing"],
        ["--agent", "alice", "reserve", "src/auth/**"],
        ["--agent", "bob", "reserve", "src/auth/**", "--check"],
        ["--agent", "alice", "release", "--all"],
        ["reservations"],
    ],
    ids=["send", "read", "heartbeat", "status", "status-json", "set-status", "reserve", "reserve-check", "release", "reservations"],
)
def test_with_relayd_up_the_usual_commands_load_no_click_msgspec_or_store(relayctl, relay_env: dict[str, str], argv: list[str]) -> None:
    _team(relayctl, colour="red")  # (printing an ANSI sequence into a pipe is left to click.echo)
    daemon = Daemon(relay_env).start()
    try:
        proc = subprocess.run([sys.executable, "-c", MODULES_PROBE, *argv], env=relay_env, capture_output=True, text=True, timeout=60)
    finally:
        daemon.stop()
    assert proc.returncode == 0, proc.stderr
    loaded = [line for line in proc.stderr.splitlines() if line.startswith("LOADED:")]
    assert loaded == ["LOADED:"], proc.stderr
    if argv[-1] == "status" and "--json" not in argv:
        assert proc.stdout.startswith("relayd: running")


@pytest.mark.slow
def test_with_relayd_down_the_fast_path_works_on_the_store_without_click(relayctl, relay_env: dict[str, str]) -> None:
    _team(relayctl)
    proc = subprocess.run([sys.executable, "-c", MODULES_PROBE, "--agent", "alice", "send", "bob", "direct"], env=relay_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("sent "), proc.stderr
    assert "click" not in proc.stderr.split("LOADED:")[1].split(",")
    messages = json.loads(relayctl("--json", "read", agent="bob").stdout)
    assert messages[-1]["body"] == "direct"


@pytest.mark.slow
def test_leaving_without_teardown_loses_no_output_and_a_closed_pipe_is_quiet(relayctl, relay_env: dict[str, str]) -> None:
    """The fast path ends with os._exit: a long listing must still arrive whole, byte for
    byte as the click CLI prints it, and a reader that stops early (head) is no error."""
    from relayd.store import Store

    _team(relayctl)
    with Store(relay_env["RELAY_DIR"], fsync=False) as store:
        for n in range(600):
            ops.call(store, "send", {"agent": "alice", "to": ["bob"], "body": f"line {n} " + "x" * 200})
    fast_run, full_run = both(relay_env, "read", "--last", "0", agent="bob")
    same(fast_run, full_run)
    assert fast_run.stdout.count(b"alice \xe2\x86\x92 bob") >= 600  # (the team's own messages too)

    proc = subprocess.Popen([sys.executable, "-m", "relayctl", "--agent", "bob", "read", "--last", "0"], env=relay_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    with proc.stderr:
        assert proc.stderr.read() == b""
