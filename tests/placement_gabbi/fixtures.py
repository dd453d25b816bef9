"""The set-up each Placement gabbi file names in its ``fixtures:`` list, made over REST.

Placement's own functional tests build their providers with Python calls into their
database layer. Here every fixture is re-made with the public API, so the same YAML
files run against any server: the reference Placement and corral's ``/placement/``.
What each fixture creates (names, inventories, traits, aggregates, allocations and the
environment variables the YAML reads through ``$ENVIRON``) was read from Placement
16.0.0's ``placement/tests/functional/fixtures/gabbits.py``; the code is our own.

Two REST details keep the providers' generations equal to what the YAML expects:
aggregates are set at microversion 1.18 (before 1.19 setting them does not bump the
generation, as the database call the original fixtures use does not), and allocations
at 1.28 (no ``consumer_type``: such consumers read back as ``unknown``, as theirs do).

Before every file, :func:`clean` empties the server over REST: every consumer's
allocations, every provider (leaves first), the custom resource classes and the
custom traits. On a corral testbed the master daemon must leave the cluster out of
``/placement/`` (``CORRAL_PLACEMENT_CLUSTER=off`` when the testbed starts): a node's
provider cannot be deleted over REST.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import urllib3
from gabbi import fixture

__all__ = ["FIXTURES", "PlacementClient", "clean", "configure"]


class FixtureError(Exception):
    """A REST call a fixture or the clean-up makes got an unexpected answer."""


@dataclass
class PlacementClient:
    """Minimal JSON client of one Placement endpoint (``url`` ends before the API paths).

    It authenticates as the gabbi files do, ``X-Auth-Token: admin`` (the admin under
    Placement's ``noauth2``), plus ``headers`` (e.g. corral's HTTP basic credentials).
    """

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    verify: bool = True
    #: The CA certificate file to verify an HTTPS server with (else the system's).
    ca: str | None = None
    _pool: urllib3.PoolManager | None = None
    #: Providers' generations as the fixture's own changes left them (saves a GET).
    _generations: dict[str, int] = field(default_factory=dict)

    def call(self, method: str, path: str, body: Any = None, *, version: str = "1.39",
             expect: tuple[int, ...] = (200, 201, 204)) -> Any:
        """One request; the decoded JSON body (None when empty). Raises on another status."""
        if self._pool is None:
            self._pool = urllib3.PoolManager(
                cert_reqs="CERT_REQUIRED" if self.verify else "CERT_NONE",
                ca_certs=self.ca, retries=False, timeout=urllib3.Timeout(30.0))
            if not self.verify:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        headers = {"accept": "application/json", "x-auth-token": "admin",
                   "openstack-api-version": f"placement {version}", **self.headers}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        response = self._pool.request(method, self.url + path, body=data, headers=headers)
        if response.status not in expect:
            raise FixtureError(f"{method} {path} -> {response.status}: "
                               f"{response.data[:500].decode(errors='replace')}")
        return json.loads(response.data) if response.data else None

    # -- what the fixtures do -------------------------------------------------------

    def create_provider(self, name: str, *aggregates: str, parent: str | None = None,
                        rp_uuid: str | None = None) -> str:
        """A provider (and its aggregates, without bumping its generation); its uuid."""
        rp_uuid = rp_uuid or str(uuid.uuid4())
        body: dict[str, Any] = {"name": name, "uuid": rp_uuid}
        if parent:
            body["parent_provider_uuid"] = parent
        self.call("POST", "/resource_providers", body, version="1.20")
        self._generations[rp_uuid] = 0
        if aggregates:
            self.call("PUT", f"/resource_providers/{rp_uuid}/aggregates", list(aggregates),
                      version="1.18")
        return rp_uuid

    def generation(self, rp_uuid: str) -> int:
        """The provider's current generation."""
        if rp_uuid not in self._generations:
            provider = self.call("GET", f"/resource_providers/{rp_uuid}")
            self._generations[rp_uuid] = int(provider["generation"])
        return self._generations[rp_uuid]

    def ensure_resource_class(self, name: str) -> None:
        """Create a custom resource class unless it exists (standard ones always do)."""
        if name.startswith("CUSTOM_"):
            self.call("PUT", f"/resource_classes/{name}", version="1.7", expect=(201, 204))

    def add_inventory(self, rp_uuid: str, resource_class: str, total: int,
                      **fields: float) -> None:
        """One inventory record; ``max_unit`` defaults to ``total`` as in the original."""
        self.ensure_resource_class(resource_class)
        body: dict[str, Any] = {"resource_class": resource_class, "total": total,
                                "max_unit": total, **fields}
        self._generations.pop(rp_uuid, None)
        answer = self.call("POST", f"/resource_providers/{rp_uuid}/inventories", body)
        self._generations[rp_uuid] = int(answer["resource_provider_generation"])

    def set_traits(self, rp_uuid: str, *traits: str) -> None:
        """Replace the provider's traits (custom ones are created first)."""
        for trait in traits:
            if trait.startswith("CUSTOM_"):
                self.call("PUT", f"/traits/{trait}", expect=(201, 204))
        answer = self.call("PUT", f"/resource_providers/{rp_uuid}/traits",
                           {"resource_provider_generation": self.generation(rp_uuid),
                            "traits": list(traits)})
        self._generations[rp_uuid] = int(answer["resource_provider_generation"])

    def set_allocation(self, rp_uuid: str, consumer: str, resources: dict[str, int],
                       project_id: str, user_id: str) -> None:
        """Give a new consumer ``resources`` on one provider."""
        self._generations.pop(rp_uuid, None)
        self.call("PUT", f"/allocations/{consumer}",
                  {"allocations": {rp_uuid: {"resources": resources}},
                   "project_id": project_id, "user_id": user_id,
                   "consumer_generation": None}, version="1.28")


