"""Search over every message in the store: the one function behind `relayctl search` and
the web view's search box (and its "newest messages" list, which is a search with no terms).

What matches: every whitespace-separated term of `text` must occur, ignoring case
(`str.lower`), in the message's subject, body, sender, recipient, thread or tags; `from`,
`to`, `agent` (from or to) and `thread` must be equal; `since` keeps newer messages.
Results come newest first, at most `limit` of them.

How it stays fast on a large store without an index: an inbox holds the messages *to* one
agent, so `to` picks files, not lines. Each file is read from its end in large blocks; a
block is searched as bytes for the most selective piece of the query (a text term, lowered
the way `bytes.lower` lowers ASCII, or the encoded `"thread":...` / `"from":...` field),
and only the lines holding it are decoded and checked exactly. Appends are in time order,
so a `since` stops the walk at the first older block. `benchmarks/bench_search.py`
measures this on a store of 1,000,000 messages.

Not an operation on the socket: relayd runs operations on its one loop, and a scan of a
big store there would hold up every send. Readers only take complete lines, so searching
the files from the client's process is safe while relayd (or anyone) writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgspec

from .. import layout
from ..errors import UsageError
from ..fsio import complete_end, regions_backward
from ..records import Message, check_agent_name, first_line_ts, json_encoder, message_decoder
from ..store import Store
from ..timefmt import parse_since, to_iso

MAX_LIMIT = 10_000
MAX_TERMS = 16
_FIRST_BLOCK = 256 * 1024  # most searches stop at the limit in an inbox's newest lines
_BLOCK = 8 * 1024 * 1024
_ASCII_LOWER = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))  # as bytes.lower, faster


class SearchQuery(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str = ""
    from_: str | None = msgspec.field(default=None, name="from")
    to: str | None = None
    agent: str | None = None  # sender or recipient
    thread: str | None = None
    since: str | None = None  # a duration back from now ("1h") or a date/time
    limit: int = 50


class SearchResult(msgspec.Struct, kw_only=True):
    messages: list[Message]  # newest first
    more: bool  # the limit was reached: older matches may exist
    scanned_bytes: int  # how much of the inbox files was read


@dataclass
class _Plan:
    """The query made ready for scanning one inbox file."""

    terms: list[str]
    from_: str | None
    thread: str | None
    since: str  # fixed-width ISO, "" for none
    needle: bytes | None  # a block without it holds no match
    fold: bool  # the needle is matched against ASCII-lowered bytes
    scanned: int = field(default=0)

    def matches(self, m: Message) -> bool:
        if self.from_ is not None and m.from_ != self.from_:
            return False
        if self.thread is not None and m.thread != self.thread:
            return False
        if self.since and m.ts < self.since:
            return False
        if self.terms:
            text = "\n".join((m.subject, m.body, m.from_, m.to, m.thread or "", *m.tags)).lower()
            return all(term in text for term in self.terms)
        return True


def _searchable_run(term: str) -> str:
    """The longest piece of a lowered term whose stored bytes are predictable: characters
    that JSON leaves unescaped and that `bytes.lower` lowers as `str.lower` does (ASCII,
    or characters without case, such as CJK)."""
    best = current = ""
    for char in term:
        plain = char.isprintable() and char not in '"\\'
        if plain and (char.isascii() or char.lower() == char.upper()):
            current += char
            if len(current) > len(best):
                best = current
        else:
            current = ""
    return best


def _encoded(value: str) -> bytes:
    return json_encoder.encode(value)


def _plan(q: SearchQuery, inbox_owner: str) -> _Plan:
    terms = [t.lower() for t in q.text.split()]
    since = to_iso(parse_since(q.since)) if q.since else ""
    from_ = q.from_
    if q.agent is not None and q.agent != inbox_owner:
        # Every message in its own inbox is to the agent; in another, only what it sent.
        from_ = q.agent if q.from_ in (None, q.agent) else "\x00"  # "\x00": two senders, no match
    needle, fold = None, False
    run = max((_searchable_run(t) for t in terms), key=len, default="")
    if q.thread is not None:
        needle = b'"thread":' + _encoded(q.thread)
    elif len(run) >= 3:
        needle, fold = run.encode(), True
    elif from_ is not None and from_ != "\x00":
        needle = b'"from":' + _encoded(from_)
    elif run:
        needle, fold = run.encode(), True
    return _Plan(terms, from_, q.thread, since, needle, fold)


def _lines_with(data: bytes, begin: int, needle: bytes, fold: bool) -> list[tuple[int, int]]:
    """(start, end) of each line of `data[begin:]` holding `needle`, in file order
    (`begin` follows a newline; offsets, not a slice: a copy of the block costs time)."""
    haystack = data.translate(_ASCII_LOWER) if fold else data
    spans = []
    at = haystack.find(needle, begin)
    while at >= 0:
        start = haystack.rfind(b"\n", begin, at) + 1 or begin
        end = haystack.find(b"\n", at)
        spans.append((start, end))
        at = haystack.find(needle, end + 1)
    return spans


def _all_lines(data: bytes, begin: int) -> list[tuple[int, int]]:
    spans = []
    start = begin
    while (end := data.find(b"\n", start)) >= 0:
        spans.append((start, end))
        start = end + 1
    return spans


_MORE, _FULL, _OLDER = range(3)


def _scan(fd: int, plan: _Plan, limit: int, found: list[Message]) -> int:
    """Matches of one file, newest first, into `found`: _FULL once `limit` is reached,
    _OLDER once it met messages older than `since`, _MORE when the file ran out."""
    taken = 0
    for _, data, cut in regions_backward(fd, complete_end(fd), _FIRST_BLOCK, _BLOCK):
        plan.scanned += len(data) - cut
        spans = _all_lines(data, cut) if plan.needle is None else _lines_with(data, cut, plan.needle, plan.fold)
        for line_start, line_end in reversed(spans):
            try:
                message = message_decoder.decode(data[line_start:line_end])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a corrupt line is `read`'s to report; a search only finds messages
            if plan.since and message.ts < plan.since:
                return _OLDER  # older from here on (appends are in time order)
            if plan.matches(message):
                found.append(message)
                taken += 1
                if taken >= limit:
                    return _FULL
        if plan.since and first_line_ts(data, cut) < plan.since:
            return _OLDER
    return _MORE


def _check(q: SearchQuery) -> None:
    if not 1 <= q.limit <= MAX_LIMIT:
        raise UsageError(f"limit must be 1-{MAX_LIMIT}, not {q.limit}")
    if len(q.text.split()) > MAX_TERMS:
        raise UsageError(f"at most {MAX_TERMS} search terms")
    for label, name in (("from", q.from_), ("to", q.to), ("agent", q.agent)):
        if name is not None:
            check_agent_name(name, label)
    if q.thread is not None and not q.thread:
        raise UsageError("thread: give a thread id")


def search(store: Store, q: SearchQuery) -> SearchResult:
    """Messages matching `q` in every inbox (current and rotated files), newest first."""
    _check(q)
    store.require_existing()
    if q.to is not None:
        if not store.is_agent(q.to):
            raise store.unknown_agent(q.to)
        owners = [q.to]
    else:
        owners = store.known_agents()
    found: list[Message] = []
    scanned = 0
    for owner in owners:
        plan = _plan(q, owner)
        if plan.from_ == "\x00":
            continue
        mine: list[Message] = []
        with store.agent_dir(owner) as folder:
            for name in (layout.INBOX, layout.INBOX_ROTATED):
                try:
                    fd = folder.open(name, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    outcome = _scan(fd, plan, q.limit - len(mine), mine)
                finally:
                    os.close(fd)
                if outcome != _MORE:
                    break  # the rotated file holds only older messages
        scanned += plan.scanned
        found.extend(mine)
    found.sort(key=lambda m: (m.ts, m.id), reverse=True)
    return SearchResult(messages=found[: q.limit], more=len(found) >= q.limit, scanned_bytes=scanned)
