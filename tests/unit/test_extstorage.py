"""ExtStorage providers on a node: discovery with Ganeti's checks, the scripts'
environment, failures quoting their output, and the ext driver against real scripts
(the test provider that records its environment, and corral-file as shipped)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage import ExtStorage, get_block_device
from corral.storage.base import DiskMissingError
from corral.storage.ext import parse_attach
from corral.storage.extstorage import (
    discover,
    find_provider,
    load_provider,
    metadata_text,
    run_action,
    volume_env,
)
from corral.testbed.core import bundled_extstorage_dir

ENVDUMP = Path(__file__).resolve().parents[1] / "data" / "extstorage" / "corral-envdump"
SEARCH = "/srv/corral/extstorage"
#: What the shell itself puts in a script's environment.
SHELL_VARS = {"PWD", "SHLVL", "_", "OLDPWD"}


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    """A node root with the test provider and corral-file on its search path."""
    node = Paths(tmp_path / "node")
    node.ensure_dirs()
    base = node.node_path(SEARCH)
    base.mkdir(parents=True)
    shutil.copytree(ENVDUMP, base / "corral-envdump")
    shutil.copytree(bundled_extstorage_dir() / "corral-file", base / "corral-file")
    (base / "corral-file" / "settings").write_text(f"VOLUME_DIR={tmp_path / 'volumes'}\n")
    return node


def _disk(provider: str = "corral-envdump", volume: str = "u1.ext.disk0", *, size: int = 8,
          name: str | None = "d0", index: int = 0, **params: str) -> DiskSpec:
    return DiskSpec(uuid="6c7f56cc-a0d6-44ac-a944-c18e558d6683", index=index,
                    dev_type="ext", size=size, logical_id=[provider, volume], name=name,
                    params={"provider": provider, "access": "kernelspace", **params},
                    search_path=[SEARCH])


def _calls(paths: Paths) -> list[tuple[str, dict[str, str]]]:
    """The test provider's record: ``(action, environment)`` per run, in order."""
    log = paths.node_path(SEARCH) / "corral-envdump" / "calls.log"
    calls: list[tuple[str, dict[str, str]]] = []
    for line in log.read_text().splitlines():
        if line.startswith("=== "):
            calls.append((line.split()[1], {}))
        elif "=" in line and calls:
            key, _, value = line.partition("=")
            calls[-1][1][key] = value
    return calls


def _write_start(path: Path, data: bytes) -> None:
    with path.open("r+b") as file:
        file.write(data)


def _sysfs(device: str, name: str) -> str | None:
    try:
        return Path(f"/sys/block/{Path(device).name}/{name}").read_text().strip()
    except FileNotFoundError:
        return None


def _ganeti_vars(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in SHELL_VARS}


# -- discovery -------------------------------------------------------------------------


def test_discover_finds_valid_providers_with_their_parameters(paths: Paths) -> None:
    found = {p.name: p for p in discover([paths.node_path(SEARCH)])}
    assert sorted(found) == ["corral-envdump", "corral-file"]
    envdump = found["corral-envdump"]
    assert envdump.valid, envdump.message
    assert envdump.parameters == (("fail", "Name of an action whose script fails on purpose"),
                                  ("colour", "A parameter that is only passed on"))
    assert set(envdump.scripts) == {"create", "attach", "detach", "remove", "grow", "setinfo",
                                    "verify", "snapshot", "open", "close"}


@pytest.mark.parametrize(("breakage", "message"), [
    ("rm grow", "File 'grow' under path '{dir}' is missing (ENOENT)"),
    ("chmod verify", "File 'verify' under path '{dir}' is not executable"),
    ("dir parameters.list", "File 'parameters.list' under path '{dir}' is not a regular file"),
    ("rm parameters.list", "File 'parameters.list' under path '{dir}' is missing (ENOENT)"),
])
def test_an_incomplete_provider_is_invalid_with_ganetis_message(
        paths: Paths, breakage: str, message: str) -> None:
    directory = paths.node_path(SEARCH) / "corral-envdump"
    how, name = breakage.split()
    target = directory / name
    if how == "rm":
        target.unlink()
    elif how == "chmod":
        target.chmod(0o644)
    else:
        target.unlink()
        target.mkdir()
    provider = load_provider("corral-envdump", directory)
    assert not provider.valid
    assert provider.message == message.format(dir=directory)


