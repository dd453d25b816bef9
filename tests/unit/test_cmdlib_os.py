"""OP_OS_DIAGNOSE, the "os" query resource and the OS settings of OP_CLUSTER_SET_PARAMS,
against a real store and node daemons in this process with real OS definitions."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params
from corral.config import ConfigStore
from corral.errors import NotFoundError, OsError, OsScriptError, ParameterError
from corral.objects import Cluster, Node
from tests.unit.config_helpers import new_store
from tests.unit.lu_helpers import JobCtx, LocalRpc, make_processor, run_op

#: Where the nodes keep their OS definitions (cluster-wide).
SEARCH = "/srv/ganeti/os"


@dataclass(frozen=True)
class Os:
    """An OS definition to install on a node (the dumpenv test OS, adjusted)."""

    name: str
    valid: bool = True
    variants: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    apis: tuple[int, ...] = (20,)
    version: str | None = "1.0"


def _store(tmp_path: Path, nodes: int = 3) -> ConfigStore:
    store = new_store(tmp_path / "config.db")
    group = store.all("nodegroup")[0]
    with store.transaction() as txn:
        for n in range(2, nodes + 1):
            txn.add(Node(name=f"node{n}", primary_ip=f"192.0.2.{n}", group=group.uuid))
        cluster = txn.cluster()
        cluster.os_search_path = [SEARCH]
        txn.update(cluster)
    return store


def _rpc(store: ConfigStore, per_node: Mapping[str, list[Os]]) -> LocalRpc:
    """Nodes in this process, each with the OS definitions ``per_node`` names."""
    rpc = LocalRpc(store, Path(tempfile.mkdtemp(dir=store.path.parent)))
    for node, systems in per_node.items():
        for system in systems:
            rpc.install_os(SEARCH, system.name, variants=system.variants,
                           parameters=[f"{name} {doc}" for name, doc in system.params],
                           nodes=[node])
            where = _path(rpc, node, system.name)
            (where / "ganeti_api_version").write_text(
                "".join(f"{api}\n" for api in system.apis))
            if system.version is None:
                (where / "os_version").unlink()
            else:
                (where / "os_version").write_text(system.version + "\n")
            if not system.valid:
                (where / "create").unlink()
    return rpc


def _path(rpc: LocalRpc, node: str, name: str) -> Path:
    """Where ``node`` keeps OS ``name`` (node daemons answer their own paths)."""
    return rpc.nodes.paths(node).node_path(SEARCH) / name


MISSING_CREATE = "required script(s) missing: create"


ALL = ["name", "valid", "hidden", "blacklisted", "variants", "parameters", "api_versions",
       "node_status", "os_hvp", "osparams", "trusted", "os_version", "message"]


def _diagnose(store: ConfigStore, rpc: LocalRpc, fields: list[str],
              names: list[str] | None = None) -> Any:
    processor, _ctx = make_processor(store, rpc)
    return run_op(processor, {"OP_ID": "OP_OS_DIAGNOSE", "output_fields": fields,
                              "names": names or []})


def test_merges_per_os_over_nodes_in_one_call(tmp_path: Path) -> None:
    store = _store(tmp_path)
    debian = Os("debian", variants=("buster", "bullseye"), params=(("dhcp", "use dhcp"),))
    rpc = _rpc(store, {
        "node1": [debian, Os("ext4", apis=(15, 20))],
        "node2": [Os("debian", variants=("buster",), params=(("dhcp", "use dhcp"),)),
                  Os("ext4", apis=(20,))],
        "node3": [debian, Os("ext4", apis=(20,))],
    })
    rows = _diagnose(store, rpc, ALL)
    assert rpc.procedures() == ["os_diagnose"] * 3
    assert {c.node for c in rpc.calls} == {"node1", "node2", "node3"}
    assert rpc.calls[0].args == {"search_path": list(store.cluster.os_search_path)}
    by_name = {row[0]: dict(zip(ALL, row, strict=True)) for row in rows}
    assert [row[0] for row in rows] == ["debian", "ext4"]
    deb = by_name["debian"]
    assert deb["valid"] is True and deb["variants"] == ["buster"]
    assert deb["parameters"] == [["dhcp", "use dhcp"]] and deb["api_versions"] == [20]
    assert deb["os_version"] == "1.0" and deb["message"] == ""
    assert deb["node_status"]["node2"] == [
        [str(_path(rpc, "node2", "debian")), True, "", ["buster"], [["dhcp", "use dhcp"]],
         [20], True]]
    assert by_name["ext4"]["api_versions"] == [20]


def test_invalid_missing_and_version_mismatch(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rpc = _rpc(store, {
        "node1": [Os("a"), Os("b"), Os("c", version="1.0")],
        "node2": [Os("a", valid=False), Os("c", version="2.0")],
        "node3": [Os("a"), Os("b"), Os("c", version="2.0")],
    })
    rows = {r[0]: r for r in _diagnose(store, rpc, ["name", "valid", "message", "node_status",
                                                     "os_version"])}
    assert rows["a"][1] is False and f"invalid on node node2: {MISSING_CREATE}" in rows["a"][2]
    assert rows["b"][1] is False and "not found on node(s) node2" in rows["b"][2]
    assert rows["b"][3]["node2"] == []
    assert rows["c"][1] is False
    assert rows["c"][2] == "os_version differs between nodes: 1.0 on node1; 2.0 on node2, node3"
    assert rows["c"][4] is None


def test_hidden_blacklisted_and_invalid_are_left_out_unless_asked(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.hidden_os = ["hid"]
        cluster.blacklisted_os = ["black"]
        cluster.osparams = {"ok": {"a": "1"}, "ok+v1": {"b": "2"}, "other": {"c": "3"}}
        cluster.os_hvp = {"ok": {"fake": {}}}
        txn.update(cluster)
    rpc = _rpc(store, {"node1": [Os("ok", variants=("v1",)), Os("hid"), Os("black"),
                                 Os("bad", valid=False)]})
    assert _diagnose(store, rpc, ["name", "variants"]) == [["ok", ["v1"]]]
    assert _diagnose(store, rpc, ["name", "hidden"]) == [["hid", True], ["ok", False]]
    assert [r[0] for r in _diagnose(store, rpc, ["name", "valid", "hidden", "blacklisted"])] == [
        "bad", "black", "hid", "ok"]
    assert _diagnose(store, rpc, ["name", "osparams", "os_hvp"], names=["ok"]) == [
        ["ok", {"ok": {"a": "1"}, "ok+v1": {"b": "2"}}, {"ok": {"fake": {}}}]]


def test_unknown_name_lists_known_ones(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    with pytest.raises(NotFoundError, match=r"unknown OS nope.*found on the nodes: ok"):
        _diagnose(store, _rpc(store, {"node1": [Os("ok")]}), ["name"], names=["nope"])


def test_unreachable_and_offline_nodes_do_not_invalidate(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        node3 = txn.get("node", "node3")
        node3.offline = True
        txn.update(node3)
    rpc = _rpc(store, {"node1": [Os("ok")], "node2": [Os("ok")]})
    rpc.down.add("node2")
    rows = _diagnose(store, rpc, ["name", "valid", "node_status"])
    assert rows == [["ok", True, {"node1": [[str(_path(rpc, "node1", "ok")), True, "", [], [],
                                             [20], True]]}]]
    assert {c.node for c in rpc.calls} == {"node1", "node2"}


def test_query_resource_answers_fields(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    _processor, ctx = make_processor(
        store, _rpc(store, {"node1": [Os("ok"), Os("x", valid=False)]}))

    async def ask() -> dict[str, Any]:
        return await ctx.queries["os"].query(["name", "valid"], ["?", "valid"])

    answer = asyncio.run(ask())
    assert answer["data"] == [[[0, "ok"], [0, True]]]
    assert [f["name"] for f in ctx.queries["os"].query_fields(None)["fields"]][:3] == [
        "api_versions", "blacklisted", "hidden"]


# -- OP_CLUSTER_SET_PARAMS: os_hvp, osparams, hidden/blacklisted ------------------------


def test_osparams_set_and_remove() -> None:
    cluster = Cluster(name="c", master_node="n")
    changes = apply_cluster_params(cluster, ClusterSetParams(
        osparams={"deb": {"dhcp": "yes", "mirror": "m"}, "deb+v": {"x": "1"}}))
    assert cluster.osparams == {"deb": {"dhcp": "yes", "mirror": "m"}, "deb+v": {"x": "1"}}
    assert "osparams/deb+v: None -> {'x': '1'}" in changes
    apply_cluster_params(cluster, ClusterSetParams(
        osparams={"deb": {"dhcp": None, "mirror": "default"}, "deb+v": {"x": "2"}}))
    assert cluster.osparams == {"deb+v": {"x": "2"}}
    with pytest.raises(ParameterError, match="invalid OS parameter name 'Bad'"):
        apply_cluster_params(cluster, ClusterSetParams(osparams={"deb": {"Bad": "1"}}))
    with pytest.raises(ParameterError, match="invalid OS name"):
        apply_cluster_params(cluster, ClusterSetParams(osparams={"a+b+c": {"x": "1"}}))


def test_os_hvp_set_and_remove() -> None:
    cluster = Cluster(name="c", master_node="n")
    apply_cluster_params(cluster, ClusterSetParams(os_hvp={"deb": {"kvm": {"acpi": "false"}}}))
    assert cluster.os_hvp == {"deb": {"kvm": {"acpi": False}}}
    apply_cluster_params(cluster, ClusterSetParams(os_hvp={"deb": {"kvm": {"acpi": None}}}))
    assert cluster.os_hvp == {}
    apply_cluster_params(cluster, ClusterSetParams(os_hvp={"deb": {"kvm": {"acpi": "true"}}}))
    apply_cluster_params(cluster, ClusterSetParams(os_hvp={"deb": {"kvm": None}}))
    assert cluster.os_hvp == {}
    with pytest.raises(ParameterError, match="unknown hypervisor 'xen'"):
        apply_cluster_params(cluster, ClusterSetParams(os_hvp={"deb": {"xen": {}}}))


def _set_params(store: ConfigStore, rpc: LocalRpc, **body: Any) -> tuple[Any, JobCtx]:
    processor, _ctx = make_processor(store, rpc)
    job = JobCtx()
    return run_op(processor, {"OP_ID": "OP_CLUSTER_SET_PARAMS", **body}, job), job


def test_cluster_osparams_are_verified_on_the_master(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=2)
    rpc = _rpc(store, {"node1": [Os("deb", variants=("v",),
                                    params=(("a", "A"), ("b", "B"), ("fail", "F")))],
                       "node2": [Os("deb", variants=("v",), params=(("a", "A"),))]})
    _set_params(store, rpc, osparams={"deb": {"a": "1"}, "deb+v": {"b": "2"}})
    assert [c.node for c in rpc.calls] == ["node1", "node1"]
    assert [c.args["name"] for c in rpc.calls] == ["deb", "deb+v"]
    assert rpc.calls[1].args["osparams"] == {"a": "1", "b": "2"}
    assert store.cluster.osparams == {"deb": {"a": "1"}, "deb+v": {"b": "2"}}
    # The OS's verify script refuses (dumpenv fails on request).
    with pytest.raises(OsScriptError, match="dumpenv: failure line"):
        _set_params(store, rpc, osparams={"deb": {"fail": "verify"}})
    assert store.cluster.osparams == {"deb": {"a": "1"}, "deb+v": {"b": "2"}}
    # Only an OS the master lacks is let through; an undeclared parameter is refused.
    with pytest.raises(OsError, match="has no parameter"):
        _set_params(store, rpc, osparams={"deb": {"unknown": "1"}})
    assert "unknown" not in store.cluster.osparams["deb"]
    _result, job = _set_params(store, rpc, osparams={"missing": {"x": "1"}})
    assert any("not checked" in str(line) for line in job.log)
    assert store.cluster.osparams["missing"] == {"x": "1"}


def test_hidden_and_blacklisted_pairs(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    rpc = _rpc(store, {})
    _set_params(store, rpc, hidden_os=[["add", "deb"]], blacklisted_os=[["add", "old"]])
    assert store.cluster.hidden_os == ["deb"] and store.cluster.blacklisted_os == ["old"]
    _set_params(store, rpc, hidden_os=[["remove", "deb"]])
    assert store.cluster.hidden_os == []
