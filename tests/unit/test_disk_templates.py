"""The table of disk templates: Ganeti's classification of each one."""

from __future__ import annotations

from corral.objects.disk_templates import DISK_TEMPLATE_INFO, template, templates_where
from corral.objects.params import DISK_TEMPLATES


def test_every_template_a_cluster_may_enable_has_a_row() -> None:
    assert set(DISK_TEMPLATES) <= set(DISK_TEMPLATE_INFO)


def test_ganetis_groups_of_templates() -> None:
    # Ganeti 3.0's constants.DTS_EXT_MIRROR, DTS_INT_MIRROR, DTS_LVM, DTS_MAY_ADOPT,
    # DTS_MUST_ADOPT, DTS_GROWABLE and DTS_SNAPSHOT_CAPABLE.
    assert templates_where(shared=True) == {"diskless", "sharedfile", "blockdev", "rbd",
                                            "ext", "gluster"}
    assert templates_where(mirrored=True) == {"drbd"}
    assert templates_where(lvm=True) == {"plain", "drbd"}
    assert templates_where(adoption="may") == {"plain"}
    assert templates_where(adoption="must") == {"blockdev"}
    assert templates_where(growable=True) == {"file", "sharedfile", "plain", "drbd", "rbd",
                                              "ext", "gluster"}
    assert templates_where(snapshots=True) == {"plain", "drbd", "ext"}


def test_storage_types_and_locality() -> None:
    plain = template("plain")
    assert plain is not None and plain.storage_type == "lvm-vg" and plain.local
    assert {name for name, row in DISK_TEMPLATE_INFO.items() if row.local} == {"file",
                                                                              "plain"}
    assert template("nbd") is None
