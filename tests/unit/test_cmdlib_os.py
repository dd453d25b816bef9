"""OP_OS_DIAGNOSE, the "os" query resource and the OS settings of OP_CLUSTER_SET_PARAMS,
against a real store and scripted node daemons."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params
from corral.config import ConfigStore
from corral.errors import NotFoundError, OsError, OsNotFoundError, OsScriptError, ParameterError
from corral.objects import Cluster, Node
from tests.unit.config_helpers import new_store
from tests.unit.lu_helpers import FakeRpc, JobCtx, make_processor, run_op


def _os(name: str, *, valid: bool = True, message: str = "", variants: tuple[str, ...] = (),
        params: tuple[tuple[str, str], ...] = (), apis: tuple[int, ...] = (20,),
        version: str | None = "1.0") -> dict[str, Any]:
    return {"name": name, "path": f"/srv/os/{name}", "valid": valid, "message": message,
            "api_versions": list(apis), "variants": list(variants),
            "parameters": [list(p) for p in params], "os_version": version, "trusted": True}


def _store(tmp_path: Path, nodes: int = 3) -> ConfigStore:
    store = new_store(tmp_path / "config.db")
    group = store.all("nodegroup")[0]
    with store.transaction() as txn:
        for n in range(2, nodes + 1):
            txn.add(Node(name=f"node{n}", primary_ip=f"192.0.2.{n}", group=group.uuid))
    return store


def _rpc(per_node: Mapping[str, list[dict[str, Any]]]) -> FakeRpc:
    def diagnose(node: Node, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        return per_node[node.name]
    return FakeRpc(handlers={"os_diagnose": diagnose})


ALL = ["name", "valid", "hidden", "blacklisted", "variants", "parameters", "api_versions",
       "node_status", "os_hvp", "osparams", "trusted", "os_version", "message"]


def _diagnose(store: ConfigStore, rpc: FakeRpc, fields: list[str],
              names: list[str] | None = None) -> Any:
    processor, _ctx = make_processor(store, rpc)
    return run_op(processor, {"OP_ID": "OP_OS_DIAGNOSE", "output_fields": fields,
                              "names": names or []})


def test_merges_per_os_over_nodes_in_one_call(tmp_path: Path) -> None:
    store = _store(tmp_path)
    debian = _os("debian", variants=("buster", "bullseye"), params=(("dhcp", "use dhcp"),))
    rpc = _rpc({
        "node1": [debian, _os("ext4", apis=(15, 20))],
        "node2": [_os("debian", variants=("buster",), params=(("dhcp", "use dhcp"),)),
                  _os("ext4", apis=(20,))],
        "node3": [debian, _os("ext4", apis=(20,))],
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
        ["/srv/os/debian", True, "", ["buster"], [["dhcp", "use dhcp"]], [20], True]]
    assert by_name["ext4"]["api_versions"] == [20]


def test_invalid_missing_and_version_mismatch(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rpc = _rpc({
        "node1": [_os("a"), _os("b"), _os("c", version="1.0")],
        "node2": [_os("a", valid=False, message="missing create script"), _os("c",
                                                                            version="2.0")],
        "node3": [_os("a"), _os("b"), _os("c", version="2.0")],
    })
    rows = {r[0]: r for r in _diagnose(store, rpc, ["name", "valid", "message", "node_status",
                                                     "os_version"])}
    assert rows["a"][1] is False and "invalid on node node2: missing create script" in rows["a"][2]
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
    rpc = _rpc({"node1": [_os("ok", variants=("v1",)), _os("hid"), _os("black"),
                          _os("bad", valid=False, message="no")]})
    assert _diagnose(store, rpc, ["name", "variants"]) == [["ok", ["v1"]]]
    assert _diagnose(store, rpc, ["name", "hidden"]) == [["hid", True], ["ok", False]]
    assert [r[0] for r in _diagnose(store, rpc, ["name", "valid", "hidden", "blacklisted"])] == [
        "bad", "black", "hid", "ok"]
    assert _diagnose(store, rpc, ["name", "osparams", "os_hvp"], names=["ok"]) == [
        ["ok", {"ok": {"a": "1"}, "ok+v1": {"b": "2"}}, {"ok": {"fake": {}}}]]


def test_unknown_name_lists_known_ones(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    with pytest.raises(NotFoundError, match=r"unknown OS nope.*found on the nodes: ok"):
        _diagnose(store, _rpc({"node1": [_os("ok")]}), ["name"], names=["nope"])


def test_unreachable_and_offline_nodes_do_not_invalidate(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        node3 = txn.get("node", "node3")
        node3.offline = True
        txn.update(node3)
    rpc = _rpc({"node1": [_os("ok")], "node2": [_os("ok")]})
    rpc.down.add("node2")
    rows = _diagnose(store, rpc, ["name", "valid", "node_status"])
    assert rows == [["ok", True, {"node1": [["/srv/os/ok", True, "", [], [], [20], True]]}]]
    assert {c.node for c in rpc.calls} == {"node1", "node2"}


def test_query_resource_answers_fields(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    _processor, ctx = make_processor(store, _rpc({"node1": [_os("ok"), _os("x", valid=False)]}))

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


def _set_params(store: ConfigStore, rpc: FakeRpc, **body: Any) -> tuple[Any, JobCtx]:
    processor, _ctx = make_processor(store, rpc)
    job = JobCtx()
    return run_op(processor, {"OP_ID": "OP_CLUSTER_SET_PARAMS", **body}, job), job


def test_cluster_osparams_are_verified_on_the_master(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=2)
    seen: list[Mapping[str, Any]] = []

    def validate(node: Node, args: Mapping[str, Any]) -> None:
        seen.append(args)
        if args["osparams"].get("bad"):
            raise OsScriptError("verify failed: bad is bad")
        if args["name"].startswith("missing"):
            raise OsNotFoundError("OS missing not found")
        if "unknown" in args["osparams"]:
            raise OsError("OS 'deb' has no parameter(s) unknown; its parameters: a, b")

    rpc = FakeRpc(handlers={"os_validate": validate})
    _set_params(store, rpc, osparams={"deb": {"a": "1"}, "deb+v": {"b": "2"}})
    assert [c.node for c in rpc.calls] == ["node1", "node1"]
    assert seen[1]["name"] == "deb+v" and seen[1]["osparams"] == {"a": "1", "b": "2"}
    assert store.cluster.osparams == {"deb": {"a": "1"}, "deb+v": {"b": "2"}}
    with pytest.raises(OsScriptError, match="bad is bad"):
        _set_params(store, rpc, osparams={"deb": {"bad": "1"}})
    assert store.cluster.osparams == {"deb": {"a": "1"}, "deb+v": {"b": "2"}}
    # Only an OS the master lacks is let through; an undeclared parameter is refused.
    with pytest.raises(OsError, match="no parameter"):
        _set_params(store, rpc, osparams={"deb": {"unknown": "1"}})
    assert "unknown" not in store.cluster.osparams["deb"]
    _result, job = _set_params(store, rpc, osparams={"missing": {"x": "1"}})
    assert any("not checked" in str(line) for line in job.log)
    assert store.cluster.osparams["missing"] == {"x": "1"}


def test_hidden_and_blacklisted_pairs(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    _set_params(store, FakeRpc(), hidden_os=[["add", "deb"]], blacklisted_os=[["add", "old"]])
    assert store.cluster.hidden_os == ["deb"] and store.cluster.blacklisted_os == ["old"]
    _set_params(store, FakeRpc(), hidden_os=[["remove", "deb"]])
    assert store.cluster.hidden_os == []
