"""`relayctl mime`: IGNITE message files parse to IGNITE's JSON, build writes IGNITE's
header order, edits are atomic and keep everything else, and relay <-> file round trips."""

from __future__ import annotations

import email.utils
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from relayd.ignite import mime
from relayd.ulid import ulid_time_ms
from support.paths import TESTS

GOLDEN = TESTS / "golden" / "ignite"
SEED_FILE = "task_assignment_1770263544123456"
CRLF_FILE = "evaluation_result_crlf_folded"


@pytest.mark.parametrize("name", [SEED_FILE, CRLF_FILE])
def test_golden_files_parse_to_the_json_ignite_tooling_reads(relayctl, name: str) -> None:
    out = relayctl("mime", "parse", str(GOLDEN / f"{name}.mime")).stdout
    expected = json.loads((GOLDEN / f"{name}.json").read_text())
    assert json.loads(out) == expected
    assert list(json.loads(out)) == list(expected)  # same key order as IGNITE's parse


def test_extract_body_gives_the_body_with_ignite_s_line_ends(relay_env: dict[str, str]) -> None:
    # IGNITE's tool reads files in Python's text mode: a CRLF body comes out with LF
    for name, sep in ((SEED_FILE, b"\n\n"), (CRLF_FILE, b"\r\n\r\n")):
        raw = (GOLDEN / f"{name}.mime").read_bytes()
        proc = subprocess.run([sys.executable, "-m", "relayctl", "mime", "extract-body", str(GOLDEN / f"{name}.mime")], env=relay_env, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == raw.split(sep, 1)[1].replace(b"\r\n", b"\n")
    assert b"\r" in (GOLDEN / f"{CRLF_FILE}.mime").read_bytes().split(b"\r\n\r\n", 1)[1]  # the case is really tested


BUILD_ORDER = [
    "MIME-Version", "Message-ID", "From", "To", "Cc", "Date", "X-IGNITE-Type", "X-IGNITE-Priority",
    "X-IGNITE-Thread-ID", "In-Reply-To", "X-IGNITE-Repository", "X-IGNITE-Issue", "X-IGNITE-Status",
    "Content-Type", "Content-Transfer-Encoding",
]  # fmt: skip


def test_build_writes_the_seed_headers_in_order(relayctl, short_tmp: Path) -> None:
    out = short_tmp / "task_assignment_1770263544123456.mime"
    body = 'task_id: "task_001"\ntitle: "タスク名"\n'
    relayctl(
        "mime", "build", "--from", "coordinator", "--to", "ignitian_1", "ignitian_2", "--cc", "leader",
        "--type", "task_assignment", "--priority", "high", "--thread-id", "th-1", "--in-reply-to", "<1.2.3@ignite.local>",
        "--repo", "owner/repo", "--issue", "42", "--status", "queued", "--body", body, "-o", str(out),
    )  # fmt: skip
    text = out.read_text()
    head, _, got_body = text.partition("\n\n")
    names = [line.split(":", 1)[0] for line in head.split("\n")]
    assert names == BUILD_ORDER
    values = dict(line.split(": ", 1) for line in head.split("\n"))
    assert re.fullmatch(r"<\d+\.\d+\.[0-9a-f]+@ignite\.local>", values["Message-ID"])
    assert email.utils.parsedate_to_datetime(values["Date"]).tzinfo is not None  # RFC 2822 with a zone
    assert values["To"] == "ignitian_1, ignitian_2" and values["Content-Type"] == "text/x-yaml; charset=utf-8"
    assert values["Content-Transfer-Encoding"] == "8bit" and values["MIME-Version"] == "1.0"
    assert got_body == body
    assert out.stat().st_mode & 0o777 == 0o600


def test_build_minimal_matches_the_seed_example_shape(relayctl) -> None:
    text = relayctl("mime", "build", "--from", "user", "--to", "leader", "--type", "user_goal", "--body", 'goal: "README"').stdout
    names = [line.split(":", 1)[0] for line in text.split("\n\n")[0].split("\n")]
    assert names == ["MIME-Version", "Message-ID", "From", "To", "Date", "X-IGNITE-Type", "X-IGNITE-Priority", "Content-Type", "Content-Transfer-Encoding"]
    assert text.endswith('\n\ngoal: "README"')


def test_several_values_after_one_flag_and_none_at_all(relayctl, short_tmp: Path) -> None:
    text = relayctl("mime", "build", "--from", "leader", "--to", "ignitian_1", "ignitian_2", "--cc", "--type", "t", "--body", "x: 1").stdout
    assert "To: ignitian_1, ignitian_2\n" in text and "Cc:" not in text
    path = short_tmp / "m.mime"
    path.write_text(text)
    relayctl("mime", "update-status", str(path), "delivered", "--extra", "X-A=1", "X-B=2", "--processed-at", "now")
    fields = mime.read_file(str(path))
    assert (fields.get("X-A"), fields.get("X-B"), fields.get("X-IGNITE-Processed-At")) == ("1", "2", "now")


def test_build_body_file_and_stdin(relayctl, short_tmp: Path) -> None:
    body = short_tmp / "body.yaml"
    body.write_text("a: 1\n")
    text = relayctl("mime", "build", "--from", "user", "--to", "leader", "--type", "user_goal", "--body-file", str(body)).stdout
    assert text.endswith("\n\na: 1\n")
    text = relayctl("mime", "build", "--from", "user", "--to", "leader", "--type", "user_goal", "--body-file", "-", input="b: 2\n").stdout
    assert text.endswith("\n\nb: 2\n")
    # a body file saved with CRLF (an editor on Windows) is written with LF, as IGNITE's tool writes it
    body.write_bytes(b'task_id: "t-1"\r\nnotes: |\r\n  two\r\n  lines\r\n')
    built = short_tmp / "built.mime"
    relayctl("mime", "build", "--from", "user", "--to", "leader", "--type", "user_goal", "--body-file", str(body), "-o", str(built))
    assert b"\r" not in built.read_bytes()
    assert built.read_bytes().endswith(b'\n\ntask_id: "t-1"\nnotes: |\n  two\n  lines\n')


def test_update_status_keeps_crlf_folding_order_and_body(relayctl, short_tmp: Path) -> None:
    path = short_tmp / "m.mime"
    shutil.copy(GOLDEN / f"{CRLF_FILE}.mime", path)
    os.chmod(path, 0o640)
    before = path.read_bytes()
    inode = path.stat().st_ino
    relayctl("mime", "update-status", str(path), "retrying", "--processed-at", "2026-02-11T10:00:00+09:00", "--extra", "X-IGNITE-Retry-Count=3", "X-IGNITE-Error-Reason=timeout")
    after = path.read_bytes()
    assert path.stat().st_ino != inode  # replaced by rename, not rewritten in place
    assert path.stat().st_mode & 0o777 == 0o640
    expected = (
        before.replace(b"X-IGNITE-Status: delivered", b"X-IGNITE-Status: retrying")
        .replace(b"X-IGNITE-Processed-At: 2026-02-11T09:31:00+09:00", b"X-IGNITE-Processed-At: 2026-02-11T10:00:00+09:00")
        .replace(b"X-IGNITE-Retry-Count: 2", b"X-IGNITE-Retry-Count: 3")
        .replace(b"Content-Transfer-Encoding: 8bit\r\n\r\n", b"Content-Transfer-Encoding: 8bit\r\nX-IGNITE-Error-Reason: timeout\r\n\r\n")
    )
    assert after == expected
    parsed = json.loads(relayctl("mime", "parse", str(path)).stdout)
    assert (parsed["status"], parsed["retry_count"], parsed["error_reason"], parsed["thread_id"]) == ("retrying", "3", "timeout", "thread-2026-02-11 part-two")
    assert [p.name for p in short_tmp.iterdir()] == ["m.mime"]  # no temp file left behind


@pytest.mark.slow
def test_update_and_remove_header_take_folded_lines_along(relayctl, short_tmp: Path) -> None:
    path = short_tmp / "m.mime"
    shutil.copy(GOLDEN / f"{CRLF_FILE}.mime", path)
    relayctl("mime", "update-header", str(path), "X-IGNITE-Thread-ID", "t2")
    relayctl("mime", "remove-header", str(path), "To")
    text = path.read_bytes().decode()
    assert "part-two" not in text and "coordinator" not in text.split("\r\n\r\n")[0]
    assert "X-IGNITE-Thread-ID: t2\r\n" in text
    parsed = json.loads(relayctl("mime", "parse", str(path)).stdout)
    assert parsed["to"] == [] and parsed["thread_id"] == "t2" and parsed["cc"] == ["innovator"]
    relayctl("mime", "update-header", str(path), "X-IGNITE-Retry-Count", "4")
    assert json.loads(relayctl("mime", "parse", str(path)).stdout)["retry_count"] == "4"


@pytest.mark.slow
@pytest.mark.parametrize(
    "content,why",
    [
        (b"", "empty"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "none of the headers"),
        (b"just some text\nwith lines\n", "header section"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
)
def test_a_file_that_is_not_a_message_gets_one_line(relayctl, short_tmp: Path, content: bytes, why: str) -> None:
    path = short_tmp / "bad.mime"
    path.write_bytes(content)
    for args in (["parse", str(path)], ["extract-body", str(path)], ["update-status", str(path), "delivered"], ["remove-header", str(path), "X"]):
        proc = relayctl("mime", *args, check=False)
        assert proc.returncode == 1, proc
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and why in proc.stderr
        assert "Traceback" not in proc.stderr
    assert path.read_bytes() == content  # an edit that was refused changed nothing


@pytest.mark.slow
def test_missing_file_and_bad_header_are_one_line_errors(relayctl, short_tmp: Path) -> None:
    proc = relayctl("mime", "parse", str(short_tmp / "nope.mime"), check=False)
    assert proc.returncode == 1 and "no such file" in proc.stderr
    path = short_tmp / "m.mime"
    shutil.copy(GOLDEN / f"{SEED_FILE}.mime", path)
    proc = relayctl("mime", "update-header", str(path), "Bad Name", "x", check=False)
    assert proc.returncode == 2 and "invalid header name" in proc.stderr
    proc = relayctl("mime", "build", "--from", "a", "--to", "b", "--type", "t", "--priority", "urgent", check=False)
    assert proc.returncode == 2 and "urgent" in proc.stderr
    assert path.read_bytes() == (GOLDEN / f"{SEED_FILE}.mime").read_bytes()


@pytest.mark.slow
def test_help_teaches_with_examples(relayctl) -> None:
    out = relayctl("mime", "--help").stdout
    assert "Examples:" in out
    for sub in ("build", "parse", "extract-body", "update-status", "update-header", "remove-header", "send", "export"):
        assert f"relayctl mime {sub}" in out
        assert "Example" in relayctl("mime", sub, "--help").stdout


# -- relay <-> files ----------------------------------------------------------------------


@pytest.fixture
def team(relayctl) -> None:
    relayctl.setup("init", preset="ignite", workers=2)


@pytest.mark.slow
def test_send_mime_turns_a_file_into_relay_messages(relayctl, team, short_tmp: Path) -> None:
    path = short_tmp / "m.mime"
    shutil.copy(GOLDEN / f"{CRLF_FILE}.mime", path)
    sent = json.loads(relayctl("--json", "send", "--mime", str(path)).stdout)
    assert [m["to"] for m in sent] == ["leader", "coordinator", "innovator"]  # To and Cc
    body = mime.read_file(str(path)).body
    for m in sent:
        assert (m["from"], m["type"], m["thread"], m["priority"]) == ("evaluator", "evaluation_result", "thread-2026-02-11 part-two", "normal")
        assert m["body"] == body  # CRLF and all
    inbox = json.loads(relayctl("--json", "read", agent="leader").stdout)
    assert inbox[-1]["body"] == body
    seed = json.loads(relayctl("--json", "mime", "send", str(GOLDEN / f"{SEED_FILE}.mime")).stdout)
    assert seed[0]["priority"] == "high" and seed[0]["tags"] == ["repo:owner/repo", "issue:42"] and seed[0]["to"] == "ignitian_1"


@pytest.mark.slow
def test_critical_becomes_urgent_and_back(relayctl, team, short_tmp: Path) -> None:
    path = short_tmp / "e.mime"
    relayctl("mime", "build", "--from", "queue_monitor", "--to", "leader", "--type", "escalation", "--priority", "critical", "--body", "x: 1\n", "-o", str(path))
    sent = json.loads(relayctl("--json", "mime", "send", str(path)).stdout)[0]
    assert sent["priority"] == "urgent"
    exported = relayctl("mime", "export", sent["id"]).stdout
    assert "X-IGNITE-Priority: critical\n" in exported


@pytest.mark.slow
def test_send_mime_refuses_unknown_recipients_and_bad_files_whole(relayctl, team, short_tmp: Path) -> None:
    good = short_tmp / "good.mime"
    relayctl("mime", "build", "--from", "leader", "--to", "ignitian_1", "--type", "task_assignment", "--body", "a: 1\n", "-o", str(good))
    bad = short_tmp / "bad.mime"
    bad.write_text("no headers here\n")
    proc = relayctl("mime", "send", str(good), str(bad), check=False)
    assert proc.returncode == 1 and "bad.mime is not an IGNITE message" in proc.stderr
    assert json.loads(relayctl("--json", "read", agent="ignitian_1").stdout) == []  # nothing half-sent
    stranger = short_tmp / "s.mime"
    relayctl("mime", "build", "--from", "leader", "--to", "ignitian_9", "--type", "t", "-o", str(stranger))
    proc = relayctl("send", "--mime", str(stranger), check=False)
    assert proc.returncode == 1 and "unknown agent 'ignitian_9'" in proc.stderr


@pytest.mark.slow
def test_round_trip_relay_to_mime_to_relay_keeps_every_field(relayctl, team, short_tmp: Path) -> None:
    body = 'task_id: "t-7"\r\nnotes: |\n  spaces   kept\n\n'
    original = json.loads(
        relayctl(
            "--json", "send", "ignitian_2", body, "--subject", "Review, please: t-7", "--thread", "bd-42", "--priority", "urgent",
            "--tag", "repo:owner/repo", "--tag", "a, b", "--tag", "issue:42", "--type", "task_assignment", "--ack", agent="coordinator",
        ).stdout
    )  # fmt: skip
    path = short_tmp / "export.mime"
    relayctl("mime", "export", original["id"], "-o", str(path))
    # what IGNITE's tooling reads from it
    fields = json.loads(relayctl("mime", "parse", str(path)).stdout)
    assert (fields["from"], fields["to"], fields["type"], fields["priority"], fields["thread_id"]) == ("coordinator", ["ignitian_2"], "task_assignment", "critical", "bd-42")
    assert (fields["repository"], fields["issue"], fields["body"]) == ("owner/repo", "42", body.replace("\r\n", "\n"))  # as IGNITE's tool reads it
    # IGNITE's form: <{epoch}.{pid}.{hash}@ignite.local>, the epoch being when the message's id was made
    epoch, pid, digest = re.fullmatch(r"<(\d+)\.(\d+)\.([0-9a-f]{12})@ignite\.local>", fields["message_id"]).groups()
    assert int(epoch) == ulid_time_ms(original["id"]) // 1000 and int(pid) > 0
    again_exported = short_tmp / "again.mime"
    relayctl("mime", "export", original["id"], "-o", str(again_exported))
    assert json.loads(relayctl("mime", "parse", str(again_exported)).stdout)["message_id"].endswith(f".{digest}@ignite.local>")  # the message's own hash
    again = json.loads(relayctl("--json", "send", "--mime", str(path)).stdout)[0]
    for key in ("from", "to", "subject", "body", "thread", "priority", "tags", "type", "ack"):
        assert again[key] == original[key], key
    assert again["id"] != original["id"]  # a new message, as every send is


@pytest.mark.slow
def test_round_trip_of_an_untyped_plain_message(relayctl, team, short_tmp: Path) -> None:
    original = json.loads(relayctl("--json", "send", "leader", "  hello\nthere", agent="ignitian_1").stdout)
    text = relayctl("--agent", "leader", "read", "--format", "mime", "--last", "1").stdout
    assert text.startswith("MIME-Version: 1.0\n") and "X-IGNITE-Type: message" in text
    path = short_tmp / "plain.mime"
    path.write_text(text)
    fields = json.loads(relayctl("mime", "parse", str(path)).stdout)
    assert fields["body"].rstrip("\n") == "  hello\nthere"
    exported = short_tmp / "exact.mime"
    relayctl("mime", "export", original["id"], "-o", str(exported))
    again = json.loads(relayctl("--json", "mime", "send", str(exported)).stdout)[0]
    for key in ("from", "to", "subject", "body", "thread", "priority", "tags", "type", "ack"):
        assert again[key] == original[key], key


@pytest.mark.slow
def test_export_of_an_unknown_id_is_one_line(relayctl, team) -> None:
    proc = relayctl("mime", "export", "01NOPE", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: no message 01NOPE")


@pytest.mark.slow
def test_ignite_preset_with_workers_and_escalation_agent(relayctl, store_dir: Path) -> None:
    (store_dir).mkdir(parents=True)
    (store_dir / "config.json").write_text(json.dumps({"notify": {"trigger": "hi"}}))
    data = json.loads(relayctl("--json", "init", "--preset", "ignite", "--workers", "5").stdout)
    assert data["agents"] == sorted(["leader", "strategist", "architect", "evaluator", "coordinator", "innovator"] + [f"ignitian_{n}" for n in range(1, 6)])
    assert data["escalate_to"] == "leader"
    config = json.loads((store_dir / "config.json").read_text())
    # the preset's team is fixed: agent programs cannot join it under a new (typo'd) name
    assert config == {"notify": {"trigger": "hi"}, "delivery": {"escalate_to": "leader"}, "team": {"preset": "ignite", "allow_new": False}}
    # a choice made by hand is kept
    (store_dir / "config.json").write_text(json.dumps({"delivery": {"escalate_to": "coordinator"}}))
    assert json.loads(relayctl("--json", "init", "--preset", "ignite").stdout)["escalate_to"] == "coordinator"
    proc = relayctl("init", "--preset", "overlord", "--workers", "2", check=False)
    assert proc.returncode == 2 and "only the ignite preset" in proc.stderr


def test_a_thread_id_one_header_cannot_hold_survives_export_and_import() -> None:
    """A thread id with control characters (any local agent can choose one) is carried
    JSON-encoded, as a subject is, instead of making `read --format mime` refuse the inbox."""
    from relayd.ignite import convert, mime

    message = {"id": "01J0000000000000000000000A", "ts": "2026-11-24T01:00:00.000000Z", "from": "alice", "to": "bob",
               "subject": "s", "body": "b\n", "thread": "th\x1b]52;c;aGk=\x07\nX-Forged: 1", "priority": "normal", "tags": []}
    text = convert.from_message(message).to_text()
    assert "X-Forged" not in [line.split(":")[0] for line in text.splitlines()]
    params = convert.to_send_params(mime.parse(text), "exported")
    assert params["thread"] == message["thread"]
