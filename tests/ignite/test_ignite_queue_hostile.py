"""An IGNITE queue directory that someone else can write into: symlinks planted in it are
never followed, and the one-monitor lock survives the directory being removed and made
again under a running monitor."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from support.relayd_proc import Daemon
from support.ignite_queue import TIMEOUT, Clock, drop, inbox, make_monitor, queue, team  # noqa: F401  (fixtures)
from support.waiting import wait_for

NAME = "task_assignment_1770263544123456.mime"


def outside_with_a_task(relayctl, short_tmp: Path, queue: Path, where: str, status: str | None = None) -> tuple[Path, bytes]:
    """A directory outside the queue holding a message file; returns it and the file's bytes."""
    outside = short_tmp / where
    outside.mkdir()
    (queue / "ignitian_1").mkdir(exist_ok=True)
    path = drop(relayctl, queue, "ignitian_1", NAME)
    if status:
        relayctl("mime", "update-status", str(path), status, "--processed-at", "2020-01-01T00:00:00+00:00")
    os.replace(path, outside / NAME)
    return outside, (outside / NAME).read_bytes()


@pytest.mark.slow
def test_a_symlinked_agent_directory_is_never_followed(relayctl, team, queue: Path, relay_env, short_tmp: Path) -> None:
    outside, before = outside_with_a_task(relayctl, short_tmp, queue, "outside")
    shutil.rmtree(queue / "ignitian_2")
    (queue / "ignitian_2").symlink_to(outside)
    drop(relayctl, queue, "ignitian_1", "task_assignment_1770263544999999.mime")  # a real one still flows
    out = make_monitor(relay_env, queue, Clock()).run_once()
    assert [os.path.basename(p) for p in out.delivered] == ["task_assignment_1770263544999999.mime"]
    assert sorted(p.name for p in outside.iterdir()) == [NAME] and (outside / NAME).read_bytes() == before
    assert inbox(relay_env, "ignitian_2") == []


@pytest.mark.slow
def test_a_symlinked_processed_directory_is_never_followed(relayctl, team, queue: Path, relay_env, short_tmp: Path) -> None:
    # An old "delivered" file there would be retried (rewritten) and announced if followed.
    outside, before = outside_with_a_task(relayctl, short_tmp, queue, "outside", status="delivered")
    shutil.rmtree(queue / "ignitian_2" / "processed")
    (queue / "ignitian_2" / "processed").symlink_to(outside)
    waiting = drop(relayctl, queue, "ignitian_2", "task_assignment_1770263544222222.mime")
    logged: list[tuple[str, dict]] = []
    monitor = make_monitor(relay_env, queue, Clock())
    monitor.log = lambda event, **fields: logged.append((event, fields))
    out = monitor.run_once()
    assert out.taken == [] and out.delivered == [] and out.retrying == []
    assert sorted(p.name for p in outside.iterdir()) == [NAME] and (outside / NAME).read_bytes() == before
    assert waiting.exists(), "a new file was moved through the link"
    assert inbox(relay_env, "ignitian_2") == []
    assert [event for event, _ in logged] == ["queue_agent_refused"] and "symlink" in logged[0][1]["error"]


def test_a_symlinked_dead_letter_directory_is_never_followed(relayctl, team, queue: Path, relay_env, short_tmp: Path) -> None:
    outside = short_tmp / "outside"
    outside.mkdir()
    (queue / "dead_letter").symlink_to(outside)
    drop(relayctl, queue, "ignitian_1", NAME)
    clock = Clock()
    monitor = make_monitor(relay_env, queue, clock)
    for _ in range(10):  # past every retry (max_deliver 3): the file is due for the dead letters
        monitor.run_once()
        clock.now += 10 * TIMEOUT
    assert list(outside.iterdir()) == []
    assert (queue / "ignitian_1" / "processed" / NAME).exists()


@pytest.mark.slow
def test_one_monitor_even_after_the_queue_directory_is_made_again(relayctl, team, queue: Path, relay_env) -> None:
    daemon = Daemon(relay_env, "--ignite-queue", str(queue)).start()
    try:
        wait_for("relayd to take the queue", lambda: relayctl("ignite", "watch", str(queue), "--once", check=False).returncode == 1)
        # rm -rf queue (again while relayd, still serving, puts a directory back under it)
        wait_for("the queue to be removed", lambda: shutil.rmtree(queue, ignore_errors=True) or not queue.exists())
        for agent in ("leader", "coordinator", "ignitian_1", "ignitian_2"):
            (queue / agent / "processed").mkdir(parents=True, exist_ok=True)
        proc = relayctl("ignite", "watch", str(queue), "--once", check=False)
        assert proc.returncode == 1 and proc.stderr.startswith("error: another monitor serves"), proc.stderr
        # relayd still serves the new directory, alone.
        path = drop(relayctl, queue, "ignitian_1", NAME)
        wait_for("relayd to take a file from the new directory", lambda: not path.exists())
        wait_for("the notice", lambda: inbox(relay_env, "ignitian_1"))
        assert [n["tags"] for n in inbox(relay_env, "ignitian_1")] == [[f"ignite:{NAME}#0"]]
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=20) == 0


@pytest.mark.slow
def test_a_queue_made_again_empty_is_served_when_its_agents_appear(relayctl, team, queue: Path, relay_env) -> None:
    # The monitor's lock file in the queue keeps a removed queue directory alive, so inotify
    # never reports the removal: a monitor that only watched the queue itself (no agent
    # directories yet) went on watching the dead one, deaf to the new one.
    shutil.rmtree(queue)
    queue.mkdir()
    monitor = make_monitor(relay_env, queue, time.time)  # type: ignore[arg-type]  (a real clock: serve waits on it)
    made_again = threading.Event()
    passes: list[bool] = []  # one per pass that read the queue; True: it began after the removal
    real_pass = monitor.run_once

    def run_once():  # records each pass that read the queue (a pass finding none raises)
        after = made_again.is_set()
        out = real_pass()
        passes.append(after)
        return out

    monitor.run_once = run_once  # type: ignore[method-assign]
    stop = threading.Event()
    serving = threading.Thread(target=monitor.serve, args=(stop, relay_env["RELAY_SOCKET"]))
    serving.start()
    try:
        # The first pass, then the watch, then its catch-up pass: the old queue is watched.
        wait_for("the monitor to watch the queue", lambda: len(passes) >= 2)
        shutil.rmtree(queue)
        made_again.set()
        queue.mkdir()
        wait_for("a pass over the queue made again", lambda: any(passes))
        (queue / "ignitian_1" / "processed").mkdir(parents=True, exist_ok=True)  # (the monitor may make processed/ as soon as it sees the agent)
        path = drop(relayctl, queue, "ignitian_1", NAME)
        wait_for("the monitor to take a file from the queue made again", lambda: not path.exists())
        wait_for("the notice", lambda: inbox(relay_env, "ignitian_1"))  # sent after the file is taken
        assert [n["tags"] for n in inbox(relay_env, "ignitian_1")] == [[f"ignite:{NAME}#0"]]
    finally:
        stop.set()
        serving.join(timeout=20)
    assert not serving.is_alive()
