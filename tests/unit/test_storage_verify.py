"""The storage hooks of gnt-cluster verify on a node: whether a template's place is
usable, and which volumes are there; and the kvm hypervisor's health check."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from corral.errors import ParameterError
from corral.hypervisor.kvm import verify_node
from corral.paths import Paths
from corral.storage.verify import check_storage, list_volumes

FILE_DIR = "/srv/corral/file-storage"
SHARED_DIR = "/srv/corral/shared-file-storage"


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    result = Paths(tmp_path / "node")
    result.ensure_dirs()
    return result


def check(paths: Paths, template: str, where: str) -> str | None:
    return asyncio.run(check_storage(paths, template, where))


def test_a_file_directory_is_made_on_first_use_a_shared_one_must_be_there(paths: Paths) -> None:
    assert check(paths, "file", FILE_DIR) is None
    assert check(paths, "sharedfile", SHARED_DIR) == (
        f"Path '{SHARED_DIR}' is not existing or not a directory.")
    paths.node_path(SHARED_DIR).mkdir(parents=True)
    assert check(paths, "sharedfile", SHARED_DIR) is None


def test_a_directory_the_node_does_not_allow_is_unusable(paths: Paths) -> None:
    message = check(paths, "file", "/srv/elsewhere")
    assert message is not None and message.startswith(
        "Path '/srv/elsewhere' is not one of the directories this node allows disks in")
    assert check(paths, "file", "/etc/disks") == "Path '/etc/disks' uses a forbidden prefix"
    paths.file_storage_paths.parent.mkdir(parents=True, exist_ok=True)
    paths.file_storage_paths.write_text("/srv/elsewhere\n")
    assert check(paths, "file", "/srv/elsewhere") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_a_directory_nobody_may_write_is_unusable(paths: Paths) -> None:
    local = paths.node_path(FILE_DIR)
    local.mkdir(parents=True)
    local.chmod(0o500)
    assert check(paths, "file", FILE_DIR) == f"Path '{FILE_DIR}' is not writable"


def test_a_plain_file_where_the_directory_should_be(paths: Paths) -> None:
    local = paths.node_path(FILE_DIR)
    local.parent.mkdir(parents=True)
    local.write_text("")
    assert check(paths, "file", FILE_DIR) == (
        f"Path '{FILE_DIR}' is not existing or not a directory.")


def test_volumes_are_the_files_of_the_directory_and_one_level_below(paths: Paths) -> None:
    assert asyncio.run(list_volumes(paths, "file", FILE_DIR)) == []
    local = paths.node_path(FILE_DIR)
    (local / "inst-uuid" / "deeper").mkdir(parents=True)
    (local / "inst-uuid" / "disk-uuid.disk0").write_bytes(b"")
    (local / "inst-uuid" / "deeper" / "ignored").write_bytes(b"")
    (local / "stray.img").write_bytes(b"")
    assert asyncio.run(list_volumes(paths, "file", FILE_DIR)) == [
        f"{FILE_DIR}/inst-uuid/disk-uuid.disk0", f"{FILE_DIR}/stray.img"]


def test_a_template_without_a_hook_is_refused_by_name(paths: Paths) -> None:
    with pytest.raises(ParameterError, match="cannot verify storage of disk template 'rbd'"):
        check(paths, "rbd", "pool")


def test_kvm_needs_its_binary_and_with_kvm_flag_enabled_the_device(tmp_path: Path) -> None:
    binary = tmp_path / "qemu"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    device = tmp_path / "kvm"
    assert verify_node({"kvm_path": str(binary), "kvm_flag": "disabled"}, device) is None
    problem = verify_node({"kvm_path": str(binary), "kvm_flag": "enabled"}, device)
    assert problem is not None and problem.startswith(f"kvm_flag is enabled but {device}")
    device.write_text("")
    assert verify_node({"kvm_path": str(binary), "kvm_flag": "enabled"}, device) is None
    assert verify_node({"kvm_path": str(tmp_path / "none")}, device) == (
        f"the qemu binary {tmp_path / 'none'} (kvm_path) does not exist or is not executable")
