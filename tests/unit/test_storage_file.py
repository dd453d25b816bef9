"""File disks: sparse files below the storage directories the node allows."""

# The tests look at the files between awaits; blocking a test's own loop is harmless.
# ruff: noqa: ASYNC240

from __future__ import annotations

import inspect
import os
import stat
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

import corral.storage.filestore as filestore
from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage import (
    DEV_TYPES,
    FILE_DRIVER,
    BlockDevice,
    FileStorage,
    PlainStorage,
    allowed_dirs,
    dir_info,
    disk_path,
    file_logical_id,
    get_block_device,
)
from tests.unit.loop_helpers import ticks_while

MIB = 1024 * 1024
STORAGE = "/srv/corral/file-storage"
SHARED = "/srv/corral/shared-file-storage"


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "node1")


@pytest.fixture
def files(paths: Paths) -> FileStorage:
    return FileStorage(paths)


def disk(
    size: int = 64,
    index: int = 0,
    logical_id: list[str] | None = None,
    dev_type: str = "file",
    instance: str = "inst-uuid",
) -> DiskSpec:
    return DiskSpec(
        uuid=f"disk-uuid-{index}",
        index=index,
        dev_type=dev_type,
        size=size,
        logical_id=(
            logical_id
            if logical_id is not None
            else file_logical_id(STORAGE, instance, f"disk-uuid-{index}", index)
        ),
    )


def allocated(path: Path) -> int:
    """Bytes actually allocated to ``path``."""
    return path.stat().st_blocks * 512


