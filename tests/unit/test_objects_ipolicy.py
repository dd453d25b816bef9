"""Instance policies: defaults, inheritance, changes and violations, with the texts the
reference Ganeti 3.0 printed for the same cases."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from corral.cli.ipolicy import format_policy, ipolicy_from_options
from corral.errors import OpPrereqError, ParameterError
from corral.objects.ipolicy import (
    check_policy,
    default_policy,
    disk_templates_not_enabled,
    group_policy,
    spec_violations,
    updated_policy,
)

LOW = {"cpu-count": 1, "disk-count": 1, "disk-size": 512, "memory-size": 64,
       "nic-count": 0, "spindle-use": 1}
HIGH = {"cpu-count": 4, "disk-count": 4, "disk-size": 10240, "memory-size": 4096,
        "nic-count": 4, "spindle-use": 4}


def _cluster() -> dict[str, Any]:
    return default_policy(["file", "diskless"])


def test_default_policy_is_ganetis() -> None:
    # as /2/info of a fresh Ganeti 3.0 cluster with file and diskless enabled
    assert _cluster() == {
        "minmax": [{"min": {"cpu-count": 1, "disk-count": 1, "disk-size": 1024,
                            "memory-size": 128, "nic-count": 1, "spindle-use": 1},
                    "max": {"cpu-count": 8, "disk-count": 16, "disk-size": 1048576,
                            "memory-size": 32768, "nic-count": 8, "spindle-use": 12}}],
        "std": {"cpu-count": 1, "disk-count": 1, "disk-size": 1024, "memory-size": 128,
                "nic-count": 1, "spindle-use": 1},
        "disk-templates": ["file", "diskless"], "spindle-ratio": 32, "vcpu-ratio": 4}
    assert check_policy(_cluster(), cluster=True) == _cluster()


def test_group_policy_fills_from_the_cluster_key_by_key() -> None:
    custom = {"minmax": [{"min": LOW, "max": HIGH}], "vcpu-ratio": 2.5}
    effective = group_policy(_cluster(), custom)
    assert effective["minmax"] == [{"min": LOW, "max": HIGH}]
    assert effective["vcpu-ratio"] == 2.5
    assert effective["spindle-ratio"] == 32 and effective["std"] == _cluster()["std"]
    assert group_policy(_cluster(), {}) == _cluster()
    # the result is a copy: changing it leaves the cluster's alone
    effective["std"]["cpu-count"] = 9
    assert _cluster()["std"]["cpu-count"] == 1


def test_group_changes_and_resets() -> None:
    policy = updated_policy({}, {"vcpu-ratio": "2.5", "spindle-ratio": 8}, group=True)
    assert policy == {"vcpu-ratio": 2.5, "spindle-ratio": 8}
    assert updated_policy(policy, {"vcpu-ratio": "default"}, group=True) == {"spindle-ratio": 8}
    assert updated_policy(policy, {"spindle-ratio": None, "vcpu-ratio": []}, group=True) == {}
    with pytest.raises(ParameterError, match=r"^std cannot appear in group instance specs"):
        updated_policy({}, {"std": {"cpu-count": 2}}, group=True)


def test_cluster_changes() -> None:
    policy = updated_policy(_cluster(), {"std": {"memory-size": 256}, "vcpu-ratio": 4.0},
                            group=False)
    assert policy["std"]["memory-size"] == 256 and policy["std"]["cpu-count"] == 1
    assert policy["vcpu-ratio"] == 4 and isinstance(policy["vcpu-ratio"], int)
    with pytest.raises(ParameterError,
                       match=r"^Can't unset ipolicy attribute 'vcpu-ratio' on the cluster"):
        updated_policy(_cluster(), {"vcpu-ratio": "default"}, group=False)
    with pytest.raises(ParameterError, match=r"^Invalid key in new ipolicy: bogus"):
        updated_policy(_cluster(), {"bogus": 1}, group=False)


@pytest.mark.parametrize(("change", "text"), [
    ({"minmax": [{"min": {**LOW, "cpu-count": 3}, "max": {**HIGH, "cpu-count": 2}}]},
     "Invalid instance policy: Invalid specification of min/max values for cpu-count: 3/2"),
    ({"minmax": [{"min": {"cpu-count": 1}, "max": HIGH}]},
     "Invalid instance policy: Missing instance specs parameters for min: disk-count"),
    ({"minmax": []}, "Can't unset ipolicy attribute 'minmax' on the cluster"),
    ({"disk-templates": ["file", "bogus"]},
     "Invalid instance policy: Invalid disk template(s) bogus"),
    ({"std": {"memory-size": 65536}}, "Invalid instance policy: Invalid std specifications"),
    ({"vcpu-ratio": "abc"}, "Invalid value for attribute 'vcpu-ratio': 'abc'"),
    ({"minmax": [{"min": {**LOW, "disk-size": "big"}, "max": HIGH}]},
     "Invalid instance policy: min disk-size must be a whole number, got 'big'"),
])
def test_bad_changes_are_refused_naming_the_problem(change: dict[str, Any], text: str) -> None:
    before = copy.deepcopy(_cluster())
    with pytest.raises(ParameterError) as err:
        updated_policy(before, change, group=False)
    assert err.value.message.startswith(text)
    assert before == _cluster()


def test_allowed_templates_must_be_enabled() -> None:
    disk_templates_not_enabled(_cluster(), ["file", "diskless", "sharedfile"])
    with pytest.raises(OpPrereqError) as err:
        disk_templates_not_enabled({**_cluster(), "disk-templates": ["file", "sharedfile"]},
                                   ["file", "diskless"])
    assert err.value.message == ("The following disk templates are allowed by the ipolicy, "
                                 "but not enabled on the cluster: sharedfile")
    assert err.value.ecode == "wrong_input"


def test_violations_in_ganetis_words() -> None:
    policy = _cluster()

    def check(**kw: Any) -> list[str]:
        values = {"memory": 128, "cpus": 1, "disk_sizes": [1024], "nic_count": 1,
                  "spindle_use": 1, "disk_templates": ["file"], **kw}
        return spec_violations(policy, **values)

    assert check() == []
    assert check(memory=64) == ["memory-size value 64 is not in range [128, 32768]"]
    assert check(cpus=16) == ["cpu-count value 16 is not in range [1, 8]"]
    assert check(disk_sizes=[1024, 512], disk_templates=["file", "file"]) == [
        "disk-size/1 value 512 is not in range [1024, 1048576]"]
    assert check(disk_templates=["sharedfile"]) == [
        "Disk template sharedfile is not allowed (allowed templates: file, diskless)"]
    assert check(memory=None, cpus=None, spindle_use=None) == []
    # no disks: diskless must be allowed
    assert check(disk_sizes=[], disk_templates=[]) == []
    assert spec_violations({**policy, "disk-templates": ["file"]}, memory=128, cpus=1,
                           disk_sizes=[], nic_count=1, spindle_use=1, disk_templates=[]) == [
        "Disk template diskless is not allowed (allowed templates file)"]


def test_the_bounds_pair_broken_least_is_reported() -> None:
    small = {"min": {**LOW, "memory-size": 64}, "max": {**HIGH, "memory-size": 256}}
    big = {"min": {**LOW, "memory-size": 1024, "cpu-count": 2},
           "max": {**HIGH, "memory-size": 4096}}
    policy = {**_cluster(), "minmax": [small, big]}
    found = spec_violations(policy, memory=512, cpus=1, disk_sizes=[1024], nic_count=1,
                            spindle_use=1, disk_templates=["file"])
    assert found == ["memory-size value 512 is not in range [64, 256]"]
    assert spec_violations(policy, memory=2048, cpus=2, disk_sizes=[1024], nic_count=1,
                           spindle_use=1, disk_templates=["file"]) == []


# -- the command line ---------------------------------------------------------------


def test_options_build_ganetis_ipolicy() -> None:
    kw = {"ipolicy_bounds_specs": "min:cpu-count=1,disk-count=1,disk-size=512,memory-size=64,"
                                  "nic-count=0,spindle-use=1/max:cpu-count=4,disk-count=4,"
                                  "disk-size=10G,memory-size=4G,nic-count=4,spindle-use=4",
          "ipolicy_vcpu_ratio": "2.5", "ipolicy_disk_templates": "file,diskless"}
    assert ipolicy_from_options(kw, group=True) == {
        "minmax": [{"min": LOW, "max": HIGH}], "vcpu-ratio": 2.5,
        "disk-templates": ["file", "diskless"]}
    assert ipolicy_from_options({"ipolicy_bounds_specs": "default",
                                 "ipolicy_spindle_ratio": "default"}, group=True) == {
        "minmax": "default", "spindle-ratio": "default"}
    assert ipolicy_from_options({"ipolicy_std_specs": "memory-size=256M"}, group=False) == {
        "std": {"memory-size": 256}}
    assert ipolicy_from_options({}, group=False) is None


def test_split_specs_fill_the_rest_with_defaults() -> None:
    policy = ipolicy_from_options({"specs_mem_size": "min=64,max=1G,std=256",
                                   "specs_cpu_count": "max=2"}, group=False)
    assert policy is not None
    (pair,) = policy["minmax"]
    assert pair["min"]["memory-size"] == 64 and pair["max"]["memory-size"] == 1024
    assert pair["max"]["cpu-count"] == 2 and pair["min"]["disk-size"] == 1024
    assert policy["std"]["memory-size"] == 256
    check_policy({**_cluster(), **policy}, cluster=True)


@pytest.mark.parametrize(("kw", "text"), [
    ({"ipolicy_bounds_specs": "min:cpu-count=1/max:cpu-count=2"},
     "Missing parameters in ipolicy spec min: disk-count, disk-size, memory-size, nic-count, "
     "spindle-use"),
    ({"ipolicy_bounds_specs": "low:cpu-count=1"},
     "Invalid key in bounds instance specifications: low"),
    ({"specs_cpu_count": "max=2", "ipolicy_std_specs": "cpu-count=1"},
     "A --specs-xxx option cannot be specified together with any --ipolicy-xxx-specs option"),
    ({"ipolicy_vcpu_ratio": "many"}, "--ipolicy-vcpu-ratio: expected a number"),
    ({"ipolicy_std_specs": "cpu-count=two"}, "--ipolicy-std-specs: cpu-count must be a whole"),
])
def test_bad_options(kw: dict[str, Any], text: str) -> None:
    with pytest.raises(ParameterError) as err:
        ipolicy_from_options(kw, group=False)
    assert err.value.message.startswith(text)


def test_cluster_policy_display() -> None:
    shown = dict(format_policy(_cluster(), _cluster(), cluster=True))
    assert shown["allowed disk templates"] == "file, diskless"
    assert shown["vcpu-ratio"] == "4" and shown["spindle-ratio"] == "32"
    assert shown["std"]["memory-size"] == "128"
    ((low, high),) = shown["bounds specs"]
    assert low == ("min/0", {**{k: str(v) for k, v in _cluster()["minmax"][0]["min"].items()}})
    assert high[0] == "max/0"


def test_a_new_clusters_policy(tmp_path: Any) -> None:
    """init: Ganeti's defaults, the options applied, the allowed templates restricted to
    the enabled ones (in their order), and the built-in allocator by default."""
    from corral import bootstrap
    from corral.cmdlib.cluster import ClusterSetParams
    from corral.paths import Paths

    def init(**params: Any) -> Any:
        options = bootstrap.InitOptions(cluster_name="c.test", master_name="m.test",
                                        primary_ip="127.0.9.1",
                                        params=ClusterSetParams(**params))
        cluster, _group, _node = bootstrap._build_config(Paths(tmp_path), options)
        return cluster

    cluster = init(enabled_disk_templates=["diskless", "file"])
    assert cluster.ipolicy == {**default_policy(["diskless", "file"])}
    assert cluster.default_iallocators == ["corral"]
    split = ipolicy_from_options({"specs_mem_size": "min=64,max=4G,std=256"}, group=False)
    cluster = init(ipolicy={**(split or {}), "vcpu-ratio": 2,
                            "disk-templates": ["file", "plain"]})
    assert cluster.ipolicy["disk-templates"] == ["file"]
    assert cluster.ipolicy["std"]["memory-size"] == 256
    assert cluster.ipolicy["minmax"][0]["max"]["memory-size"] == 4096
    assert cluster.ipolicy["vcpu-ratio"] == 2
    with pytest.raises(ParameterError, match="allows none of the enabled disk templates"):
        init(ipolicy={"disk-templates": ["plain"]})
