"""Wake layers try a restarting gateway again (bench_wake measured one try at ~77 %)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading

import pytest

from relayd import ops
from relayd.team import wake as wake_module
from relayd.config import load_config
from relayd.store import Store


@pytest.fixture
def store(store_dir):
    with Store(str(store_dir)) as opened:
        ops.call(opened, "init", {})
        yield opened


def configure(store: Store, **wake: object) -> None:
    with open(os.path.join(store.root, "config.json"), "w") as fh:
        json.dump({"wake": wake}, fh)


def test_a_gateway_that_fails_while_restarting_is_tried_again(store, short_tmp, monkeypatch):
    log = short_tmp / "woken"
    script = short_tmp / "gateway.sh"
    script.write_text(f'#!/bin/sh\nif [ ! -e {short_tmp}/up ]; then echo restarting >&2; exit 1; fi\nprintf "%s\\n" "$1" >> {log}\n')
    script.chmod(stat.S_IRWXU)
    waits = []

    def sleep(seconds: float) -> None:  # the gateway comes back during the first wait
        waits.append(seconds)
        (short_tmp / "up").touch()

    monkeypatch.setattr(wake_module, "sleep", sleep)
    configure(store, gateway_command=[str(script)])
    assert wake_module.by_gateway(load_config(store), "wake up") is None
    assert waits == [0.1] and log.read_text() == "wake up\n"

    (short_tmp / "up").unlink()
    waits.clear()
    monkeypatch.setattr(wake_module, "sleep", waits.append)  # stays down
    assert "exited 1: restarting" in wake_module.by_gateway(load_config(store), "again")
    assert waits == [0.1, 0.3]  # wake.retries = 2 by default
    configure(store, gateway_command=[str(script)], retries=0)
    waits.clear()
    assert wake_module.by_gateway(load_config(store), "again") is not None and waits == []


def test_a_missing_gateway_is_not_tried_again(store, short_tmp, monkeypatch):
    waits = []
    monkeypatch.setattr(wake_module, "sleep", waits.append)
    configure(store, gateway_command=[str(short_tmp / "nope")])
    assert "not found" in wake_module.by_gateway(load_config(store), "x")
    assert waits == []


def test_a_gateway_socket_that_is_restarting_is_tried_again(store, short_tmp, monkeypatch):
    path = str(short_tmp / "gw.sock")
    received = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received.append(json.loads(conn.makefile().readline())["text"])

    def sleep(seconds: float) -> None:  # the server is back after the first wait
        listener.bind(path)
        listener.listen(1)
        threading.Thread(target=serve, daemon=True).start()

    monkeypatch.setattr(wake_module, "sleep", sleep)
    configure(store, gateway_socket=path)
    try:
        assert wake_module.by_socket(load_config(store), "wake up", "athena") is None
    finally:
        listener.close()
    assert received == ["wake up"]
