"""Networks on one 3-node testbed, as an administrator uses them: gnt-network add,
connect, instances whose NICs take addresses from the pool, list and info, a full
pool, conflicts, a disconnect refused while NICs use the network, removal; then the
same resources through RAPI (``/2/networks``...)."""

from __future__ import annotations

import json
import subprocess
from urllib.parse import urlsplit

import pytest

from tests.conftest import TestbedHandle
from tests.integration.test_rapi import _client
from tests.integration.test_rapi_clients import (
    GANETI_LIB,
    SYSTEM_PYTHON,
    _ganeti_client_missing,
    rapi_of,
)

pytestmark = pytest.mark.integration

ADD = ("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start", "-n",
       "node2.testbed")


@pytest.fixture
def tb(shared_testbed: TestbedHandle) -> TestbedHandle:
    """The module's shared testbed (one for the whole workflow), with the event-loop check
    every test of a shared testbed gets (tests/conftest.py)."""
    return shared_testbed


def _rows(tb: TestbedHandle, fields: str, *names: str) -> list[list[str]]:
    out = tb.run("gnt-network", "list", "--no-headers", "--separator", "|", "-o", fields,
                 *names).stdout
    return [line.split("|") for line in out.splitlines() if line]


def test_administrator_workflow(tb: TestbedHandle) -> None:
    tb.run("gnt-network", "add", "--network=10.99.0.0/29", "--gateway=10.99.0.1",
           "--add-reserved-ips=10.99.0.5", "--tags=a,b", "net-a")
    again = tb.run("gnt-network", "add", "--network=10.99.0.0/29", "net-a", check=False)
    assert again.returncode == 1
    assert "Desired network name 'net-a' already exists as a network" in again.stderr
    assert _rows(tb, "name,network,gateway,mac_prefix,group_list,tags,free_count,"
                 "reserved_count,map,external_reservations") == [
        ["net-a", "10.99.0.0/29", "10.99.0.1", "-", "", "a,b", "4", "4", "XX...X.X",
         "10.99.0.0, 10.99.0.1, 10.99.0.5, 10.99.0.7"]]

    # Not connected yet: a NIC on it is refused, saying so.
    refused = tb.run(*ADD, "--net", "0:network=net-a,ip=pool", "web0.testbed", check=False)
    assert refused.returncode == 1
    assert "No netparams found for network net-a" in refused.stderr
    tb.run("gnt-network", "connect", "-N", "mode=routed,link=rt-a", "net-a", "default")
    assert _rows(tb, "group_list,group_cnt") == [["default (routed, rt-a, )", "1"]]

    added = tb.run(*ADD, "--net", "0:network=net-a,ip=pool", "--net",
                   "1:network=net-a,ip=pool", "web1.testbed")
    assert "Chose IP 10.99.0.2 from network net-a" in added.stdout + added.stderr
    out = tb.run("gnt-instance", "list", "--no-headers", "--separator", "|", "-o",
                 "name,nic.ips,nic.modes,nic.links", "web1.testbed").stdout
    assert out.split() == ["web1.testbed|10.99.0.2,10.99.0.3|routed,routed|rt-a,rt-a"]
    taken = tb.run(*ADD, "--net", "0:network=net-a,ip=10.99.0.3", "web2.testbed",
                   check=False)
    assert taken.returncode == 1
    assert "IP address 10.99.0.3 already in use or does not belong to network net-a" \
        in taken.stderr
    outside = tb.run(*ADD, "--net", "0:ip=10.99.0.4,mode=routed,link=x", "web2.testbed",
                     check=False)
    assert outside.returncode == 1
    assert "belongs to network net-a, but the target NIC does not" in outside.stderr

    # Two addresses are left: the third NIC finds the pool full, and nothing is created.
    full = tb.run(*ADD, "--net", "0:network=net-a,ip=pool", "--net", "1:network=net-a,ip=pool",
                  "--net", "2:network=net-a,ip=pool", "web2.testbed", check=False)
    assert full.returncode == 1
    assert "Unable to get a free IP for NIC 2 from the address pool: network net-a " \
        "(10.99.0.0/29) is full" in full.stderr

    # Nothing of web2 stayed behind: only web1 uses the pool.
    info = tb.run("gnt-network", "info", "net-a").stdout
    assert "  Free: 2 (25.00%)" in info
    assert "    default (mode:routed link:rt-a vlan:)" in info
    assert "    web1.testbed: 0:10.99.0.2, 1:10.99.0.3" in info

    # In use: neither disconnect nor remove.
    busy = tb.run("gnt-network", "disconnect", "net-a", "default", check=False)
    assert busy.returncode == 1
    assert "Conflicting IP addresses found" in busy.stderr
    assert "web1.testbed: nic0/10.99.0.2, nic1/10.99.0.3" in busy.stderr
    still = tb.run("gnt-network", "remove", "net-a", check=False)
    assert still.returncode == 1 and "Network still connected" in still.stderr

    # Another network over the same subnet cannot connect while NICs use addresses in it.
    tb.run("gnt-network", "add", "--network=10.99.0.0/29", "net-b")
    clash = tb.run("gnt-network", "connect", "-N", "mode=bridged,link=br0", "net-b",
                   "default", check=False)
    assert clash.returncode == 1 and "Conflicting IP addresses found" in clash.stderr
    tb.run("gnt-network", "remove", "net-b")

    # Removing a NIC and the instance frees their addresses; then it can all go.
    tb.run("gnt-instance", "modify", "--net", "1:remove", "web1.testbed")
    assert _rows(tb, "free_count,inst_cnt") == [["3", "1"]]
    tb.run("gnt-instance", "remove", "-f", "web1.testbed")
    assert _rows(tb, "free_count,inst_list") == [["4", ""]]
    tb.run("gnt-network", "disconnect", "net-a", "default")
    tb.run("gnt-network", "remove", "net-a")
    assert _rows(tb, "name") == []


