"""Search (`relayd.inbox.search`, behind `relayctl search` and the web view) against a plain
model: every stored message checked one by one, with no prefilter and no early stop."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from relayd import layout, ops
from relayd.inbox.read import read_all
from relayd.inbox.search import SearchQuery, search
from relayd.store import Store

AGENTS = ["ann", "bob", "cy"]
WORDS = ["Auth", "auth", "TESTS", "pass", "Grüße", "straße", "完了", "テスト", 'say "hi"', "back\\slash", "tab\there", "x", "bd-42"]


def _model(store: Store, q: SearchQuery) -> list[str]:
    terms = [t.lower() for t in q.text.split()]
    found = []
    for owner in AGENTS:
        for m in read_all(store, owner).messages:
            text = "\n".join((m.subject, m.body, m.from_, m.to, m.thread or "", *m.tags)).lower()
            if q.from_ and m.from_ != q.from_ or q.to and m.to != q.to or q.thread and m.thread != q.thread:
                continue
            if q.agent and q.agent not in (m.from_, m.to):
                continue
            if all(t in text for t in terms):
                found.append(m)
    found.sort(key=lambda m: (m.ts, m.id), reverse=True)
    return [m.id for m in found[: q.limit]]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("search") / "store"
    with Store(str(root), fsync=False, rotate_bytes=4096) as s:  # small files: rotation happens
        for name in AGENTS:
            ops.call(s, "register", {"name": name})
        for i in range(240):
            words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(1 + i % 4)]
            ops.call(
                s,
                "send",
                {"agent": AGENTS[i % 3], "to": [AGENTS[(i + 1 + i // 3) % 3] if (i + 1 + i // 3) % 3 != i % 3 else AGENTS[(i + 2) % 3]], "body": " ".join(words) + f" #{i}", "thread": f"t{i % 5}" if i % 2 else None, "tags": ["Urgent"] if i % 11 == 0 else []},
            )
        assert any(os.path.exists(os.path.join(root, layout.AGENTS, a, layout.INBOX_ROTATED)) for a in AGENTS)
    opened = Store(str(root))
    yield opened
    opened.close()


queries = st.builds(
    SearchQuery,
    text=st.lists(st.sampled_from(["auth", "AUTH", "tests", "grüsse", "GRÜSSE", "straße", "完了", "テスト", '"hi"', "back\\slash", "x", "bd-42", "urgent", "ann", "#1", "ß", "nowhere"]), max_size=2).map(" ".join),
    from_=st.none() | st.sampled_from(AGENTS),
    to=st.none() | st.sampled_from(AGENTS),
    agent=st.none() | st.sampled_from(AGENTS),
    thread=st.none() | st.sampled_from(["t1", "t3", "t0"]),
    limit=st.integers(1, 300),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=queries)
def test_search_finds_exactly_what_checking_every_message_finds(store: Store, q: SearchQuery) -> None:
    assert [m.id for m in search(store, q).messages] == _model(store, q)


def test_search_stops_reading_at_since(store: Store) -> None:
    everything = search(store, SearchQuery(text="nowhere-at-all"))
    recent = search(store, SearchQuery(text="nowhere-at-all", since="2000-01-01"))
    none_newer = search(store, SearchQuery(text="auth", since="2999-01-01"))
    assert recent.scanned_bytes == everything.scanned_bytes > 0  # everything is newer than 2000
    assert none_newer.messages == [] and none_newer.scanned_bytes < everything.scanned_bytes


@pytest.mark.slow
def test_relayctl_search(relayctl) -> None:
    relayctl("init")
    for name in ("athena", "agent-bd-42"):
        relayctl("register", name)
    relayctl("send", "athena", "Bead bd-42 complete. All tests pass.", "--thread", "bd-42", agent="agent-bd-42")
    relayctl("send", "agent-bd-42", "Thanks. Please review bd-43 next.", agent="athena")
    out = relayctl("search", "ALL", "tests").stdout
    assert "agent-bd-42 → athena  Bead bd-42 complete. All tests pass.  (thread bd-42)" in out
    found = json.loads(relayctl("search", "--thread", "bd-42", "--json").stdout)
    assert [m["body"] for m in found] == ["Bead bd-42 complete. All tests pass."]
    found = json.loads(relayctl("search", "--from", "athena", "--since", "1h", "--json").stdout)
    assert [m["to"] for m in found] == ["agent-bd-42"]
    assert relayctl("search", "nothing-like-this").stdout.strip() == "no messages match"
    for argv, message in (
        ((), "error: give words to search for, or a filter"),
        (("x", "--to", "nobody"), "error: unknown agent 'nobody'"),
        (("x", "--since", "yesterday-ish"), "error: --since takes a duration"),
        (("x", "--from", "Bad Name"), "error: "),
    ):
        proc = relayctl("search", *argv, check=False)
        assert proc.returncode != 0 and proc.stderr.startswith(message) and "Traceback" not in proc.stderr, proc.stderr


def test_relayctl_search_without_a_store_says_so(relayctl, store_dir: Path) -> None:
    proc = relayctl("search", "x", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: no relay store at")
    assert not store_dir.exists()
