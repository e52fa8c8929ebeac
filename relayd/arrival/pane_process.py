"""The process a terminal pane runs (tmux's `#{pane_pid}`), to tell whose a session state is.

A program state is accepted from, and believed of, only the program process that runs in the
agent's own pane (relayd.arrival.program_state). tmux is asked once per pane process: the
answer is kept while that process lives, so a hook event costs no tmux call.
"""

from __future__ import annotations

from .program_process import Process, alive, process

_known: dict[str, Process] = {}  # notify target -> the process its pane ran when last asked


def tmux_argv(target: str) -> tuple[list[str], str]:
    """(`tmux` argv prefix, pane target): `/socket/path:TARGET` selects the server."""
    if target.startswith("/") and ":" in target:
        socket_path, _, pane = target.partition(":")
        return ["tmux", "-S", socket_path], pane
    return ["tmux"], target


def pane_process(notify: str | None, timeout: float = 3.0) -> Process | None:
    """The process running in the tmux pane an agent's `meta.notify` names (`tmux:TARGET`);
    None for another mechanism, a pane that is gone, or a tmux that does not answer."""
    kind, _, target = (notify or "").partition(":")
    if kind != "tmux" or not target:
        return None
    cached = _known.get(target)
    if cached is not None and alive(cached):
        return cached
    tmux, pane = tmux_argv(target)
    # deferred import: subprocess costs a send or `status` start-up time, and tmux is asked
    # only when a pane's process is not known yet
    import subprocess

    try:
        done = subprocess.run([*tmux, "display-message", "-p", "-t", pane, "#{pane_pid} #{pane_dead}"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    pid, _, dead = done.stdout.strip().partition(" ")
    if done.returncode != 0 or not pid.isdigit() or dead == "1":
        _known.pop(target, None)
        return None
    found = process(int(pid))
    if found is not None:
        _known[target] = found
    return found
