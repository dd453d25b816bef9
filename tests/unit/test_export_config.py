"""An export's config.ini: Ganeti 3.0's (recorded from a real export) reads, and what
corral writes reads back the same and has Ganeti's sections and keys."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from corral.cmdlib.export_config import parse_export, write_export
from corral.errors import ParameterError
from corral.objects import NIC, Disk, Instance

GANETI = Path(__file__).resolve().parents[1] / "data" / "ganeti-export" / "o-inst1.example"


def test_ganeti_export_reads() -> None:
    exported = parse_export((GANETI / "config.ini").read_text(), "the recorded export")
    assert (exported.name, exported.os, exported.disk_template, exported.hypervisor) == (
        "o-inst1.example", "o-dd+default", "file", "fake")
    [disk] = exported.disks
    assert (disk.dump, disk.size, disk.name) == ("9c08bf95-a03d-4ba7-acba-ee84062fabc9", 4,
                                                 None)
    assert exported.nics == [{"mac": "aa:00:00:a3:cc:96", "link": "gntbr0",
                              "mode": "bridged"}]
    assert exported.beparams["maxmem"] == "128"
    assert exported.compression == "none"


def test_written_export_has_ganetis_layout_and_reads_back() -> None:
    disks = [Disk(uuid="d-0", size=64, iv_name="disk/0"),
             Disk(uuid="d-1", size=8, iv_name="disk/1", name="data")]
    inst = Instance(uuid="i-1", name="web.example", primary_node="n-1", os="tiny+default",
                    hypervisor="kvm", disk_template="plain", disks=["d-0", "d-1"],
                    nics=[NIC(uuid="n", mac="aa:00:00:00:00:01", ip="192.0.2.5",
                              nicparams={"mode": "bridged", "link": "br0"})],
                    hvparams={"kernel_path": ""}, osparams={"color": "blue"},
                    tags=["b", "a"])
    text = write_export(inst, disks, "n-1", 1700000000,
                        {"maxmem": 256, "minmem": 128, "vcpus": 2})
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    assert parser.sections() == ["export", "instance", "hypervisor", "backend", "os",
                                 "os_private"]
    assert dict(parser["export"]) == {"version": "0", "timestamp": "1700000000",
                                      "source": "n-1", "os": "tiny+default",
                                      "compression": "none"}
    assert parser["instance"]["disk1_name"] == "data"
    assert parser["instance"]["disk0_name"] == "None"
    assert parser["instance"]["nic0_network"] == "None"
    assert parser["instance"]["tags"] == "a b"
    back = parse_export(text, "corral's export")
    assert [(d.dump, d.size) for d in back.disks] == [("d-0", 64), ("d-1", 8)]
    assert back.nics[0]["ip"] == "192.0.2.5" and back.osparams == {"color": "blue"}


def test_bad_config_is_refused_naming_it() -> None:
    with pytest.raises(ParameterError, match="export x is not a valid"):
        parse_export("[export]\nversion = 0\n", "export x")
    with pytest.raises(ParameterError, match="version '1' is not supported"):
        parse_export("[export]\nversion = 1\n[instance]\nname = a\n", "export y")
