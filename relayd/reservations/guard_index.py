"""The reservations the pre-commit guard checks a repository against, and their index.

The truth is `reservations/` in the store: one file per reservation, all repositories mixed.
Reading and decoding every file is most of what the hook costs with 1,000 reservations,
so the guard keeps, per repository, an index of the exclusive reservations in it
(`guard/<crc32 of the repo>.idx` in the store). The index is only a cache: it is used
when it describes the reservations directory as it is now, and rebuilt from the files
otherwise, so it never changes an answer:

* It names the directory it was built from: device, inode, mtime and ctime. Every change
  relay makes to a reservation (reserve, renew, release, `gc`, `reset`) links, renames or
  unlinks a file there, which moves the directory's ctime; so does any `mv` or `rm` of a
  file in it. A file rewritten in place (a text editor that saves over the file) does not:
  such a hand edit is seen once the directory next changes (documented in
  docs/coordination.md).
* A directory changed within the last SETTLED_NS before the build is not indexed: file
  times come from a coarse clock, and a change in the same tick as the build would leave
  the ctime the index names unchanged.
* Expiry is decided at each check, never at the build; the index keeps expired ones.
* A header carries the body's length and CRC-32: a torn, truncated or foreign file is a
  miss (the files are read), never an answer. The index of another repository whose name
  has the same CRC is a miss too (the body names its repository).

Building reads the files as the store does (no symlinks followed, damaged files hold
nothing) and skips, before decoding, files that cannot concern this repository.

A commit that finds its index out of date pays for the rebuild (every reservation file
read). Relay spares commits that: every reserve, release and `gc` applies its change to
the indexes commits have made before it lets go of the reservations lock
(`written_through`), and relayd, once reservations/ has changed and settled, rebuilds any
index a change outside relay left behind (`refresh`).
"""

from __future__ import annotations

import binascii
import os
import sys
import time

from .. import jsonline, layout
from ..errors import RelayError
from ..fsio import Dir

MAGIC = b"relay-guard-index 1"
SUFFIX = ".idx"
SETTLED_NS = 2_000_000_000  # beyond any file system's timestamp granularity (FAT: 2 s)
_JSON_ESCAPED = frozenset('"\\') | frozenset(map(chr, range(0x20)))


class Held:
    """An exclusive reservation in the repository: what the check and its refusal read."""

    __slots__ = ("agent", "pattern", "repo", "expires_at", "reason")

    def __init__(self, agent: str, pattern: str, repo: str, expires_at: str, reason: str | None) -> None:
        self.agent = agent
        self.pattern = pattern
        self.repo = repo
        self.expires_at = expires_at
        self.reason = reason

    def row(self) -> list:
        return [self.agent, self.pattern, self.repo, self.expires_at, self.reason]


def index_name(top: str) -> str:
    return f"{binascii.crc32(top.encode('utf-8', 'surrogateescape')):08x}{SUFFIX}"


def held_in(store_dir: str, top: str, clock=None) -> list[Held]:
    """Every exclusive reservation (active or expired) whose repo is `top` or a directory
    inside it: from the index when it is current, else from the files, rewriting the index.
    `clock` (nanoseconds since the epoch) is injected by tests."""
    try:
        root = Dir.open_root(store_dir)
    except FileNotFoundError:
        return []  # no store: nothing reserved
    try:
        try:
            folder = root.subdir(layout.RESERVATIONS)
        except FileNotFoundError:
            return []
        try:
            stamp = _identity(os.fstat(folder.fd))
            held = _load(root, top, stamp)
            if held is None:
                started = (clock or time.time_ns)()
                held = _read_files(folder, top)
                after = _identity(os.fstat(folder.fd))
                if after == stamp and max(stamp[2], stamp[3]) + SETTLED_NS <= started:
                    _save(root, top, stamp, held)
        finally:
            folder.close()
    finally:
        root.close()
    return held


def _identity(info: os.stat_result) -> list[int]:
    return [info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns]


def _read_files(folder, top: str) -> list[Held]:
    """Parse the reservation files that can concern `top`. A file is skipped undecoded when
    it has no JSON escape and `top` does not occur in it: its repo is then spelled out
    literally and is neither `top` nor below it. Parsed with relayd.jsonline (json's C
    scanner), not the store's msgspec records nor `json`: their imports alone cost the
    hook more than reading the files."""
    below = top + "/"
    literal = top.isprintable() and not _JSON_ESCAPED.intersection(top)
    needle = top.encode("utf-8", "surrogateescape") if literal else b""
    held = []
    for _, raw in folder.read_listed(".json"):
        if literal and needle not in raw and b"\\" not in raw:
            continue
        try:
            record = jsonline.loads(raw)
            repo = record["repo"]
            if record.get("exclusive", True) is False or not isinstance(repo, str) or not (repo == top or repo.startswith(below)):
                continue
            reason = record.get("reason")
            held.append(Held(str(record["agent"]), str(record["pattern"]), repo, str(record["expires_at"]), None if reason is None else str(reason)))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue  # a damaged file holds nothing
    return held


