"""The git pre-commit guard: a commit may not touch another agent's exclusive reservation.

`relayctl guard install` writes `.git/hooks/pre-commit` (wherever `git rev-parse
--git-path hooks` points, so `core.hooksPath` and worktrees are honoured). The hook is a sh
script (HOOK_SCRIPT) that runs a pre-commit hook that was there before (moved aside to
`pre-commit.relay-chained`, restored by `guard uninstall`) as if it were still in its place,
then `hook()` below in the Python that installed it, which:

  1. asks git for the repository's top level and the staged paths (`git diff --cached
     --name-only --no-renames`: added, changed and deleted, both sides of a rename);
  2. reads the exclusive reservations in this repository straight from the store (relayd
     need not run), through an index that is only a cache (relayd.reservations.guard_index);
  3. refuses (exit 1) when a staged path lies inside an active exclusive reservation held
     by an agent other than the committer (`RELAY_AGENT`, then `OVLD_ROLE`), deciding
     "inside" with the same pattern rules as `relayctl reserve` (relayd.reservations.globs), and names
     each holder, pattern and expiry.

A reservation's repo may be the top level or a directory inside it (an agent reserving from
a subdirectory): a path counts for it when it lies below that directory. Speed: with 1,000
reservations and 1,000 staged paths a full check is a sort and, per reservation, a bisect
to the paths that share its literal prefix (benchmarks/bench_guard.py).

The hook outlives relay: with that Python or relay's package gone it lets the commit through
with one line saying the guard is not active and how to remove it. It is never written where
git would track it or where other repositories read hooks (_check_hooks_dir).
"""

from __future__ import annotations

import bisect
import os
import sys

from .errors import NotFound, RelayError, UsageError
from .reservations.globs import PatternError, fixed_ends, matches_path
from .timefmt import now, parse_iso, passed_test, short_span
from .reservations.guard_index import held_in

HOOK = "pre-commit"
CHAINED = "pre-commit.relay-chained"
MARK = "# relay guard:"
SHOWN_PATHS = 3  # per reservation in a refusal; the rest are counted
SHOWN_RESERVATIONS = 20  # in a refusal; the rest are counted (and listed by `relayctl reservations`)

# A POSIX sh script, so that it runs whatever became of the Python that installed it. It runs
# the chained hook first, then relay's check in that Python without site (-S: with an
# editable install or many .pth files, site alone costs more than the whole check) and
# isolated (-I: nothing from the repository's directory or the environment shadows relay's
# modules). When that Python or relay's package is gone (the venv or the clone deleted, relay
# uninstalled) the commit goes ahead with one line saying so and how to remove the hook.
HOOK_SCRIPT = """#!/bin/sh
{mark} refuses a commit that touches another agent's exclusive file reservation.
# Installed by 'relayctl guard install'; 'relayctl guard uninstall' removes it and puts back
# the hook it chained. Bypass it for one commit: git commit --no-verify
relay_python={python}
relay_root={package_root}
relay_store={store}
{chain}
if [ -x "$relay_python" ] && [ -f "$relay_root/relayd/guard.py" ]; then
  exec "$relay_python" -IS -c 'import sys; sys.path.insert(0, sys.argv[1]); from relayd.guard import hook; hook(store=sys.argv[2])' "$relay_root" "$relay_store"
fi
printf '%s\\n' {gone} >&2
exit 0
"""
# The chained hook runs as if it were still the pre-commit hook: a shell script is sourced
# under this script's $0, since husky 9's dispatcher (`.husky/_/h`) finds the user's script by
# the name and place of $0; any other program is run directly.
CHAIN = """relay_chained="$(dirname "$0")/{chained}"
if [ -x "$relay_chained" ]; then
  {run} || exit $?
fi"""
CHAIN_SOURCED = '''{shell} -c 'relay_chained_hook=$1; shift; . "$relay_chained_hook"' "$0" "$relay_chained" "$@"'''
CHAIN_RUN = '"$relay_chained" "$@"'
SHELLS = ("sh", "bash", "dash", "ksh", "zsh", "ash", "mksh")


