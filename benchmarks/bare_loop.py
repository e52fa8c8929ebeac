"""A request/reply server that does nothing but relayd's I/O: the floor under relayd's CPU a send.

`python benchmarks/bare_loop.py SOCKET STORE` serves relay's line protocol the way relayd's
connections do (relayd.daemon.server.Peer): an asyncio reader callback per connection, one
`recv` per readable turn, each line decoded with msgspec, every reply of the turn encoded
and written with one `send`. It greets as relayd for STORE, so relay's own client talks to
it unchanged, and answers every request with a send's result shape -- without validating,
storing, fsyncing, or emitting anything. What the same clients cost it is what any relayd
written in Python pays before doing a send's work (bench_daemon's "bare loop" rows).
"""

from __future__ import annotations

import asyncio
import socket
import sys

import msgspec

from relayd.wire.handshake import VERSION

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def _answer(frame: dict, store: str) -> bytes:
    if frame.get("type") == "hello":
        return _encode({"type": "hello", "version": VERSION, "server": "bare loop", "store": store})
    params = frame.get("params") or {}
    to = params.get("to") or []
    result = {"messages": [{"id": params.get("id", ""), "to": name} for name in to], "duplicates": [], "agent_registered": True}
    return _encode({"type": "response", "id": frame.get("id"), "ok": True, "result": result})


async def serve(path: str, store: str) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    listener.setblocking(False)

    def accept() -> None:
        conn, _ = listener.accept()
        conn.setblocking(False)
        pending = [b""]  # a line not complete yet

        def readable() -> None:
            try:
                data = conn.recv(256 * 1024)
            except BlockingIOError:
                return
            if not data:
                loop.remove_reader(conn.fileno())
                conn.close()
                return
            *lines, pending[0] = (pending[0] + data).split(b"\n")
            replies = [_answer(_decode(line), store) + b"\n" for line in lines if line.strip()]
            if replies:
                conn.send(b"".join(replies))  # (replies are small: the socket buffer takes them)

        loop.add_reader(conn.fileno(), readable)

    loop.add_reader(listener.fileno(), accept)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
