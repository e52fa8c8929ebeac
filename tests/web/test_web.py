"""The web view in a real browser: headless Debian chromium driven by Playwright, against
a real `relayctl web` process, with and without a real relayd."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import expect

from support.relayd_proc import Daemon
from support.claude_session import FakeSession
from support.dead_letters import dead_letters
from support.web_view import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, WebView, browser, open_view, page, team, web  # noqa: F401  (fixtures)
from support.paths import DOCS
from support.waiting import wait_for

pytestmark = pytest.mark.slow  # the real agent programs, nats-server or a browser: not in the quick loop

# How long the open page may take to show a change: generous, since a timeout here is no
# measurement (benchmarks/bench_web.py measures how soon the view's stream carries a send).
# It was 2 s, and a loaded run of the suite missed it once with the view working.
SHOWN_MS = 10_000
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(params=["direct", "daemon"])
def mode(request, relay_env) -> Iterator[str]:
    if request.param == "direct":
        yield "direct"
        return
    # The sweep runs only when a test runs it (relayctl redeliver), so counts are exact.
    daemon = Daemon(relay_env, "--redeliver-interval", "1h").start()
    try:
        yield "daemon"
    finally:
        daemon.stop()


def test_refuses_every_request_without_the_token(web: WebView, page) -> None:
    for path in ("/api/state", "/api/events", "/api/search?text=x", f"/api/state?token={web.token}"):
        status, body, _ = web.get(path)
        assert status == 403, f"{path} answered {status} without the token"
        assert b"forbidden" in body
    assert web.get("/api/state", {"X-Relay-Token": "wrong"})[0] == 403
    # The page's own files hold no data and no token: they are served to anyone on loopback.
    for path in ("/", "/static/app.js", "/static/style.css"):
        status, body, headers = web.get(path)
        assert status == 200 and web.token.encode() not in body and "set-cookie" not in {h.lower() for h in headers}
    assert web.get("/api/state", {"X-Relay-Token": web.token})[0] == 200
    # Another site cannot reach it through a DNS name that resolves to 127.0.0.1.
    assert web.get("/api/state", {"X-Relay-Token": web.token, "Host": f"evil.example:{web.port}"})[0] == 403
    assert web.get("/", {"Host": f"evil.example:{web.port}"})[0] == 403
    # A state change needs the token in a header and a JSON body: a cross-site form has neither.
    body = json.dumps({"to": ["athena"], "body": "forged"}).encode()
    assert web.get("/api/send", {"Content-Type": "application/json"}, "POST", body)[0] == 403
    assert web.get("/api/send", {"X-Relay-Token": web.token, "Content-Type": "text/plain"}, "POST", body)[0] == 403
    assert web.get("/api/send", {"X-Relay-Token": web.token}, "OPTIONS")[0] == 405
    # No CORS: an answer never invites another origin to read it.
    status, _, headers = web.get("/api/state", {"X-Relay-Token": web.token, "Origin": "http://evil.example"})
    assert status == 200 and not any(h.lower().startswith("access-control-") for h in headers)
    assert "script-src 'self'" in headers["content-security-policy"] and "unsafe-inline" not in headers["content-security-policy"]

    page.goto(web.base + "/")  # no token: the page says what to do, and shows nothing of the store
    page.wait_for_selector("#live:has-text('forbidden')", timeout=5_000)
    assert page.locator("#agents tbody tr").count() == 0


def test_the_token_leaves_the_address_bar_and_is_never_a_cookie(web: WebView, page) -> None:
    open_view(page, web)
    assert page.url == web.base + "/"
    assert page.context.cookies() == [] and page.evaluate("document.cookie") == ""
    # A reload keeps working (the token is in this origin's sessionStorage, for this tab).
    page.reload()
    page.wait_for_selector("#agents tbody tr[data-agent='athena']", timeout=10_000)
    assert not page.errors


def test_agents_and_messages_appear_live_without_a_reload(mode: str, web: WebView, page, relayctl) -> None:
    open_view(page, web)
    page.evaluate("window.__same_page = true")
    relayctl("register", "newcomer", "--program", "script", "--task", "joined late")
    started = time.monotonic()
    page.wait_for_selector("#agents tr[data-agent='newcomer']", timeout=SHOWN_MS)
    assert "joined late" in page.text_content("#agents tr[data-agent='newcomer']")
    relayctl("send", "athena", "Bead bd-42 complete. All tests pass.", "--thread", "bd-42", "--priority", "high", agent="agent-bd-42")
    started = time.monotonic()
    page.wait_for_selector("#messages li:has-text('Bead bd-42 complete')", timeout=SHOWN_MS)
    took = time.monotonic() - started
    item = page.text_content("#messages li:first-child")
    assert "agent-bd-42 → athena" in item and "high" in item and "thread bd-42" in item
    assert page.evaluate("window.__same_page") is True, "the page reloaded"
    expected = "relayd events" if mode == "daemon" else "store files"
    assert expected in page.text_content("#live")
    unread = page.text_content("#agents tr[data-agent='athena'] td:nth-child(7)")
    assert unread == "1"
    print(f"message visible {took:.3f} s after relayctl send returned ({mode})")


def test_message_typed_in_the_page_lands_in_the_inbox_and_notifies(mode: str, web: WebView, page, relayctl, short_tmp: Path) -> None:
    log = short_tmp / "notified.log"
    relayctl("register", "agent-bd-42", "--notify", f"cmd:sh -c 'echo \"$RELAY_NOTIFY_AGENT\" >> {log}'")
    open_view(page, web)
    page.select_option("#c-to", "agent-bd-42")
    page.fill("#c-thread", "bd-42")
    page.select_option("#c-priority", "urgent")
    page.fill("#c-body", "Please rebase onto main before the review.")
    page.click("#c-send")
    page.wait_for_selector("#c-result:has-text('sent to agent-bd-42')", timeout=5_000)
    inbox = json.loads(relayctl("read", "--unread", "--json", agent="agent-bd-42").stdout)
    assert [(m["from"], m["body"], m["thread"], m["priority"]) for m in inbox] == [("human", "Please rebase onto main before the review.", "bd-42", "urgent")]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (log.exists() and log.read_text().strip()):
        time.sleep(0.05)
    assert log.read_text().split() == ["agent-bd-42"], "the recipient's arrival mechanism did not fire"
    # The page shows it too (the human's own message, live).
    page.wait_for_selector("#messages li:has-text('Please rebase onto main')", timeout=SHOWN_MS)


def test_a_broadcast_from_the_page_reaches_every_agent(web: WebView, page, relayctl) -> None:
    open_view(page, web)
    page.select_option("#c-to", "*")
    page.fill("#c-body", "Standup in 5 minutes")
    page.click("#c-send")
    page.wait_for_selector("#c-result:has-text('sent to')", timeout=5_000)
    for name in ("athena", "agent-bd-42", "agent-bd-43"):
        inbox = json.loads(relayctl("read", "--unread", "--json", agent=name).stdout)
        assert [m["body"] for m in inbox] == ["Standup in 5 minutes"]


def test_hostile_message_body_is_shown_as_text_and_runs_nothing(web: WebView, page, relayctl) -> None:
    open_view(page, web)
    relayctl("send", "athena", HOSTILE, "--subject", '<img src=x onerror="window.__pwned = 3">', agent="agent-bd-43")
    page.wait_for_selector("#messages li:has-text('window.__pwned = 1')", timeout=SHOWN_MS)
    time.sleep(0.3)  # give an injected image time to fail and fire its handler, were there one
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages img, #messages script").count() == 0
    assert page.text_content("#messages li:first-child pre.body") == HOSTILE
    assert '<img src=x onerror="window.__pwned = 3">' in page.text_content("#messages li:first-child .subject")


def test_search_and_thread_view(web: WebView, page, relayctl) -> None:
    relayctl("send", "athena", "Parser done, tests pass", "--thread", "bd-42", agent="agent-bd-42")
    relayctl("send", "agent-bd-42", "Thanks. Please review bd-43 next.", "--thread", "bd-42", agent="athena")
    relayctl("send", "agent-bd-43", "Endpoint schema ready", agent="athena")
    open_view(page, web)
    page.fill("#q-text", "SCHEMA")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#view-title:has-text('Search')")
    expect(page.locator("#messages li[data-id]")).to_have_count(1)
    assert "Endpoint schema ready" in page.text_content("#messages")
    page.click("#q-clear")
    page.click("#messages .badge.thread >> nth=0")
    page.wait_for_selector("#view-title:has-text('Thread bd-42')")
    expect(page.locator("#messages li[data-id]")).to_have_count(2)
    bodies = page.locator("#messages li[data-id] .subject").all_text_contents()
    assert bodies == ["Parser done, tests pass", "Thanks. Please review bd-43 next."]  # oldest first
    # A new message in the thread shows up in the open thread view, live.
    relayctl("send", "athena", "Review done", "--thread", "bd-42", agent="agent-bd-43")
    page.wait_for_selector("#messages li:has-text('Review done')", timeout=SHOWN_MS)


def test_a_message_shows_its_way_to_each_recipient(web: WebView, page, relayctl) -> None:
    relayctl("register", "agent-bd-43", "--notify", "cmd:false")  # its announcement fails
    message_id = json.loads(relayctl("--json", "send", "agent-bd-42,agent-bd-43", "Merge window opens", "--ack", agent="athena").stdout)[0]["id"]
    relayctl("read", "--unread", "--mark-read", agent="agent-bd-42")
    open_view(page, web)
    page.wait_for_selector("#messages li[data-id]:has-text('Merge window opens')")
    page.click(f"#messages li[data-id='{message_id}'] .badge.way")  # (the bounce to athena quotes the subject too)
    page.wait_for_selector(f"#messages li[data-id='{message_id}'] ul.way li >> nth=1")
    ways = page.locator(f"#messages li[data-id='{message_id}'] ul.way li").all_text_contents()
    assert len(ways) == 2
    read, failed = sorted(ways)
    assert read.startswith("agent-bd-42: stored ") and re.search(r", read 20\d\d-\d\d-\d\dT[\d:.]+Z, not acknowledged$", read), read  # with the time it was read
    assert failed.startswith("agent-bd-43: ") and "announcing by cmd failed" in failed and "bounced to the sender" in failed and "unread" in failed


def test_screenshot_of_the_populated_page(web: WebView, page, relayctl, tmp_path: Path) -> None:
    """The quickstart's three agents at work; saved as a test artifact."""
    repo = str(tmp_path / "oathkeeper")  # reservations are refused in a repository that does not exist
    os.makedirs(repo)
    relayctl("send", "athena", "Bead bd-42 complete. All tests pass.", "--thread", "bd-42", agent="agent-bd-42")
    relayctl("send", "agent-bd-42", "Thanks. Please review bd-43 next.", "--priority", "high", "--thread", "bd-43", agent="athena")
    relayctl("send", "--broadcast", "Rebasing main, hold commits for 2 minutes", "--priority", "urgent", agent="athena")
    relayctl("send", "athena", "Endpoints /v1/users and /v1/sessions are in; schema attached.\nRunning the contract tests now.", "--type", "status_update", agent="agent-bd-43")
    relayctl("set-status", "reviewing", "--task", "review bd-43", agent="agent-bd-42")
    relayctl("set-status", "working", agent="agent-bd-43")
    relayctl("reserve", "src/auth/**", "--repo", repo, "--reason", "bd-42 auth refactor", agent="agent-bd-42")
    relayctl("reserve", "src/api/*.py", "--repo", repo, "--shared", agent="agent-bd-43")
    relayctl("reserve", "src/auth/login.py", "--repo", repo, "--force", agent="agent-bd-43")
    relayctl("cmd", "agent:main:main", "/verify", "oathkeeper", "bd-42", agent="athena")
    make_dead_letter(relayctl, "Deploy the auth service to staging (reply with ack)")
    open_view(page, web)
    page.wait_for_selector("#messages li:has-text('Endpoints /v1/users')", timeout=5_000)
    page.wait_for_selector("#reservations .badge.conflict")
    page.wait_for_selector("#dead-letters tr[data-dead]")
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "web-view.png")
    page.screenshot(path=shot, full_page=True)
    assert os.path.getsize(shot) > 10_000
    if os.environ.get("RELAY_UPDATE_DOCS_SCREENSHOT"):
        page.screenshot(path=str(DOCS / "web-view.png"), full_page=True)


