"""The node procedures' argument Structs: one contract that the node decodes strictly and
the master checks before sending."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from corral.errors import BlockDeviceError, ParameterError
from corral.masterd.rpc import MasterRpc
from corral.noded import procedures
from corral.objects import Node
from corral.paths import Paths
from corral.rpc.args import (
    ARGS,
    HypervisorsArgs,
    InstanceOsAddArgs,
    OsArgs,
    check_args,
    decode_args,
)
from corral.rpc.protocol import RpcResult


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "node")


def test_every_procedure_the_node_runs_has_a_struct() -> None:
    assert set(ARGS) == set(procedures.PROCEDURES)


@pytest.mark.parametrize("procedure", sorted(procedures.PROCEDURES))
async def test_every_procedure_decodes_its_arguments_before_it_runs(
        paths: Paths, procedure: str) -> None:
    # An argument no procedure takes is refused by name, and nothing runs: no replica,
    # no uploaded file, no master role change touches the node's files.
    with pytest.raises(ParameterError,
                       match=f"^procedure {procedure}: unknown argument 'bogus'; it takes "):
        await procedures.dispatch(paths, procedure, {"bogus": 1})
    assert not paths.root.exists()


def test_defaults_are_what_a_node_assumes_without_the_argument() -> None:
    assert decode_args("instance_list", {}) == HypervisorsArgs(hypervisors=None)
    os_args = decode_args("os_diagnose", {})
    assert isinstance(os_args, OsArgs)
    assert os_args.search_path == list(Paths.DEFAULT_OS_SEARCH_PATH)
    assert os_args.force_variant is False
    add = decode_args("instance_os_add", {"instance": {"name": "a", "uuid": "u"}})
    assert isinstance(add, InstanceOsAddArgs)
    assert (add.reinstall, add.debug, add.instance.name) == (False, 0, "a")


@pytest.mark.parametrize(
    ("procedure", "args", "message"),
    [
        ("instance_shutdown", {"instance": {"name": "a", "uuid": "u"}, "timeout": "soon"},
         "procedure instance_shutdown: argument 'timeout': expected `float`, got `str`"),
        ("instance_info", {"instance": "a"}, "procedure instance_info: argument 'hypervisor'"
         " is missing"),
        ("migration_finish", {"instance": {"name": "a", "uuid": "u"}, "success": 1},
         "procedure migration_finish: argument 'success': expected `bool`, got `int`"),
        ("blockdev_assemble", {"disks": [{"uuid": "d", "index": "0", "dev_type": "file",
                                          "size": 1}]},
         "procedure blockdev_assemble: argument 'disks': expected `int`, got `str` "
         "(at disks[0].index)"),
        ("version", {"verbose": True},
         "procedure version: unknown argument 'verbose'; it takes no arguments"),
        ("os_get", {"name": "debian", "serch_path": []},
         "procedure os_get: unknown argument 'serch_path'; it takes search_path, "
         "force_variant, name"),
        # replication updates (and their parts)
        ("config_replicate", {"snapshot": True, "serial": 2, "upserts": [["node", "u", 1]]},
         "procedure config_replicate: argument 'upserts': expected `array` of length 4, "
         "got 3 (at upserts[0])"),
        ("config_replicate", {"base": 1, "serial": 2, "deletes": ["u", 7]},
         "procedure config_replicate: argument 'deletes': expected `str`, got `int` "
         "(at deletes[1])"),
        ("config_replicate", {"serial": 3, "upserts": []},
         "procedure config_replicate: invalid arguments: a delta needs 'base' (the serial "
         "it applies to); or send a snapshot"),
        ("jobs_replicate", {"snapshot": True, "serial": "2"},
         "procedure jobs_replicate: argument 'serial': expected `int`, got `str`"),
        ("jobs_replicate", {"snapshot": True, "serial": 2, "archive": [[1, "yesterday", "{}"]]},
         "procedure jobs_replicate: argument 'archive': expected `int | null`, got `str` "
         "(at archive[0][1])"),
        ("jobs_replicate", {"snapshot": True, "serial": 2, "session": "s", "part": -1},
         "procedure jobs_replicate: argument 'part': expected `int` >= 0"),
        ("jobs_replicate", {"snapshot": True, "serial": 2, "last": "yes"},
         "procedure jobs_replicate: argument 'last': expected `bool`, got `str`"),
        # master role
        ("master_demote", {"new_master": "node2", "handover_wait": -1},
         "procedure master_demote: argument 'handover_wait': expected `float` >= 0.0"),
        ("master_demote", {"new_master": ""},
         "procedure master_demote: argument 'new_master': expected `str` of length >= 1"),
        ("master_demote", {"handover_wait": "soon"},
         "procedure master_demote: argument 'handover_wait': expected `float`, got `str`"),
        ("master_takeover", {"force": True},
         "procedure master_takeover: unknown argument 'force'; it takes no arguments"),
        # ancillary files
        ("upload_files", {"files": [{"name": "ca_cert"}]},
         "procedure upload_files: argument 'files': object missing required field `data` "
         "(at files[0])"),
        ("upload_files", {"files": [{"name": "ca_cert", "data": "%%"}]},
         "procedure upload_files: argument 'files': invalid base64 encoded string "
         "(at files[0].data)"),
        ("upload_files", {"files": [{"path": "/etc/motd", "data": "", "mode": 0o10644}]},
         "procedure upload_files: argument 'files': expected `int` <= 4095 "
         "(at files[0].mode)"),
        ("upload_files", {"files": [{"path": "/etc/motd", "data": "", "mode": True}]},
         "procedure upload_files: argument 'files': expected `int`, got `bool` "
         "(at files[0].mode)"),
        ("upload_files", {"files": [{"data": ""}]},
         "procedure upload_files: argument 'files': a file needs 'name' (a known file) or "
         "'path' (a file of the user file list) (at files[0])"),
        ("upload_files", {"files": [{"name": "ca_cert", "path": "/etc/motd", "data": ""}]},
         "procedure upload_files: argument 'files': a file has both 'name' ('ca_cert') and "
         "'path' ('/etc/motd'); it is one or the other (at files[0])"),
        ("upload_files", {"files": {"name": "ca_cert", "data": ""}},
         "procedure upload_files: argument 'files': expected `array`, got `object`"),
    ],
)
def test_malformed_arguments_are_refused_by_procedure_and_argument(
    procedure: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParameterError) as excinfo:
        decode_args(procedure, args)
    assert str(excinfo.value) == message
    with pytest.raises(ParameterError, match="^" + re.escape(message)):
        check_args(procedure, args)


def test_a_procedure_the_contract_does_not_know_is_left_to_the_node() -> None:
    check_args("no_such_procedure", {"anything": object()})


async def test_a_malformed_update_changes_nothing_on_the_node(paths: Paths) -> None:
    paths.data_dir.mkdir(parents=True)
    # Refused naming the argument, before anything is staged or applied.
    with pytest.raises(ParameterError, match="procedure jobs_replicate: argument 'serial'"):
        await procedures.dispatch(paths, "jobs_replicate", {
            "snapshot": True, "serial": "2", "jobs": [[1, "{}"]]})
    assert not paths.jobs_replica.exists()
    # A file without contents used to be written empty.
    with pytest.raises(ParameterError, match="missing required field `data`"):
        await procedures.dispatch(paths, "upload_files", {"files": [{"name": "ca_cert"}]})
    assert not paths.ca_cert.exists()
    assert await procedures.dispatch(paths, "upload_files", {"files": [
        {"name": "ca_cert", "data": "Q0EK", "mode": 0o600}]}) == ["ca_cert"]
    assert paths.ca_cert.read_bytes() == b"CA\n"


async def test_dispatch_decodes_before_the_procedure_runs(paths: Paths) -> None:
    assert await procedures.dispatch(paths, "instance_list", {}) == []
    with pytest.raises(ParameterError, match=r"instance_list: argument 'hypervisors': "
                                             r"expected `array \| null`, got `str`"):
        await procedures.dispatch(paths, "instance_list", {"hypervisors": "fake"})
    with pytest.raises(BlockDeviceError, match=r"'/etc/ssh/key', below a system directory"):
        await procedures.dispatch(paths, "blockdev_create", {"disk": {
            "uuid": "d", "index": 0, "dev_type": "file", "size": 1,
            "logical_id": ["loop", "/etc/ssh/key"]}})
    assert not paths.root.exists()


async def test_the_disk_stream_is_confined_like_every_disk_path(paths: Paths) -> None:
    paths.ensure_dirs()
    paths.ca_key.write_text("secret")
    with pytest.raises(BlockDeviceError, match="private directory"):
        await procedures.open_disk_stream(paths, {"path": "/var/lib/corral/ca-key.pem"})
    with pytest.raises(ParameterError, match=r"\?path="):
        await procedures.open_disk_stream(paths, {})


class _RecordingClient:
    """Stands for RpcClient: records which nodes were contacted with what."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def call(self, targets: Any, procedure: str, args: Any, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        results = {}
        for name, _ip, _port in targets:
            node_args = args(name) if callable(args) else args
            self.sent.append((name, dict(node_args)))
            results[name] = RpcResult(name, payload="ok")
        return results