def test_rapi_resources(tb: TestbedHandle) -> None:
    api = _client(tb)
    api.run("POST", "/2/networks", {"network_name": "net-r", "network": "10.97.0.0/28",
                                    "gateway": "10.97.0.1", "add_reserved_ips": ["10.97.0.3"],
                                    "tags": ["x"]})
    assert api.ok("GET", "/2/networks") == [{"name": "net-r", "uri": "/2/networks/net-r"}]
    net = api.ok("GET", "/2/networks/net-r")
    assert (net["network"], net["gateway"], net["mac_prefix"], net["free_count"]) == (
        "10.97.0.0/28", "10.97.0.1", None, 12)
    assert net["external_reservations"] == "10.97.0.0, 10.97.0.1, 10.97.0.3, 10.97.0.15"
    assert [n["name"] for n in api.ok("GET", "/2/networks?bulk=1")] == ["net-r"]
    status, answer, _ = api.request("GET", "/2/networks/net-zz")
    assert status == 404, answer

    job = api.wait(api.ok("PUT", "/2/networks/net-r/modify",
                          {"gateway": "10.97.0.2", "add_reserved_ips": ["10.97.0.9"]}))
    assert job["status"] == "error"
    assert "Cannot modify gateway and reserved ips at once" in json.dumps(job["opresult"])
    api.run("PUT", "/2/networks/net-r/modify", {"mac_prefix": "aa:bb:cc"})
    api.run("PUT", "/2/networks/net-r/connect", {"group_name": "default",
                                                  "network_mode": "bridged",
                                                  "network_link": "br-r"})
    assert api.ok("GET", "/2/networks/net-r")["group_list"] == [
        ["default", "bridged", "br-r", ""]]
    api.run("POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": "rapi-net.testbed",
        "disk_template": "diskless", "disks": [], "pnode": "node3.testbed",
        "no_install": True, "start": False, "ip_check": False, "name_check": False,
        "nics": [{"network": "net-r", "ip": "pool"}]})
    net = api.ok("GET", "/2/networks/net-r")
    assert (net["inst_list"], net["free_count"]) == (["rapi-net.testbed"], 11)

    api.run("PUT", "/2/networks/net-r/tags?tag=y")
    assert api.ok("GET", "/2/networks/net-r/tags") == ["x", "y"]
    api.run("DELETE", "/2/networks/net-r/tags?tag=x")
    job = api.wait(api.ok("PUT", "/2/networks/net-r/disconnect", {"group_name": "default"}))
    assert job["status"] == "error"
    api.run("DELETE", "/2/instances/rapi-net.testbed")
    api.run("PUT", "/2/networks/net-r/disconnect", {"group_name": "default"})
    api.run("DELETE", "/2/networks/net-r")
    assert api.ok("GET", "/2/networks") == []


#: Ganeti's own client creating, connecting, changing, disconnecting and removing a
#: network (run with the system Python, where the client lives); prints what it saw.
_GANETI_CLIENT_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ganeti.rapi import client as rapi
host, port, user, password, cafile = sys.argv[2:7]
c = rapi.GanetiRapiClient(host, port=int(port), username=user, password=password,
    curl_config_fn=rapi.GenericCurlConfig(cafile=cafile, proxy="", connect_timeout=10))
def done(job):
    assert c.WaitForJobCompletion(job, period=0.2, retries=150), c.GetJobStatus(job)
done(c.CreateNetwork("net-g", "10.96.0.0/29", gateway="10.96.0.1"))
done(c.ConnectNetwork("net-g", "default", "routed", "rt-g"))
done(c.ModifyNetwork("net-g", add_reserved_ips=["10.96.0.4"]))
seen = c.GetNetwork("net-g")
done(c.DisconnectNetwork("net-g", "default"))
done(c.DeleteNetwork("net-g"))
print(json.dumps({"network": seen, "after": c.GetNetworks()}))
"""


def test_ganeti_rapi_client(tb: TestbedHandle) -> None:
    missing = _ganeti_client_missing()
    if missing:
        pytest.skip(missing)
    rapi = rapi_of(tb)
    url = urlsplit(rapi.url)
    proc = subprocess.run(
        [SYSTEM_PYTHON, "-c", _GANETI_CLIENT_SCRIPT, str(GANETI_LIB), str(url.hostname),
         str(url.port), rapi.user, rapi.password, str(rapi.cafile)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["network"]["group_list"] == [["default", "routed", "rt-g", ""]]
    assert seen["network"]["external_reservations"] == \
        "10.96.0.0, 10.96.0.1, 10.96.0.4, 10.96.0.7"
    assert seen["after"] == []