# -- the check ----------------------------------------------------------------------------


def _git(args: list[str], cwd: str | None = None) -> bytes:
    """git's output; UsageError with what it said when it fails. Spawned with
    os.posix_spawnp, not subprocess: that module's imports (re, enum, locale, threading)
    cost the hook more than its whole check."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    argv = ["git", *(["-C", cwd] if cwd else []), *args]
    try:
        pid = os.posix_spawnp("git", argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ])
    except FileNotFoundError:
        raise UsageError("git is not installed (not on PATH)") from None
    finally:
        os.close(out_w)
        os.close(err_w)
    out, err = _read_all(out_r), _read_all(err_r)  # git says little on stderr: no deadlock
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0:
        said = " ".join(err.decode(errors="replace").split())[:300]
        raise UsageError(f"git {' '.join(args[:2])} failed: {said or f'exit {status}'}")
    return out


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def repository(path: str | None = None) -> str:
    """The top level of the git work tree at `path` (or the current directory), real path."""
    top = _git(["rev-parse", "--show-toplevel"], cwd=path and os.path.abspath(path)).decode(errors="surrogateescape").strip()
    if not top:
        raise UsageError(f"{path or os.getcwd()} is not inside a git work tree")
    return os.path.realpath(top)


def staged_paths(top: str) -> list[str]:
    out = _git(["diff", "--cached", "--name-only", "--no-renames", "-z"], cwd=top)
    return [p for p in out.decode(errors="surrogateescape").split("\0") if p]


def blocking(top: str, paths: list[str], held: list, committer: str | None, reference=None) -> list[tuple[object, list[str]]]:
    """(reservation, the staged paths inside it) for every active reservation of another
    agent in `held` (the exclusive ones in `top` or a directory inside it: guard_index)
    that some staged path lies in; active at `reference` (default now)."""
    passed = passed_test(reference)
    by_repo: dict[str, list] = {}
    for r in held:
        if r.agent != committer:
            by_repo.setdefault(r.repo, []).append(r)
    found = []
    for repo, mine in by_repo.items():
        below = "" if repo == top else repo[len(top) + 1 :] + "/"
        # Paths relative to the reservation's repo, sorted, so a literal prefix is a bisect.
        local = sorted(p[len(below) :] for p in paths if p.startswith(below))
        if not local:
            continue
        end = len(local)
        for r in mine:
            if passed(r.expires_at):
                continue
            pattern = r.pattern
            try:
                prefix, suffix = fixed_ends(pattern)
                if pattern[len(prefix) : len(prefix) + 1] == "/" and not pattern.startswith("**", len(prefix) + 1):
                    prefix += "/"  # `pkg/p1/*.go` has nothing in `pkg/p1x/`; but `src/**` matches `src`
                hits = []
                at = bisect.bisect_left(local, prefix)
                while at < end and local[at].startswith(prefix):
                    path = local[at]
                    if path.endswith(suffix) and matches_path(pattern, path):
                        hits.append(below + path)
                    at += 1
            except PatternError:
                continue  # a hand-edited file with a broken pattern holds nothing
            if hits:
                found.append((r, hits))
    found.sort(key=lambda f: (f[0].repo, f[0].pattern, f[0].agent))
    return found


def refusal(found: list[tuple[object, list[str]]], committer: str | None) -> str:
    who = f"you are {committer}" if committer else "no RELAY_AGENT is set, so every holder is someone else"
    lines = [f"relay guard: commit refused: it touches files reserved by other agents ({who}):"]
    moment = now()
    for r, hits in found[:SHOWN_RESERVATIONS]:
        left = (parse_iso(r.expires_at) - moment).total_seconds()
        shown = ", ".join(hits[:SHOWN_PATHS]) + (f" and {len(hits) - SHOWN_PATHS} more" if len(hits) > SHOWN_PATHS else "")
        why = f" — {r.reason}" if r.reason else ""
        lines.append(f"  {r.agent} holds {r.pattern} (exclusive, until {r.expires_at}, in {short_span(left)}){why}: {shown}")
    if len(found) > SHOWN_RESERVATIONS:
        rest = found[SHOWN_RESERVATIONS:]
        paths = sum(len(hits) for _, hits in rest)
        lines.append(f"  and {len(rest)} more reservations of other agents, over {paths} more staged files (relayctl reservations lists them)")
    lines.append("Unstage those files, wait for the reservation to expire or be released, or ask its holder")
    lines.append("(relayctl send AGENT ...). To commit anyway: git commit --no-verify")
    return "\n".join(lines)


def check(top: str, store_dir: str, committer: str | None, moment=None) -> str | None:
    """The refusal text, or None when the commit may go ahead. `moment` (a datetime; tests)
    stands in for now, for the index's clock and for expiry alike."""
    paths = staged_paths(top)
    if not paths:
        return None
    held = held_in(store_dir, top, None if moment is None else lambda: int(moment.timestamp() * 1e9))
    if not held:
        return None
    found = blocking(top, paths, held, committer, moment)
    return refusal(found, committer) if found else None