def test_ctrl_c_stops_it_cleanly(team, relay_env) -> None:
    import http.client

    view = WebView(relay_env)
    assert view.get("/api/state", {"X-Relay-Token": view.token})[0] == 200
    stream = http.client.HTTPConnection("127.0.0.1", view.port, timeout=10)
    stream.request("GET", "/api/events", headers={"X-Relay-Token": view.token})
    assert stream.getresponse().status == 200  # an open event stream must not hold up the exit
    err = view.stop()
    stream.close()
    assert view.proc.returncode == 0, err
    assert "Traceback" not in err and "error" not in err and err.rstrip().endswith("relay web view stopped")


def test_relayctl_web_without_a_store_says_so(relay_env) -> None:
    proc = subprocess.run([sys.executable, "-m", "relayctl", "web"], env=relay_env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: no relay store at") and "Traceback" not in proc.stderr


def test_other_commands_do_not_load_the_web_stack(team, relay_env) -> None:
    code = (
        "import sys\n"
        "from relayctl.cli import main\n"
        "try:\n    main(['status'])\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'relayweb'))\n"
        "print(loaded, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=relay_env, capture_output=True, text=True, timeout=30)
    assert proc.stderr.strip() == "[]", proc.stderr


def make_dead_letter(relayctl, body: str) -> dict:
    """A message sent with --ack that nobody acknowledges, swept until it is dead-lettered."""
    relayctl("send", "agent-bd-43", body, "--ack", "--ack-wait", "1ms", "--max-deliver", "1", agent="athena")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        relayctl("redeliver")
        letters = json.loads(relayctl("dlq", "list", "--json").stdout)["dead_letters"]
        if letters:
            return letters[0]
        time.sleep(0.01)
    raise AssertionError("the message never became a dead letter")


def test_a_dead_letter_can_be_retried_from_the_page(mode: str, web: WebView, page, relayctl) -> None:
    open_view(page, web)
    letter = make_dead_letter(relayctl, "Run the migration on staging")
    row = f"#dead-letters tr[data-dead='{letter['id']}']"
    page.wait_for_selector(row, timeout=SHOWN_MS)
    assert "agent-bd-43" in page.text_content(row) and "Run the migration on staging" in page.text_content(row)
    owed_before = page.text_content("#agents tr[data-agent='agent-bd-43'] td:nth-child(8)")
    assert owed_before == "0"
    page.click(f"{row} button.retry")
    page.wait_for_selector(row, state="detached", timeout=SHOWN_MS)
    assert json.loads(relayctl("dlq", "list", "--json").stdout)["dead_letters"] == []
    inbox = json.loads(relayctl("read", "--json", "--last", "0", agent="agent-bd-43").stdout)
    copies = [m for m in inbox if m["id"] == letter["id"]]
    assert len(copies) == 3 and copies[-1]["attempt"] == 3, copies  # first delivery, one redelivery, the retry
    owed = page.locator("#agents tr[data-agent='agent-bd-43'] td:nth-child(8)")
    expect(owed).to_have_text("1", timeout=10_000)
    # Acknowledged, it is settled for good: nothing is owed any more.
    relayctl("ack", letter["id"], agent="agent-bd-43")
    expect(owed).to_have_text("0", timeout=10_000)


def test_a_dead_letter_can_be_dropped_from_the_page(web: WebView, page, relayctl) -> None:
    open_view(page, web)
    letter = make_dead_letter(relayctl, "Obsolete instruction")
    row = f"#dead-letters tr[data-dead='{letter['id']}']"
    page.wait_for_selector(row, timeout=SHOWN_MS)
    page.on("dialog", lambda dialog: dialog.accept())
    page.click(f"{row} button.drop")
    page.wait_for_selector(row, state="detached", timeout=SHOWN_MS)
    assert json.loads(relayctl("dlq", "list", "--json").stdout)["dead_letters"] == []
    # Without the token header the same request is refused.
    assert web.get("/api/dlq/retry", {"Content-Type": "application/json"}, "POST", json.dumps({"id": letter["id"]}).encode())[0] == 403


def test_times_are_utc_dated_and_labelled_as_relayctl_read_prints_them(web: WebView, browser, relayctl) -> None:
    """A browser far from UTC shows the same time as `read` (and the hooks), not its own."""
    context = browser.new_context(timezone_id="Pacific/Kiritimati", locale="en-US")  # UTC+14: another date too
    try:
        page = context.new_page()
        open_view(page, web)
        sent = json.loads(relayctl("--json", "send", "agent-bd-42", "Ship the release notes", agent="athena").stdout)["id"]
        shown = page.wait_for_selector(f"#messages li[data-id='{sent}'] .when", timeout=SHOWN_MS).text_content()
        read_line = relayctl("read", "--last", "1", agent="agent-bd-42").stdout.splitlines()[0]
        assert shown.endswith(" UTC") and read_line.split("  ")[1] == shown
    finally:
        context.close()


def test_each_agents_arrival_and_a_failed_announcement_show(web: WebView, page, relayctl) -> None:
    relayctl("register", "agent-bd-42", "--notify", "cmd:false")
    open_view(page, web)
    row = "#agents tr[data-agent='agent-bd-42']"
    expect(page.locator(row)).to_contain_text("cmd:false", timeout=10_000)
    assert page.query_selector(f"{row} .badge.failed") is None  # nothing announced yet
    assert "channel" in page.text_content("#agents tr[data-agent='athena']")  # no --notify: the channel
    relayctl("send", "agent-bd-42", "Rebase onto main", agent="athena", check=False)  # warns: the announcement failed
    failed = page.wait_for_selector(f"{row} .badge.failed", timeout=SHOWN_MS).text_content()
    assert "false exited 1" in failed and failed.startswith("failed ") and " UTC" in failed
    relayctl("send", "agent-bd-42", "And the tags", agent="athena", check=False)  # fails again: the page counts the run
    page.wait_for_selector(f"{row} .badge.failed:text-matches('^failed ([2-9]|\\\\d\\\\d+) times since .+ UTC: false exited 1$')", timeout=SHOWN_MS)


def test_an_agent_whose_session_door_is_not_used_says_why(web: WebView, page, relayctl, relay_env, short_tmp: Path) -> None:
    """Codex's hook, run outside any Codex process, reports a thread relay cannot queue into:
    the row names the mechanism used instead and why not the door, as relayctl status does."""
    relayctl("register", "agent-bd-42", "--program", "codex", "--notify", "cmd:true")
    event = {"hook_event_name": "UserPromptSubmit", "session_id": "019a0000-0000-7000-8000-000000000042", "prompt": "hello", "cwd": str(short_tmp)}
    env = {**relay_env, "RELAY_AGENT": "agent-bd-42", "CODEX_HOME": str(short_tmp / "codex-home")}
    hook = subprocess.run([sys.executable, "-m", "relayctl", "hook", "codex"], env=env, input=json.dumps(event), capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0, hook.stderr
    open_view(page, web)
    why = page.wait_for_selector("#agents tr[data-agent='agent-bd-42'] .door-unusable", timeout=10_000).text_content()
    assert why == "not its Codex queue: relay's hook found no Codex process above it"
    assert "cmd:true" in page.text_content("#agents tr[data-agent='agent-bd-42']")
    assert page.query_selector("#agents tr[data-agent='athena'] .door-unusable") is None


def test_a_dead_lettered_copy_is_marked_in_the_message_list(web: WebView, page, relayctl) -> None:
    open_view(page, web)
    letter = make_dead_letter(relayctl, "Rotate the staging keys")
    marked = f"#messages li[data-id='{letter['id']}'] .badge.dead"
    page.wait_for_selector(marked, timeout=SHOWN_MS)
    assert page.text_content(marked) == "dead letter"
    relayctl("send", "agent-bd-42", "An ordinary message", agent="athena")
    page.wait_for_selector("#messages li .subject:text('An ordinary message')", timeout=SHOWN_MS)
    assert page.query_selector_all("#messages li .badge.dead") != [] and all(
        li.get_attribute("data-id") == letter["id"] for li in page.query_selector_all("#messages li:has(.badge.dead)")
    )


def test_owed_messages_are_listed_until_acknowledged(web: WebView, page, relayctl) -> None:
    open_view(page, web)
    sent = json.loads(relayctl("--json", "send", "agent-bd-43", "Confirm the schema change", "--ack", "--max-deliver", "2", agent="athena").stdout)["id"]
    row = f"#owed tr[data-owed='{sent}']"
    page.wait_for_selector(row, timeout=SHOWN_MS)
    cells = [td.text_content() for td in page.query_selector_all(f"{row} td")]
    assert cells[:3] == ["athena: Confirm the schema change", "agent-bd-43", "1 of 3"] and cells[3].endswith(" UTC")
    assert page.text_content("#owed-count") == "1"
    relayctl("ack", sent, agent="agent-bd-43")
    page.wait_for_selector(row, state="detached", timeout=SHOWN_MS)
    assert page.text_content("#owed-count") == "0"


@pytest.mark.parametrize("mode", ["direct", "daemon"], indirect=True)
def test_the_pages_identity_leaves_the_team_when_the_view_stops(mode: str, team, relay_env) -> None:
    """While `relayctl web --as lead` runs, lead is alive and broadcasts reach it; once it
    stops, lead is archived (not alive) and broadcasts leave it out, until a view writes as
    it again. Mail sent to it by name still arrives."""

    def lead() -> dict:
        return next(a for a in json.loads(team("--json", "status", "--agents").stdout)["agents"] if a["name"] == "lead")

    def broadcast_reaches() -> list[str]:
        return sorted(m["to"] for m in json.loads(team("--json", "send", "--broadcast", "standup in 5", agent="athena").stdout))

    view = WebView(relay_env, "--as", "lead")
    try:
        assert lead()["alive"] and "lead" in broadcast_reaches()
    finally:
        view.stop()
    assert not lead()["alive"] and lead()["archived"]
    assert broadcast_reaches() == ["agent-bd-42", "agent-bd-43"]
    team("send", "lead", "for the lead, by name", agent="athena")
    assert "for the lead, by name" in team("read", "--last", "1", agent="lead").stdout
    view = WebView(relay_env, "--as", "lead")
    try:
        assert lead()["alive"] and "lead" in broadcast_reaches()
    finally:
        view.stop()


def test_a_30_mib_dead_letter_list_shows_on_the_page_through_relayd(store_dir: Path, relay_env, relayctl, page) -> None:
    """A dead-letter list thirty times what one protocol line holds: relayd hands it over in
    parts, relayctl prints all of it, and the page lists every letter."""
    sent = dead_letters(store_dir, 90)  # 250 KB bodies with escaped and multi-byte characters
    daemon = Daemon(relay_env, "--redeliver-interval", "1h").start()
    view = WebView(relay_env)
    try:
        printed = relayctl("--json", "dlq", "list").stdout
        assert len(printed.encode()) > 30 << 20
        assert sorted(d["id"] for d in json.loads(printed)["dead_letters"]) == sorted(sent)
        page.goto(view.url)
        page.wait_for_selector(f"#dead-letters tr[data-dead='{sent[-1]}']", timeout=30_000)
        shown = page.eval_on_selector_all("#dead-letters tr[data-dead]", "rows => rows.map(r => r.dataset.dead)")
        assert sorted(shown) == sorted(sent) and page.errors == []
        # The list came through relayd, not from the files: the state ends with that list,
        # so its mode is the list's. (Asked again while relayd is so slow to greet -- a
        # loaded machine -- that the view took it for hung and read the files itself.)
        wait_for("the web view's state to come through relayd", lambda: json.loads(view.get("/api/state", {"X-Relay-Token": view.token})[1])["relayd"] is True, timeout=60)
    finally:
        view.stop()
        daemon.stop()


def test_the_agents_table_fits_a_laptop_window_with_long_names_and_targets(web: WebView, browser, relayctl) -> None:
    """At 1280 px, the agents table keeps its last columns (unread, owed) inside its panel,
    however long an agent's name, task or notify target; a long value wraps, and what is cut
    short shows in full on hover."""
    long_name = "agent-" + "x" * 58  # the longest name relay takes (64)
    relayctl("register", long_name, "--program", "claude-code-with-a-long-wrapper-name", "--task", "refactor the authentication middleware and its tests " * 3,
             "--notify", "tmux:/tmp/a-rather-long-socket-directory/of-a-private-tmux-server/default:%123")
    relayctl("register", "agent-bd-42", "--notify", "cmd:/usr/local/bin/a-notification-program-with-a-long-name --with-an-argument", check=False)
    relayctl("send", "agent-bd-42", "tell me", agent="athena", check=False)  # its announcement fails: a long error badge
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(web.url)
        page.wait_for_selector(f"#agents tr[data-agent='{long_name}']", timeout=10_000)
        page.wait_for_selector("#agents tr[data-agent='agent-bd-42'] .badge.failed", timeout=10_000)
        fit = page.evaluate("""() => {
            const section = document.querySelector('#agents').closest('section').getBoundingClientRect();
            const cells = [...document.querySelectorAll('#agents th, #agents td')].map((c) => c.getBoundingClientRect().right);
            return {right: Math.max(...cells), panel: section.right, page: document.documentElement.scrollWidth, widths: [...document.querySelectorAll('#agents th')].map((c) => Math.round(c.getBoundingClientRect().width))};
        }""")
        if os.path.isdir(ARTIFACTS):
            page.screenshot(path=os.path.join(ARTIFACTS, "agents-at-1280.png"), full_page=True)
        assert fit["right"] <= fit["panel"] and fit["page"] <= 1280, fit
        for column in ("unread", "owed"):
            box = page.locator("#agents th", has_text=column).bounding_box()
            assert box is not None and box["x"] + box["width"] <= 1280
        row = page.locator(f"#agents tr[data-agent='{long_name}']")
        assert row.locator("td.who").get_attribute("title") == long_name
        assert row.locator("td .clip").nth(0).get_attribute("title") == "claude-code-with-a-long-wrapper-name"
        target = row.locator("td .clip").nth(1)
        assert target.get_attribute("title").startswith("tmux:/tmp/a-rather-long-socket-directory/of-a-private-tmux-server/default:%123: ")
        assert target.evaluate("(s) => s.scrollWidth > s.clientWidth")  # cut short on the page, whole on hover
    finally:
        context.close()


def _no_overflow(page) -> dict:
    """What runs past the window or past a card (a panel, a message) horizontally."""
    return page.evaluate("""() => ({
        page: document.documentElement.scrollWidth, window: window.innerWidth,
        cards: [...document.querySelectorAll('section, #messages li')].filter((c) => c.scrollWidth > c.clientWidth)
                 .map((c) => (c.id || c.dataset.id || c.tagName) + ' ' + c.scrollWidth + '>' + c.clientWidth)})""")


def test_the_page_says_why_an_agent_is_silent_and_fits_laptop_and_desktop_windows(web: WebView, browser, relayctl, relay_env, short_tmp: Path) -> None:
    """An agent whose program asks its person a question, in its team pane: the page shows its
    session state as relayctl status does, its pane, and its held mail with why and since
    when (whenever status has them); the heading counts what the rows say; an --ack copy
    delivered twice is one row; nothing is chosen for the person to write to; a long word wraps."""
    from relayd.config import DeliveryConfig
    from support.tmux_pane import Tmux

    config = Path(relay_env["RELAY_DIR"]) / "config.json"
    if "held_after" in DeliveryConfig.__struct_fields__:  # mail is held at once, not after 30 s
        config.write_text(json.dumps({**(json.loads(config.read_text()) if config.exists() else {}), "delivery": {"held_after": "0s"}}))
    # The agent's program in its team pane: a stand-in that runs relay's hook as its child when
    # it asks its person a question (a state is taken only from the agent's own program), then waits.
    asked_file = short_tmp / "asked"
    program = ("import json, subprocess, sys, time\n"
               "done = subprocess.run([sys.executable, '-m', 'relayctl', 'hook', 'claude'], capture_output=True, text=True,\n"
               "                      input=json.dumps({'hook_event_name': 'PermissionRequest', 'tool_name': 'Bash'}))\n"
               f"open({str(asked_file)!r}, 'w').write(str(done.returncode) + done.stderr)\n"
               "time.sleep(600)\n")
    pane = Tmux(short_tmp, "crew")
    relayctl("register", "agent-bd-42", "--program", "claude-code")
    try:
        pane.start([sys.executable, "-c", program], short_tmp, {**relay_env, "PATH": os.environ["PATH"], "HOME": str(short_tmp), "TERM": "xterm-256color", "RELAY_AGENT": "agent-bd-42"})
        relayctl("register", "agent-bd-42", "--notify", f"tmux:{pane.target()}")
        wait_for("the program's hook", lambda: asked_file.exists() and asked_file.read_text() != "", timeout=30)
        assert asked_file.read_text() == "0", asked_file.read_text()
        relayctl("send", "agent-bd-42", "Please rebase onto main", agent="athena", check=False)
        relayctl.setup("program_state", agent="agent-bd-43", state="stopped", event="relayctl down")  # archived, as down leaves it
        acked = json.loads(relayctl("--json", "send", "athena", "Confirm the schema", "--ack", "--ack-wait", "1ms", "--max-deliver", "3", agent="agent-bd-43").stdout)["id"]
        wait_for("a redelivery", lambda: relayctl("redeliver") and len(json.loads(relayctl("--json", "read", "--last", "10", agent="athena").stdout)) >= 2, timeout=10)
        word = "unbroken" * 40
        relayctl("send", "athena", f"{word} at the end of the line", "--subject", word, agent="agent-bd-42")
        status = {a["name"]: a for a in json.loads(relayctl("--json", "status", "--agents").stdout)["agents"]}
        assert status["agent-bd-42"]["session"] == "asking" and status["agent-bd-43"]["archived"]

        for width in (1280, 1920):
            context = browser.new_context(viewport={"width": width, "height": 900})
            try:
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(web.url)
                row = page.locator("#agents tr[data-agent='agent-bd-42']")
                expect(row).to_contain_text("asking the person", timeout=10_000)
                pane_id = pane.target().rpartition(":")[2]
                expect(row).to_contain_text(f"pane {pane_id} live")
                held = status["agent-bd-42"].get("held")
                if held:  # the page says what status says
                    expect(row.locator(".badge.held")).to_contain_text(f"held: since {held['since'][:16].replace('T', ' ')} UTC: {held['why']}")
                else:
                    assert row.locator(".badge.held").count() == 0
                expect(page.locator("#messages li", has_text=word)).to_have_count(1)
                kinds = [b.text_content() for b in page.query_selector_all("#agents tbody tr td:nth-child(2) > .badge")]
                assert "archived" in kinds and page.text_content("#agent-count") == ", ".join(
                    f"{kinds.count(k)} {k}" for k in ("alive", "stale", "archived", "never seen") if k == "alive" or kinds.count(k)), kinds
                ack_rows = page.locator(f"#messages li[data-id='{acked}']")
                expect(ack_rows).to_have_count(1)
                expect(ack_rows.locator(".badge.ack")).to_have_text(re.compile(r"^ack · [2-9] deliveries$"))
                assert page.eval_on_selector("#c-to", "s => s.value") == ""  # nobody preselected
                page.fill("#c-body", "to whom?")
                page.click("#c-send")
                assert page.eval_on_selector("#c-to", "s => s.validity.valueMissing") is True and page.text_content("#c-result") == ""
                fit = _no_overflow(page)
                os.makedirs(ARTIFACTS, exist_ok=True)
                page.screenshot(path=os.path.join(ARTIFACTS, f"web-view-{width}.png"), full_page=True)
                assert fit["page"] <= fit["window"] and fit["cards"] == [], fit
                assert errors == []
            finally:
                context.close()
    finally:
        pane.kill()


def test_a_paused_exchange_and_relays_share_of_each_context_are_in_the_view(team, relayctl, relay_env, store_dir, web, page) -> None:
    (store_dir / "config.json").write_text(json.dumps({"coordination": {"loop_messages": 1}}))
    for name in ("coder", "reviewer"):
        relayctl.setup("register", name=name, notify="cmd:true")  # a trigger that is run, and lands
    relayctl("send", "reviewer", "looks good?", agent="coder")  # no relayd: the sender's process announces it
    relayctl("send", "coder", "yes, does it to you?", agent="reviewer")  # back and forth twice: more than 1, paused
    state = wait_for("the pause in the view's state", lambda: (s := json.loads(web.get("/api/state", {"X-Relay-Token": web.token})[1]))["paused"] and s, timeout=30)
    assert state["paused"][0]["agents"] == ["coder", "reviewer"]
    context = {a["name"]: a.get("context") for a in state["agents"]}
    assert context["reviewer"]["by"]["trigger"] > 0 and context["athena"] is None
    open_view(page, web)
    expect(page.locator("#paused")).to_contain_text("relayctl budget resume coder reviewer")
    expect(page.locator("#agents tbody tr[data-agent='reviewer']")).to_contain_text("tokens/h")


def test_a_handed_over_reservation_shows_who_handed_it_and_when(web: WebView, page, relayctl, tmp_path: Path) -> None:
    repo = str(tmp_path / "oathkeeper")
    os.makedirs(repo)
    relayctl("reserve", "src/auth/**", "--repo", repo, "--reason", "bd-42 auth refactor", agent="agent-bd-42")
    relayctl("reserve", "docs/**", "--repo", repo, agent="agent-bd-42")
    open_view(page, web)
    page.wait_for_selector("#reservations tr:has-text('docs/**')", timeout=5_000)
    assert page.locator("#reservations .badge.handed").count() == 0  # nothing handed yet
    relayctl("handoff", "agent-bd-43", "src/auth/**", "Auth is yours", "--repo", repo, "--thread", "bd-42", agent="agent-bd-42")
    handed = page.locator("#reservations tr:has-text('src/auth/**') .badge.handed")
    expect(handed).to_have_text(re.compile(r"^handed over by agent-bd-42 at \d\d:\d\d UTC, thread bd-42$"), timeout=5_000)
    assert handed.get_attribute("title").endswith(" — bd-42 auth refactor")  # the whole reason, the old one kept
    assert page.locator("#reservations tr:has-text('src/auth/**') td:nth-child(2) .who").text_content() == "agent-bd-43"
    assert page.locator("#reservations tr:has-text('docs/**') .badge.handed").count() == 0  # not handed: as it was


def test_claude_codes_own_receipt_shows_in_the_agents_row_and_the_messages_way(team, relayctl, relay_env, short_tmp: Path, web, page) -> None:
    session = FakeSession(short_tmp)  # athena's Claude Code session, its inbox as Claude Code makes it
    daemon = Daemon(relay_env).start()  # relayd writes into the inbox and hears the session's receipts
    try:
        assert relayctl.setup("claude_inbox", agent="athena", socket=session.socket, sessions_dir=str(session.sessions)).get("unusable") is None
        message_id = json.loads(relayctl("--json", "send", "athena", "Rebase onto main first", agent="agent-bd-42").stdout)["id"]
        written = session.wait_lines(2)[-1]  # (after the key line)
        session.answer(written, "held")  # the person has not let it in yet
        open_view(page, web)
        said = page.locator("#agents tbody tr[data-agent='athena'] .door-said")
        # (a receipt is no store event: the view shows it at its next rebuild, within its 5 s refresh)
        expect(said).to_have_text(re.compile(r"^Claude Code: held for the person's approval 20\d\d-\d\d-\d\d \d\d:\d\d UTC$"), timeout=12_000)
        page.click(f"#messages li[data-id='{message_id}'] .badge.way")
        way = page.locator(f"#messages li[data-id='{message_id}'] ul.way li")
        expect(way).to_contain_text(re.compile(r"^athena: stored .*, Claude Code: held for the person's approval 20\d\d-\d\d-\d\dT[\d:.]+Z, unread$"))
        session.answer(written, "delivered")  # the person let it in: the row follows, live
        expect(said).to_have_text(re.compile(r"^Claude Code: delivered "), timeout=12_000)
        assert not page.errors
    finally:
        daemon.stop()
        session.close()