def clean(client: PlacementClient) -> None:
    """Remove every allocation, provider, custom resource class and custom trait."""
    client._generations.clear()
    providers = client.call("GET", "/resource_providers")["resource_providers"]
    consumers: set[str] = set()
    for provider in providers:
        allocations = client.call(
            "GET", f"/resource_providers/{provider['uuid']}/allocations")["allocations"]
        consumers.update(allocations)
    for consumer in sorted(consumers):
        client.call("DELETE", f"/allocations/{consumer}", expect=(204, 404))
    parents = {p["uuid"]: p.get("parent_provider_uuid") for p in providers}

    def depth(rp_uuid: str) -> int:
        parent = parents.get(rp_uuid)
        return 0 if parent is None else 1 + depth(parent)

    for rp_uuid in sorted(parents, key=depth, reverse=True):
        client.call("DELETE", f"/resource_providers/{rp_uuid}", expect=(204, 404))
    for rc in client.call("GET", "/resource_classes")["resource_classes"]:
        if rc["name"].startswith("CUSTOM_"):
            client.call("DELETE", f"/resource_classes/{rc['name']}", expect=(204, 404))
    for trait in client.call("GET", "/traits?name=startswith:CUSTOM_")["traits"]:
        client.call("DELETE", f"/traits/{trait}", expect=(204, 404))


# The server the fixtures talk to: set by the runner before it builds a file's suite
# (gabbi instantiates fixture classes itself, without arguments).
_CLIENT: PlacementClient | None = None


def configure(client: PlacementClient) -> None:
    """Point the fixtures at ``client``'s server."""
    global _CLIENT
    _CLIENT = client


def _new() -> str:
    return str(uuid.uuid4())


def _export(**values: str) -> None:
    os.environ.update(values)


class APIFixture(fixture.GabbiFixture):
    """An empty server and the identifiers every file may read from the environment."""

    client: PlacementClient

    def start_fixture(self) -> None:
        """Clean the server, export fresh identifiers, then build this fixture's data."""
        if _CLIENT is None:
            raise FixtureError("placement gabbi fixtures used before configure()")
        self.client = _CLIENT
        clean(self.client)
        for name in ("RP_UUID", "RP_NAME", "RP_UUID1", "RP_NAME1", "RP_UUID2", "RP_NAME2",
                     "PROJECT_ID", "ADMIN_PROJECT_ID", "SERVICE_PROJECT_ID", "USER_ID",
                     "PROJECT_ID_ALT", "USER_ID_ALT", "INSTANCE_UUID", "MIGRATION_UUID",
                     "CONSUMER_UUID", "PARENT_PROVIDER_UUID", "ALT_PARENT_PROVIDER_UUID"):
            os.environ[name] = _new()
        _export(CUSTOM_RES_CLASS="CUSTOM_IRON_NFV", CUSTOM_RES_CLASS1="CUSTOM_IRON_NFV1",
                CUSTOM_RES_CLASS2="CUSTOM_IRON_NFV2")
        self.make()

    def make(self) -> None:
        """This fixture's providers (none for the plain API fixture)."""

    def stop_fixture(self) -> None:
        """Nothing: the next file's fixture cleans the server before it starts."""


