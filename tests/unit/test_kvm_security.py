"""KVM security (design 2.2): the parameter checks, and who and where qemu runs as —
the ``-runas``/``-chroot`` arguments, pool uids taken and given back, chroot
directories made and removed. No qemu runs here (tests/system does that)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pwd
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.cluster import ClusterSetParams, apply_cluster_params
from corral.errors import HypervisorError, ParameterError
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.hypervisor.kvm.security import (
    SecuritySetup,
    check_security_params,
    chroot_dir,
    prepare_security,
    quarantine_dir,
    release_security,
    validate_security_params,
)
from corral.noded import procedures
from corral.objects import Cluster as ClusterObject
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from corral.rpc.args import InstanceArgs
from corral.uidpool import is_uid_in_use
from tests.unit.instance_helpers import Cluster, open_cluster

MISSING_USER = "corral-no-such-user"


def _free_uid() -> int:
    """A uid no user has, no process runs with: a pool uid that is not a user."""
    for uid in range(47000, 48000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no uid without a user between 47000 and 48000")


# -- parameter checks ----------------------------------------------------------------


@pytest.mark.parametrize("model, domain", [("none", ""), ("user", "qemu"), ("pool", "")])
def test_accepted_combinations(model: str, domain: str) -> None:
    check_security_params({"security_model": model, "security_domain": domain})


@pytest.mark.parametrize(
    "model, domain, message",
    [
        ("user", "", "security_model=user needs security_domain"),
        ("none", "qemu", r"security_domain \('qemu'\) is only used with security_model=user"),
        ("pool", "qemu", "with security_model=pool leave it empty"),
        ("group", "", "accepted: none, user, pool"),
    ],
)
def test_refused_combinations(model: str, domain: str, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        check_security_params({"security_model": model, "security_domain": domain})


def test_node_validation_needs_the_user_to_exist() -> None:
    validate_security_params({"security_model": "user", "security_domain": "root"})
    with pytest.raises(HypervisorError, match=f"user '{MISSING_USER}' does not exist"):
        validate_security_params({"security_model": "user",
                                  "security_domain": MISSING_USER})


def test_cluster_modify_refuses_a_user_model_without_domain() -> None:
    cluster = ClusterObject(name="c", master_node="n-uuid")
    with pytest.raises(ParameterError, match="needs security_domain"):
        apply_cluster_params(cluster, ClusterSetParams(
            hvparams={"kvm": {"security_model": "user"}}))
    apply_cluster_params(cluster, ClusterSetParams(
        hvparams={"kvm": {"security_model": "user", "security_domain": "qemu"}}))
    assert cluster.hvparams["kvm"]["security_model"] == "user"


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def test_instance_create_and_modify_check_the_filled_parameters(cl: Cluster) -> None:
    cl.set_cluster(enabled_hypervisors=["fake", "kvm"])
    args: dict[str, Any] = {"hypervisor": "kvm", "disk_template": "diskless", "disks": [],
                            "no_install": True, "start": False}
    with pytest.raises(ParameterError, match="needs security_domain"):
        cl.create("vm1", hvparams={"security_model": "user"}, **args)
    cl.create("vm1", hvparams={"security_model": "pool"}, **args)
    with pytest.raises(ParameterError, match="with security_model=pool leave it empty"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1",
               hvparams={"security_domain": "root"})
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1",
           hvparams={"security_model": "user", "security_domain": "root"})
    assert cl.store.get("instance", "vm1").hvparams == {"security_model": "user",
                                                        "security_domain": "root"}


def test_the_nodes_check_that_the_run_as_user_exists(cl: Cluster) -> None:
    cl.set_cluster(enabled_hypervisors=["fake", "kvm"])
    args: dict[str, Any] = {"hypervisor": "kvm", "disk_template": "diskless", "disks": [],
                            "no_install": True, "start": False}
    missing = {"security_model": "user", "security_domain": MISSING_USER}
    refusal = (f"checking the kvm hypervisor parameters failed on node node1: security"
               f" domain user '{MISSING_USER}' does not exist on this node")
    with pytest.raises(HypervisorError, match=re.escape(refusal)):
        cl.create("vm1", hvparams=missing, **args)
    assert cl.store.find("instance", "vm1") is None
    cl.create("vm1", **args)
    with pytest.raises(HypervisorError, match=re.escape(refusal)):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1", hvparams=missing)
    assert cl.store.get("instance", "vm1").hvparams == {}
    with pytest.raises(HypervisorError, match=f"user '{MISSING_USER}' does not exist"):
        cl.run("OP_CLUSTER_SET_PARAMS", hvparams={"kvm": missing})
    assert cl.store.cluster.hvparams.get("kvm", {}).get("security_model", "none") == "none"


# -- start and stop ------------------------------------------------------------------


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    result = Paths(tmp_path / "node")
    result.ensure_dirs()
    return result


@pytest.fixture
def runtime(paths: Paths) -> Iterator[InstanceRuntime]:
    result = InstanceRuntime(paths, "vm1")
    result.prepare()
    yield result
    result.remove()


def _spec(**hvparams: Any) -> InstanceSpec:
    return InstanceSpec(name="vm1", uuid="u-1", hypervisor="kvm", hvparams=hvparams)


def _prepare(runtime: InstanceRuntime, **hvparams: Any) -> SecuritySetup:
    return asyncio.run(prepare_security(_spec(**hvparams), runtime))


def _release(runtime: InstanceRuntime, setup: SecuritySetup) -> None:
    record = RuntimeRecord(name="vm1", spec=_spec(), uid=setup.uid,
                           extra={"security": setup.extra})
    asyncio.run(release_security(runtime, record))


def _locked_elsewhere(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_ensure_dirs_makes_the_uid_pool_lock_dir(paths: Paths) -> None:
    assert paths.uid_pool_lock_dir.is_dir()
    assert paths.uid_pool_lock_dir.parent == paths.run_dir


def test_model_none_adds_nothing(runtime: InstanceRuntime) -> None:
    setup = _prepare(runtime, security_model="none")
    assert (setup.args, setup.uid) == ([], None)


def test_model_user_runs_as_the_domain_and_closes_the_sockets(
        runtime: InstanceRuntime) -> None:
    setup = _prepare(runtime, security_model="user", security_domain="root")
    assert setup.args == ["-runas", "root"]
    assert setup.uid == 0
    assert stat.S_IMODE(runtime.socket_dir.stat().st_mode) == 0o700


def test_model_user_with_a_missing_user_names_it_and_leaves_nothing(
        paths: Paths, runtime: InstanceRuntime) -> None:
    with pytest.raises(HypervisorError,
                       match=f"cannot start instance vm1: .*user '{MISSING_USER}'"):
        _prepare(runtime, security_model="user", security_domain=MISSING_USER,
                 use_chroot=True)
    assert not chroot_dir(paths, "vm1").exists()


def test_pool_empty_says_how_to_set_one(paths: Paths, runtime: InstanceRuntime) -> None:
    with pytest.raises(HypervisorError, match=r"pool is empty; .*gnt-cluster modify --uid-pool"):
        _prepare(runtime, security_model="pool")
    paths.uid_pool.write_text("")
    with pytest.raises(HypervisorError, match="pool is empty"):
        _prepare(runtime, security_model="pool")


def test_pool_uid_is_locked_until_started_and_free_after_release(
        paths: Paths, runtime: InstanceRuntime) -> None:
    uid = _free_uid()
    paths.uid_pool.write_text(f"{uid}\n")
    setup = _prepare(runtime, security_model="pool")
    assert setup.uid == uid
    assert setup.args == ["-runas", f"{uid}:{uid}"]
    assert setup.extra == {"model": "pool", "chroot": None}
    lock = paths.uid_pool_lock_dir / str(uid)
    assert _locked_elsewhere(lock)
    with pytest.raises(HypervisorError, match="no unused user-id left"):
        _prepare(runtime, security_model="pool")
    setup.started()
    assert lock.exists() and not _locked_elsewhere(lock)
    _release(runtime, setup)
    assert not lock.exists()
    _release(runtime, setup)  # again: nothing left to give back, no error


def test_pool_uid_of_a_user_runs_as_that_user(paths: Paths, runtime: InstanceRuntime) -> None:
    user = next((u for u in pwd.getpwall() if u.pw_uid and not is_uid_in_use(u.pw_uid)), None)
    if user is None:
        pytest.skip("every user of this host has a process running")
    paths.uid_pool.write_text(f"{user.pw_uid}\n")
    setup = _prepare(runtime, security_model="pool")
    assert setup.args == ["-runas", user.pw_name]
    setup.abandon()


def test_pool_uid_in_use_by_a_process_is_not_taken(
        paths: Paths, runtime: InstanceRuntime) -> None:
    paths.uid_pool.write_text(f"{os.getuid()}\n")  # this very process runs with it
    with pytest.raises(HypervisorError, match=rf"no unused user-id left .*\({os.getuid()}\)"):
        _prepare(runtime, security_model="pool")


def test_abandoned_start_gives_the_uid_back_and_removes_the_chroot(
        paths: Paths, runtime: InstanceRuntime) -> None:
    uid = _free_uid()
    paths.uid_pool.write_text(f"{uid}\n")
    setup = _prepare(runtime, security_model="pool", use_chroot=True)
    assert chroot_dir(paths, "vm1").is_dir()
    setup.abandon()
    assert not (paths.uid_pool_lock_dir / str(uid)).exists()
    assert not chroot_dir(paths, "vm1").exists()


def test_chroot_is_an_empty_root_only_directory_removed_at_release(
        paths: Paths, runtime: InstanceRuntime) -> None:
    setup = _prepare(runtime, use_chroot=True)
    directory = chroot_dir(paths, "vm1")
    assert setup.args == ["-chroot", str(directory)]
    assert setup.extra == {"model": "none", "chroot": str(directory)}
    info = directory.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700)
    assert list(directory.iterdir()) == []
    assert directory.parent.name.startswith(".")  # not taken for an instance's directory
    _release(runtime, setup)
    assert not directory.exists()


def test_chroot_not_empty_at_release_is_quarantined_untouched(
        paths: Paths, runtime: InstanceRuntime) -> None:
    setup = _prepare(runtime, use_chroot=True)
    (chroot_dir(paths, "vm1") / "left-behind").write_text("evidence")
    _release(runtime, setup)
    assert not chroot_dir(paths, "vm1").exists()
    kept = list(quarantine_dir(paths).glob("vm1-*/root/left-behind"))
    assert [p.read_text() for p in kept] == ["evidence"]


def test_user_and_chroot_together(paths: Paths, runtime: InstanceRuntime) -> None:
    setup = _prepare(runtime, security_model="user", security_domain="root",
                     use_chroot=True)
    assert setup.args == ["-chroot", str(chroot_dir(paths, "vm1")), "-runas", "root"]


def test_a_node_without_the_run_as_user_says_so_before_a_move(paths: Paths) -> None:
    spec = _spec(security_model="user", security_domain=MISSING_USER)
    answer = asyncio.run(procedures.instance_check_host(paths, InstanceArgs(instance=spec)))
    assert [line for line in answer["missing"] if MISSING_USER in line] == [
        f"security domain user '{MISSING_USER}' does not exist on this node; create the"
        " user or name an existing one in security_domain"]
    spec = _spec(security_model="user", security_domain="root")
    answer = asyncio.run(procedures.instance_check_host(paths, InstanceArgs(instance=spec)))
    assert not [line for line in answer["missing"] if "security" in line]


def test_os_hypervisor_parameters_are_checked_with_the_clusters(cl: Cluster) -> None:
    cl.set_cluster(enabled_hypervisors=["fake", "kvm"])
    with pytest.raises(ParameterError, match="needs security_domain"):
        cl.run("OP_CLUSTER_SET_PARAMS", os_hvp={"corral-ext4": {"kvm": {
            "security_model": "user"}}})
    with pytest.raises(HypervisorError, match=f"user '{MISSING_USER}' does not exist"):
        cl.run("OP_CLUSTER_SET_PARAMS", os_hvp={"corral-ext4": {"kvm": {
            "security_model": "user", "security_domain": MISSING_USER}}})
    assert cl.store.cluster.os_hvp == {}


def test_enabling_kvm_has_the_nodes_check_its_parameters(cl: Cluster) -> None:
    missing = {"security_model": "user", "security_domain": MISSING_USER}
    cl.run("OP_CLUSTER_SET_PARAMS", hvparams={"kvm": missing})  # not enabled: not asked
    with pytest.raises(HypervisorError, match=f"user '{MISSING_USER}' does not exist"):
        cl.run("OP_CLUSTER_SET_PARAMS", enabled_hypervisors=["fake", "kvm"])
    assert cl.store.cluster.enabled_hypervisors == ["fake"]
