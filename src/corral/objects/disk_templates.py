"""What each disk template is: where its data lives and what can be done with it.

One row per template Ganeti knows, with Ganeti's classification (``constants.DTS_*``
and ``MAP_DISK_TEMPLATE_STORAGE_TYPE``), so that the logical units ask one table
("can this template's disks grow?", "does every node reach its data?") instead of
keeping their own lists. Which templates a cluster may enable is
:data:`corral.objects.params.DISK_TEMPLATES`; a row here says nothing about whether
corral implements the template on a node.

``shared`` is Ganeti's "externally mirrored" (``DTS_EXT_MIRROR``): every node of the
group reaches the same data (shared files, Ceph, adopted devices visible everywhere),
so migration and failover move no data. ``mirrored`` is the internal mirror
(``DTS_INT_MIRROR``, DRBD): the data is on a primary and a secondary node. The rest
are local to their node: a live migration copies them along (kvm), ``move`` copies
them with the instance stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "ADOPTABLE_BLOCKDEV_ROOT",
    "BLOCKDEV_DRIVER",
    "DISK_TEMPLATE_INFO",
    "DiskTemplate",
    "template",
    "templates_where",
]

#: Where a device adopted by the ``blockdev`` template must be (Ganeti's
#: ``ADOPTABLE_BLOCKDEV_ROOT``): the persistent names udev makes.
ADOPTABLE_BLOCKDEV_ROOT: Final = "/dev/disk/"
#: The driver in a ``blockdev`` disk's logical id (Ganeti's ``BLOCKDEV_DRIVER_MANUAL``).
BLOCKDEV_DRIVER: Final = "manual"

Adoption = Literal["never", "may", "must"]


@dataclass(frozen=True, slots=True)
class DiskTemplate:
    """One disk template's properties."""

    name: str
    storage_type: str
    """The storage unit type its space comes from (``gnt-node list-storage -t``)."""
    shared: bool = False
    """Every node reaches the data: migration and failover copy nothing."""
    mirrored: bool = False
    """The data is mirrored between a primary and a secondary node (DRBD)."""
    copyable: bool = False
    """``gnt-instance move`` copies the disks to another node."""
    growable: bool = False
    snapshots: bool = False
    """Disks can be snapshotted (exports of running instances)."""
    adoption: Adoption = "never"
    """Whether disks may (``plain``) or must (``blockdev``) be existing volumes."""
    lvm: bool = False
    """Its volumes live in an LVM volume group (the cluster's, or ``vg=``)."""
    file_based: bool = False
    """Its volumes are files below a storage directory."""

    @property
    def local(self) -> bool:
        """The data is on one node only (neither shared nor mirrored), so a live
        migration has to take it along."""
        return not (self.shared or self.mirrored or self.name == "diskless")


#: Every disk template Ganeti knows, by name.
DISK_TEMPLATE_INFO: Final[dict[str, DiskTemplate]] = {t.name: t for t in (
    DiskTemplate("diskless", "diskless", shared=True, copyable=True),
    DiskTemplate("file", "file", copyable=True, growable=True, file_based=True),
    DiskTemplate("sharedfile", "sharedfile", shared=True, growable=True, file_based=True),
    DiskTemplate("plain", "lvm-vg", copyable=True, growable=True, snapshots=True,
                 adoption="may", lvm=True),
    DiskTemplate("blockdev", "blockdev", shared=True, adoption="must"),
    DiskTemplate("drbd", "lvm-vg", mirrored=True, growable=True, snapshots=True, lvm=True),
    DiskTemplate("rbd", "rados", shared=True, growable=True),
    DiskTemplate("ext", "ext", shared=True, growable=True, snapshots=True),
    DiskTemplate("gluster", "gluster", shared=True, growable=True, file_based=True),
)}


def template(name: str) -> DiskTemplate | None:
    """The row of template ``name``; None for a name no Ganeti template has."""
    return DISK_TEMPLATE_INFO.get(name)


def templates_where(**wanted: bool | str) -> frozenset[str]:
    """Names of the templates whose properties have the given values
    (``templates_where(shared=True)``)."""
    return frozenset(name for name, row in DISK_TEMPLATE_INFO.items()
                     if all(getattr(row, key) == value for key, value in wanted.items()))
