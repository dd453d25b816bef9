"""Single- and dual-homed clusters: which secondary IPs a node may get."""

from __future__ import annotations

import pytest

from corral.cmdlib.node_homing import check_secondary_change
from corral.errors import ParameterError
from corral.objects import Node

MASTER = Node(name="m", primary_ip="192.0.2.1", group="g")
OTHER = Node(name="n2", primary_ip="192.0.2.2", group="g")


def test_a_secondary_ip_on_a_single_homed_cluster_is_refused() -> None:
    warnings: list[str] = []
    with pytest.raises(ParameterError, match=r"single-homed.*requires the --force option"):
        check_secondary_change(MASTER, OTHER, "198.51.100.2", force=False, warn=warnings.append)
    with pytest.raises(ParameterError, match="single-homed"):
        check_secondary_change(MASTER, OTHER, "198.51.100.2", force=True, warn=warnings.append)
    with pytest.raises(ParameterError, match="single-homed"):
        check_secondary_change(MASTER, MASTER, "198.51.100.1", force=False,
                               warn=warnings.append)
    assert not warnings
    check_secondary_change(MASTER, OTHER, OTHER.primary_ip, force=False, warn=warnings.append)
    check_secondary_change(MASTER, MASTER, "198.51.100.1", force=True, warn=warnings.append)
    assert warnings and "multi-homed" in warnings[0]


def test_the_primary_ip_as_secondary_on_a_dual_homed_cluster_is_refused() -> None:
    master = Node(name="m", primary_ip="192.0.2.1", secondary_ip="198.51.100.1", group="g")
    with pytest.raises(ParameterError, match="multi-homed"):
        check_secondary_change(master, OTHER, OTHER.primary_ip, force=True, warn=print)
    check_secondary_change(master, OTHER, "198.51.100.2", force=False, warn=print)