class AllocationFixture(APIFixture):
    """One provider (VCPU 10, DISK_GB 2048 in steps of 10) and three consumers on it."""

    def make(self) -> None:
        """Provider RP_UUID, consumers CONSUMER_0, CONSUMER_ID and ALT_CONSUMER_ID."""
        c = self.client
        os.environ["ALT_USER_ID"] = _new()
        project, user, alt_user = (os.environ["PROJECT_ID"], os.environ["USER_ID"],
                                   os.environ["ALT_USER_ID"])
        rp = c.create_provider(os.environ["RP_NAME"], rp_uuid=os.environ["RP_UUID"])
        c.add_inventory(rp, "DISK_GB", 2048, step_size=10, min_unit=10, max_unit=1000)
        c.add_inventory(rp, "VCPU", 10, max_unit=10)
        consumers = {"CONSUMER_0": _new(), "CONSUMER_ID": _new(), "ALT_CONSUMER_ID": _new()}
        c.set_allocation(rp, consumers["CONSUMER_0"], {"DISK_GB": 1000}, project, user)
        c.set_allocation(rp, consumers["CONSUMER_ID"], {"VCPU": 6}, project, user)
        c.set_allocation(rp, consumers["ALT_CONSUMER_ID"], {"DISK_GB": 20, "VCPU": 1},
                         project, alt_user)
        _export(**consumers, ALT_RP_UUID=_new(), ALT_RP_NAME=_new())


