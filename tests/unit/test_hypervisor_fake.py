"""The fake hypervisor: instances as state files that survive a node daemon restart."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral.errors import HypervisorError, ParameterError
from corral.hypervisor import HYPERVISOR_NAMES, Hypervisor, get_hypervisor
from corral.hypervisor.fake import FakeHypervisor
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from tests.unit.loop_helpers import ticks_while

# MemTotal 8192 MiB, MemAvailable 4096 MiB.
MEMINFO = """\
MemTotal:        8388608 kB
MemFree:         1048576 kB
MemAvailable:    4194304 kB
Buffers:          102400 kB
Cached:          2097152 kB
"""


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path)


@pytest.fixture
def meminfo(tmp_path: Path) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    return path


@pytest.fixture
def hv(paths: Paths, meminfo: Path) -> FakeHypervisor:
    return FakeHypervisor(paths, meminfo=meminfo)


def spec(name: str = "web1.example.com", maxmem: Any = 512, vcpus: int = 2) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        uuid=f"uuid-{name}",
        os="debian+default",
        beparams={"maxmem": maxmem, "minmem": 128, "vcpus": vcpus},
        disk_template="file",
    )


def state_dir(paths: Paths) -> Path:
    return paths.hypervisor_state_dir / "fake"


# -- registry ----------------------------------------------------------------------


def test_public_surface() -> None:
    import corral.hypervisor

    assert sorted(corral.hypervisor.__all__) == ["HYPERVISOR_NAMES", "Hypervisor", "get_hypervisor"]


def test_get_hypervisor_knows_fake(paths: Paths) -> None:
    assert "fake" in HYPERVISOR_NAMES
    hv = get_hypervisor("fake", paths)
    assert isinstance(hv, Hypervisor)
    assert hv.name == "fake"


def test_get_hypervisor_refuses_unknown_name_listing_known(paths: Paths) -> None:
    with pytest.raises(HypervisorError, match=r"unknown hypervisor 'xen-pvm'.*fake"):
        get_hypervisor("xen-pvm", paths)


async def test_default_node_info_reads_the_real_node(paths: Paths) -> None:
    info = await get_hypervisor("fake", paths).node_info()
    assert info["memory_total"] > 0
    assert 0 <= info["memory_free"] <= info["memory_total"]
    assert info["memory_hv"] == 0
    assert info["cpu_count"] == (os.cpu_count() or 1)


# -- start / stop / list / info ----------------------------------------------------


async def test_start_records_state_and_lists_instance(hv: FakeHypervisor, paths: Paths) -> None:
    assert await hv.list_instances() == []
    await hv.start(spec(), ["/srv/disk0", "/srv/disk1"])
    assert await hv.list_instances() == ["web1.example.com"]
    info = await hv.instance_info("web1.example.com")
    assert info is not None
    assert info["name"] == "web1.example.com"
    assert info["state"] == "running"
    assert info["memory"] == 512
    assert info["vcpus"] == 2
    assert 0 <= info["time"] < 60
    record = json.loads((state_dir(paths) / "web1.example.com.json").read_text())
    assert record["disk_paths"] == ["/srv/disk0", "/srv/disk1"]
    assert msgspec.convert(record["spec"], InstanceSpec) == spec()


async def test_state_survives_a_new_hypervisor_object(
    hv: FakeHypervisor, paths: Paths, meminfo: Path
) -> None:
    await hv.start(spec("a"), [])
    await hv.start(spec("b"), [], paused=True)
    restarted = FakeHypervisor(paths, meminfo=meminfo)
    assert await restarted.list_instances() == ["a", "b"]
    infos = await restarted.all_instances_info()
    assert set(infos) == {"a", "b"}
    assert infos["a"]["state"] == "running"
    assert infos["b"]["state"] == "paused"
    await restarted.stop("a")
    assert (await FakeHypervisor(paths, meminfo=meminfo).list_instances()) == ["b"]


async def test_start_of_running_instance_is_refused(hv: FakeHypervisor) -> None:
    await hv.start(spec(), [])
    with pytest.raises(HypervisorError, match="already running"):
        await hv.start(spec(), [])


async def test_stop_removes_instance_and_stopping_again_is_fine(hv: FakeHypervisor) -> None:
    await hv.start(spec(), [])
    await hv.stop("web1.example.com", timeout=5)
    assert await hv.list_instances() == []
    assert await hv.instance_info("web1.example.com") is None
    await hv.stop("web1.example.com", force=True)
    await hv.stop("never-started")


async def test_queries_on_a_fresh_node_create_nothing(hv: FakeHypervisor, paths: Paths) -> None:
    assert await hv.list_instances() == []
    assert await hv.all_instances_info() == {}
    assert await hv.instance_info("x") is None
    assert not state_dir(paths).exists()


async def test_invalid_instance_names_are_refused(hv: FakeHypervisor) -> None:
    for name in ("", "../escape", "a/b", ".hidden"):
        with pytest.raises(HypervisorError, match="invalid instance name"):
            await hv.start(spec(name), [])


async def test_temporary_files_are_not_listed(hv: FakeHypervisor, paths: Paths) -> None:
    await hv.start(spec("a"), [])
    (state_dir(paths) / ".a.json.xyz.tmp").write_text("{")
    assert await hv.list_instances() == ["a"]


async def test_corrupt_state_file_is_reported(hv: FakeHypervisor, paths: Paths) -> None:
    await hv.start(spec("a"), [])
    (state_dir(paths) / "a.json").write_text("{not json")
    with pytest.raises(HypervisorError, match=r"state file of instance a .* not valid JSON"):
        await hv.instance_info("a")


# -- memory ------------------------------------------------------------------------


async def test_node_info_from_meminfo(hv: FakeHypervisor) -> None:
    info = await hv.node_info()
    assert info["memory_total"] == 8192
    assert info["memory_free"] == 4096
    assert info["memory_hv"] == 0
    assert info["cpu_count"] == (os.cpu_count() or 1)


async def test_instances_use_their_maxmem(hv: FakeHypervisor) -> None:
    await hv.start(spec("a", maxmem=1024), [])
    await hv.start(spec("b", maxmem="2G"), [], paused=True)
    info = await hv.node_info()
    assert info["memory_hv"] == 3072
    assert info["memory_free"] == 1024
    assert info["memory_total"] == 8192
    await hv.stop("a")
    assert (await hv.node_info())["memory_free"] == 2048


async def test_start_refused_when_memory_does_not_fit(hv: FakeHypervisor) -> None:
    await hv.start(spec("a", maxmem=3072), [])
    with pytest.raises(HypervisorError) as excinfo:
        await hv.start(spec("b", maxmem=2048), [])
    assert "needs 2048 MiB" in str(excinfo.value)
    assert "only 1024 MiB free" in str(excinfo.value)
    assert await hv.list_instances() == ["a"]


async def test_meminfo_without_memavailable_uses_free_buffers_cached(
    paths: Paths, tmp_path: Path
) -> None:
    old = tmp_path / "old-meminfo"
    old.write_text("MemTotal: 2097152 kB\nMemFree: 524288 kB\nBuffers: 0 kB\nCached: 524288 kB\n")
    assert (await FakeHypervisor(paths, meminfo=old).node_info())["memory_free"] == 1024


async def test_unreadable_meminfo_is_a_hypervisor_error(paths: Paths, tmp_path: Path) -> None:
    hv = FakeHypervisor(paths, meminfo=tmp_path / "missing")
    with pytest.raises(HypervisorError, match="cannot read the node's memory"):
        await hv.node_info()


async def test_invalid_maxmem_is_reported(hv: FakeHypervisor) -> None:
    with pytest.raises(HypervisorError, match="invalid maxmem"):
        await hv.start(spec(maxmem="lots"), [])


# -- reboot ------------------------------------------------------------------------


async def test_reboot_of_stopped_instance_is_refused(hv: FakeHypervisor) -> None:
    for kind in ("soft", "hard", "full"):
        with pytest.raises(HypervisorError, match=r"cannot reboot .* not running"):
            await hv.reboot(spec(), [], kind)


async def test_reboot_type_is_checked(hv: FakeHypervisor) -> None:
    await hv.start(spec(), [])
    with pytest.raises(ParameterError, match="soft, hard, full"):
        await hv.reboot(spec(), [], "gentle")


async def test_soft_reboot_keeps_state_hard_reboot_restarts(
    hv: FakeHypervisor, paths: Paths
) -> None:
    await hv.start(spec(), ["/old"], paused=True)
    record_file = state_dir(paths) / "web1.example.com.json"
    record = json.loads(record_file.read_text())
    record["started"] -= 1000  # it has been up for a while
    record_file.write_text(json.dumps(record))
    await hv.reboot(spec(), ["/old"], "soft")
    info = await hv.instance_info("web1.example.com")
    assert info is not None
    assert info["state"] == "paused"
    assert info["time"] >= 1000
    await hv.reboot(spec(maxmem=1024), ["/new"], "hard")
    info = await hv.instance_info("web1.example.com")
    assert info is not None
    assert info["state"] == "running"
    assert info["time"] < 1000
    assert info["memory"] == 1024
    assert json.loads(record_file.read_text())["disk_paths"] == ["/new"]


async def test_hard_reboot_counts_the_instances_own_memory_as_free(hv: FakeHypervisor) -> None:
    await hv.start(spec("a", maxmem=4096), [])  # uses all free memory
    await hv.reboot(spec("a", maxmem=4096), [], "full")
    with pytest.raises(HypervisorError, match="needs 4097 MiB"):
        await hv.reboot(spec("a", maxmem=4097), [], "hard")
    assert await hv.list_instances() == ["a"]


# -- migration ---------------------------------------------------------------------


async def test_migration_between_two_nodes(tmp_path: Path, meminfo: Path) -> None:
    source = FakeHypervisor(Paths(tmp_path / "node1"), meminfo=meminfo)
    target = FakeHypervisor(Paths(tmp_path / "node2"), meminfo=meminfo)
    await source.start(spec(maxmem=1024), ["/disk0"])

    await target.accept_migration(spec(maxmem=1024))
    info = await target.instance_info("web1.example.com")
    assert info is not None
    assert info["state"] == "migrating"
    assert (await target.node_info())["memory_free"] == 3072  # reserved on the target

    await source.migrate(spec(maxmem=1024), "192.0.2.2", live=True)
    assert await source.list_instances() == []

    await target.finish_migration(spec(maxmem=1024), success=True)
    info = await target.instance_info("web1.example.com")
    assert info is not None
    assert info["state"] == "running"


async def test_failed_migration_drops_the_target_copy(hv: FakeHypervisor) -> None:
    await hv.accept_migration(spec())
    await hv.finish_migration(spec(), success=False)
    assert await hv.list_instances() == []


async def test_accept_refuses_instance_already_here(hv: FakeHypervisor) -> None:
    await hv.start(spec(), [])
    with pytest.raises(HypervisorError, match=r"cannot accept .* already running"):
        await hv.accept_migration(spec())


async def test_accept_refuses_when_memory_does_not_fit(hv: FakeHypervisor) -> None:
    with pytest.raises(HypervisorError, match=r"needs 8192 MiB .* only 4096 MiB free"):
        await hv.accept_migration(spec(maxmem=8192))


async def test_migrate_refuses_instance_not_running_here(hv: FakeHypervisor) -> None:
    with pytest.raises(
        HypervisorError, match=r"cannot migrate .* to 192\.0\.2\.2: it is not running"
    ):
        await hv.migrate(spec(), "192.0.2.2", live=False)


async def test_migrating_instance_cannot_be_rebooted(hv: FakeHypervisor) -> None:
    await hv.accept_migration(spec())
    with pytest.raises(HypervisorError, match="not running"):
        await hv.reboot(spec(), [], "soft")


# -- console -----------------------------------------------------------------------


async def test_console_is_a_message(hv: FakeHypervisor) -> None:
    console = await hv.console(spec())
    assert set(console) == {"instance", "kind", "message"}
    assert console["instance"] == "web1.example.com"
    assert console["kind"] == "msg"
    assert "web1.example.com" in console["message"]


# -- asynchronous interface --------------------------------------------------------


def test_every_hypervisor_operation_is_a_coroutine() -> None:
    abstract = sorted(Hypervisor.__abstractmethods__)
    assert {"list_instances", "instance_info", "all_instances_info", "node_info",
            "console"} <= set(abstract)
    for name in abstract:
        assert inspect.iscoroutinefunction(getattr(Hypervisor, name)), name
        assert inspect.iscoroutinefunction(getattr(FakeHypervisor, name)), name


async def test_slow_state_files_do_not_block_the_event_loop(
    hv: FakeHypervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    import corral.hypervisor.fake as fake

    real_write = fake.write_public
    real_listdir = os.listdir

    def slow_write(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.3)
        real_write(*args, **kwargs)

    def slow_listdir(path: Any) -> list[str]:
        time.sleep(0.3)
        return real_listdir(path)

    monkeypatch.setattr(fake, "write_public", slow_write)
    assert await ticks_while(hv.start(spec(), [])) >= 10
    monkeypatch.setattr(fake.os, "listdir", slow_listdir)
    assert await ticks_while(hv.list_instances()) >= 10
    assert await ticks_while(hv.node_info()) >= 10


async def test_concurrent_starts_of_one_instance_start_it_once(hv: FakeHypervisor) -> None:
    results = await asyncio.gather(*(hv.start(spec(), []) for _ in range(8)),
                                   return_exceptions=True)
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, HypervisorError) for r in results if r is not None)
    assert await hv.list_instances() == ["web1.example.com"]