async def stream(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def collect(chunks: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in chunks]


# -- the interface -------------------------------------------------------------------


def test_every_block_device_operation_is_a_coroutine() -> None:
    assert {"create", "remove", "grow", "assemble", "shutdown", "info", "read",
            "write"} == set(BlockDevice.__abstractmethods__)
    for name in BlockDevice.__abstractmethods__:
        assert inspect.iscoroutinefunction(getattr(BlockDevice, name)), name
        assert inspect.iscoroutinefunction(getattr(FileStorage, name)), name


def test_drivers_by_device_type(paths: Paths) -> None:
    assert set(DEV_TYPES) == {"file", "sharedfile", "plain", "blockdev", "rbd",
                              "ext"}
    assert isinstance(get_block_device("sharedfile", paths), FileStorage)
    assert isinstance(get_block_device("plain", paths), PlainStorage)
    with pytest.raises(BlockDeviceError, match=r"device type 'drbd' .* file, sharedfile"):
        get_block_device("drbd", paths)


async def test_slow_file_work_does_not_block_the_event_loop(
    files: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ftruncate, real_statvfs = os.ftruncate, os.statvfs

    def slow_ftruncate(fd: int, length: int) -> None:
        time.sleep(0.3)
        real_ftruncate(fd, length)

    def slow_statvfs(path: Any) -> os.statvfs_result:
        time.sleep(0.3)
        return real_statvfs(path)

    monkeypatch.setattr(filestore.os, "ftruncate", slow_ftruncate)
    assert await ticks_while(files.create(disk(size=4))) >= 10
    assert await ticks_while(files.write(disk(size=4), stream([b"x" * 100]))) >= 10
    monkeypatch.setattr(filestore.os, "statvfs", slow_statvfs)
    assert await ticks_while(files.grow(disk(size=4), 1)) >= 10


# -- logical ids and paths ---------------------------------------------------------


def test_file_logical_id_is_uuid_based() -> None:
    assert file_logical_id("/srv/files/", "i-1", "d-2", 3) == [
        FILE_DRIVER,
        "/srv/files/i-1/d-2.disk3",
    ]
    assert FILE_DRIVER == "loop"


def test_disk_path_maps_cluster_path_below_node_root(paths: Paths) -> None:
    assert (
        disk_path(paths, disk())
        == paths.root / "srv/corral/file-storage/inst-uuid/disk-uuid-0.disk0"
    )
    shared = disk(dev_type="sharedfile", logical_id=["blktap2", f"{SHARED}/x.disk0"])
    assert disk_path(paths, shared) == paths.root / "srv/corral/shared-file-storage/x.disk0"


@pytest.mark.parametrize(
    ("logical_id", "message"),
    [
        (["loop"], r"logical id \['loop'\].*\[driver, path\]"),
        (["loop", "/a", "/b"], r"\[driver, path\]"),
        (["qcow", "/srv/x.disk0"], r"file driver 'qcow'.*loop, blktap, blktap2"),
        (["loop", "relative/x.disk0"], r"file path 'relative/x.disk0'.*absolute"),
        (["loop", "/srv/../etc/passwd"], r"without '\.\.'"),
        (["loop", "/"], r"file path '/'"),
        (["loop", "/srv/dir/"], r"file path '/srv/dir/'"),
    ],
)
async def test_bad_logical_ids_are_refused(
    paths: Paths, files: FileStorage, logical_id: list[str], message: str
) -> None:
    with pytest.raises(BlockDeviceError, match=message):
        disk_path(paths, disk(logical_id=logical_id))
    with pytest.raises(BlockDeviceError, match=message):
        await files.create(disk(logical_id=logical_id))
    assert not paths.root.exists()


async def test_non_file_device_type_is_refused(files: FileStorage) -> None:
    with pytest.raises(BlockDeviceError, match=r"device type 'plain'.*file, sharedfile"):
        await files.create(disk(dev_type="plain"))


# -- confinement -------------------------------------------------------------------


def test_default_allowed_dirs_are_the_default_storage_dirs(paths: Paths) -> None:
    assert allowed_dirs(paths) == [STORAGE, SHARED]


def test_allowed_dirs_come_from_the_node_file(paths: Paths) -> None:
    paths.data_dir.mkdir(parents=True)
    paths.file_storage_paths.write_text(
        "# file storage of this node\n/data/disks/\n\nrelative/ignored\n/etc/no\n/\n/data/disks\n")
    assert allowed_dirs(paths) == ["/data/disks"]


@pytest.mark.parametrize(
    "cluster_path",
    ["/var/lib/corral/ca-key.pem", "/etc/passwd", "/srv/other/x.disk0",
     "/srv/corral/file-storage-evil/x.disk0", f"{STORAGE}"],
)
async def test_paths_outside_the_allowed_dirs_are_refused(
    paths: Paths, files: FileStorage, cluster_path: str
) -> None:
    bad = disk(logical_id=["loop", cluster_path])
    for operation in (files.create(bad), files.remove(bad), files.assemble(bad),
                      files.read(bad), files.write(bad, stream([b"x"]))):
        with pytest.raises(BlockDeviceError) as excinfo:
            await operation
        message = str(excinfo.value)
        assert repr(cluster_path) in message
        assert STORAGE in message and SHARED in message
    assert not paths.node_path(cluster_path).exists()


async def test_only_the_listed_dirs_are_allowed(paths: Paths, files: FileStorage) -> None:
    paths.data_dir.mkdir(parents=True)
    paths.file_storage_paths.write_text("/data/disks\n")
    with pytest.raises(BlockDeviceError, match=r"outside .* allows: /data/disks"):
        await files.create(disk())
    made = await files.create(disk(logical_id=["loop", "/data/disks/i/d.disk0"], size=1))
    assert Path(made) == paths.root / "data/disks/i/d.disk0"


async def test_forbidden_system_dirs_are_refused_even_when_listed(
    paths: Paths, files: FileStorage
) -> None:
    paths.data_dir.mkdir(parents=True)
    paths.file_storage_paths.write_text("/etc\n/usr/lib\n")
    for cluster_path in ("/etc/shadow", "/usr/lib/x.disk0"):
        with pytest.raises(BlockDeviceError, match="system directory"):
            await files.create(disk(logical_id=["loop", cluster_path], size=1))


async def test_a_symlink_out_of_the_storage_dir_is_refused(
    paths: Paths, files: FileStorage, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"private key")
    storage_dir = paths.node_path(STORAGE)
    storage_dir.mkdir(parents=True)
    (storage_dir / "inst").mkdir()
    (storage_dir / "inst" / "d.disk0").symlink_to(secret)
    (storage_dir / "escape").symlink_to(tmp_path, target_is_directory=True)
    for cluster_path in (f"{STORAGE}/inst/d.disk0", f"{STORAGE}/escape/secret"):
        linked = disk(logical_id=["loop", cluster_path])
        with pytest.raises(BlockDeviceError, match=r"outside the storage directories"):
            await files.read(linked)
        with pytest.raises(BlockDeviceError, match=r"outside the storage directories"):
            await files.remove(linked)
        with pytest.raises(BlockDeviceError, match=r"outside the storage directories"):
            await files.write(linked, stream([b"overwritten"]))
    assert secret.read_bytes() == b"private key"


async def test_a_symlink_into_the_private_data_dir_is_refused(
    paths: Paths, files: FileStorage
) -> None:
    paths.ensure_dirs()
    (paths.data_dir / "ca-key.pem").write_bytes(b"key")
    storage_dir = paths.node_path(STORAGE)
    storage_dir.parent.mkdir(parents=True)
    storage_dir.symlink_to(paths.data_dir, target_is_directory=True)
    with pytest.raises(BlockDeviceError, match="private directory"):
        await files.read(disk(logical_id=["loop", f"{STORAGE}/ca-key.pem"]))


async def test_a_storage_dir_that_is_a_link_is_followed(
    paths: Paths, files: FileStorage, tmp_path: Path
) -> None:
    mount = tmp_path / "shared-mount"
    mount.mkdir()
    link = paths.node_path(SHARED)
    link.parent.mkdir(parents=True)
    link.symlink_to(mount, target_is_directory=True)
    shared = disk(dev_type="sharedfile", logical_id=["loop", f"{SHARED}/i/d.disk0"], size=1)
    made = Path(await files.create(shared))
    assert made == mount / "i" / "d.disk0"
    assert made.stat().st_size == MIB


# -- create / assemble / remove ----------------------------------------------------


async def test_create_makes_a_sparse_file_of_the_size(paths: Paths, files: FileStorage) -> None:
    path = Path(await files.create(disk(size=1024)))
    assert path == disk_path(paths, disk())
    assert path.stat().st_size == 1024 * MIB
    assert allocated(path) < MIB
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o750
    assert await files.assemble(disk()) == str(path)
    info = await files.info(disk())
    assert info == {"path": str(path), "size": 1024, "allocated": 0}


async def test_create_refuses_existing_file(files: FileStorage) -> None:
    path = Path(await files.create(disk(size=1)))
    path.write_bytes(b"precious")
    with pytest.raises(BlockDeviceError, match=r"disk/0: the file .* already exists"):
        await files.create(disk(size=1))
    assert path.read_bytes() == b"precious"


async def test_create_refuses_size_beyond_the_file_system(
    paths: Paths, files: FileStorage
) -> None:
    paths.root.mkdir(parents=True)
    st = os.statvfs(paths.root)
    total = st.f_blocks * st.f_frsize // MIB
    with pytest.raises(BlockDeviceError) as excinfo:
        await files.create(disk(size=total + 1))
    assert f"needs {total + 1} MiB" in str(excinfo.value)
    assert f"only {total} MiB in total" in str(excinfo.value)
    assert not disk_path(paths, disk()).exists()


async def test_create_refuses_non_positive_size(files: FileStorage) -> None:
    with pytest.raises(BlockDeviceError, match="expected a positive size"):
        await files.create(disk(size=0))


async def test_assemble_and_info_of_missing_file(files: FileStorage) -> None:
    for operation in (files.assemble(disk()), files.info(disk())):
        with pytest.raises(
            BlockDeviceError, match=r"disk/0 is missing on this node: .* does not exist"
        ):
            await operation


async def test_find_reports_a_present_file_and_none_for_a_missing_one(
    files: FileStorage,
) -> None:
    assert await files.find(disk()) is None
    path = await files.create(disk())
    status = await files.find(disk())
    assert status is not None
    assert status["dev_path"] == path
    assert status["ldisk_status"] == "ok" and not status["is_degraded"]
    with pytest.raises(BlockDeviceError, match="file driver"):
        await files.find(disk(logical_id=["nbd", "/x/y"]))


async def test_rename_moves_the_file_within_the_allowed_dirs(
    paths: Paths, files: FileStorage,
) -> None:
    old = Path(await files.create(disk()))
    old.write_bytes(b"data")
    new_id = file_logical_id(STORAGE, "other-inst", "disk-uuid-0", 0)
    await files.rename(disk(), new_id)
    assert not old.exists() and not old.parent.exists()
    moved = paths.node_path(new_id[1])
    assert moved.read_bytes() == b"data"
    with pytest.raises(BlockDeviceError, match="this node allows disks only below"):
        await files.rename(disk(logical_id=new_id), ["loop", "/etc/shadow-copy/x"])
    assert moved.exists()
    await files.create(disk())
    with pytest.raises(BlockDeviceError, match="a file is there already"):
        await files.rename(disk(), new_id)


async def test_file_disks_have_no_snapshots(files: FileStorage) -> None:
    await files.create(disk())
    with pytest.raises(BlockDeviceError, match="disks of type file have no snapshots"):
        await files.snapshot(disk(), "snap", 16)


async def test_remove_is_idempotent_and_removes_empty_instance_dir(files: FileStorage) -> None:
    first = Path(await files.create(disk(index=0)))
    second = Path(await files.create(disk(index=1)))
    instance_dir = first.parent
    await files.remove(disk(index=0))
    assert not first.exists()
    assert instance_dir.is_dir()  # disk 1 is still there
    await files.remove(disk(index=1))
    assert not second.exists()
    assert not instance_dir.exists()
    assert instance_dir.parent.is_dir()  # the storage dir stays
    await files.remove(disk(index=1))


async def test_shutdown_only_checks_the_logical_id(files: FileStorage) -> None:
    await files.shutdown(disk())  # nothing to do, even for a missing file
    with pytest.raises(BlockDeviceError, match="file driver"):
        await files.shutdown(disk(logical_id=["nbd", "/x/y"]))


# -- grow --------------------------------------------------------------------------


async def test_grow_extends_the_file_sparsely(files: FileStorage) -> None:
    path = Path(await files.create(disk(size=16)))
    await files.grow(disk(size=16), 48)
    assert path.stat().st_size == 64 * MIB
    assert allocated(path) < MIB


async def test_grow_dryrun_changes_nothing(files: FileStorage) -> None:
    path = Path(await files.create(disk(size=16)))
    await files.grow(disk(size=16), 48, dryrun=True)
    assert path.stat().st_size == 16 * MIB


async def test_grow_refuses_more_than_free_space(files: FileStorage) -> None:
    path = Path(await files.create(disk(size=16)))
    st = os.statvfs(path.parent)
    free = st.f_bavail * st.f_frsize // MIB
    for dryrun in (True, False):
        with pytest.raises(BlockDeviceError) as excinfo:
            await files.grow(disk(size=16), free + 10, dryrun=dryrun)
        message = str(excinfo.value)
        assert f"by {free + 10} MiB" in message
        assert "MiB free" in message
    assert path.stat().st_size == 16 * MIB


async def test_grow_missing_disk_is_refused(files: FileStorage) -> None:
    with pytest.raises(BlockDeviceError, match="missing"):
        await files.grow(disk(), 1)


async def test_grow_refuses_negative_amount(files: FileStorage) -> None:
    await files.create(disk(size=16))
    with pytest.raises(BlockDeviceError, match="must not be negative"):
        await files.grow(disk(), -1)


# -- dir_info ----------------------------------------------------------------------


async def test_dir_info_reports_size_and_free(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    info = await dir_info(tmp_path)
    assert info["size"] == st.f_blocks * st.f_frsize // MIB
    assert 0 <= info["free"] <= info["size"]


async def test_dir_info_of_missing_dir_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "srv" / "storage"
    with pytest.raises(BlockDeviceError, match="does not exist"):
        await dir_info(missing)
    assert not (tmp_path / "srv").exists()
    assert await dir_info(missing, nearest_existing=True) == await dir_info(tmp_path)
    assert not (tmp_path / "srv").exists()


# -- copying -----------------------------------------------------------------------


def fill(path: Path, blocks: dict[int, bytes]) -> None:
    with path.open("r+b") as handle:
        for offset_mib, data in blocks.items():
            handle.seek(offset_mib * MIB)
            handle.write(data)


async def test_read_yields_the_whole_file(files: FileStorage) -> None:
    path = Path(await files.create(disk(size=3)))
    fill(path, {1: b"hello"})
    chunks = await collect(await files.read(disk(size=3), chunk=MIB))
    assert [len(c) for c in chunks] == [MIB, MIB, MIB]
    assert b"".join(chunks) == path.read_bytes()
    assert len(await collect(await files.read(disk(size=3), chunk=1000 * 1000))) == 4


async def test_read_of_missing_disk_fails_at_once(files: FileStorage) -> None:
    with pytest.raises(BlockDeviceError, match="missing"):
        await files.read(disk())


async def test_copy_between_nodes_stays_sparse(tmp_path: Path) -> None:
    source_files = FileStorage(Paths(tmp_path / "node1"))
    target_paths = Paths(tmp_path / "node2")
    source = Path(await source_files.create(disk(size=32)))
    fill(source, {0: b"boot sector", 20: b"x" * 4096, 31: b"end"})

    written = await FileStorage(target_paths).write(
        disk(size=32), await source_files.read(disk(size=32)))

    target = disk_path(target_paths, disk())
    assert written == 32 * MIB
    assert target.stat().st_size == 32 * MIB
    assert target.read_bytes() == source.read_bytes()
    assert allocated(target) <= 4 * MIB  # three touched chunks at most, not 32 MiB


async def test_write_discards_old_contents_and_keeps_trailing_hole(
    files: FileStorage,
) -> None:
    path = Path(await files.create(disk(size=4)))
    fill(path, {0: b"old" * 1000, 3: b"old"})
    data = [b"new", bytes(MIB - 3), bytes(MIB), bytes(2 * MIB)]
    written = await files.write(disk(size=4), stream(data))
    assert written == 4 * MIB
    content = path.read_bytes()
    assert len(content) == 4 * MIB
    assert content[:3] == b"new"
    assert content.count(0) == 4 * MIB - 3


async def test_write_unaligned_chunks(paths: Paths, files: FileStorage) -> None:
    payload = os.urandom(5000) + bytes(300_000) + os.urandom(777)
    chunks = [payload[i : i + 4093] for i in range(0, len(payload), 4093)]
    written = await files.write(disk(), stream(chunks))
    assert written == len(payload)
    assert disk_path(paths, disk()).read_bytes() == payload
