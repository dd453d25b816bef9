"""Every command-line tool starts as a client: ``--help`` of the tool and of each of
its commands loads nothing of the master's machinery (see tests/startup_probe.py).

A tool pays at every start for what it imports: cmdlib, the job queue or pyparsing
cost 0.1-0.6 s each time a script calls gnt-instance in a loop, msgspec 10 ms. What a command
needs only when it runs (bootstrap for ``gnt-cluster init``, failover for
``master-failover``, the confd client once a query is sent) it imports then.
"""

from __future__ import annotations

import pytest

from tests.startup_probe import (
    CONFD_CODEC,
    DAEMON_CONTROL,
    edge_entry_points,
    outside_client_side,
    probe,
)

EDGES = edge_entry_points()


def test_every_tool_is_checked() -> None:
    assert {"gnt-cluster", "gnt-instance", "gnt-node", "gnt-group", "gnt-job", "gnt-debug",
            "gnt-filter", "gnt-os", "gnt-network", "gnt-backup", "gnt-storage",
            "corral-daemons", "corral-confd-query", "hbal", "hspace", "hail", "hinfo",
            "hcheck", "hscan"} <= set(EDGES)


@pytest.mark.parametrize("tool", sorted(EDGES))
def test_help_of_a_tool_and_its_commands_loads_client_side_modules_only(tool: str) -> None:
    found = probe(EDGES[tool], [["--help"], "*"])
    # every help answered (exit 0) and printed something
    assert all(code in (0, None) for code in found.exits), found.exits
    assert all(size > 0 for size in found.output_sizes), found.output_sizes
    extra = DAEMON_CONTROL if tool == "corral-daemons" else ()
    libraries = CONFD_CODEC if tool == "corral-confd-query" else ()
    assert outside_client_side(found.modules, extra, libraries) == []


def test_the_check_names_what_a_daemon_loads() -> None:
    # the master daemon's --help loads its machinery: the check must say so
    found = probe("corral.masterd.daemon:main", [["--help"]])
    outside = outside_client_side(found.modules)
    assert "asyncio" in outside
    assert any(m.startswith("corral.cmdlib") for m in outside)
    assert "corral.jobs.queue" in outside
    assert "msgspec" in outside


def test_a_text_filter_loads_the_grammar_when_given() -> None:
    # the query grammar is not at start, but a command given a filter still parses it
    # (here against no cluster: the filter is refused or parsed before connecting)
    found = probe("corral.cli.gnt_job:main", [["list", "--filter", "status == 1 and"]])
    assert "corral.qlang.grammar" in found.modules
    assert found.exits == [1]