def hook(store: str) -> None:
    """The pre-commit hook's check (the hook script has run the chained hook already): exit
    0 to let the commit go ahead, non-zero to refuse it. The store is RELAY_DIR /
    OVLD_RELAY_DIR when set, else the one `guard install` used."""
    try:
        committer = os.environ.get("RELAY_AGENT") or os.environ.get("OVLD_ROLE") or None
        chosen = os.environ.get("RELAY_DIR") or os.environ.get("OVLD_RELAY_DIR")
        store_dir = os.path.abspath(os.path.expanduser(chosen)) if chosen else store
        # git runs a pre-commit hook at the work tree's top level: no need to ask it where that is.
        top = os.path.realpath(os.getcwd()) if os.environ.get("GIT_INDEX_FILE") else repository()
        refused = check(top, store_dir, committer)
    except (RelayError, OSError) as exc:
        text = exc.message if isinstance(exc, RelayError) else str(exc)
        print(f"relay guard: cannot check reservations: {text} (to commit anyway: git commit --no-verify)", file=sys.stderr)
        sys.exit(1)
    if refused:
        print(refused, file=sys.stderr)
        sys.exit(1)


# -- installing the hook ----------------------------------------------------------------------


def hooks_dir(top: str) -> str:
    out = _git(["rev-parse", "--path-format=absolute", "--git-path", "hooks"], cwd=top)
    return out.decode(errors="surrogateescape").strip()


