"""Codex's own message queue, as relay speaks to it: the pure parts (no I/O).

Codex CLI (0.169.0) has `codex queue --thread ID --message TEXT`: it adds the text to the
thread's queue in `$CODEX_HOME/queue_1.sqlite` (table `queued_items`; triggers bump
`queued_thread_revisions`) and prints `Queued message <id> for thread <id>.`. Whoever hosts
the thread submits what was queued as its next turn: at once when the session is idle,
after the running tool or turn otherwise; a permission question is left for the person.
Who hosts it decides how soon:

* A plain `codex` runs its session in the local app-server daemon Codex starts on its own
  (`$CODEX_HOME/packages/app-server-daemon/...`, control socket
  `$CODEX_HOME/app-server-control/app-server-control.sock`; feature `daemon_auto_start`);
  the TUI is its client. There a queued message reaches the model in about 0.2 s.
* A `codex` started with flags the daemon cannot take (`--dangerously-bypass-hook-trust`
  was seen to do it) hosts its own app server in the TUI process, which looks at the
  database (`PRAGMA data_version`, then the revisions newer than the last it saw) on a
  timer: 5 to 8 s after the command here, as if every ~10 s. `codex queue --resume` does
  not help there: it reaches only a daemon ("start a local daemon or specify a server with
  --remote"), and no flag or feature was found that wakes an in-process session sooner.

There is no receipt: the command's success means queued, not seen by the model.

What relay needs from a session to use it (relayctl.hook_answer reports it from the hooks,
which run as Codex's children): the thread id (the hook event's `session_id`), the Codex
process (pid and start time, so a later session in the same pane never gets an earlier
one's thread), the binary that process runs (it queues with the same version), and the
session's CODEX_HOME (where its queue database is).
"""

from __future__ import annotations

import os

from .for_models import mail_notice

QUEUE_USAGE = "Usage: codex queue"  # what `codex queue --help` prints where the command exists
NOTICE_MAX = 1200  # characters of one queued notice; the mail itself is read with relay's tools
# After the person declines a question (Esc), Codex keeps what was queued until their next
# prompt: relay's hooks record that as "idle" after the Interrupt event.
DECLINED_EVENT = "Interrupt"
HELD_NOTE = "queued in Codex; Codex holds it until the person's next prompt (a question was declined)"



def has_queue(help_output: str) -> bool:
    return QUEUE_USAGE in help_output


def queue_argv(codex: str, thread: str, text: str) -> list[str]:
    return [codex, "queue", "--thread", thread, "--message", text]


def queued(stdout: str, thread: str) -> bool:
    """Whether `codex queue` says it queued the message into `thread`."""
    return "Queued message" in stdout and thread in stdout


def notice(agent: str, messages: list[dict]) -> str:
    """The text queued into the session (relayd.arrival.for_models.mail_notice)."""
    return mail_notice(agent, messages, NOTICE_MAX)


def held_for_person(state: str | None, event: str | None) -> bool:
    """Whether Codex keeps queued messages until the person's next prompt: the session's
    last hook said it went back to its prompt by the person declining a question."""
    return state == "idle" and event == DECLINED_EVENT
