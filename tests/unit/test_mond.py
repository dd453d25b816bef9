"""The monitoring daemon without a daemon: its collectors over files a test writes
(``/proc/diskstats``, ``/proc/stat``, a node's instance records and the fake
hypervisor's state) and its HTTP API in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from corral.hypervisor.fake import FakeHypervisor
from corral.mond import collectors as mond_collectors
from corral.mond.collectors import CpuSampler, collectors, parse_diskstats
from corral.mond.server import MondApp
from corral.noded import instance_status
from corral.objects.specs import InstanceSpec
from corral.paths import Paths

DISKSTATS = ("   7       0 loop0 2837 0 338672 212 448 0 29473 58 0 260 270 0 0 0 0\n"
             "   8       0 sda 10 2 30 4 50 6 70 8 1 90 100\n")


def test_diskstats_in_ganetis_fields() -> None:
    loop0, sda = parse_diskstats(DISKSTATS)
    assert loop0 == {"major": 7, "minor": 0, "name": "loop0", "readsNum": 2837,
                     "mergedReads": 0, "secRead": 338672, "timeRead": 212, "writes": 448,
                     "mergedWrites": 0, "secWritten": 29473, "timeWrite": 58, "ios": 0,
                     "timeIO": 260, "wIOmillis": 270}
    assert (sda["name"], sda["wIOmillis"]) == ("sda", 100)


def test_cpu_load_is_the_busy_share_over_the_window(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    sampler = CpuSampler(stat)
    # user nice system idle iowait irq softirq steal
    stat.write_text("cpu  0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0\ncpu1 0 0 0 200 0 0 0 0\n")
    sampler.sample()
    stat.write_text("cpu  0 0 0 0 0 0 0 0\ncpu0 175 0 0 125 0 0 0 0\ncpu1 50 0 0 250 0 0 0 0\n")
    sampler.sample()
    load = sampler.load()
    assert load == {"cpu_number": 2, "cpus": [0.75, 0.5], "cpu_total": 1.25}


@pytest.mark.parametrize(("admin", "actual", "code"), [
    ("up", "running", 0), ("up", "shutdown", 4), ("up", "hung", 2), ("down", "shutdown", 0),
    ("down", "running", 4), ("offline", "shutdown", 2)])
def test_instance_status_codes(admin: str, actual: str, code: int) -> None:
    assert mond_collectors._instance_status(admin, actual)["code"] == code


@pytest.fixture
async def mond(tmp_path: Path) -> AsyncIterator[tuple[TestClient, Paths]]:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    spec = InstanceSpec(name="web1", uuid="8f1c7a52-13e2-4c4d-9a6c-0d2f4f8e3b11",
                        hypervisor="fake", beparams={"maxmem": 256, "vcpus": 2},
                        admin_state="up")
    await FakeHypervisor(paths).start(spec, [])
    await instance_status.record_status_change(paths, spec, [["user", "go", 1]], "start")
    down = InstanceSpec(name="web2", uuid="u2", hypervisor="fake", admin_state="up")
    await instance_status.record_status_change(paths, down, [["user", "crash", 2]], "start")
    app = MondApp(paths, collectors(paths, CpuSampler()), cache_seconds=0)
    client = TestClient(TestServer(app.application()))
    await client.start_server()
    try:
        yield client, paths
    finally:
        await client.close()


async def _json(client: TestClient, path: str) -> Any:
    response = await client.get(path)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_the_api_paths_and_reports(mond: tuple[TestClient, Paths]) -> None:
    client, _paths = mond
    assert await _json(client, "/") == [1]
    assert await _json(client, "/1") is None
    listed = await _json(client, "/1/list/collectors")
    assert ["inst-status-fake", "instance", 1] in listed
    assert ["cpu-avg-load", "default", 0] in listed
    report = await _json(client, "/1/report/instance/inst-status-fake")
    assert list(report) == ["name", "version", "format_version", "timestamp", "category",
                            "kind", "data"]  # Ganeti's order
    web1, web2 = report["data"]["instances"]
    assert (web1["name"], web1["adminState"], web1["actualState"]) == ("web1", "up", "running")
    assert web1["state_reason"][0] == ["user", "go", 1]
    assert web1["state_reason"][1][0] == "gnt:daemon:noded:start"
    assert (web2["actualState"], web2["status"]["code"]) == ("shutdown", 4)
    assert report["data"]["status"]["code"] == 4
    every = await _json(client, "/1/report/all")
    assert [r["name"] for r in every] == [entry[0] for entry in listed]
    for path, text in (("/1/report/storage/inst-status-fake",
                        "Unable to produce a report for the requested resource"),
                       ("/1/report/nope", "Unable to produce a report for the requested "
                        "resource"), ("/3", "Resource not found")):
        response = await client.get(path)
        assert (response.status, await response.text()) == (404, text)


async def test_node_metrics(mond: tuple[TestClient, Paths]) -> None:
    client, _paths = mond
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(await response.text())
               for s in family.samples}
    web1 = (("hypervisor", "fake"), ("instance", "web1"))
    web2 = (("hypervisor", "fake"), ("instance", "web2"))
    assert samples[("corral_instance_up", web1)] == 1
    assert samples[("corral_instance_up", web2)] == 0
    assert samples[("corral_instance_admin_up", web2)] == 1
    assert samples[("corral_instance_memory_bytes", web1)] == 256 << 20
    assert samples[("corral_instance_vcpus", web1)] == 2