def _is_ours(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return MARK.encode() in fh.read(4096)
    except (FileNotFoundError, IsADirectoryError):
        return False


def _git_dir(top: str) -> str:
    out = _git(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=top)
    return os.path.realpath(out.decode(errors="surrogateescape").strip())


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


COMMITTED_HOOK_LINE = "if command -v relayctl >/dev/null; then relayctl guard check; fi"


def _check_hooks_dir(top: str, hooks: str) -> None:
    """Refuse a hooks directory relay must not write into: one shared with other repositories
    (a global core.hooksPath), or one in the work tree where a hook relay writes would be
    committed, or would rewrite a committed one (husky 5-8 keeps `.husky/pre-commit` in git).
    Husky 9's `.husky/_` is ignored by git (its own .gitignore), so a hook there stays local."""
    real = os.path.realpath(hooks)
    if _inside(real, _git_dir(top)):
        return
    if not _inside(real, top):
        raise UsageError(f"core.hooksPath points to {hooks}, outside this repository (shared with other repositories); "
                         "relay installs its guard only into a repository's own hooks: no guard installed")
    hook = os.path.join(real, HOOK)
    rel = os.path.relpath(hook, top)
    # What to do instead: the team's committed hook runs the same check (a no-op for whoever
    # has no relayctl).
    instead = f"to guard commits here, add this line to {rel} and commit it: {COMMITTED_HOOK_LINE}"
    if _git(["ls-files", "-z", "--", rel], cwd=top):
        raise UsageError(f"{hook} is committed to this repository (core.hooksPath); relay never rewrites a file git tracks: "
                         f"no guard installed (the committed hook keeps running as it is); {instead}")
    try:
        _git(["check-ignore", "-q", "--no-index", "--", rel], cwd=top)
    except UsageError:
        raise UsageError(f"a hook relay wrote at {hook} (core.hooksPath) would not be ignored by git and could be committed "
                         f"for everyone: no guard installed; {instead}") from None


def _chain_runner(chained: str) -> str:
    """How the hook script runs the chained hook: a shell script sourced under the hook's own
    $0 (CHAIN_SOURCED), anything else run as a program."""
    # deferred imports: the commit guard runs at every git commit; shlex and shutil only to install
    # the hook
    import shlex
    import shutil

    try:
        with open(chained, "rb") as fh:
            first = fh.readline(512).decode(errors="replace")
    except OSError:
        return CHAIN_RUN
    if not first.startswith("#!"):
        return CHAIN_SOURCED.format(shell="/bin/sh")  # no #! line: git has /bin/sh run it too
    words = first[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if w != "-S"]
        if words and "/" not in words[0]:
            words[0] = shutil.which(words[0]) or words[0]
    if not words or os.path.basename(words[0]) not in SHELLS:
        return CHAIN_RUN
    return CHAIN_SOURCED.format(shell=" ".join(shlex.quote(w) for w in words))


def install(repo: str | None, store_dir: str, python: str = sys.executable) -> dict:
    """Write the guard as the repository's pre-commit hook, chaining one that was there.
    (shlex here, not at the top: the hook itself imports this module.)"""
    import shlex

    top = repository(repo)
    hooks = hooks_dir(top)
    _check_hooks_dir(top, hooks)
    hook, chained = os.path.join(hooks, HOOK), os.path.join(hooks, CHAINED)
    if os.path.isdir(hook):
        raise UsageError(f"{hook} is a directory; cannot install the guard there")
    moved = False
    if os.path.lexists(hook) and not _is_ours(hook):
        if os.path.lexists(chained):
            raise UsageError(f"both {hook} (not relay's) and {chained} exist; move one of them away first")
        os.rename(hook, chained)
        moved = True
    os.makedirs(hooks, exist_ok=True)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    has_chained = os.path.lexists(chained)
    remove = f"mv {shlex.quote(chained)} {shlex.quote(hook)}" if has_chained else f"rm {shlex.quote(hook)}"
    gone = f"relay guard: not active (relay is no longer installed at {python}); the commit goes ahead. Remove the guard: {remove}"
    text = HOOK_SCRIPT.format(
        mark=MARK, python=shlex.quote(python), package_root=shlex.quote(package_root), store=shlex.quote(os.path.abspath(store_dir)),
        chain=CHAIN.format(chained=CHAINED, run=_chain_runner(chained) if has_chained else CHAIN_RUN), gone=shlex.quote(gone),
    )
    temp = hook + ".relay-tmp"
    with open(temp, "w") as fh:
        fh.write(text)
    os.chmod(temp, 0o755)
    os.replace(temp, hook)
    return {"repo": top, "hook": hook, "chained": chained if has_chained else None, "moved_aside": moved, "store": store_dir}


def uninstall(repo: str | None) -> dict:
    """Remove the guard and put back the hook it chained."""
    top = repository(repo)
    hooks = hooks_dir(top)
    hook, chained = os.path.join(hooks, HOOK), os.path.join(hooks, CHAINED)
    if not _is_ours(hook):
        if os.path.lexists(hook):
            raise UsageError(f"{hook} is not relay's guard; left it alone")
        if os.path.lexists(chained):
            raise UsageError(f"no relay guard in {hook}, but {chained} is there; rename it back to {HOOK} yourself if it is yours")
        raise NotFound(f"no relay guard is installed in {top}")
    os.unlink(hook)
    restored = None
    if os.path.lexists(chained):
        os.rename(chained, hook)
        restored = hook
    return {"repo": top, "removed": hook, "restored": restored}

