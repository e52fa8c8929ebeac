"""reserve, release, reservations."""

from __future__ import annotations

import os
import sys

import click

from relayd.errors import Conflict, NotOwner, UsageError
from relayd.timefmt import now, parse_iso, short_span

from .context import clip, settings, visible


def repo_path(repo: str | None) -> str:
    """--repo, or the current directory, as a canonical absolute path."""
    return os.path.realpath(os.path.expanduser(repo) if repo else os.getcwd())


def _expiry(r: dict) -> str:
    left = (parse_iso(r["expires_at"]) - now()).total_seconds()
    return f"expires in {short_span(left)}" if left > 0 else f"EXPIRED {short_span(left)} ago"


def _kind(r: dict) -> str:
    return "exclusive" if r.get("exclusive", True) else "shared"


def render_holder(r: dict) -> str:
    return visible(f"  {r['agent']} holds {r['pattern']} ({_kind(r)}, {_expiry(r)}, until {r['expires_at']})" + (f" — {r['reason']}" if r.get("reason") else ""))


@click.command()
@click.argument("pattern")
@click.option("--repo", metavar="PATH", help="Repository the pattern is relative to. [default: the current directory]")
@click.option("--shared", is_flag=True, help="Shared: other shared holders of overlapping patterns are fine.")
@click.option("--ttl", default="1h", show_default=True, metavar="DURATION", help="How long it holds, e.g. 30m, 2h.")
@click.option("--reason", metavar="TEXT", help="Why, for whoever runs into it.")
@click.option("--force", is_flag=True, help="Take it even when others hold overlapping patterns; and to reserve everything (**, * at the top) or for longer than a day.")
@click.option("--check", is_flag=True, help="Only report conflicts (exit 1 if any); reserve nothing.")
def reserve(pattern: str, repo, shared, ttl, reason, force, check) -> None:
    """Reserve the files matching PATTERN before editing them.

    PATTERN is read as .gitignore and CODEOWNERS read one, relative to the repo: with
    no / (other than a trailing one) it matches at any depth ("*.go" is every Go file),
    a leading / roots it at the repo's top ("/*.go"), as does a / in the middle
    ("src/*.go"). * and ? stay inside one path segment, [a-z] / [!a-z] are character
    sets, ** is any number of segments, a trailing / means the whole directory. Two
    patterns conflict when some path could match both (exact, not a text comparison);
    shared + shared and expired reservations never conflict. Reserving a pattern you
    already hold renews it with the new TTL. A pattern of
    nothing but wildcards (`**`, `*`, `**/*`), which holds every file, or a TTL longer
    than a day needs --force: while it holds, the pre-commit guard refuses every other
    agent's commit touching it.

    \b
    Examples:
      relayctl reserve "src/auth/**" --reason "bd-42 auth refactor"
      relayctl reserve "*.go" --shared --ttl 2h
      relayctl reserve /README.md --check
      relayctl reserve "src/auth/**" --repo ~/oathkeeper --force
    """
    s = settings()
    if repo is not None and not os.path.isdir(repo_path(repo)):
        # Most likely a typo: a reservation there would protect nobody's files.
        raise UsageError(f"--repo {repo}: no such directory (give the repository's path on this machine)")
    params = {
        "agent": s.require_agent("reserve"),
        "pattern": pattern,
        "repo": repo_path(repo),
        "shared": shared,
        "ttl": ttl,
        "reason": reason,
        "force": force,
        "check": check,
    }
    try:
        result = s.call("reserve", params)
    except Conflict as exc:
        exc.message += " (wait, ask the holder, or use --force)"
        raise
    if check:
        s.out(result, lambda r: _render_check(r, pattern, params["repo"]))
        if result["conflicts"]:
            sys.exit(1)
        return
    s.warn_if_unregistered(result, "reserved")
    if result.get("overridden"):
        for holder in result["conflicts"]:
            s.warn(f"overriding: {render_holder(holder).strip()}")
    # deferred imports: `relayctl --help` loads every command module; the reservations module
    # (msgspec, the store) only when reserve checks for a reservation of everything
    from relayd.reservations.reserve import covers_everything

    held = result.get("reservation") or {}
    if held and covers_everything(held["pattern"]):
        s.warn(f"{held['pattern']} holds every file in {held['repo']} until {held['expires_at']}: release it when done (relayctl release {held['pattern']!r})")
    s.out(result, _render_reserved)


def _render_check(r: dict, pattern: str, repo: str) -> str:
    if not r["conflicts"]:
        return f"free: nobody else holds anything overlapping {pattern} in {repo}"
    return f"{pattern} in {repo} conflicts with:\n" + "\n".join(render_holder(c) for c in r["conflicts"])


def _render_reserved(r: dict) -> str:
    res = r["reservation"]
    verb = "renewed" if r.get("renewed") else "reserved"
    return f"{verb} {res['pattern']} in {res['repo']} ({_kind(res)}, {_expiry(res)}, until {res['expires_at']})"


@click.command()
@click.argument("pattern", required=False)
@click.option("--repo", metavar="PATH", help="Repository. [default: the current directory; with --all: every repo]")
@click.option("--all", "all_", is_flag=True, help="Release every reservation you hold.")
def release(pattern: str | None, repo, all_: bool) -> None:
    """Release PATTERN (a reservation you hold), or all of yours with --all.

    Only the holder can release; to take over someone else's, use reserve --force.

    \b
    Examples:
      relayctl release "src/auth/**"
      relayctl release --all
      relayctl release --all --repo ~/oathkeeper
    """
    s = settings()
    if all_ == (pattern is not None):
        raise click.UsageError("give a PATTERN to release, or --all (not both)")
    params = {"agent": s.require_agent("release"), "pattern": pattern, "all": all_, "repo": repo_path(repo) if (repo or not all_) else None}
    try:
        result = s.call("release", params)
    except NotOwner as exc:
        exc.message += " (or take it over with reserve --force)"
        raise

    def human(r: dict) -> str:
        if not r["released"]:
            return "nothing to release"
        return "\n".join(f"released {x['pattern']} in {x['repo']}" for x in r["released"])

    s.out(result, human)


@click.command()
@click.option("--repo", metavar="PATH", help="Only this repository.")
@click.option("--agent", "holder", metavar="NAME", help="Only reservations held by NAME.")
@click.option("--expired", is_flag=True, help="Include expired reservations.")
def reservations(repo, holder, expired) -> None:
    """List active reservations: pattern, holder, kind, expiry, repo.

    \b
    Examples:
      relayctl reservations
      relayctl reservations --repo . --expired
      relayctl --json reservations --repo ~/oathkeeper
    """
    s = settings()
    result = s.call("reservations", {"repo": repo_path(repo) if repo else None, "agent": holder, "expired": expired})

    def human(rows: list[dict]) -> str:
        if not rows:
            return "no reservations" if expired else "no active reservations"
        return "\n".join(
            f"{clip(r['pattern'], 28):<28} {r['agent']:<16} {_kind(r):<10} {_expiry(r):<18} {visible(r['repo'])}" + (f"  ({clip(r['reason'], 40)})" if r.get("reason") else "")
            for r in rows
        )

    s.out(result, human)
