"""The per-file summary of the Placement gabbi run, at the end of pytest's report."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per gabbi file that ran: tests passed, failed, skipped, seconds."""
    module = sys.modules.get("tests.placement_gabbi.test_gabbi")
    results = getattr(module, "RESULTS", None)
    if not results:
        return
    terminalreporter.section("Placement gabbi files on corral's /placement/")
    for result in results:
        terminalreporter.write_line(result.line())
