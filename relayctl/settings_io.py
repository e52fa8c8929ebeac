"""How relay writes and removes the files it puts outside its store: a project's hook
settings, MCP configs, OpenCode's plugin, Copilot CLI's hooks file, the programs' trust
files in the home directory.

Three rules, the same for every such file:
* Where it lands (`landing`): a file of the project is written only inside the project.
  A symlinked file, or a folder on the way that is a symlink (`.opencode -> ~/elsewhere`),
  is followed only while where it leads stays inside; anything else is refused with one
  line, before anything is written, made or removed. (A program's own file in the home
  directory is followed wherever its link goes: that link is the person's, often into
  their dotfiles.)
* A file with more than one hard link is never replaced or removed: the rename that makes
  a write crash-safe would give the name a new file and cut it off from its other names
  (a dotfiles copy) without a word, and writing in place would not be crash-safe. It is
  refused with one line, and the file stays as it is.
* The write itself is relayd.fsio.replace_file: temp file, fsync, rename, directory fsync.

Every failure is a RelayError whose message ends "(relay did not change the file)".
"""

from __future__ import annotations

import os

from relayd.errors import RelayError
from relayd.fsio import replace_file

UNCHANGED = "(relay did not change the file)"


def landing(path: str, root: str | None) -> str:
    """Where writing `path` lands (every symlink resolved). With `root` (the project), it
    must be inside `root`: a link leaving it is not relay's to write through."""
    target = os.path.realpath(path)
    if root is None:
        return target
    top = os.path.realpath(root)
    if target != top and not target.startswith(top.rstrip("/") + "/"):
        raise RelayError(f"{path} leads through a symlink to {target}, outside the project {top}; relay writes only inside it {UNCHANGED}")
    return target


def refuse_shared(target: str, shown: str) -> None:
    """Refuse a file that has other names (hard links): see the module docstring."""
    try:
        links = os.lstat(target).st_nlink
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RelayError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if links > 1:
        raise RelayError(f"{shown} has {links} hard links (other names for the same file, a dotfiles copy): relay would cut it off "
                         f"from them, so it leaves the file; make it a symlink instead, or edit it by hand {UNCHANGED}")


def replace(target: str, data: bytes, shown: str | None = None) -> None:
    """Write `data` to `target` (a path `landing` returned), making its folders."""
    shown = shown or target
    refuse_shared(target, shown)
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        replace_file(target, data)
    except OSError as exc:
        raise RelayError(f"cannot write {shown}: {exc.strerror or exc}") from None
    except RelayError as exc:  # relayd.fsio's UnsafePath / StoreError
        raise RelayError(f"cannot write {shown}: {exc.message}") from None


def remove(target: str, shown: str | None = None) -> None:
    """Remove `target` (a path `landing` returned); gone already is fine. A file with other
    names is refused too: they would keep what relay wrote, with no name of relay's left."""
    refuse_shared(target, shown or target)
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RelayError(f"cannot remove {shown or target}: {exc.strerror or exc}") from None