class SharedStorageFixture(APIFixture):
    """Two computes (NUMA cells with PFs below) and two sharing storage providers."""

    def make(self) -> None:
        """cn1/cn2, ss/ss2 in one aggregate; numa*_*, pf*_* beneath the computes."""
        c = self.client
        agg = _new()
        ids = {name: c.create_provider(name, agg) for name in ("cn1", "cn2", "ss", "ss2")}
        for host in (1, 2):
            for n in (1, 2):
                numa = c.create_provider(f"numa{host}_{n}", parent=ids[f"cn{host}"])
                ids[f"numa{host}_{n}"] = numa
                ids[f"pf{host}_{n}"] = c.create_provider(f"pf{host}_{n}", parent=numa)
        for cn in ("cn1", "cn2"):
            c.add_inventory(ids[cn], "VCPU", 24, allocation_ratio=16.0)
            c.add_inventory(ids[cn], "MEMORY_MB", 128 * 1024, allocation_ratio=1.5)
        c.set_traits(ids["cn1"], "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2")
        c.add_inventory(ids["cn2"], "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
        for ss in ("ss", "ss2"):
            c.add_inventory(ids[ss], "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
            c.set_traits(ids[ss], "MISC_SHARES_VIA_AGGREGATE")
        for pf in ("pf1_1", "pf1_2", "pf2_1", "pf2_2"):
            c.add_inventory(ids[pf], "SRIOV_NET_VF", 8, allocation_ratio=1.0)
        _export(AGG_UUID=agg, **{f"{name.upper()}_UUID": rp for name, rp in ids.items()})


class NUMAAggregateFixture(APIFixture):
    """Two computes without inventory, their NUMA cells with VCPU, two sharing disks."""

    def make(self) -> None:
        """cn1 in aggA, cn2 in aggA and aggB, ss1 in aggA, numa1_1 and ss2 in aggC."""
        c = self.client
        agg_a, agg_b, agg_c = _new(), _new(), _new()
        ids = {"cn1": c.create_provider("cn1", agg_a),
               "cn2": c.create_provider("cn2", agg_a, agg_b),
               "ss1": c.create_provider("ss1", agg_a),
               "ss2": c.create_provider("ss2", agg_c)}
        ids["numa1_1"] = c.create_provider("numa1_1", agg_c, parent=ids["cn1"])
        ids["numa1_2"] = c.create_provider("numa1_2", parent=ids["cn1"])
        ids["numa2_1"] = c.create_provider("numa2_1", parent=ids["cn2"])
        ids["numa2_2"] = c.create_provider("numa2_2", parent=ids["cn2"])
        for numa in ("numa1_1", "numa1_2", "numa2_1", "numa2_2"):
            c.add_inventory(ids[numa], "VCPU", 24, allocation_ratio=16.0)
        for ss in ("ss1", "ss2"):
            c.add_inventory(ids[ss], "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
            c.set_traits(ids[ss], "MISC_SHARES_VIA_AGGREGATE")
        _export(AGGA_UUID=agg_a, AGGB_UUID=agg_b, AGGC_UUID=agg_c,
                **{f"{name.upper()}_UUID": rp for name, rp in ids.items()})


class NUMANetworkFixture(APIFixture):
    """cn1 (NUMA cells with devices, network agents) and cn2 (NICs with PFs), ss1."""

    def make(self) -> None:
        """The two compute trees, the sharing disk, two allocations on them."""
        cn1, cn2 = self.parents()
        self.make_entities(cn1, cn2)

    def parents(self) -> tuple[str | None, str | None]:
        """Where cn1 and cn2 hang (nowhere: they are roots here)."""
        return None, None

    def make_entities(self, cn1_parent: str | None, cn2_parent: str | None) -> None:
        """Everything below (and including) cn1 and cn2."""
        c = self.client
        ids: dict[str, str] = {}
        agg_a = _new()
        ss1 = c.create_provider("ss1", agg_a)
        c.set_traits(ss1, "MISC_SHARES_VIA_AGGREGATE")
        c.add_inventory(ss1, "DISK_GB", 2000)
        ids["ss1"] = ss1
        cn1 = c.create_provider("cn1", agg_a, parent=cn1_parent)
        c.set_traits(cn1, "COMPUTE_VOLUME_MULTI_ATTACH")
        ids["cn1"] = cn1
        numas = []
        for i in (0, 1):
            numa = c.create_provider(f"numa{i}", parent=cn1)
            c.set_traits(numa, "HW_NUMA_ROOT", *(["CUSTOM_FOO"] if i == 1 else []))
            c.add_inventory(numa, "VCPU", 4)
            numas.append(numa)
            ids[f"numa{i}"] = numa
        c.add_inventory(numas[0], "MEMORY_MB", 2048, min_unit=512, step_size=256)
        c.add_inventory(numas[1], "MEMORY_MB", 2048, min_unit=256, max_unit=1024)
        user, project = "numafx-user", "numafx-project"
        c.set_allocation(numas[0], _new(), {"VCPU": 2}, project, user)
        ids["fpga0"] = c.create_provider("fpga0", parent=numas[0])
        c.add_inventory(ids["fpga0"], "FPGA", 1)
        ids["pgpu0"] = c.create_provider("pgpu0", parent=numas[0])
        c.add_inventory(ids["pgpu0"], "VGPU", 8)
        for i in (0, 1):
            ids[f"fpga1_{i}"] = c.create_provider(f"fpga1_{i}", parent=numas[1])
            c.add_inventory(ids[f"fpga1_{i}"], "FPGA", 1)
        agent = c.create_provider("sriov_agent", parent=cn1)
        c.set_traits(agent, "CUSTOM_VNIC_TYPE_DIRECT")
        ids["sriov_agent"] = agent
        for i in (1, 2):
            dev = c.create_provider(f"esn{i}", parent=agent)
            c.set_traits(dev, f"CUSTOM_PHYSNET{i}")
            c.add_inventory(dev, "NET_BW_EGR_KILOBIT_PER_SEC", 10000 * i)
            ids[f"esn{i}"] = dev
        agent = c.create_provider("ovs_agent", parent=cn1)
        c.set_traits(agent, "CUSTOM_VNIC_TYPE_NORMAL")
        ids["ovs_agent"] = agent
        ids["br_int"] = c.create_provider("br_int", parent=agent)
        c.set_traits(ids["br_int"], "CUSTOM_PHYSNET0")
        c.add_inventory(ids["br_int"], "NET_BW_EGR_KILOBIT_PER_SEC", 1000)
        cn2 = c.create_provider("cn2", agg_a, parent=cn2_parent)
        ids["cn2"] = cn2
        c.add_inventory(cn2, "VCPU", 8)
        c.set_allocation(cn2, _new(), {"VCPU": 3}, project, user)
        c.add_inventory(cn2, "MEMORY_MB", 2048, min_unit=1024, step_size=128)
        c.add_inventory(cn2, "DISK_GB", 1000)
        c.set_traits(cn2, "CUSTOM_FOO")
        nics = []
        for i in (1, 2, 3):
            nic = c.create_provider(f"nic{i}", parent=cn2)
            c.set_traits(nic, "CUSTOM_HW_NIC_ROOT")
            nics.append(nic)
            ids[f"nic{i}"] = nic
        pfs = [(0, "1_1", 1, 4), (0, "1_2", 2, 4), (1, "2_1", 1, 2), (1, "2_2", 2, 2),
               (1, "2_3", 1, 2), (1, "2_4", 2, 2), (2, "3_1", 1, 8)]
        for nic_index, suffix, physnet, vfs in pfs:
            pf = c.create_provider(f"pf{suffix}", parent=nics[nic_index])
            c.set_traits(pf, f"CUSTOM_PHYSNET{physnet}")
            c.add_inventory(pf, "CUSTOM_VF", vfs)
            ids[f"pf{suffix}"] = pf
        _export(AGGA_UUID=agg_a, **{f"{name.upper()}_UUID": rp for name, rp in ids.items()})


class DeepNUMANetworkFixture(NUMANetworkFixture):
    """The NUMA network trees hung below two empty parents and one grandparent."""

    def parents(self) -> tuple[str | None, str | None]:
        """gp1 with p1 and p2 below it; cn1 goes under p1, cn2 under p2."""
        c = self.client
        gp1 = c.create_provider("gp1")
        return c.create_provider("p1", parent=gp1), c.create_provider("p2", parent=gp1)


class NonSharedStorageFixture(APIFixture):
    """Three computes with local VCPU, MEMORY_MB and DISK_GB; aggregates only named."""

    def make(self) -> None:
        """cn1, cn2, cn3 and the (unused) aggregate uuids AGGA/AGGB/AGGC."""
        c = self.client
        values = {"AGGA_UUID": _new(), "AGGB_UUID": _new(), "AGGC_UUID": _new()}
        for name in ("cn1", "cn2", "cn3"):
            rp = c.create_provider(name)
            values[f"{name.upper()}_UUID"] = rp
        for name in ("cn1", "cn2", "cn3"):
            rp = values[f"{name.upper()}_UUID"]
            c.add_inventory(rp, "VCPU", 24)
            c.add_inventory(rp, "MEMORY_MB", 128 * 1024)
            c.add_inventory(rp, "DISK_GB", 2000)
        _export(**values)


class GranularFixture(APIFixture):
    """cn_left, cn_middle, cn_right, shr_disk_1, shr_disk_2 and shr_net (aggA/B/C)."""

    def make(self) -> None:
        """The granular-request population (see the class docstring)."""
        c = self.client
        c.ensure_resource_class("CUSTOM_NET_MBPS")
        agg_a, agg_b, agg_c = _new(), _new(), _new()
        _export(AGGA=agg_a, AGGB=agg_b, AGGC=agg_c)
        left = c.create_provider("cn_left", agg_a)
        for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500), ("VGPU", 8),
                          ("SRIOV_NET_VF", 8), ("CUSTOM_NET_MBPS", 4000)):
            c.add_inventory(left, rc, total)
        c.set_traits(left, "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_GPU_API_DXVA",
                     "HW_NIC_DCB_PFC", "CUSTOM_FOO")
        middle = c.create_provider("cn_middle", agg_a, agg_b)
        for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("SRIOV_NET_VF", 8),
                          ("CUSTOM_NET_MBPS", 4000)):
            c.add_inventory(middle, rc, total)
        c.set_traits(middle, "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE",
                     "HW_NIC_ACCEL_TLS")
        right = c.create_provider("cn_right", agg_b, agg_c)
        for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)):
            c.add_inventory(right, rc, total)
        c.add_inventory(right, "VGPU", 8, max_unit=2)
        c.set_traits(right, "HW_CPU_X86_MMX", "HW_GPU_API_DXVA", "CUSTOM_DISK_SSD")
        disk1 = c.create_provider("shr_disk_1", agg_a)
        c.add_inventory(disk1, "DISK_GB", 1000)
        c.set_traits(disk1, "MISC_SHARES_VIA_AGGREGATE", "CUSTOM_DISK_SSD")
        disk2 = c.create_provider("shr_disk_2", agg_a, agg_b)
        c.add_inventory(disk2, "DISK_GB", 1000)
        c.set_traits(disk2, "MISC_SHARES_VIA_AGGREGATE")
        net = c.create_provider("shr_net", agg_c)
        c.add_inventory(net, "SRIOV_NET_VF", 16)
        c.add_inventory(net, "CUSTOM_NET_MBPS", 40000)
        c.set_traits(net, "MISC_SHARES_VIA_AGGREGATE")
        _export(CN_LEFT=left, CN_MIDDLE=middle, CN_RIGHT=right, SHR_DISK_1=disk1,
                SHR_DISK_2=disk2, SHR_NET=net)


