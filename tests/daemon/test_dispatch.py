"""One dispatcher: an operation gives the same answer through relayd as directly on the store.

relayd's server runs in the test's own event loop on a real Unix socket (tests/support/inproc.py);
the raw client talks to it from a worker thread. Each test here is a place where relayd's
copy of "run an operation" had drifted from `relayd.ops.run`, the one both now use.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterator

import anyio
import msgspec
import pytest

from support.inproc import blocking, serving
from relayd import ops
from relayd.daemon import timers
from relayd.errors import Internal, NotFound
from relayd.registry import REGISTERED, Operation
from relayd.store import Store
from support.rawclient import RawClient

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _request(socket_path: str, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    client = RawClient(socket_path)
    try:
        return client.request(op, params or {})
    finally:
        client.close()


def _direct_error(store_dir: str, op: str, params: dict[str, Any]) -> Exception:
    with Store(store_dir, fsync=False) as store:
        with pytest.raises(Exception) as raised:
            ops.call(store, op, params)
    return raised.value


class Buggy(msgspec.Struct):
    key: str = "missing"


def _buggy(store: Store, p: Buggy) -> Any:
    return {}[p.key]


def _buggy_batch(store: Store, params: list[Buggy]) -> list[Any]:
    return [{}[p.key] for p in params]


@pytest.fixture
def buggy_ops() -> Iterator[None]:
    """Two operations with a bug, one run alone, one batched (as relayd batches sends)."""
    REGISTERED["test_buggy"] = Operation("test_buggy", Buggy, _buggy, False, "a bug")
    REGISTERED["test_buggy_batched"] = Operation("test_buggy_batched", Buggy, _buggy, True, "a bug", batch=_buggy_batch)
    try:
        yield
    finally:
        del REGISTERED["test_buggy"], REGISTERED["test_buggy_batched"]


async def test_a_store_removed_under_relayd_is_reported_as_directly(short_tmp: Path) -> None:
    store_dir = short_tmp / "store"
    async with serving(str(store_dir), str(short_tmp / "d.sock")) as relayd:
        assert (await blocking(_request, relayd.socket_path, "register", {"name": "alice"}))["ok"]
        shutil.rmtree(store_dir)
        expected = _direct_error(str(store_dir), "unread", {"agent": "alice"})
        assert isinstance(expected, NotFound) and not store_dir.exists()
        for op, params in (("unread", {"agent": "alice"}), ("agents", {}), ("status", {})):
            answer = await blocking(_request, relayd.socket_path, op, params)
            # before: relayd answered from the removed directory ("unknown agent", an empty list)
            assert answer["ok"] is False and answer["error"] == {"code": "not_found", "message": expected.message}
        assert not store_dir.exists()  # looking created nothing


async def test_a_bug_in_an_operation_reads_the_same_through_relayd_and_directly(short_tmp: Path, buggy_ops: None) -> None:
    store_dir = short_tmp / "store"
    async with serving(str(store_dir), str(short_tmp / "d.sock")) as relayd:
        for op in ("test_buggy", "test_buggy_batched"):
            direct = _direct_error(str(store_dir), op, {"key": "k"})
            # before: direct mode raised the bare KeyError (relayctl: "internal error: KeyError...", exit 70)
            # while relayd answered "internal error in OP: ..." (relayctl: exit 1)
            assert isinstance(direct, Internal) and direct.message == "internal error in " + op + ": KeyError: 'k'"
            assert direct.exit_status == 70
            answer = await blocking(_request, relayd.socket_path, op, {"key": "k"})
            assert answer["ok"] is False and answer["error"] == {"code": "internal", "message": direct.message}
        assert (await blocking(_request, relayd.socket_path, "version"))["ok"]  # still serving


async def test_bad_params_of_a_batched_operation_are_answered_in_order(short_tmp: Path) -> None:
    """A send whose params do not decode is refused with the message direct mode gives, and
    its reply keeps its place among the sends pipelined around it."""
    store_dir = short_tmp / "store"
    async with serving(str(store_dir), str(short_tmp / "d.sock")) as relayd:
        for name in ("alice", "bob"):
            assert (await blocking(_request, relayd.socket_path, "register", {"name": name}))["ok"]
        bad = {"agent": "alice", "to": "bob", "body": 5}
        expected = _direct_error(str(store_dir), "send", bad)

        def pipelined() -> list[dict[str, Any]]:
            client = RawClient(relayd.socket_path)
            try:
                for n, params in enumerate(({"agent": "alice", "to": ["bob"], "body": "one"}, bad, {"agent": "alice", "to": ["bob"], "body": "two"})):
                    client.send_line({"type": "request", "id": n, "op": "send", "params": params})
                return [client.line() or {} for _ in range(3)]
            finally:
                client.close()

        first, refused, second = await blocking(pipelined)
        assert [first["id"], refused["id"], second["id"]] == [0, 1, 2]
        assert first["ok"] and second["ok"]
        assert refused["error"] == {"code": "invalid_argument", "message": expected.message}


async def test_a_bug_in_gc_is_logged_and_the_timer_goes_on(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the timer let the exception out, and relayd's task group (the whole daemon)
    ended with it."""
    calls: list[int] = []

    def broken_gc(store: Store, p: Any) -> Any:
        calls.append(1)
        raise KeyError("retention")

    gc = ops.table()["gc"]
    monkeypatch.setitem(REGISTERED, "gc", msgspec.structs.replace(gc, run=broken_gc))
    with Store(str(short_tmp / "store"), fsync=False) as store:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(timers.collect_garbage, store, 0.001)
                while len(calls) < 3:
                    await anyio.sleep(0.001)
                tasks.cancel_scope.cancel()
