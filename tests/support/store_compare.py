"""Two stores (or two answers) compared for what matters: ids, timestamps, jittered due
times and inode-named marks differ between runs and are written as placeholders."""

from __future__ import annotations

import re

from .inproc import snapshot

ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
DUE = re.compile(r'"due":[0-9.e+-]+')
MARK = re.compile(r"\[-?[0-9]+,[0-9]+\]")  # marks (announced.json, delivery.absorbed) name files by inode, which differs between stores


def normalize(value, root):
    if isinstance(value, dict):
        return {normalize(k, root): (None if k == "age_seconds" else normalize(v, root)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, root) for v in value]
    if isinstance(value, str):
        return STAMP.sub("<ts>", ULID.sub("<id>", value.replace(root, "<store>")))
    return value


def normalized_store(root):
    files = {}
    for rel, data in snapshot(root).items():
        if rel == "relayd.lock":
            continue
        name = ULID.sub("<id>", rel)
        if "reservations/" in rel:
            name = "reservations/<key>.json"  # the key hashes the pattern; compared by content
        text = DUE.sub('"due":<t>', data.decode(errors="replace"))  # the due time has jitter
        if rel in ("announced.json", "delivery.absorbed"):
            # Marks of inboxes: an owed line's jittered due time has a varying number of digits,
            # so the offsets after it vary too.
            text = MARK.sub("[<ino>,<offset>]", text)
        if rel == "delivery.jsonl":
            # relayd announces after its reply, in the background: under load that can come
            # after a later step of the scenario removed the recipient. Only that outcome is
            # timing; every other line must be the same (and a log holding only it, none).
            text = "".join(line for line in text.splitlines(keepends=True) if "UnknownAgent: unknown agent" not in line)
            if not text:
                continue
        files.setdefault(name, []).append(normalize(text, root))
    return {k: sorted(v) for k, v in files.items()}
