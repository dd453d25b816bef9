"""``move-instance``: Ganeti's option checks and the creation request built from the
source's instance information (no clusters needed)."""

from __future__ import annotations

import pytest

from corral.cli import move_instance
from corral.cli.move_instance import Move


@pytest.mark.parametrize(("argv", "message"), [
    (["a", "b"], "Not enough arguments"),
    (["a", "b", "c"], "Missing source cluster CA file"),
    (["--src-ca-file=/x", "-p", "0", "a", "b", "c"],
     "Number of simultaneous moves must be >= 1"),
    (["--src-ca-file=/x", "-I", "hail", "--dest-primary-node", "n", "a", "b", "c"],
     "Destination node and iallocator options exclude each other"),
    (["--src-ca-file=/x", "--opportunistic-tries", "2", "a", "b", "c"],
     "Opportunistic instance creation can only be used with an iallocator"),
    (["--src-ca-file=/x", "--opportunistic-delay", "3", "a", "b", "c"],
     "Opportunistic delay can only be specified when opportunistic tries are used"),
    (["--src-ca-file=/x", "--dest-instance-name", "z", "a", "b", "c", "d"],
     "The options --dest-instance-name, --dest-primary-node, --dest-secondary-node, "
     "--hypervisor-parameters, --backend-parameters, --os-parameters and --net can only be "
     "used when moving exactly one instance"),
])
def test_wrong_options_exit_2_with_ganetis_message(argv: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        move_instance.main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"move-instance: error: {message}" in err


def test_an_unreachable_cluster_fails_with_exit_1(tmp_path, capsys) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    with pytest.raises(SystemExit) as done:
        move_instance.main([f"--src-ca-file={ca}", "--src-rapi-port=1", "127.0.0.1",
                            "127.0.0.1", "web1"])
    assert done.value.code == 1
    assert "move-instance: error: " in capsys.readouterr().err


INSTANCE = {
    "name": "web1", "config_state": "up", "os": "corral-ext4+default",
    "disk_template": "file", "hypervisor": "fake",
    "disks": [{"size": 1024, "mode": "rw", "name": None, "spindles": None},
              {"size": 512, "mode": "ro", "name": "data", "spindles": 1}],
    "nics": [["nic0", "u1", "192.0.2.7", "aa:00:00:00:00:01", "bridged", "br0", "", None,
              None],
             ["nic1", "u2", None, "aa:00:00:00:00:02", None, None, None, "n-uuid",
              {"name": "net1"}]],
    "be_instance": {"maxmem": 256}, "hv_instance": {}, "os_instance": {"x": "1"},
    "tags": ["a"],
}
PREPARED = {"handshake": [0, "h", "s"], "x509_ca": "X-Ganeti-Signature: s/h\n\n...",
            "x509_key_name": ["k", "h", "s"]}


def test_creation_request_carries_the_instance_and_the_source_values() -> None:
    move = Move("web1", "web2", dest_pnode="node3", compress="zstd",
                beparams={"maxmem": 512}, nics=[{"ip": None}])
    body = move_instance._creation_body(move, INSTANCE, PREPARED)
    assert body["mode"] == "remote-import" and body["__version__"] == 1
    assert body["name"] == "web2" and body["source_instance_name"] == "web1"
    assert body["source_handshake"] == PREPARED["handshake"]
    assert body["source_x509_ca"] == PREPARED["x509_ca"]
    assert body["disks"] == [{"size": 1024, "mode": "rw"},
                             {"size": 512, "mode": "ro", "name": "data", "spindles": 1}]
    assert body["nics"][0] == {"name": "nic0", "ip": None, "mac": "aa:00:00:00:00:01",
                               "mode": "bridged", "link": "br0", "vlan": ""}
    assert body["nics"][1] == {"name": "nic1", "ip": None, "mac": "aa:00:00:00:00:02",
                               "network": "net1"}
    assert body["beparams"] == {"maxmem": 512} and body["osparams"] == {"x": "1"}
    assert body["start"] is True and body["pnode"] == "node3" and "iallocator" not in body
    assert body["compress"] == "zstd" and body["tags"] == ["a"]


def test_more_nic_overrides_than_nics_are_refused() -> None:
    move = Move("web1", "web1", nics=[{}, {}, {}])
    with pytest.raises(Exception, match="Can not create new NICs"):
        move_instance._creation_body(move, INSTANCE, PREPARED)
