"""gnt-network's checks that need no cluster, and its info layout."""

from __future__ import annotations

from click.testing import CliRunner

from corral.cli.gnt_network import cli, format_network_info


def test_add_without_network_says_which_option_is_missing() -> None:
    result = CliRunner().invoke(cli, ["add", "net-c"], prog_name="gnt-network")
    assert result.exit_code == 1
    assert "The --network option must be given" in result.output


def test_info_layout_is_ganeti_s() -> None:
    row = {"name": "net-a", "uuid": "u-1", "serial_no": 1, "network": "10.99.0.0/29",
           "gateway": "10.99.0.1", "network6": None, "gateway6": None, "mac_prefix": None,
           "free_count": 4, "map": "XX...X.X",
           "external_reservations": "10.99.0.0, 10.99.0.1, 10.99.0.5, 10.99.0.7",
           "group_list": [["default", "bridged", "br0", ""]]}
    text = format_network_info(row, [("web1", ["0:10.99.0.2"])])
    assert text.splitlines() == [
        "Network name: net-a", "UUID: u-1", "Serial number: 1", "  Subnet: 10.99.0.0/29",
        "  Gateway: 10.99.0.1", "  IPv6 Subnet: None", "  IPv6 Gateway: None",
        "  Mac Prefix: None", "  Size: 8", "  Free: 4 (50.00%)", "  Usage map:",
        f"        0 {'XX...X.X':<64} 63", "         (X) used    (.) free",
        "  externally reserved IPs:", "    10.99.0.0, 10.99.0.1, 10.99.0.5, 10.99.0.7",
        "  connected to node groups:", "    default (mode:bridged link:br0 vlan:)",
        "  used by 1 instances:", "    web1: 0:10.99.0.2"]