def _load(root, top: str, stamp: list[int]) -> list[Held] | None:
    """The index of `top` if it is whole and names this very directory state, else None."""
    try:
        index = root.subdir(layout.GUARD_INDEX)
    except (FileNotFoundError, RelayError):
        return None
    try:
        raw = index.read_bytes(index_name(top))
    except (OSError, RelayError):
        return None
    finally:
        index.close()
    body = _body(raw) if raw else None
    if body is None:
        return None
    try:
        doc = jsonline.loads(body)
        if doc["repo"] != top or doc["dir"] != stamp:
            return None
        held = [Held(*row) for row in doc["held"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    text = (str,)
    if all(type(h.agent) in text and type(h.pattern) in text and type(h.repo) in text and type(h.expires_at) in text and (h.reason is None or type(h.reason) in text) for h in held):
        return held
    return None


def _save(root, top: str, stamp: list[int], held: list[Held]) -> None:
    """Write the index (temp file and rename: a reader sees the old one or the new one).
    Unsynced: a file torn by a crash fails its CRC and is rebuilt. A store this user may
    not write to simply has no index."""
    doc = {"dir": stamp, "repo": top, "held": [h.row() for h in held]}
    # The same bytes either way. The hook never imports msgspec (that costs it more than
    # encoding does); a reserve or relayd has it loaded, and it encodes ~60x faster.
    msgspec = sys.modules.get("msgspec")
    body = msgspec.json.encode(doc) if msgspec is not None else jsonline.dumps(doc).encode()
    _write(root, top, body)


def _write(root, top: str, body: bytes) -> None:
    data = MAGIC + b" %d %d\n" % (len(body), binascii.crc32(body)) + body
    try:
        with root.subdir(layout.GUARD_INDEX, create=True) as index:
            # Removed first: ext4 flushes a file renamed over another (2-3 ms here, in every
            # reserve); a commit between the two finds no index and reads the files.
            index.unlink(index_name(top), missing_ok=True)
            index.replace(index_name(top), data, None)
    except (OSError, RelayError):
        pass


def directory_stamp(store_dir: str) -> list[int] | None:
    """The reservations directory's identity as an index names it; None without one."""
    try:
        info = os.stat(os.path.join(store_dir, layout.RESERVATIONS), follow_symlinks=False)
    except OSError:
        return None
    return _identity(info)


def settled(stamp: list[int], clock=None) -> bool:
    """Whether a directory in this state may be indexed now (see SETTLED_NS)."""
    return max(stamp[2], stamp[3]) + SETTLED_NS <= (clock or time.time_ns)()


def written_through(store_dir: str, before: list[int] | None, added: list, removed: list[tuple[str, str]]) -> None:
    """After relay changed reservations/, with the reservations lock still held: every
    index a commit has made that described the directory as it was just before the change
    (`before`, its identity then) gets the change (`added` reservations; `removed` (repo,
    pattern) of exclusive ones) and describes the directory as it is now. So the next
    commit finds its index current, relayd running or not. An index of an older state is
    left to commits and relayd (`refresh`); it is only a cache, so a failure here is too.
    An index whose repository the change is not in is only restamped (no decoding)."""
    if before is None or not os.path.isdir(os.path.join(store_dir, layout.GUARD_INDEX)):
        return

    try:
        after = directory_stamp(store_dir)
        if after is None:
            return
        old_head = b'{"dir":' + jsonline.dumps(before).encode() + b","
        new_head = b'{"dir":' + jsonline.dumps(after).encode() + b","
        with Dir.open_root(store_dir) as root:
            with root.subdir(layout.GUARD_INDEX) as index:
                files = index.read_listed(SUFFIX)
            for _, raw in files:
                body = _body(raw)
                if body is None or not body.startswith(old_head):
                    continue
                doc = jsonline.loads(body)
                top = doc["repo"]
                below = top + "/"
                touched = [r for r in added if r.exclusive and (r.repo == top or r.repo.startswith(below))]
                gone = {key for key in removed if key[0] == top or key[0].startswith(below)}
                if not touched and not gone:
                    _write(root, top, new_head + body[len(old_head):])
                    continue
                gone.update((r.repo, r.pattern) for r in touched)
                held = [Held(*row) for row in doc["held"] if (row[2], row[1]) not in gone]
                held += [Held(r.agent, r.pattern, r.repo, r.expires_at, r.reason) for r in touched]
                _save(root, top, after, held)
    except (OSError, RelayError, ValueError, TypeError, KeyError, AttributeError):
        pass


def refresh(store_dir: str, clock=None) -> list[str]:
    """Rebuild every index a commit has made whose repository's reservations changed; the
    repositories whose index is current afterwards."""
    try:
        root = Dir.open_root(store_dir)
    except FileNotFoundError:
        return []
    try:
        try:
            index = root.subdir(layout.GUARD_INDEX)
        except (FileNotFoundError, RelayError):
            return []
        try:
            repos = [repo for repo in map(_repo_of, (raw for _, raw in index.read_listed(SUFFIX))) if repo is not None]
        finally:
            index.close()
    finally:
        root.close()
    for repo in repos:
        held_in(store_dir, repo, clock)
    stamp = directory_stamp(store_dir)
    return [repo for repo in repos if stamp is not None and _current(store_dir, repo, stamp)]


def _body(raw: bytes) -> bytes | None:
    """An index file's body if its header vouches for it (magic, length, CRC-32)."""
    head, _, body = raw.partition(b"\n")
    try:
        magic, size, crc = head.rsplit(b" ", 2)
        if magic != MAGIC or int(size) != len(body) or int(crc) != binascii.crc32(body):
            return None
    except ValueError:
        return None
    return body


def _repo_of(raw: bytes) -> str | None:
    """The repository an index file is about, whatever state it names; None if damaged."""
    body = _body(raw)
    try:
        repo = jsonline.loads(body)["repo"] if body is not None else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return repo if isinstance(repo, str) else None


def _current(store_dir: str, repo: str, stamp: list[int]) -> bool:
    with Dir.open_root(store_dir) as root:
        return _load(root, repo, stamp) is not None