def test_optional_scripts_may_be_missing(paths: Paths) -> None:
    directory = paths.node_path(SEARCH) / "corral-envdump"
    for script in ("snapshot", "open", "close"):
        (directory / script).unlink()
    provider = load_provider("corral-envdump", directory)
    assert provider.valid
    assert "open" not in provider.scripts


def test_the_first_directory_of_the_search_path_wins(paths: Paths, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    shutil.copytree(ENVDUMP, earlier / "corral-file")
    (earlier / "corral-file" / "grow").unlink()
    found = find_provider([earlier, paths.node_path(SEARCH)], "corral-file")
    assert found.path == earlier / "corral-file"
    assert not found.valid


def test_an_unknown_provider_names_the_search_path(paths: Paths) -> None:
    with pytest.raises(BlockDeviceError, match=r"Directory for External Storage Provider "
                       r"nosuch not found in search path \(/nowhere, /else\)"):
        find_provider([Path("/nowhere"), Path("/else")], "nosuch")


# -- the environment ---------------------------------------------------------------------


def test_volume_env_sets_only_what_is_given() -> None:
    env = volume_env("v.ext.disk0", {"provider": "p", "access": "kernelspace",
                                     "fromsnap": "s1"}, size=1024, uuid="u")
    assert env == {"PATH": "/sbin:/bin:/usr/sbin:/usr/bin", "LC_ALL": "C",
                   "VOL_NAME": "v.ext.disk0", "EXTP_PROVIDER": "p",
                   "EXTP_ACCESS": "kernelspace", "EXTP_FROMSNAP": "s1", "VOL_SIZE": "1024",
                   "VOL_UUID": "u"}
    assert volume_env("v", {}, exclusive=False)["VOL_OPEN_EXCLUSIVE"] == "False"


def test_metadata_is_made_safe_as_ganeti_does() -> None:
    assert metadata_text("originstname+web1.example.com") == "originstname+web1.example.com"
    assert metadata_text("-bad name/x") == "_bad_name_x"
    assert len(metadata_text("x" * 300)) == 128


def test_attach_output_path_and_uris() -> None:
    assert parse_attach("/dev/loop3\nkvm:rbd:rbd/img\nXEN:foo\n") == parse_attach(
        "/dev/loop3\nkvm:rbd:rbd/img\nxen:foo")
    got = parse_attach("\nkvm:rbd:rbd/img\n")
    assert got.path == ""
    assert got.uris == {"kvm": "rbd:rbd/img"}


# -- the driver ------------------------------------------------------------------------------


async def test_each_action_gets_ganetis_environment_and_nothing_else(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    assert isinstance(driver, ExtStorage)
    disk = _disk(colour="blue")
    await driver.create(disk)
    await driver.set_info(disk, "originstname+web1")
    path = await driver.assemble(disk)
    await driver.open(disk, exclusive=False)
    await driver.grow(disk, 8)
    await driver.snapshot(disk, "u1.ext.disk0.snap", 8)
    await driver.close(disk)
    await driver.shutdown(disk)
    await driver.remove(disk)
    assert path == str(paths.node_path(SEARCH) / "corral-envdump" / "volumes" / "u1.ext.disk0")
    common = {"PATH": "/sbin:/bin:/usr/sbin:/usr/bin", "LC_ALL": "C",
              "VOL_NAME": "u1.ext.disk0", "EXTP_PROVIDER": "corral-envdump",
              "EXTP_ACCESS": "kernelspace", "EXTP_COLOUR": "blue"}
    identity = {"VOL_CNAME": "d0", "VOL_UUID": disk.uuid}
    expected = [
        ("create", {**common, **identity, "VOL_SIZE": "8"}),
        ("setinfo", {**common, **identity, "VOL_METADATA": "originstname+web1"}),
        ("attach", {**common, **identity}),
        ("open", {**common, **identity, "VOL_OPEN_EXCLUSIVE": "False"}),
        ("grow", {**common, **identity, "VOL_SIZE": "8", "VOL_NEW_SIZE": "16"}),
        ("snapshot", {**common, "VOL_SNAPSHOT_NAME": "u1.ext.disk0.snap",
                      "VOL_SNAPSHOT_SIZE": "8"}),
        ("close", {**common, **identity}),
        ("detach", {**common, **identity}),
        ("detach", {**common, **identity}),
        ("remove", {**common, **identity}),
    ]
    calls = _calls(paths)
    assert [(action, _ganeti_vars(env)) for action, env in calls] == expected
    # Run in the provider's directory, with no arguments.
    log = (paths.node_path(SEARCH) / "corral-envdump" / "calls.log").read_text()
    assert re.search(rf"=== create at=\S+ args= cwd={paths.node_path(SEARCH)}/corral-envdump\n",
                     log)


async def test_a_disk_without_name_has_no_vol_cname(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    await driver.create(_disk(name=None))
    (_action, env), = _calls(paths)
    assert "VOL_CNAME" not in env
    assert env["VOL_UUID"] == _disk().uuid


async def test_a_failing_script_is_quoted_with_its_last_twenty_lines(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    with pytest.raises(BlockDeviceError) as caught:
        await driver.create(_disk(fail="create"))
    message = caught.value.message
    assert message.startswith("External storage's create script failed (exited with exit "
                              "code 3) for volume u1.ext.disk0 of provider corral-envdump, "
                              "last lines of output (log ")
    lines = message.split("\n")[1:]
    assert len(lines) == 20
    assert lines[0] == "noise line 6"  # 24 noise lines and the last one: 25
    assert lines[-1] == "failing create on purpose"
    logs = list(paths.extstorage_log_dir.glob("create-corral-envdump-u1.ext.disk0-*.log"))
    assert len(logs) == 1
    assert "noise line 1\n" in logs[0].read_text()


async def test_userspace_access_uses_the_kvm_uri(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    disk = _disk(access="userspace")
    await driver.create(disk)
    where = await driver.assemble(disk)
    assert where == str(paths.node_path(SEARCH) / "corral-envdump" / "volumes" / "u1.ext.disk0")
    script = paths.node_path(SEARCH) / "corral-envdump" / "attach"
    script.write_text("#!/bin/sh\necho /dev/null\n")
    with pytest.raises(BlockDeviceError, match="Userspace access is not supported by the "
                       "'corral-envdump' ExtStorage provider for the 'kvm' hypervisor"):
        await driver.assemble(disk)


async def test_a_path_that_is_no_block_device_nor_file_is_refused(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    script = paths.node_path(SEARCH) / "corral-envdump" / "attach"
    script.write_text("#!/bin/sh\necho /proc\n")
    with pytest.raises(BlockDeviceError, match="gave /proc, which is neither a block device "
                                               "nor a file"):
        await driver.assemble(_disk())
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(BlockDeviceError, match="neither a local path nor a userspace URI"):
        await driver.assemble(_disk())


async def test_a_missing_provider_makes_the_disk_missing_for_its_status(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    with pytest.raises(DiskMissingError, match="not found in search path"):
        await driver.info(_disk(provider="nosuch"))
    assert await driver.find(_disk(provider="nosuch")) is None


async def test_an_invalid_provider_refuses_to_run(paths: Paths) -> None:
    (paths.node_path(SEARCH) / "corral-envdump" / "grow").unlink()
    with pytest.raises(BlockDeviceError, match="ExtStorage provider corral-envdump is not "
                                               "valid on this node: File 'grow'"):
        await get_block_device("ext", paths).create(_disk())


async def test_a_provider_without_snapshot_script_cannot_snapshot(paths: Paths) -> None:
    (paths.node_path(SEARCH) / "corral-envdump" / "snapshot").unlink()
    with pytest.raises(BlockDeviceError, match="has no snapshot script"):
        await get_block_device("ext", paths).snapshot(_disk(), "s", 8)


async def test_run_action_skips_an_optional_script_the_provider_lacks(paths: Paths) -> None:
    directory = paths.node_path(SEARCH) / "corral-envdump"
    (directory / "open").unlink()
    provider = load_provider("corral-envdump", directory)
    assert await run_action(paths, provider, "open", volume_env("v", {})) is None


# -- corral-file, the provider corral ships ----------------------------------------------------


async def test_corral_file_creates_grows_snapshots_and_removes_volumes(
        paths: Paths, tmp_path: Path) -> None:
    driver = get_block_device("ext", paths)
    disk = _disk("corral-file", size=16)
    await driver.create(disk)
    volume = tmp_path / "volumes" / "u1.ext.disk0"
    assert volume.stat().st_size == 16 << 20
    await driver.set_info(disk, "originstname+web1")
    assert (tmp_path / "volumes" / "u1.ext.disk0.info").read_text() == "originstname+web1\n"
    where = await driver.assemble(disk)
    assert where == str(volume)
    _write_start(Path(where), b"corral was here")
    await driver.grow(disk, 16)
    assert volume.stat().st_size == 32 << 20
    info = await driver.info(disk)
    assert info["path"] == str(volume)
    assert await driver.snapshot(disk, "u1.ext.disk0.snap", 16) == ["corral-file",
                                                                    "u1.ext.disk0.snap"]
    copy = tmp_path / "volumes" / "u1.ext.disk0.snap"
    assert copy.read_bytes()[:15] == b"corral was here"
    chunks = [chunk async for chunk in await driver.read(disk, chunk=1 << 20)]
    assert b"".join(chunks)[:15] == b"corral was here"
    await driver.shutdown(disk)
    await driver.remove(disk)
    assert not volume.exists()
    assert not (tmp_path / "volumes" / "u1.ext.disk0.info").exists()
    with pytest.raises(BlockDeviceError, match=r"volume u1\.ext\.disk0 does not exist"):
        await driver.assemble(disk)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None,
                    reason="loop devices need root and losetup")
async def test_corral_file_attaches_through_a_loop_device(paths: Paths) -> None:
    driver = get_block_device("ext", paths)
    disk = _disk("corral-file", size=8, loop="yes")
    await driver.create(disk)
    try:
        device = await driver.assemble(disk)
        assert stat.S_ISBLK(os.stat(device).st_mode)
        assert await driver.assemble(disk) == device  # attach again: the same device
        await driver.grow(disk, 8)
        assert _sysfs(device, "size") == str(16 << 11)  # 512-byte sectors
    finally:
        await driver.remove(disk)
    assert _sysfs(device, "loop/backing_file") is None


async def test_an_attach_output_with_a_nul_byte_is_refused(paths: Paths) -> None:
    """A NUL byte can be neither in a path nor on qemu's command line: refused, naming
    the provider, not an unexpected ValueError."""
    script = paths.node_path(SEARCH) / "corral-envdump" / "attach"
    for output in ("/dev/null\\0x", "\\nkvm:rbd:a\\0b"):
        script.write_text(f"#!/bin/sh\nprintf '{output}\\n'\n")
        with pytest.raises(BlockDeviceError, match="attach script of ExtStorage provider "
                                                   "corral-envdump printed a NUL byte"):
            await get_block_device("ext", paths).assemble(_disk(access="userspace"
                                                                 if "kvm" in output
                                                                 else "kernelspace"))
