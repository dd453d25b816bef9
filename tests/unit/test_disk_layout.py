"""Disk definitions and logical ids by template (Ganeti's rules for vg= and adopt=)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.cmdlib.disk_layout import lv_name, new_logical_id, parse_disks
from corral.errors import OpPrereqError, ParameterError


def _ids(name: str, disks: list[dict[str, Any]], vg: str = "xenvg") -> list[list[str]]:
    parsed = parse_disks(name, disks, default_vg=vg)
    return [new_logical_id(name, d, instance_uuid="i-1", disk_uuid=f"d-{n}", index=n,
                           storage_dir="/srv/f") for n, d in enumerate(parsed)]


def test_plain_disks_are_lvs_named_by_disk_uuid_in_the_cluster_or_given_vg() -> None:
    assert _ids("plain", [{"size": "1G"}, {"size": 64, "vg": "fastvg"}]) == [
        ["xenvg", "d-0.disk0"], ["fastvg", "d-1.disk1"]]
    assert lv_name("abc", 3) == "abc.disk3"


def test_plain_without_a_volume_group_is_refused() -> None:
    with pytest.raises(OpPrereqError, match=r"no LVM volume group.*--vg-name"):
        parse_disks("plain", [{"size": 1}], default_vg="")


@pytest.mark.parametrize(("name", "disks", "message"), [
    ("plain", [{"size": 1, "adopt": "lv1"}], "Only one of 'size' and 'adopt' allowed"),
    ("plain", [{"adopt": "lv1"}, {"size": 4}], "Either all disks are adopted or none is"),
    ("plain", [{"adopt": "lv1"}, {"adopt": "lv1"}], "Duplicate volume names given"),
    ("plain", [{"adopt": "lv1", "spindles": 2}], "spindles is not a valid option"),
    ("plain", [{"adopt": "bad name"}], "not a valid LVM name"),
    ("plain", [{"size": 1, "vg": "-vg"}], "not a valid LVM name"),
    ("file", [{"adopt": "x"}], "Disk adoption is not supported for the 'file' disk template"),
    ("blockdev", [{"size": 1}], "Disk template blockdev requires disk adoption"),
    ("blockdev", [{"adopt": "/dev/disk/a"}, {"adopt": "/dev/disk/../disk/a"}],
     "Duplicate disk names given for adoption"),
    ("file", [{"size": 1, "vg": "xenvg"}], "'vg' is only for disks in LVM"),
    ("plain", [{"size": 1, "provider": "p"}],
         "The 'provider' option is only valid for the ext disk template, not plain"),
])
def test_refused_definitions(name: str, disks: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        parse_disks(name, disks, default_vg="xenvg")


def test_adopted_disks_take_their_size_from_the_volume() -> None:
    parsed = parse_disks("plain", [{"adopt": "old-lv", "vg": "othervg"}], default_vg="xenvg")
    assert parsed[0]["size"] is None and parsed[0]["adopt"] == "old-lv"
    assert parsed[0]["vg"] == "othervg"
    # The LV is renamed to corral's name once adopted.
    assert _ids("plain", [{"adopt": "old-lv"}]) == [["xenvg", "d-0.disk0"]]


def test_blockdev_logical_ids_name_the_normalised_device() -> None:
    assert _ids("blockdev", [{"adopt": "/dev/disk/by-id/../by-id/x"}]) == [
        ["manual", "/dev/disk/by-id/x"]]


def test_file_disks_keep_their_path_scheme() -> None:
    assert _ids("file", [{"size": 1}]) == [["loop", "/srv/f/i-1/d-0.disk0"]]
