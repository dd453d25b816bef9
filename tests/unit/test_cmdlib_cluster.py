"""Validating and applying cluster parameter changes (gnt-cluster modify's logic)."""

from __future__ import annotations

import copy

import pytest

from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params, cluster_info
from corral.errors import OpPrereqError, ParameterError, UnknownParameterError
from corral.objects import Cluster


def _cluster() -> Cluster:
    return Cluster(name="c.example", master_node="n-uuid")


def test_changes_are_applied_and_reported() -> None:
    cluster = _cluster()
    changes = apply_cluster_params(cluster, ClusterSetParams(
        beparams={"maxmem": "2G", "minmem": "1G"}, hvparams={"kvm": {"kvm_flag": "disabled"}},
        candidate_pool_size=3, uid_pool=[(4000, 4009)], default_iallocator="hail, builtin",
    ))
    assert cluster.beparams["default"]["maxmem"] == 2048
    assert cluster.hvparams["kvm"]["kvm_flag"] == "disabled"
    assert cluster.candidate_pool_size == 3
    assert cluster.default_iallocators == ["hail", "builtin"]
    assert changes == [
        "hvparams/kvm/kvm_flag:  -> disabled",
        "beparams/default/maxmem: 128 -> 2048",
        "beparams/default/minmem: 128 -> 1024",
        "candidate_pool_size: 10 -> 3",
        "uid_pool:  -> 4000-4009",
        "default_iallocators: corral -> hail,builtin",
    ]


def test_setting_the_same_values_reports_no_change() -> None:
    cluster = _cluster()
    assert apply_cluster_params(cluster, ClusterSetParams(beparams={"vcpus": 1})) == []


def test_default_restores_builtin_value() -> None:
    cluster = _cluster()
    apply_cluster_params(cluster, ClusterSetParams(hvparams={"kvm": {"acpi": False}}))
    apply_cluster_params(cluster, ClusterSetParams(hvparams={"kvm": {"acpi": "default"}}))
    assert cluster.hvparams["kvm"]["acpi"] is True
    apply_cluster_params(cluster, ClusterSetParams(beparams={"vcpus": None}))
    assert cluster.beparams["default"]["vcpus"] == 1


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (ClusterSetParams(hvparams={"xen-pvm": {}}), UnknownParameterError,
         "valid ones: fake, kvm"),
        (ClusterSetParams(beparams={"mem": 1}), UnknownParameterError, "valid ones: always_"),
        (ClusterSetParams(beparams={"vcpus": 0}), ParameterError,
         "'vcpus': 0 is out of range; accepted: 1 or more"),
        (ClusterSetParams(beparams={"vcpus": "-1"}), ParameterError, "accepted: 1 or more"),
        (ClusterSetParams(beparams={"maxmem": "0"}), ParameterError,
         "0 MiB is out of range; accepted: 1 MiB or more"),
        (ClusterSetParams(diskparams={"drbd": {}}), UnknownParameterError, "unknown disk template"),
        (ClusterSetParams(nicparams={"mode": "nat"}), ParameterError, "not one of 'bridged'"),
        (ClusterSetParams(enabled_hypervisors=[]), ParameterError, "at least one hypervisor"),
        (ClusterSetParams(enabled_hypervisors=["kvm", "kvm"]), ParameterError, "duplicates"),
        (ClusterSetParams(file_storage_dir="relative/dir"), ParameterError, "absolute path"),
        (ClusterSetParams(max_running_jobs=0), ParameterError, "at least 1"),
        (ClusterSetParams(remove_uids=[(1, 1)]), ParameterError, "not in the user-id pool"),
        (ClusterSetParams(hidden_os=[("remove", "debian")]), ParameterError, "not there"),
        (ClusterSetParams(hidden_os=[("add", "debian+buster")]), ParameterError,
         "per OS.*'debian'"),
        (ClusterSetParams(blacklisted_os=[("add", "debian+buster")]), ParameterError,
         "per OS.*'debian'"),
    ],
)
def test_invalid_changes_raise(change: ClusterSetParams, error: type[Exception],
                               message: str) -> None:
    with pytest.raises(error, match=message):
        apply_cluster_params(_cluster(), change)


def test_plain_needs_a_volume_group() -> None:
    cluster = _cluster()
    with pytest.raises(ParameterError, match="--vg-name"):
        apply_cluster_params(cluster, ClusterSetParams(enabled_disk_templates=["plain"]))
    apply_cluster_params(cluster, ClusterSetParams(enabled_disk_templates=["plain"],
                                                   vg_name="xenvg",
                                                   ipolicy={"disk-templates": ["plain"]}))
    assert cluster.enabled_disk_templates == ["plain"]
    assert cluster.ipolicy["disk-templates"] == ["plain"]


def test_hidden_and_blacklisted_os_lists() -> None:
    cluster = _cluster()
    apply_cluster_params(cluster, ClusterSetParams(
        hidden_os=[("add", "a"), ("add", "b"), ("add", "a")], blacklisted_os=[("add", "x")]))
    apply_cluster_params(cluster, ClusterSetParams(hidden_os=[("remove", "a")]))
    assert cluster.hidden_os == ["b"] and cluster.blacklisted_os == ["x"]


def test_info_has_ganeti_keys_and_only_enabled_hvparams() -> None:
    cluster = _cluster()
    original = copy.deepcopy(cluster)
    info = cluster_info(cluster, "master.example", 7)
    for key in ("name", "uuid", "master", "default_hypervisor", "enabled_hypervisors",
                "hvparams", "beparams", "nicparams", "ndparams", "diskparams", "uid_pool",
                "candidate_pool_size", "max_running_jobs", "mac_prefix", "software_version",
                "protocol_version", "config_version", "os_api_version", "architecture"):
        assert key in info
    assert list(info["hvparams"]) == ["fake"]
    assert info["master"] == "master.example" and info["config_serial"] == 7
    assert cluster == original


def test_disabling_a_template_or_hypervisor_in_use_names_the_instances() -> None:
    from corral.cmdlib.cluster import check_disabled_in_use
    from corral.objects import Cluster, Instance

    old = Cluster(name="c", master_node="m", enabled_disk_templates=["file", "diskless"],
                  enabled_hypervisors=["fake", "kvm"])
    uses = [Instance(name="web1", primary_node="n", disk_template="file", disks=["d"]),
            Instance(name="light", primary_node="n", disk_template="diskless")]
    new = Cluster(name="c", master_node="m", enabled_disk_templates=["file"],
                  enabled_hypervisors=["fake", "kvm"])
    with pytest.raises(OpPrereqError, match=r"(?s)Cannot disable disk template 'diskless'.*light"):
        check_disabled_in_use(old, new, uses)
    new = Cluster(name="c", master_node="m", enabled_disk_templates=["file", "diskless"],
                  enabled_hypervisors=["kvm"])
    with pytest.raises(OpPrereqError, match=r"hypervisor 'fake'(.|\n)*\* light\n \* web1"):
        check_disabled_in_use(old, new, uses)
    check_disabled_in_use(old, new, [])


def test_the_watchers_job_archive_age_is_a_cluster_setting() -> None:
    cluster = _cluster()
    assert cluster.job_archive_age == 6 * 3600  # Ganeti's watcher default
    assert apply_cluster_params(cluster, ClusterSetParams(job_archive_age=7200)) == [
        "job_archive_age: 21600 -> 7200"]
    with pytest.raises(ParameterError, match="at least 1"):
        apply_cluster_params(cluster, ClusterSetParams(job_archive_age=0))
