"""File disks: sparse files below the node's view of the cluster-wide storage dir."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage import (
    FILE_DRIVER,
    assemble,
    create,
    dir_info,
    disk_path,
    file_logical_id,
    grow,
    read_chunks,
    remove,
    shutdown,
    write_from,
)

MIB = 1024 * 1024
STORAGE = "/srv/corral/file-storage"


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "node1")


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
    shared = disk(dev_type="sharedfile", logical_id=["blktap2", "/shared/x.disk0"])
    assert disk_path(paths, shared) == paths.root / "shared/x.disk0"


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
def test_bad_logical_ids_are_refused(paths: Paths, logical_id: list[str], message: str) -> None:
    with pytest.raises(BlockDeviceError, match=message):
        disk_path(paths, disk(logical_id=logical_id))
    with pytest.raises(BlockDeviceError, match=message):
        create(paths, disk(logical_id=logical_id))
    assert not paths.root.exists()


def test_non_file_device_type_is_refused(paths: Paths) -> None:
    with pytest.raises(BlockDeviceError, match=r"device type 'plain'.*file, sharedfile"):
        create(paths, disk(dev_type="plain"))


# -- create / assemble / remove ----------------------------------------------------


def test_create_makes_a_sparse_file_of_the_size(paths: Paths) -> None:
    path = create(paths, disk(size=1024))
    assert path == disk_path(paths, disk())
    assert path.stat().st_size == 1024 * MIB
    assert allocated(path) < MIB
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o750
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o750
    assert assemble(paths, disk()) == path


def test_create_refuses_existing_file(paths: Paths) -> None:
    path = create(paths, disk(size=1))
    path.write_bytes(b"precious")
    with pytest.raises(BlockDeviceError, match=r"disk/0: the file .* already exists"):
        create(paths, disk(size=1))
    assert path.read_bytes() == b"precious"


def test_create_refuses_size_beyond_the_file_system(paths: Paths) -> None:
    paths.root.mkdir(parents=True)
    st = os.statvfs(paths.root)
    total = st.f_blocks * st.f_frsize // MIB
    with pytest.raises(BlockDeviceError) as excinfo:
        create(paths, disk(size=total + 1))
    assert f"needs {total + 1} MiB" in str(excinfo.value)
    assert f"only {total} MiB in total" in str(excinfo.value)
    assert not disk_path(paths, disk()).exists()


def test_create_refuses_non_positive_size(paths: Paths) -> None:
    with pytest.raises(BlockDeviceError, match="expected a positive size"):
        create(paths, disk(size=0))


def test_assemble_missing_file(paths: Paths) -> None:
    with pytest.raises(
        BlockDeviceError, match=r"disk/0 is missing on this node: .* does not exist"
    ):
        assemble(paths, disk())


def test_remove_is_idempotent_and_removes_empty_instance_dir(paths: Paths) -> None:
    first = create(paths, disk(index=0))
    second = create(paths, disk(index=1))
    instance_dir = first.parent
    remove(paths, disk(index=0))
    assert not first.exists()
    assert instance_dir.is_dir()  # disk 1 is still there
    remove(paths, disk(index=1))
    assert not second.exists()
    assert not instance_dir.exists()
    assert instance_dir.parent.is_dir()  # the storage dir stays
    remove(paths, disk(index=1))


def test_shutdown_only_checks_the_logical_id(paths: Paths) -> None:
    shutdown(paths, disk())  # nothing to do, even for a missing file
    with pytest.raises(BlockDeviceError, match="file driver"):
        shutdown(paths, disk(logical_id=["nbd", "/x/y"]))


# -- grow --------------------------------------------------------------------------


def test_grow_extends_the_file_sparsely(paths: Paths) -> None:
    path = create(paths, disk(size=16))
    grow(paths, disk(size=16), 48)
    assert path.stat().st_size == 64 * MIB
    assert allocated(path) < MIB


def test_grow_dryrun_changes_nothing(paths: Paths) -> None:
    path = create(paths, disk(size=16))
    grow(paths, disk(size=16), 48, dryrun=True)
    assert path.stat().st_size == 16 * MIB


def test_grow_refuses_more_than_free_space(paths: Paths) -> None:
    path = create(paths, disk(size=16))
    st = os.statvfs(path.parent)
    free = st.f_bavail * st.f_frsize // MIB
    for dryrun in (True, False):
        with pytest.raises(BlockDeviceError) as excinfo:
            grow(paths, disk(size=16), free + 10, dryrun=dryrun)
        message = str(excinfo.value)
        assert f"by {free + 10} MiB" in message
        assert "MiB free" in message
    assert path.stat().st_size == 16 * MIB


def test_grow_missing_disk_is_refused(paths: Paths) -> None:
    with pytest.raises(BlockDeviceError, match="missing"):
        grow(paths, disk(), 1)


def test_grow_refuses_negative_amount(paths: Paths) -> None:
    create(paths, disk(size=16))
    with pytest.raises(BlockDeviceError, match="must not be negative"):
        grow(paths, disk(), -1)


# -- dir_info ----------------------------------------------------------------------


def test_dir_info_reports_size_and_free(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    info = dir_info(tmp_path)
    assert info["size"] == st.f_blocks * st.f_frsize // MIB
    assert 0 <= info["free"] <= info["size"]


def test_dir_info_of_missing_dir_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "srv" / "storage"
    with pytest.raises(BlockDeviceError, match="does not exist"):
        dir_info(missing)
    assert not (tmp_path / "srv").exists()


# -- copying -----------------------------------------------------------------------


def fill(path: Path, blocks: dict[int, bytes]) -> None:
    with path.open("r+b") as handle:
        for offset_mib, data in blocks.items():
            handle.seek(offset_mib * MIB)
            handle.write(data)


def test_read_chunks_yields_the_whole_file(paths: Paths) -> None:
    path = create(paths, disk(size=3))
    fill(path, {1: b"hello"})
    chunks = list(read_chunks(paths, disk(size=3), chunk=MIB))
    assert [len(c) for c in chunks] == [MIB, MIB, MIB]
    assert b"".join(chunks) == path.read_bytes()
    assert len(list(read_chunks(paths, disk(size=3), chunk=1000 * 1000))) == 4


def test_read_chunks_of_missing_disk_fails_at_once(paths: Paths) -> None:
    with pytest.raises(BlockDeviceError, match="missing"):
        read_chunks(paths, disk())


async def test_copy_between_nodes_stays_sparse(tmp_path: Path) -> None:
    source_paths = Paths(tmp_path / "node1")
    target_paths = Paths(tmp_path / "node2")
    source = create(source_paths, disk(size=32))
    fill(source, {0: b"boot sector", 20: b"x" * 4096, 31: b"end"})

    written = await write_from(
        target_paths, disk(size=32), stream(read_chunks(source_paths, disk(size=32)))
    )

    target = disk_path(target_paths, disk())
    assert written == 32 * MIB
    assert target.stat().st_size == 32 * MIB
    assert target.read_bytes() == source.read_bytes()
    assert allocated(target) <= 4 * MIB  # three touched chunks at most, not 32 MiB


async def test_write_from_discards_old_contents_and_keeps_trailing_hole(paths: Paths) -> None:
    path = create(paths, disk(size=4))
    fill(path, {0: b"old" * 1000, 3: b"old"})
    data = [b"new", bytes(MIB - 3), bytes(MIB), bytes(2 * MIB)]
    written = await write_from(paths, disk(size=4), stream(data))
    assert written == 4 * MIB
    content = path.read_bytes()
    assert len(content) == 4 * MIB
    assert content[:3] == b"new"
    assert content.count(0) == 4 * MIB - 3


async def test_write_from_unaligned_chunks(paths: Paths) -> None:
    payload = os.urandom(5000) + bytes(300_000) + os.urandom(777)
    chunks = [payload[i : i + 4093] for i in range(0, len(payload), 4093)]
    written = await write_from(paths, disk(), stream(chunks))
    assert written == len(payload)
    assert disk_path(paths, disk()).read_bytes() == payload
