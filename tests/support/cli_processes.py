"""Processes the tests start the way users and scripts do: relayctl, and stopping a command
as a person would. Kept out of conftest.py so a test module can import them whichever
conftest (tests/ or tests/torture/) pytest loaded last."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from relayctl import fast
from relayd.client.full import Client

from . import cli_inprocess


# Commands that serve, follow until stopped, or start and stop other processes: always run
# as a process of their own (a signal, a pid, a process group are what they are about).
PROCESS_COMMANDS = frozenset({"daemon", "subscribe", "up", "down", "web", "bridge", "ignite", "systemd"})
FOLLOWING = frozenset({"--tail", "--wait", "--follow"})


class RelayCtl:
    """Runs relayctl as users and scripts do: its own entry point, inside this process
    (support.cli_inprocess) unless the command is about processes (`PROCESS_COMMANDS`, an
    option that follows until stopped) or the test asks for one (`process=True`). `setup`
    prepares a test's store through the client instead."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, *args: str, agent: str | None = None, input: str | None = None, check: bool = True, timeout: float = 60, process: bool = False) -> subprocess.CompletedProcess[str]:
        argv = ["--agent", agent] if agent else []
        argv += list(args)
        if process or _needs_a_process(argv):
            proc = subprocess.run([sys.executable, "-m", "relayctl", *argv], env=self.env, input=input, capture_output=True, text=True, timeout=timeout)
        else:
            proc = cli_inprocess.run(argv, self.env, input)
        if check and proc.returncode != 0:
            raise AssertionError(f"relayctl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def setup(self, op: str, **params: object) -> dict:
        """An operation a test only needs done before what it tests (`init`, `register`),
        run in this process through the client relayctl itself uses: the same operation,
        files and daemon, without a Python start (about 100 ms of CPU each, a thousand
        times a suite). What relayctl prints and how it parses are tested elsewhere."""
        with Client(self.env["RELAY_DIR"], self.env.get("RELAY_SOCKET"), name="tests") as client:
            return client.call(op, {k: v for k, v in params.items() if v is not None})


def _needs_a_process(argv: list[str]) -> bool:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        # relayctl's own table of global options: those not a flag take the next argument
        i += 1 if fast.GLOBAL.get(argv[i], (None, fast.FLAG))[1] is fast.FLAG else 2
    command = argv[i] if i < len(argv) else None
    return command in PROCESS_COMMANDS or any(token.partition("=")[0] in FOLLOWING for token in argv)


def process_state(proc: subprocess.Popen) -> str:
    """Whether a process a test started still runs, where it waits and which signals it
    blocks, ignores or catches: what a failure says of one that did not do what it should."""
    if proc.poll() is not None:
        return f"exited {proc.returncode}"
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
    except OSError as exc:
        return f"unreadable: {exc}"
    wanted = ("State:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:", "SigCgt:")
    return ", ".join([line.replace("\t", " ") for line in status if line.startswith(wanted)] + [f"wchan {wchan}"])


def stop_child(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 10.0) -> tuple:
    """Stop a command the test started (Ctrl-C by default) and collect its output. One that
    does not end in time is killed, and the test fails: no test leaves a process behind."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"{' '.join(map(str, proc.args))} was still running {timeout}s after signal {sig}; killed") from None
