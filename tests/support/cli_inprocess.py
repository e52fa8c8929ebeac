"""relayctl's own entry point run inside the test process: its argv, environment and stdin
in, its stdout, stderr and exit status out, as `subprocess.run` would give them.

A Python start costs about 100 ms of CPU, and most of the suite's relayctl calls are about
what a command does and prints, not about being a process. The same `relayctl.fast.main`
the installed script runs takes them here: the fast path, the full click CLI behind it,
relayd through its socket or the store in direct mode. What stays a process
(`cli_processes.PROCESS_COMMANDS`, or `process=True`) is what is about processes: relayd
itself, commands that follow until a signal stops them, `up` and `down`.

For the length of a call the process's environment *is* the call's (`os.environ` is
replaced and put back), sys.stdin reads `input` (or nothing, as from /dev/null) and
sys.stdout and sys.stderr are captured bytes, decoded as `text=True` would.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import traceback
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _text(raw: bytes) -> str:
    # text=True decodes with universal newlines: "\r\n" and "\r" read as "\n".
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="replace", newline=None).read()


def run(args: list[str], env: dict[str, str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`relayctl ARGS` in this process; its CompletedProcess, as subprocess.run(text=True,
    capture_output=True) would return it. A traceback that escapes relayctl's own handling
    (a bug) goes to stderr with status 1, as the interpreter would print it; a test's own
    interruption (its timeout, Ctrl-C) is not caught."""
    from relayctl.fast import main

    out, err = io.BytesIO(), io.BytesIO()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    given = (
        io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", write_through=True),
    )
    sys.stdin, sys.stdout, sys.stderr = given
    status = 0
    try:
        with _environment(env):
            main(list(args))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            sys.stderr.write(f"{exc.code}\n")
            status = 1
    except Exception:
        sys.stderr.write(traceback.format_exc())  # what the interpreter prints as it dies
        status = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        stdout, stderr = out.getvalue(), err.getvalue()
        for wrapper in given:
            wrapper.detach()  # (closing the wrapper would close the bytes under it)
    return subprocess.CompletedProcess(["relayctl", *args], status, _text(stdout), _text(stderr))
