"""guard install | uninstall | check: reservations enforced at commit (relayd.guard)."""

from __future__ import annotations

import sys

import click

from .context import settings

HELP = """A git pre-commit hook that refuses a commit touching another agent's exclusive
reservation.

The hook reads the reservations straight from the store (relayd need not run; per
repository it keeps an index in the store's guard/ that is only a cache, rebuilt whenever a
reservation changed) and refuses a commit when a staged path (added, changed, deleted, either side of a rename) lies inside an
active exclusive reservation of the same repository held by an agent other than the
committer, who is RELAY_AGENT (then OVLD_ROLE). Matching follows the rules of
`relayctl reserve`. The refusal names each holder, pattern and expiry.

A pre-commit hook that is already there keeps running first (it is moved to
pre-commit.relay-chained, and run as if still in its place, as husky 9 needs); `guard
uninstall` puts it back. A hook committed to the repository (husky 5-8's .husky/pre-commit),
a hooks directory git would not ignore, or a core.hooksPath outside the repository is
refused: relay never writes where git tracks files or other repositories read hooks. For a
committed hook the refusal gives the line to add to it instead (`relayctl guard check`).

The hook outlives relay: once the Python that installed it is gone, commits go through with
one line saying the guard is not active and how to remove it. To commit past the guard
once: git commit --no-verify.

\b
Examples:
  relayctl guard install                      # the repository of the current directory
  relayctl guard install --repo ~/oathkeeper
  RELAY_AGENT=inferno relayctl guard check    # would the staged changes pass?
  relayctl guard uninstall --repo ~/oathkeeper
"""

_repo = click.option("--repo", metavar="DIR", help="A directory inside the git work tree. [default: the current directory]")


@click.group(help=HELP)
def guard() -> None:
    pass


@guard.command()
@_repo
def install(repo: str | None) -> None:
    """Install the guard as the repository's pre-commit hook (again: rewrites it)."""
    # deferred imports: `relayctl --help` loads every command module; the guard loads only when a
    # guard command runs
    from relayd.guard import install as install_hook

    s = settings()
    result = install_hook(repo, s.dir)

    def human(r: dict) -> str:
        lines = [f"guard installed: {r['hook']} (reservations from {r['store']})"]
        if r["chained"]:
            lines.append(f"the pre-commit hook that was there runs first: {r['chained']}")
        lines.append("bypass it for one commit with: git commit --no-verify")
        return "\n".join(lines)

    s.out(result, human)


@guard.command()
@_repo
def uninstall(repo: str | None) -> None:
    """Remove the guard; the pre-commit hook it chained becomes the hook again."""
    from relayd.guard import uninstall as uninstall_hook

    s = settings()
    result = uninstall_hook(repo)
    s.out(result, lambda r: f"guard removed: {r['removed']}" + (" (the chained hook is back in its place)" if r["restored"] else ""))


@guard.command()
@_repo
def check(repo: str | None) -> None:
    """Check the staged changes now, as the hook would (exit 1 if it would refuse)."""
    from relayd.guard import check as check_staged, repository

    s = settings()
    refused = check_staged(repository(repo), s.dir, s.agent)
    if refused:
        click.echo(refused, err=True)
        sys.exit(1)
    s.note("the guard lets this commit through")
