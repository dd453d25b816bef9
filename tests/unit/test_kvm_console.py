"""kvm consoles without qemu: Ganeti's console dict, the VNC password file, the node
daemon's relay between a WebSocket and a serial socket, the master's network ports and
the ssh console's host and port, and the ``console connection`` line of ``info``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from corral.cli.gnt_instance_query import vnc_console_info
from corral.errors import HypervisorError, OpPrereqError
from corral.hypervisor.kvm.cmdline import build_command
from corral.hypervisor.kvm.console import console_info, vnc_password
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.noded.console import relay_console
from corral.objects import Node
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from tests.unit.instance_helpers import Cluster, open_cluster


def _spec(**hv: Any) -> InstanceSpec:
    params = {"serial_console": True, "vnc_bind_address": "", "vnc_password_file": ""}
    params.update(hv)
    return InstanceSpec(name="vm1", uuid="u1", hypervisor="kvm", hvparams=params,
                        network_port=11000)


def test_console_dict_serial_first_then_vnc_then_a_message(tmp_path: Path) -> None:
    runtime = InstanceRuntime(Paths(tmp_path), "vm1")
    serial = console_info(_spec(vnc_bind_address="0.0.0.0"), runtime)
    assert serial == {"instance": "vm1", "kind": "ssh", "user": "root", "command": [
        "socat", "STDIO,raw,echo=0,escape=0x1d", f"UNIX-CONNECT:{runtime.serial_socket}"]}
    assert console_info(_spec(serial_console=False, vnc_bind_address="127.0.0.1"),
                        runtime) == {"instance": "vm1", "kind": "vnc", "host": "127.0.0.1",
                                     "port": 11000, "display": 5100}
    # A unix socket directory is no address a viewer can reach: a message.
    message = console_info(_spec(serial_console=False, vnc_bind_address="/run/vnc"), runtime)
    assert message["kind"] == "msg"
    assert set(message) == {"instance", "kind", "message"}


def test_vnc_password_is_the_first_line_and_a_missing_file_is_named(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    spec = _spec(vnc_bind_address="127.0.0.1", vnc_password_file="/etc/vnc-pass")
    with pytest.raises(HypervisorError, match=r"/etc/vnc-pass.*vnc_password_file"):
        vnc_password(paths, spec)
    where = paths.node_path("/etc/vnc-pass")  # the node's copy, below its root
    where.parent.mkdir(parents=True)
    where.write_text("")
    with pytest.raises(HypervisorError, match="is empty"):
        vnc_password(paths, spec)
    where.write_text("s3cret \nignored\n")
    assert vnc_password(paths, spec) == "s3cret"
    # No VNC, or VNC on a unix socket: no password asked for.
    assert vnc_password(paths, _spec(vnc_password_file="/etc/vnc-pass")) is None
    assert vnc_password(paths, _spec(vnc_bind_address="/run/vnc",
                                     vnc_password_file="/etc/missing")) is None


# -- the node daemon's relay ------------------------------------------------------------


@pytest.fixture
async def serial(tmp_path: Path) -> AsyncIterator[tuple[Path, list[bytes]]]:
    """A unix socket standing in for qemu's serial console: it greets, then echoes
    upper-cased what it gets (and records it)."""
    received: list[bytes] = []

    async def guest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"tiny# ")
        await writer.drain()
        while data := await reader.read(100):
            received.append(data)
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    path = tmp_path / "serial.sock"
    server = await asyncio.start_unix_server(guest, str(path))
    try:
        yield path, received
    finally:
        server.close()
        await server.wait_closed()


async def test_relay_carries_both_ways_and_the_guest_keeps_its_socket(
        serial: tuple[Path, list[bytes]]) -> None:
    path, received = serial

    async def handler(request: web.Request) -> web.StreamResponse:
        return await relay_console(request, path, "vm1")

    app = web.Application()
    app.router.add_get("/console", handler)
    server = TestServer(app)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            for attempt in (b"uptime\r", b"again\r"):  # a second attach after the first
                async with session.ws_connect(server.make_url("/console")) as ws:
                    shown = b""
                    while b"#" not in shown:
                        shown += await ws.receive_bytes(timeout=5)
                    await ws.send_bytes(attempt)
                    assert await ws.receive_bytes(timeout=5) == attempt.upper()
        assert b"".join(received) == b"uptime\ragain\r"
    finally:
        await server.close()


# -- the master -------------------------------------------------------------------------


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def _kvm(cl: Cluster, name: str) -> None:
    cl.create(name, hypervisor="kvm", disk_template="diskless", disks=[], nics=[],
              start=False, no_install=True)


def test_kvm_instances_get_network_ports_and_reuse_freed_ones(cl: Cluster) -> None:
    cl.set_cluster(enabled_hypervisors=["fake", "kvm"],
                   enabled_disk_templates=["file", "diskless"])
    _kvm(cl, "vm1")
    _kvm(cl, "vm2")
    cl.create("fake1", disk_template="diskless", disks=[], nics=[], start=False,
              no_install=True)
    ports = {i.name: i.network_port for i in cl.store.all("instance")}
    assert ports == {"vm1": 11000, "vm2": 11001, "fake1": None}
    cl.run("OP_INSTANCE_REMOVE", instance_name="vm1")
    _kvm(cl, "vm3")
    assert cl.store.get("instance", "vm3").network_port == 11000


def test_ssh_console_names_the_primary_node_and_its_ssh_port(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[], nics=[])
    group = cl.store.all("nodegroup")[0]
    with cl.store.transaction() as txn:
        g = txn.get("nodegroup", group.uuid)
        g.ndparams = {"ssh_port": 2222}
        txn.update(g)

    def console(node: Node, args: Any) -> dict[str, Any]:
        return {"instance": "web1", "kind": "ssh", "user": "root",
                "command": ["socat", "STDIO", "UNIX-CONNECT:/x"]}

    cl.rpc.handlers["instance_console"] = console
    answer = cl.run("OP_INSTANCE_CONSOLE", instance_name="web1")
    assert (answer["host"], answer["port"]) == ("node1", 2222)


def test_info_console_connection_line_is_ganetis() -> None:
    base = {"pnode": "node2", "network_port": 11003}
    assert vnc_console_info({**base, "hv_actual": {"vnc_bind_address": ""}}) is None
    assert vnc_console_info({**base, "hv_actual": {"vnc_bind_address": "0.0.0.0"}}) == (
        "vnc to node2:11003 (display 5103)")
    assert vnc_console_info({**base, "hv_actual": {"vnc_bind_address": "192.0.2.5"}}) == (
        "vnc to 192.0.2.5:11003 (node node2) (display 5103)")
    assert vnc_console_info({**base, "hv_actual": {"vnc_bind_address": "/run/vnc"}}) == (
        "vnc to node2:/run/vnc")


def _vnc(tmp_path: Path, **hv: Any) -> list[str]:
    spec = _spec(serial_console=False, **hv)
    command = build_command(spec, [], InstanceRuntime(Paths(tmp_path), "vm1"),
                            binary="/usr/bin/qemu-system-x86_64")
    objects = [command[i + 1] for i, arg in enumerate(command) if arg == "-object"
               and "vnctls0" in command[i + 1]]
    return [*objects, command[command.index("-vnc") + 1]]


def test_vnc_command_line_display_password_and_tls(tmp_path: Path) -> None:
    assert _vnc(tmp_path, vnc_bind_address="0.0.0.0") == [":5100"]
    assert _vnc(tmp_path, vnc_bind_address="127.0.0.1", vnc_password_file="/p") == [
        "127.0.0.1:5100,password=on"]
    assert _vnc(tmp_path, vnc_bind_address="127.0.0.1", vnc_tls=True) == [
        "tls-creds-anon,id=vnctls0,endpoint=server", "127.0.0.1:5100,tls-creds=vnctls0"]
    assert _vnc(tmp_path, vnc_bind_address="127.0.0.1", vnc_tls=True,
                vnc_x509_path="/etc/x509", vnc_x509_verify=True) == [
        "tls-creds-x509,id=vnctls0,endpoint=server,dir=/etc/x509,verify-peer=yes",
        "127.0.0.1:5100,tls-creds=vnctls0"]


def test_console_of_an_instance_on_an_offline_node_is_refused(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[], nics=[])
    cl.set_node("node1", offline=True)
    with pytest.raises(OpPrereqError, match="console of web1: node node1 is offline"):
        cl.run("OP_INSTANCE_CONSOLE", instance_name="web1")