class NeutronQoSMultiSegmentFixture(APIFixture):
    """Four computes with OVS and SR-IOV agents, bridges and PFs on physnets."""

    def make(self) -> None:
        """compute0..compute3 and their agent trees (compute3 has two bridges, two PFs)."""
        c = self.client
        normal = ["CUSTOM_VNIC_TYPE_NORMAL"]
        direct = ["CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL",
                  "CUSTOM_VNIC_TYPE_MACVTAP"]
        physnets = ["CUSTOM_PHYSNET_OTHER", "CUSTOM_PHYSNET_MSN_S1", "CUSTOM_PHYSNET_MSN_S2",
                    "CUSTOM_PHYSNET_MSN_S1"]
        for i in range(4):
            name = f"compute{i}"
            bw = 1000 if i == 3 else 5000
            pf_bw = 1000 if i == 3 else 10000
            cn = c.create_provider(name)
            os.environ[name] = cn
            for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)):
                c.add_inventory(cn, rc, total)
            ovs = c.create_provider(f"{name}:Open vSwitch agent", parent=cn)
            os.environ[f"{name}:ovs_agent"] = ovs
            c.add_inventory(ovs, "NET_PACKET_RATE_KILOPACKET_PER_SEC", 1000)
            c.set_traits(ovs, *normal)
            bridges = [("br-ex", "br_ex", physnets[i])]
            if i == 3:
                bridges.append(("br-ex2", "br_ex2", "CUSTOM_PHYSNET_MSN_S2"))
            for bridge, key, physnet in bridges:
                br = c.create_provider(f"{name}:Open vSwitch agent:{bridge}", parent=ovs)
                os.environ[f"{name}:{key}"] = br
                c.add_inventory(br, "NET_BW_EGR_KILOBIT_PER_SEC", bw)
                c.add_inventory(br, "NET_BW_IGR_KILOBIT_PER_SEC", bw)
                c.set_traits(br, *normal, physnet)
            sriov = c.create_provider(f"{name}:NIC Switch agent", parent=cn)
            # The original exports compute2's agent under compute3's name too (a slip in
            # it that its YAML does not read); the same value keeps the environment equal.
            os.environ[f"{name}:sriov_agent"] = (
                os.environ["compute2:sriov_agent"] if i == 3 else sriov)  # noqa: SIM112
            c.set_traits(sriov, *direct)
            pfs = [("enp129s0f0", "pf0", physnets[i])]
            if i == 3:
                pfs.append(("enp129s0f1", "pf1", "CUSTOM_PHYSNET_MSN_S2"))
            for dev, key, physnet in pfs:
                pf = c.create_provider(f"{name}:NIC Switch agent:{dev}", parent=sriov)
                os.environ[f"{name}:{key}"] = pf
                c.add_inventory(pf, "NET_BW_EGR_KILOBIT_PER_SEC", pf_bw)
                c.add_inventory(pf, "NET_BW_IGR_KILOBIT_PER_SEC", pf_bw)
                c.set_traits(pf, *direct, physnet)


#: The fixture classes by the name the YAML files use.
FIXTURES: dict[str, type[APIFixture]] = {
    cls.__name__: cls for cls in (
        APIFixture, AllocationFixture, SharedStorageFixture, NUMAAggregateFixture,
        NUMANetworkFixture, DeepNUMANetworkFixture, NonSharedStorageFixture,
        GranularFixture, NeutronQoSMultiSegmentFixture)}
