"""relayweb.gate.Gate on its own, with an injected clock: who is admitted, pushed out,
timed out; the same rules serve.GatedH11 applies to real connections (test_web_hostile)."""

from __future__ import annotations

from relayweb.gate import Gate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stranger_gets_the_deadline_and_not_a_second_more() -> None:
    clock = Clock()
    gate: Gate[str] = Gate(clock=clock, deadline=10.0)
    assert gate.opened(("127.0.0.1", 1), "a") == (True, [])
    clock.now += 9.99
    assert not gate.overdue(("127.0.0.1", 1))
    clock.now += 0.01
    assert gate.overdue(("127.0.0.1", 1))


def test_a_connection_that_showed_the_token_has_no_deadline() -> None:
    clock = Clock()
    gate: Gate[str] = Gate(clock=clock, deadline=10.0)
    gate.opened(("127.0.0.1", 1), "owner")
    gate.trust(("127.0.0.1", 1))
    clock.now += 3600
    assert not gate.overdue(("127.0.0.1", 1))


def test_new_strangers_push_out_the_oldest_never_the_owner() -> None:
    gate: Gate[str] = Gate(clock=Clock(), strangers=3, total=100)
    gate.opened(("127.0.0.1", 1), "owner")
    gate.trust(("127.0.0.1", 1))
    pushed = []
    for port in range(2, 12):
        keep, out = gate.opened(("127.0.0.1", port), f"stranger-{port}")
        assert keep
        pushed += out
    assert pushed == [f"stranger-{port}" for port in range(2, 9)]  # the oldest first
    assert len(gate) == 4  # the owner and the three newest strangers


def test_past_the_total_a_new_connection_is_refused() -> None:
    gate: Gate[str] = Gate(clock=Clock(), strangers=2, total=3)
    conns = {port: f"conn-{port}" for port in (1, 2, 3)}
    for port, conn in conns.items():
        gate.opened(("127.0.0.1", port), conn)
        gate.trust(("127.0.0.1", port))
    assert gate.opened(("127.0.0.1", 4), "4") == (False, [])
    gate.closed(("127.0.0.1", 1), conns[1])
    assert gate.opened(("127.0.0.1", 4), "4") == (True, [])


def test_streams_past_the_cap_close_the_oldest() -> None:
    gate: Gate[str] = Gate(clock=Clock(), streams=2)
    for port in (1, 2, 3):
        gate.opened(("127.0.0.1", port), f"conn-{port}")
        gate.trust(("127.0.0.1", port))
    assert gate.stream(("127.0.0.1", 1)) == []
    assert gate.stream(("127.0.0.1", 2)) == []
    assert gate.stream(("127.0.0.1", 3)) == ["conn-1"]
    assert len(gate) == 2


def test_a_closed_connection_never_removes_a_newer_one_on_the_same_port() -> None:
    gate: Gate[str] = Gate(clock=Clock())
    gate.opened(("127.0.0.1", 5), "old")
    assert gate.drop(("127.0.0.1", 5)) == "old"
    gate.opened(("127.0.0.1", 5), "new")
    gate.closed(("127.0.0.1", 5), "old")  # the old one's close arrives late
    assert len(gate) == 1 and gate.drop(("127.0.0.1", 5)) == "new"
