"""The node procedures' argument Structs: one contract that the node decodes strictly and
the master checks before sending."""

from __future__ import annotations

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


def test_every_struct_belongs_to_a_procedure_the_node_runs() -> None:
    assert set(ARGS) <= set(procedures.PROCEDURES)
    # Every procedure of this module has a Struct; the others belong to their modules.
    untyped = set(procedures.PROCEDURES) - set(ARGS)
    assert untyped == {"config_replicate", "jobs_replicate", "master_info", "master_demote",
                       "master_takeover", "replica_dump", "upload_files"}


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
    ],
)
def test_malformed_arguments_are_refused_by_procedure_and_argument(
    procedure: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParameterError) as excinfo:
        decode_args(procedure, args)
    assert str(excinfo.value) == message
    with pytest.raises(ParameterError, match="^" + message.replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        check_args(procedure, args)


def test_procedures_without_a_struct_are_not_checked_on_the_master() -> None:
    check_args("upload_files", {"anything": object()})


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
