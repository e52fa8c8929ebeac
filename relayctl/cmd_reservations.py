"""reserve, release, reservations."""

from __future__ import annotations

import click

from . import actions
from .context import settings
from .options import declared


@click.command()
@click.argument("pattern")
@declared("reserve", "--repo", metavar="PATH", help="Repository the pattern is relative to. [default: the current directory]")
@declared("reserve", "--shared", help="Shared: other shared holders of overlapping patterns are fine.")
@declared("reserve", "--ttl", show_default=True, metavar="DURATION", help="How long it holds, e.g. 30m, 2h.")
@declared("reserve", "--reason", metavar="TEXT", help="Why, for whoever runs into it.")
@declared("reserve", "--force", help="Take it even when others hold overlapping patterns; and to reserve everything (**, * at the top) or for longer than a day.")
@declared("reserve", "--check", help="Only report conflicts (exit 1 if any); reserve nothing.")
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
    actions.reserve(settings(), pattern, repo, shared, ttl, reason, force, check)


@click.command()
@click.argument("pattern", required=False)
@declared("release", "--repo", metavar="PATH", help="Repository. [default: the current directory; with --all: every repo]")
@declared("release", "--all", help="Release every reservation you hold.")
def release(pattern: str | None, repo, all_: bool) -> None:
    """Release PATTERN (a reservation you hold), or all of yours with --all.

    Only the holder can release; to take over someone else's, use reserve --force.

    \b
    Examples:
      relayctl release "src/auth/**"
      relayctl release --all
      relayctl release --all --repo ~/oathkeeper
    """
    actions.release(settings(), pattern, repo, all_)


@click.command()
@declared("reservations", "--repo", metavar="PATH", help="Only this repository.")
@declared("reservations", "--agent", metavar="NAME", help="Only reservations held by NAME.")
@declared("reservations", "--expired", help="Include expired reservations.")
def reservations(repo, holder, expired) -> None:
    """List active reservations: pattern, holder, kind, expiry, repo.

    \b
    Examples:
      relayctl reservations
      relayctl reservations --repo . --expired
      relayctl --json reservations --repo ~/oathkeeper
    """
    actions.reservations(settings(), repo, holder, expired)
