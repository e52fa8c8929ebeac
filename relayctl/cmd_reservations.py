"""reserve, release, reservations, handoff."""

from __future__ import annotations

import click

from relayd.errors import UsageError

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


@click.command()
@click.argument("to", metavar="AGENT")
@click.argument("words", nargs=-1, required=True, metavar="[PATTERN]... MESSAGE")
@click.option("--all", "all_", is_flag=True, help="Hand over every reservation you hold in the repository.")
@click.option("--repo", metavar="PATH", help="Repository the patterns are in. [default: the current directory]")
@click.option("--thread", metavar="ID", help="Thread of the brief, e.g. the ticket.")
@click.option("--ttl", metavar="DURATION", help="A new expiry from now for each reservation. [default: each keeps its own]")
def handoff(to: str, words: tuple[str, ...], all_: bool, repo, thread, ttl) -> None:
    """Hand your work to AGENT: your reservations of PATTERN (or --all) move to AGENT in
    one step, and AGENT gets MESSAGE as the brief, with the list of what it now holds.

    The reservations keep their patterns, kinds and expiry (or --ttl from now); nobody
    else can take them in between. After it, the pre-commit guard refuses your own
    commits on those paths, naming the handoff, and accepts AGENT's. MESSAGE is the last
    argument ('-' reads it from stdin); track the brief with `relayctl track ID`, or wait
    until AGENT has read it with --wait on a send. Refused, with nothing moved: an unknown
    or archived AGENT, a pattern you do not hold.

    \b
    Examples:
      relayctl handoff coder "src/auth/**" "Auth is yours: login works, logout is half done" --thread auth
      relayctl handoff reviewer --all "Everything in this repo is yours now"
    """
    patterns, message = list(words[:-1]), words[-1]
    if all_ and patterns:
        raise UsageError("give the patterns to hand over, or --all (not both)")
    if not all_ and not patterns:
        raise UsageError("name the patterns to hand over before the message, or --all: relayctl handoff AGENT PATTERN... MESSAGE")
    actions.handoff(settings(), to, patterns, message, all_, repo, thread, ttl)
