"""A remote import and a remote export meeting: two clusters' logical units in one
process, their node daemons' real procedures, the real transport (TLS with the move
keys on loopback addresses) and file disks; the data arrives intact and the keys are gone."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib import move_export
from corral.cmdlib.common import instance_spec
from corral.cmdlib.move_checks import check_remote_export
from corral.errors import CorralError
from corral.noded import move_keys
from corral.opcodes import op_from_dict
from corral.paths import Paths
from corral.x509 import moves
from tests.unit.instance_helpers import Cluster, open_cluster
from tests.unit.lu_helpers import JobCtx

SECRET = "f00dfeedf00dfeedf00dfeedf00dfeedf00dfeed"


def _cluster(tmp_path: Path, net: int) -> Iterator[Cluster]:
    tmp_path.mkdir()
    for cl in open_cluster(tmp_path):
        cl.ctx.paths = Paths(tmp_path / "master")
        cl.ctx.paths.ensure_dirs()
        cl.ctx.paths.cluster_domain_secret.write_text(SECRET + "\n")
        names = [n.name for n in cl.store.all("node")]
        with cl.store.transaction() as txn:
            for number, name in enumerate(names, 1):
                node = txn.get("node", name)
                node.primary_ip = f"127.0.{net}.{number}"
                txn.update(node)
        yield cl


@pytest.fixture
def src(tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(tmp_path / "src", 5)


@pytest.fixture
def dst(tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(tmp_path / "dst", 6)


def _disk_file(cl: Cluster, node: str, instance: str) -> Path:
    inst = cl.store.get("instance", instance)
    disk = cl.store.get("disk", inst.disks[0])
    return cl.rpc.nodes.paths(node).node_path(disk.logical_id[1])


class _ExportLU:
    """What send_disks needs of the export logical unit."""

    def __init__(self, cl: Cluster, job: JobCtx) -> None:
        self.master = cl.ctx
        self.feedback = job.feedback


async def _move(src: Cluster, dst: Cluster, compression: str,
                tamper: Any = None) -> tuple[JobCtx, JobCtx, Any]:
    prep = await src.processor.execute(op_from_dict({
        "OP_ID": "OP_BACKUP_PREPARE", "instance_name": "web1", "mode": "remote"}), JobCtx())
    import_job, export_job = JobCtx(), JobCtx()
    create = asyncio.create_task(dst.processor.execute(op_from_dict({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1", "mode": "remote-import",
        "disk_template": "file", "disks": [{"size": 8}], "nics": [], "pnode": "node2",
        "no_install": True, "start": False, "compress": compression,
        "source_handshake": prep["handshake"], "source_x509_ca": prep["x509_ca"],
        "source_instance_name": "web1"}), import_job))
    info = None
    for _ in range(400):
        info = next((m for m in import_job.log if isinstance(m, dict)), None)
        if info is not None or create.done():
            break
        await asyncio.sleep(0.05)
    assert info is not None, import_job.log
    if tamper is not None:
        info = tamper(info)
    inst = src.store.get("instance", "web1")
    lu: Any = _ExportLU(src, export_job)
    node = src.store.get("node", inst.primary_node)
    spec = instance_spec(src.store, inst, node)
    # what the export's prerequisites check first
    target = check_remote_export(SECRET, "web1", 1, prep["x509_key_name"], info["x509_ca"],
                                 info["disks"])
    try:
        results: Any = await move_export.send_disks(lu, node, spec, target, compression)
    except CorralError as err:
        results = err
    try:
        await create
    except CorralError as err:
        return import_job, export_job, (results, err)
    return import_job, export_job, (results, None)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_disk_moves_intact_and_both_keys_are_removed(src: Cluster, dst: Cluster,
                                                       compression: str) -> None:
    src.create(disks=[{"size": 8}], no_install=True, start=False, os_type=None)
    data = os.urandom(3 << 20) + bytes(5 << 20)
    _disk_file(src, "node1", "web1").write_bytes(data)
    import_job, export_job, (results, error) = asyncio.run(_move(src, dst, compression))
    assert error is None, import_job.log
    assert results == [True]
    got = _disk_file(dst, "node2", "web1").read_bytes()
    assert got == data, (import_job.log, export_job.log, len(got))
    assert dst.store.get("instance", "web1").disk_template == "file"
    for cl in (src, dst):
        for node in ("node1", "node2"):
            assert move_keys.list_keys(cl.rpc.nodes.paths(node)) == []
    assert any("Disk 0 finished receiving data" in str(m) for m in import_job.log)


def test_a_redirected_destination_is_refused_before_any_data(src: Cluster,
                                                             dst: Cluster) -> None:
    src.create(disks=[{"size": 8}], no_install=True, start=False, os_type=None)

    def redirect(info: dict[str, Any]) -> dict[str, Any]:
        host, port, magic, digest, salt = info["disks"][0]
        return {**info, "disks": [[host, port + 1, magic, digest, salt]]}

    with pytest.raises(moves.MoveCertificateError, match="disk 0: HMAC is wrong"):
        asyncio.run(_move(src, dst, "none", tamper=redirect))