async def test_the_master_does_not_send_what_the_node_would_refuse(paths: Paths) -> None:
    client = _RecordingClient()
    store = SimpleNamespace(cluster=SimpleNamespace(noded_port=1811))
    rpc = MasterRpc(store, paths, client)  # type: ignore[arg-type]
    good = Node(name="good", primary_ip="127.0.1.1", group="g")
    bad = Node(name="bad", primary_ip="127.0.1.2", group="g")

    def per_node(node: Node) -> dict[str, Any]:
        return {"instance": "a", "hypervisor": "fake" if node is good else 7}

    results = await rpc.call([good, bad], "instance_info", per_node)
    assert client.sent == [("good", {"instance": "a", "hypervisor": "fake"})]
    assert results["good"].payload == "ok"
    assert isinstance(results["bad"].error, ParameterError)
    assert "procedure instance_info: argument 'hypervisor'" in str(results["bad"].error)

    client.sent.clear()
    refused = await rpc.call([good], "blockdev_grow", {"disk": {}, "amount": 1})
    assert client.sent == []
    assert "procedure blockdev_grow: argument 'disk'" in str(refused["good"].error)

    # Replication and file uploads are checked by the same contract.
    refused = await rpc.call([good], "config_replicate", {
        "base": 1, "serial": 2, "upserts": [["node", "u", "2", "{}"]]})
    assert client.sent == []
    assert "procedure config_replicate: argument 'upserts'" in str(refused["good"].error)
    refused = await rpc.call([good], "upload_files", {"files": [
        {"name": "ca_cert", "data": "Q0EK", "mode": 0o644, "candidates_only": False}]})
    assert client.sent == []
    assert "unknown field `candidates_only`" in str(refused["good"].error)
    done = await rpc.call([good], "jobs_replicate", {"serial_only": True})
    assert client.sent == [("good", {"serial_only": True})] and not done["good"].failed
