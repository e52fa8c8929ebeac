"""Torture suite fixtures: how many rounds, and the summary line at the end of the run."""

from __future__ import annotations

import os

import pytest

from support.torture_checker import TOTALS


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--long")) or os.environ.get("RELAY_TORTURE_LONG", "") not in ("", "0")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if TOTALS["scenarios"]:
        terminalreporter.write_line(
            f"torture summary: {TOTALS['scenarios']} checked runs, {TOTALS['acknowledged']} acknowledged sends, "
            f"{TOTALS['lost']} lost, {TOTALS['duplicated']} duplicated, {TOTALS['corrupt']} corrupt, {TOTALS['reordered']} out of order"
        )


def pytest_collection_modifyitems(config, items) -> None:
    """Long runs take minutes per scenario: lift the suite's per-test timeout for them."""
    if config.getoption("--long") or os.environ.get("RELAY_TORTURE_LONG", "") not in ("", "0"):
        here = os.path.dirname(__file__)
        for item in items:
            if str(item.fspath).startswith(here):
                item.add_marker(pytest.mark.timeout(1800))
