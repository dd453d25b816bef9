"""The tiny guest's recipe without qemu or the kernel package: module load order from
``modules.dep``, the initramfs archive format and the kernel command line."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from corral.errors import NotFoundError
from corral.testbed import guest as tiny_guest


def _modules_dir(tmp_path: Path) -> Path:
    (tmp_path / "modules.dep").write_text(
        "kernel/net/virtio_net.ko: kernel/net/net_failover.ko kernel/core/failover.ko "
        "kernel/virtio/virtio.ko kernel/virtio/virtio_ring.ko\n"
        "kernel/net/net_failover.ko: kernel/core/failover.ko\n"
        "kernel/core/failover.ko:\n"
        "kernel/virtio/virtio.ko:\n"
        "kernel/virtio/virtio_ring.ko:\n"
        "kernel/virtio/virtio-pci.ko: kernel/virtio/virtio.ko kernel/virtio/virtio_ring.ko\n")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/input/evdev.ko\n")
    return tmp_path


def test_modules_load_after_what_they_need_and_once(tmp_path: Path) -> None:
    order = tiny_guest._module_order(_modules_dir(tmp_path),
                                     ["virtio_net", "virtio_pci", "evdev"])
    assert order.index("kernel/core/failover.ko") < order.index("kernel/net/net_failover.ko")
    assert order.index("kernel/net/net_failover.ko") < order.index("kernel/net/virtio_net.ko")
    assert order.index("kernel/virtio/virtio.ko") < order.index("kernel/virtio/virtio-pci.ko")
    assert len(order) == len(set(order)) == 6  # evdev is built in: nothing to load


def test_a_module_the_kernel_lacks_is_named(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="e1000"):
        tiny_guest._module_order(_modules_dir(tmp_path), ["e1000"])


def test_the_archive_is_newc_with_root_owned_entries() -> None:
    archive = tiny_guest._Cpio()
    archive.directory("bin")
    archive.file("bin/hello", b"hi\n", 0o755)
    archive.symlink("init", "bin/hello")
    archive.char_device("dev/console", 5, 1)
    data = archive.finish()
    entries = []
    offset = 0
    while True:
        header = data[offset:offset + 110]
        assert header[:6] == b"070701"
        fields = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, uid, gid, size, rmajor, rminor, namesize = (
            fields[1], fields[2], fields[3], fields[6], fields[9], fields[10], fields[11])
        start = offset + 110
        name = data[start:start + namesize - 1].decode()
        body = start + namesize + (-(start + namesize) % 4)
        content = data[body:body + size]
        offset = body + size + (-(body + size) % 4)
        if name == "TRAILER!!!":
            break
        entries.append((name, stat.S_IFMT(mode), mode & 0o7777, uid, gid, content,
                        (rmajor, rminor)))
    assert offset == len(data)
    assert entries == [
        ("bin", stat.S_IFDIR, 0o755, 0, 0, b"", (0, 0)),
        ("bin/hello", stat.S_IFREG, 0o755, 0, 0, b"hi\n", (0, 0)),
        ("init", stat.S_IFLNK, 0o777, 0, 0, b"bin/hello", (0, 0)),
        ("dev/console", stat.S_IFCHR, 0o600, 0, 0, b"", (5, 1)),
    ]


def test_kernel_command_line() -> None:
    """The documented syntax of the guest's kernel command line."""
    assert tiny_guest.kernel_args() == "console=ttyS0 quiet"
    assert tiny_guest.kernel_args("192.0.2.10/24", "192.0.2.1", "vm1") == (
        "console=ttyS0 quiet corral.ip=192.0.2.10/24 corral.gw=192.0.2.1 "
        "corral.hostname=vm1")
