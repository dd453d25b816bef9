"""A real noded, called with a valid cluster certificate, keeps every disk path inside
the storage directories it allows, and refuses malformed procedure arguments by name."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from corral.errors import BlockDeviceError, ParameterError
from corral.noded.procedures import STREAM_DISK_PATH
from corral.paths import Paths
from corral.rpc.client import node_client_context
from tests.integration import test_noded
from tests.integration.test_noded import MASTER_IP, Cluster, Master

# The real two-noded cluster of test_noded, with its clean-up.
cluster = test_noded.cluster
master = test_noded.master

pytestmark = pytest.mark.integration

STORAGE = Paths.DEFAULT_FILE_STORAGE_DIR


def _disk(cluster_path: str, size: int = 1, dev_type: str = "file") -> dict[str, Any]:
    return {"uuid": "d1", "index": 0, "dev_type": dev_type, "size": size,
            "logical_id": ["loop", cluster_path]}


async def _stream(cluster: Cluster, cluster_path: str) -> tuple[int, bytes]:
    """GET the disk stream of ``cluster_path`` from the master's noded, presenting the
    master node's own certificate (signed by the cluster CA)."""
    connector = aiohttp.TCPConnector(ssl=node_client_context(cluster.master))
    async with aiohttp.ClientSession(connector=connector) as session, session.get(
            f"https://{MASTER_IP}:{cluster.port}{STREAM_DISK_PATH}",
            params={"path": cluster_path, "dev_type": "file"}) as response:
        return response.status, await response.read()


async def _call(master: Master, procedure: str, args: dict[str, Any]) -> Any:
    """Call the master's noded directly, past the master-side argument check."""
    target = [("node1.test", MASTER_IP, master.store.cluster.noded_port)]
    return (await master.client.call(target, procedure, args, timeout=10))["node1.test"]


async def test_the_disk_stream_serves_no_file_outside_the_storage_dirs(
    cluster: Cluster, master: Master
) -> None:
    ca_key = cluster.master.ca_key.read_bytes()
    passwd = cluster.master.node_path("/etc/passwd")
    passwd.parent.mkdir(parents=True, exist_ok=True)
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\n")
    for cluster_path in ("/var/lib/corral/ca-key.pem", "/etc/passwd",
                         "/var/lib/corral/server-key.pem"):
        status, body = await _stream(cluster, cluster_path)
        assert status != 200, cluster_path
        assert ca_key not in body and b"root:x:0:0" not in body
        assert cluster_path.encode() in body
        assert STORAGE.encode() in body  # the refusal names what is allowed

    # A disk inside the storage dir still streams.
    created = await master.rpc.call([master.master_node], "blockdev_create",
                                    {"disk": _disk(f"{STORAGE}/i/d.disk0")}, timeout=10)
    assert not created["node1.test"].failed, created
    status, body = await _stream(cluster, f"{STORAGE}/i/d.disk0")
    assert status == 200 and len(body) == 1 << 20


async def test_a_symlink_escape_is_not_streamed(cluster: Cluster, master: Master) -> None:
    storage = cluster.master.node_path(STORAGE)
    storage.mkdir(parents=True, exist_ok=True)
    (storage / "leak.disk0").symlink_to(cluster.master.ca_key)
    (storage / "etc").symlink_to(cluster.master.data_dir, target_is_directory=True)
    for cluster_path in (f"{STORAGE}/leak.disk0", f"{STORAGE}/etc/ca-key.pem"):
        status, body = await _stream(cluster, cluster_path)
        assert status != 200, cluster_path
        assert b"PRIVATE KEY" not in body
        assert cluster_path.encode() in body


async def test_blockdev_procedures_touch_nothing_outside_the_storage_dirs(
    cluster: Cluster, master: Master
) -> None:
    ca_key = cluster.master.ca_key
    key = ca_key.read_bytes()
    outside = cluster.master.node_path("/srv/elsewhere/x.disk0")
    for procedure, args in [
        ("blockdev_remove", {"disk": _disk("/var/lib/corral/ca-key.pem")}),
        ("blockdev_grow", {"disk": _disk("/var/lib/corral/ca-key.pem"), "amount": 1}),
        ("blockdev_create", {"disk": _disk("/var/lib/corral/new.disk0")}),
        ("blockdev_create", {"disk": _disk("/srv/elsewhere/x.disk0")}),
        ("blockdev_create", {"disk": _disk("/tmp/x.disk0", dev_type="sharedfile")}),
        ("blockdev_assemble", {"disks": [_disk("/etc/shadow")]}),
    ]:
        result = await _call(master, procedure, args)
        assert isinstance(result.error, BlockDeviceError), (procedure, result)
        assert "outside the storage directories" in str(result.error) or \
            "private directory" in str(result.error) or \
            "system directory" in str(result.error), result.error
    assert ca_key.read_bytes() == key
    assert not outside.exists()
    assert not cluster.master.node_path("/var/lib/corral/new.disk0").exists()
    assert not cluster.master.node_path("/tmp/x.disk0").exists()


async def test_the_allowed_list_is_the_nodes_own(cluster: Cluster, master: Master) -> None:
    cluster.master.file_storage_paths.write_text("/data/disks\n")
    moved = await _call(master, "blockdev_create", {"disk": _disk("/data/disks/i/d.disk0")})
    assert not moved.failed, moved.error
    default = await _call(master, "blockdev_create", {"disk": _disk(f"{STORAGE}/i/d.disk0")})
    assert isinstance(default.error, BlockDeviceError)
    assert "allows: /data/disks" in str(default.error)


@pytest.mark.parametrize(
    ("procedure", "args", "expected"),
    [
        ("blockdev_create", {"disk": 3}, "argument 'disk': expected `object`, got `int`"),
        ("blockdev_create", {}, "argument 'disk' is missing"),
        ("blockdev_grow", {"disk": _disk(f"{STORAGE}/x.disk0"), "amount": True},
         "argument 'amount': expected `int`, got `bool`"),
        ("instance_reboot", {"instance": {"name": "a", "uuid": "u"}, "reboot_type": "gentle"},
         "argument 'reboot_type': invalid enum value 'gentle'"),
        ("instance_start", {"instance": {"name": "a", "uuid": "u", "disks": [{"uuid": 1}]}},
         "argument 'instance': expected `str`, got `int` (at instance.disks[0].uuid)"),
        ("node_info", {"storage_dir": ["/srv"]}, "unknown argument 'storage_dir'"),
        ("blockdev_copy_from", {"disk": _disk("/srv/corral/file-storage/x.disk0"),
                                "source_disk": _disk("/srv/corral/file-storage/x.disk0"),
                                "source_ip": MASTER_IP, "source_port": 0},
         "argument 'source_port': expected `int` >= 1"),
    ],
)
async def test_malformed_arguments_name_the_procedure_and_the_argument(
    cluster: Cluster, master: Master, procedure: str, args: dict[str, Any], expected: str
) -> None:
    for result in (await _call(master, procedure, args),
                   (await master.rpc.call([master.master_node], procedure, args,
                                          timeout=10))["node1.test"]):
        assert isinstance(result.error, ParameterError), result
        assert f"procedure {procedure}: " in str(result.error)
        assert expected in str(result.error)


