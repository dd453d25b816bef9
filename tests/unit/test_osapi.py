"""OS definitions: discovery, lookup, the script environment and running scripts."""

from __future__ import annotations

import asyncio
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from corral.errors import InternalError, OsError, OsScriptError
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.osapi import (
    DEFAULT_PATH,
    QUOTED_LINES,
    SUPPORTED_API_VERSIONS,
    OsDefinition,
    build_env,
    core_env,
    discover,
    find_os,
    osparams_env,
    read_os,
    run_script,
    split_name,
    transfer_env,
    verify_params,
)

REPO = Path(__file__).resolve().parents[2]
BUNDLED_OS = REPO / "share" / "os" / "corral-ext4"
DUMPENV_OS = REPO / "tests" / "data" / "os" / "dumpenv"
SCRIPTS = ("create", "export", "import", "rename", "verify")
# Variables the shell itself adds to what it was given (dash exports PWD).
SHELL_ADDED = {"PWD", "OLDPWD", "SHLVL", "_"}


def make_os(root: Path, name: str, *, api: str | None = "20\n", scripts: tuple[str, ...] = SCRIPTS,
            variants: str | None = None, parameters: str | None = None,
            os_version: str | None = None, body: str = "exit 0\n") -> Path:
    """Write a small OS definition under ``root`` and return its directory."""
    path = root / name
    path.mkdir(parents=True)
    if api is not None:
        (path / "ganeti_api_version").write_text(api)
    for script in scripts:
        file = path / script
        file.write_text("#!/bin/sh\n" + body)
        file.chmod(0o755)
    if variants is not None:
        (path / "variants.list").write_text(variants)
    if parameters is not None:
        (path / "parameters.list").write_text(parameters)
    if os_version is not None:
        (path / "os_version").write_text(os_version)
    return path


def copy_dumpenv(root: Path, name: str = "dumpenv", api: str = "20\n") -> Path:
    """A copy of the test OS, optionally declaring other API versions."""
    path = root / name
    shutil.copytree(DUMPENV_OS, path)
    (path / "ganeti_api_version").write_text(api)
    return path


def two_disk_spec(tmp_path: Path) -> tuple[InstanceSpec, list[str]]:
    disks = [
        DiskSpec(uuid="d-0", index=0, dev_type="file", size=1024, mode="rw",
                 logical_id=["loop", "/srv/corral/file-storage/i/d-0.disk0"], name="root"),
        DiskSpec(uuid="d-1", index=1, dev_type="file", size=512, mode="ro",
                 logical_id=["loop", "/srv/corral/file-storage/i/d-1.disk1"]),
    ]
    nics = [
        NicSpec(index=0, mac="aa:00:00:00:00:01", uuid="n-0", ip="192.0.2.10",
                mode="bridged", link="br0", name="eth0"),
        NicSpec(index=1, mac="aa:00:00:00:00:02", uuid="n-1", ip=None, mode="routed",
                link="100"),
    ]
    spec = InstanceSpec(
        name="web1.example.com", uuid="inst-uuid", os="dumpenv+beta", hypervisor="fake",
        hvparams={"kernel_path": "/boot/vmlinuz", "acpi": True},
        beparams={"maxmem": 256, "minmem": 128, "vcpus": 2, "auto_balance": False},
        osparams={"dump_file": str(tmp_path / "env.txt"), "extra": "x y"},
        disk_template="file", disks=disks, nics=nics, primary_node="node1",
    )
    paths = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    for p in paths:
        Path(p).write_bytes(b"")
    return spec, paths


def read_env_dump(path: Path) -> dict[str, str]:
    env = dict(line.split("=", 1) for line in path.read_text().splitlines())
    for key in SHELL_ADDED:
        env.pop(key, None)
    return env


# ---------------------------------------------------------------------------- discovery


def test_bundled_os_is_valid_api_20() -> None:
    os_def = read_os(BUNDLED_OS)
    assert os_def.valid, os_def.message
    assert os_def.api_version == 20
    assert os_def.variants == ["default", "minimal"]
    assert os_def.parameter_names == ["fs_label", "hostname_file"]
    assert os_def.os_version == "1.0"
    for script in SCRIPTS:
        assert (BUNDLED_OS / script).stat().st_mode & stat.S_IXUSR


def test_dumpenv_os_is_valid() -> None:
    os_def = read_os(DUMPENV_OS)
    assert os_def.valid, os_def.message
    assert os_def.variants == ["alpha", "beta"]
    assert os_def.parameter_names == ["dump_file", "fail", "extra", "color"]


def test_discover_valid_invalid_and_first_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    make_os(first, "good", variants="# comment\none\n\ntwo\n",
            parameters="p1  the first\np2\tthe second\n", os_version="3.1\nignored\n")
    make_os(first, "dup", os_version="from-first\n")
    make_os(second, "dup", os_version="from-second\n")
    make_os(second, "noapi", api=None)
    make_os(second, "oldapi", api="5\n")
    make_os(second, "noverify", scripts=("create", "export", "import", "rename"))
    make_os(second, "badversion", api="twenty\n")
    notexec = make_os(second, "notexec")
    (notexec / "rename").chmod(0o644)
    (second / "README").write_text("not an OS\n")
    (second / ".hidden").mkdir()

    found = {d.name: d for d in discover([first, second, tmp_path / "missing"])}
    assert sorted(found) == ["badversion", "dup", "good", "noapi", "notexec", "noverify",
                             "oldapi"]
    good = found["good"]
    assert good.valid and good.message == ""
    assert good.variants == ["one", "two"]
    assert good.parameters == [("p1", "the first"), ("p2", "the second")]
    assert good.os_version == "3.1"
    assert good.path == first / "good"
    assert found["dup"].os_version == "from-first"
    assert found["dup"].path == first / "dup"

    assert not found["noapi"].valid
    assert "ganeti_api_version" in found["noapi"].message
    assert "missing" in found["noapi"].message
    assert not found["oldapi"].valid
    assert "5" in found["oldapi"].message and "10, 15, 20" in found["oldapi"].message
    assert found["oldapi"].api_versions == [5]
    assert not found["noverify"].valid and "verify" in found["noverify"].message
    assert not found["notexec"].valid
    assert "rename" in found["notexec"].message
    assert "not executable" in found["notexec"].message
    assert "twenty" in found["badversion"].message
    assert found["noapi"].variants == [] and found["noapi"].parameters == []


def test_api_10_ignores_variants_and_parameters(tmp_path: Path) -> None:
    make_os(tmp_path, "old", api="10\n", scripts=("create", "export", "import", "rename"),
            variants="v1\n", parameters="p1 doc\n")
    make_os(tmp_path, "mid", api="15\n10\n", scripts=("create", "export", "import", "rename"),
            variants="v1\nv2\n", parameters="p1 doc\n")
    make_os(tmp_path, "new", api="20\n15\n", variants="v1\n", parameters="p1 doc\n")
    found = {d.name: d for d in discover([tmp_path])}
    assert found["old"].valid and found["old"].api_version == 10
    assert found["old"].variants == [] and found["old"].parameters == []
    assert found["mid"].valid and found["mid"].api_version == 15
    assert found["mid"].variants == ["v1", "v2"] and found["mid"].parameters == []
    assert found["new"].api_version == 20 and found["new"].parameter_names == ["p1"]


def test_unreadable_variants_list_makes_os_invalid(tmp_path: Path) -> None:
    path = make_os(tmp_path, "weird")
    (path / "variants.list").mkdir()
    os_def = read_os(path)
    assert not os_def.valid
    assert "variants.list" in os_def.message


def test_to_dict_round_trip() -> None:
    os_def = read_os(BUNDLED_OS)
    data = os_def.to_dict()
    assert data["name"] == "corral-ext4"
    assert data["path"] == str(BUNDLED_OS)
    assert data["valid"] is True and data["message"] == ""
    assert data["api_versions"] == [20]
    assert data["variants"] == ["default", "minimal"]
    assert [p[0] for p in data["parameters"]] == ["fs_label", "hostname_file"]
    assert data["os_version"] == "1.0" and data["trusted"] is True
    assert OsDefinition.from_dict(data) == os_def
    assert SUPPORTED_API_VERSIONS == (10, 15, 20)


# ---------------------------------------------------------------------------- find_os


def test_find_os_variants(tmp_path: Path) -> None:
    make_os(tmp_path, "multi", variants="small\nlarge\n")
    make_os(tmp_path, "plain")
    os_def, variant = find_os([tmp_path], "multi+large")
    assert (os_def.name, variant) == ("multi", "large")
    # No variant given: the first declared one, as in Ganeti's script environment.
    assert find_os([tmp_path], "multi")[1] == "small"
    assert find_os([tmp_path], "plain")[1] == ""
    assert find_os([tmp_path], "multi+other", force_variant=True)[1] == "other"
    assert split_name("multi+large") == ("multi", "large")


def test_find_os_errors_list_choices(tmp_path: Path) -> None:
    make_os(tmp_path, "alpha", variants="small\nlarge\n")
    make_os(tmp_path, "beta")
    make_os(tmp_path, "broken", api="3\n")
    with pytest.raises(OsError) as err:
        find_os([tmp_path], "gamma")
    msg = str(err.value)
    assert "'gamma' not found" in msg and "alpha, beta" in msg and "broken" not in msg
    with pytest.raises(OsError, match=r"broken.*invalid.*API version"):
        find_os([tmp_path], "broken")
    with pytest.raises(OsError) as err:
        find_os([tmp_path], "alpha+huge")
    assert "'huge'" in str(err.value) and "alpha+small, alpha+large" in str(err.value)
    with pytest.raises(OsError, match=r"needs a variant.*alpha\+small, alpha\+large"):
        find_os([tmp_path], "alpha", require_variant=True)
    with pytest.raises(OsError, match=r"no variants.*use 'beta'"):
        find_os([tmp_path], "beta+x")
    with pytest.raises(OsError, match="available OSes: none"):
        find_os([tmp_path / "empty"], "alpha")


# ---------------------------------------------------------------------------- environment


def test_build_env_two_disks_two_nics(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    spec, paths = two_disk_spec(tmp_path)
    env = build_env(os_def, "beta", spec, paths, debug=1)
    assert env == {
        "OS_API_VERSION": "20",
        "OS_NAME": "dumpenv",
        "OS_VARIANT": "beta",
        "DEBUG_LEVEL": "1",
        "PATH": DEFAULT_PATH,
        "OSP_DUMP_FILE": str(tmp_path / "env.txt"),
        "OSP_EXTRA": "x y",
        "INSTANCE_NAME": "web1.example.com",
        "INSTANCE_OS": "dumpenv+beta",
        "INSTANCE_UUID": "inst-uuid",
        "INSTANCE_PRIMARY_NODE": "node1",
        "INSTANCE_SECONDARY_NODES": "",
        "INSTANCE_HYPERVISOR": "fake",
        "HYPERVISOR": "fake",
        "DISK_COUNT": "2",
        "DISK_0_PATH": paths[0],
        "DISK_0_ACCESS": "rw",
        "DISK_0_UUID": "d-0",
        "DISK_0_SIZE": "1024",
        "DISK_0_NAME": "root",
        "DISK_0_BACKEND_TYPE": "file:loop",
        "DISK_1_PATH": paths[1],
        "DISK_1_ACCESS": "ro",
        "DISK_1_UUID": "d-1",
        "DISK_1_SIZE": "512",
        "DISK_1_BACKEND_TYPE": "file:loop",
        "NIC_COUNT": "2",
        "NIC_0_MAC": "aa:00:00:00:00:01",
        "NIC_0_UUID": "n-0",
        "NIC_0_NAME": "eth0",
        "NIC_0_IP": "192.0.2.10",
        "NIC_0_MODE": "bridged",
        "NIC_0_BRIDGE": "br0",
        "NIC_0_LINK": "br0",
        "NIC_1_MAC": "aa:00:00:00:00:02",
        "NIC_1_UUID": "n-1",
        "NIC_1_MODE": "routed",
        "NIC_1_LINK": "100",
        "INSTANCE_BE_maxmem": "256",
        "INSTANCE_BE_minmem": "128",
        "INSTANCE_BE_vcpus": "2",
        "INSTANCE_BE_auto_balance": "False",
        "INSTANCE_HV_kernel_path": "/boot/vmlinuz",
        "INSTANCE_HV_acpi": "True",
    }


def test_build_env_block_disks(tmp_path: Path) -> None:
    """plain (LVM) and blockdev disks: the path the node assembled, backend type block."""
    os_def = read_os(DUMPENV_OS)
    spec, _paths = two_disk_spec(tmp_path)
    spec.disk_template = "plain"
    spec.disks = [
        DiskSpec(uuid="d-0", index=0, dev_type="plain", size=64,
                 logical_id=["xenvg", "d-0.disk0"]),
        DiskSpec(uuid="d-1", index=1, dev_type="blockdev", size=64,
                 logical_id=["manual", "/dev/disk/by-id/x"]),
    ]
    env = build_env(os_def, "beta", spec, ["/dev/xenvg/d-0.disk0", "/dev/disk/by-id/x"])
    assert env["DISK_0_PATH"] == "/dev/xenvg/d-0.disk0"
    assert env["DISK_1_PATH"] == "/dev/disk/by-id/x"
    assert env["DISK_0_BACKEND_TYPE"] == env["DISK_1_BACKEND_TYPE"] == "block"


def test_build_env_frontend_types_and_disk_count_check(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    spec, paths = two_disk_spec(tmp_path)
    spec.hvparams.update({"disk_type": "paravirtual", "nic_type": "e1000"})
    env = build_env(os_def, "alpha", spec, paths)
    assert env["DISK_1_FRONTEND_TYPE"] == "paravirtual"
    assert env["NIC_0_FRONTEND_TYPE"] == "e1000"
    with pytest.raises(InternalError, match="2 disk"):
        build_env(os_def, "alpha", spec, paths[:1])


def test_env_follows_api_version(tmp_path: Path) -> None:
    spec, paths = two_disk_spec(tmp_path)
    v15 = read_os(copy_dumpenv(tmp_path, "d15", "15\n"))
    v10 = read_os(copy_dumpenv(tmp_path, "d10", "10\n"))
    env15 = build_env(v15, "beta", spec, paths)
    assert env15["OS_API_VERSION"] == "15" and env15["OS_VARIANT"] == "beta"
    assert not any(k.startswith("OSP_") for k in env15)
    env10 = build_env(v10, "", spec, paths)
    assert env10["OS_API_VERSION"] == "10" and env10["OS_VARIANT"] == ""
    assert not any(k.startswith("OSP_") for k in env10)
    # An OS declaring several versions gets the highest one corral knows.
    multi = read_os(copy_dumpenv(tmp_path, "dmulti", "25\n20\n15\n"))
    assert multi.valid and build_env(multi, "", spec, paths)["OS_API_VERSION"] == "20"
    assert build_env(multi, "", spec, paths)["OS_VARIANT"] == "alpha"


def test_osparams_env_takes_filled_values() -> None:
    # The master has already applied instance > OS+variant > OS; values pass unchanged.
    filled = {"dhcp": "no", "root-size": 8, "unset": None, "Mixed_Case": ""}
    assert osparams_env(filled) == {"OSP_DHCP": "no", "OSP_ROOT_SIZE": "8",
                                    "OSP_MIXED_CASE": ""}
    os_def = read_os(DUMPENV_OS)
    assert core_env(os_def, "", {"fail": "no"}) == {
        "OS_API_VERSION": "20", "OS_NAME": "dumpenv", "OS_VARIANT": "alpha",
        "DEBUG_LEVEL": "0", "PATH": DEFAULT_PATH, "OSP_FAIL": "no",
    }


def test_transfer_env() -> None:
    env = {"DISK_0_PATH": "/d0", "DISK_1_PATH": "/d1"}
    assert transfer_env(env, "export", 1) == {
        **env, "EXPORT_INDEX": "1", "EXPORT_DISK_PATH": "/d1", "EXPORT_DEVICE": "/d1"}
    assert transfer_env(env, "import", 0)["IMPORT_DISK_PATH"] == "/d0"
    with pytest.raises(InternalError):
        transfer_env(env, "import", 2)


# ---------------------------------------------------------------------------- run_script


async def test_dumpenv_create_sees_exactly_the_env(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    spec, paths = two_disk_spec(tmp_path)
    env = build_env(os_def, "beta", spec, paths)
    env["INSTANCE_REINSTALL"] = "1"
    log = tmp_path / "log" / "add-web1.log"
    await run_script(os_def, "create", env, log)
    assert read_env_dump(tmp_path / "env.txt") == env
    text = log.read_text()
    assert text.splitlines()[0].startswith("=== ")
    assert "create script of OS dumpenv for instance web1.example.com" in text
    assert "dumpenv: create wrote its environment" in text


async def test_dumpenv_falls_back_next_to_first_disk(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    spec, paths = two_disk_spec(tmp_path)
    spec.osparams.pop("dump_file")
    env = build_env(os_def, "alpha", spec, paths)
    await run_script(os_def, "rename", {**env, "OLD_INSTANCE_NAME": "old"}, tmp_path / "log")
    dumped = read_env_dump(Path(paths[0] + ".rename.env"))
    assert dumped["OLD_INSTANCE_NAME"] == "old" and dumped["OS_VARIANT"] == "alpha"


async def test_failing_script_quotes_last_lines(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    spec, paths = two_disk_spec(tmp_path)
    spec.osparams["fail"] = "yes"
    env = build_env(os_def, "alpha", spec, paths)
    log = tmp_path / "os.log"
    log.write_text("output of an earlier run\n")
    with pytest.raises(OsScriptError) as err:
        await run_script(os_def, "create", env, log)
    msg = str(err.value)
    assert msg.startswith("create script of OS dumpenv failed (exit 1); last lines of its "
                          f"output (log {log}):\n")
    quoted = msg.splitlines()[1:]
    assert len(quoted) == QUOTED_LINES
    assert quoted[-1] == "  dumpenv: failure line 15"
    assert quoted[0] == "  dumpenv: failure line 6"
    text = log.read_text()
    assert text.startswith("output of an earlier run\n")  # appended, not replaced
    assert "dumpenv: failure line 1\n" in text and "dumpenv: failure line 15\n" in text


async def test_script_timeout_kills_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    os_def = read_os(make_os(tmp_path / "os", "slow", body=(
        f"sleep 60 &\necho $! > {pid_file}\necho started\nsleep 60\n")))
    started = time.monotonic()
    with pytest.raises(OsScriptError, match=r"killed after running for 0\.5 s") as err:
        await run_script(os_def, "create", {"PATH": DEFAULT_PATH}, tmp_path / "log",
                         timeout=0.5)
    assert time.monotonic() - started < 10
    assert "  started" in str(err.value)
    # The script's background child went with it (it may linger briefly as a zombie).
    assert await child_gone(int(pid_file.read_text()))


def process_state(pid: int) -> str | None:
    """The one-letter state of a process, ``None`` when it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


async def eventually(check: Callable[[], bool], within: float = 5.0) -> bool:
    """Poll ``check`` until it holds (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


async def child_gone(pid: int) -> bool:
    return await eventually(lambda: process_state(pid) in (None, "Z", "X"))


async def test_cancelling_kills_the_script(tmp_path: Path) -> None:
    pid_file = tmp_path / "script.pid"
    os_def = read_os(make_os(tmp_path / "os", "stuck", body=(
        f"echo $$ > {pid_file}.tmp\nmv {pid_file}.tmp {pid_file}\nexec sleep 60\n")))
    task = asyncio.create_task(
        run_script(os_def, "create", {"PATH": DEFAULT_PATH}, tmp_path / "log"))
    assert await eventually(pid_file.exists, within=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await child_gone(int(pid_file.read_text()))


async def test_script_without_output_and_signal(tmp_path: Path) -> None:
    os_def = read_os(make_os(tmp_path / "os", "quiet", body="kill -TERM $$\n"))
    with pytest.raises(OsScriptError, match=r"killed by signal 15.*\n  \(no output\)"):
        await run_script(os_def, "rename", {}, tmp_path / "log")


async def test_run_script_refuses_invalid_os(tmp_path: Path) -> None:
    os_def = read_os(make_os(tmp_path, "bad", api="1\n"))
    with pytest.raises(OsError, match="invalid"):
        await run_script(os_def, "create", {}, tmp_path / "log")


# ---------------------------------------------------------------------------- verify


async def test_verify_params_runs_verify_with_core_env_only(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    dump = tmp_path / "verify.env"
    await verify_params(os_def, "beta", {"dump_file": str(dump), "extra": "1"},
                        tmp_path / "log")
    assert read_env_dump(dump) == {
        "OS_API_VERSION": "20", "OS_NAME": "dumpenv", "OS_VARIANT": "beta",
        "DEBUG_LEVEL": "0", "PATH": DEFAULT_PATH, "OSP_DUMP_FILE": str(dump),
        "OSP_EXTRA": "1",
    }


async def test_verify_params_refuses_unknown_names_before_running(tmp_path: Path) -> None:
    os_def = read_os(DUMPENV_OS)
    dump = tmp_path / "verify.env"
    with pytest.raises(OsError, match="no parameter\\(s\\) colour, size; its parameters: "
                                      "dump_file, fail, extra"):
        await verify_params(os_def, "", {"dump_file": str(dump), "size": "1", "colour": "r"},
                            tmp_path / "log")
    assert not dump.exists()
    old = read_os(copy_dumpenv(tmp_path, "d15", "15\n"))
    await verify_params(old, "", {}, tmp_path / "log")
    with pytest.raises(OsError, match="API version 15, which has no OS parameters"):
        await verify_params(old, "", {"fail": "yes"}, tmp_path / "log")


async def test_parameter_names_are_lower_cased(tmp_path: Path) -> None:
    # Design 2.2: a parameter declared TRACK is used as "track"; scripts see OSP_TRACK.
    path = copy_dumpenv(tmp_path, "cased")
    with (path / "parameters.list").open("a") as params:
        params.write("TRACK   Distribution track\n")
    os_def = read_os(path)
    assert os_def.parameter_names[-1] == "track"
    assert os_def.to_dict()["parameters"][-1] == ["track", "Distribution track"]
    dump = tmp_path / "verify.env"
    for given in ("track", "TRACK"):
        await verify_params(os_def, "alpha", {"dump_file": str(dump), given: "testing"},
                            tmp_path / "log")
        assert read_env_dump(dump)["OSP_TRACK"] == "testing"


async def test_verify_failure_is_script_error(tmp_path: Path) -> None:
    os_def = read_os(BUNDLED_OS)
    with pytest.raises(OsScriptError, match=r"fs_label 'x{20}' has 20 characters"):
        await verify_params(os_def, "default", {"fs_label": "x" * 20}, tmp_path / "log")
    with pytest.raises(OsScriptError, match="hostname_file 'relative/path' must be"):
        await verify_params(os_def, "default", {"hostname_file": "relative/path"},
                            tmp_path / "log")
    await verify_params(os_def, "minimal", {"fs_label": "data", "hostname_file": "/etc/name"},
                        tmp_path / "log")


# ---------------------------------------------------------------------------- bundled OS

needs_e2fsprogs = pytest.mark.skipif(
    shutil.which("mkfs.ext4", path=DEFAULT_PATH) is None
    or shutil.which("debugfs", path=DEFAULT_PATH) is None,
    reason="mkfs.ext4/debugfs not installed (apt-get install -y e2fsprogs)",
)


def debugfs_cat(disk: Path, file: str) -> str:
    debugfs = shutil.which("debugfs", path=DEFAULT_PATH)
    assert debugfs is not None
    out = subprocess.run([debugfs, "-R", f"cat {file}", str(disk)], capture_output=True,
                         text=True, check=True)
    return out.stdout


def bundled_spec(disk: Path, name: str = "vm1.example.com", **osparams: str) -> InstanceSpec:
    return InstanceSpec(
        name=name, uuid="u1", os="corral-ext4+default", osparams=dict(osparams),
        disk_template="file",
        disks=[DiskSpec(uuid="d", index=0, dev_type="file", size=64,
                        logical_id=["loop", str(disk)])],
    )


@needs_e2fsprogs
async def test_bundled_os_formats_and_renames(tmp_path: Path) -> None:
    disk = tmp_path / "disk0"
    with disk.open("wb") as f:
        f.truncate(64 << 20)  # sparse
    os_def, variant = find_os([tmp_path / "none", BUNDLED_OS.parent], "corral-ext4")
    assert variant == "default"
    log = tmp_path / "os.log"
    spec = bundled_spec(disk)
    await run_script(os_def, "create", build_env(os_def, variant, spec, [str(disk)]), log)
    assert debugfs_cat(disk, "/etc/hostname") == "vm1.example.com\n"
    assert "127.0.1.1\tvm1.example.com" in debugfs_cat(disk, "/etc/hosts")
    assert disk.stat().st_blocks * 512 < disk.stat().st_size  # still sparse

    renamed = bundled_spec(disk, "vm2.example.com")
    env = {**build_env(os_def, variant, renamed, [str(disk)]),
           "OLD_INSTANCE_NAME": "vm1.example.com"}
    await run_script(os_def, "rename", env, log)
    assert debugfs_cat(disk, "/etc/hostname") == "vm2.example.com\n"
    assert "renamed vm1.example.com to vm2.example.com" in log.read_text()


@needs_e2fsprogs
async def test_bundled_os_minimal_variant_and_hostname_file(tmp_path: Path) -> None:
    disk = tmp_path / "disk0"
    disk.write_bytes(b"")
    with disk.open("r+b") as f:
        f.truncate(32 << 20)
    os_def, variant = find_os([BUNDLED_OS.parent], "corral-ext4+minimal")
    spec = bundled_spec(disk, hostname_file="/var/lib/name")
    await run_script(os_def, "create", build_env(os_def, variant, spec, [str(disk)]),
                     tmp_path / "log")
    assert debugfs_cat(disk, "/var/lib/name") == "vm1.example.com\n"
    assert debugfs_cat(disk, "/etc/hosts") == ""


async def test_bundled_os_needs_a_disk(tmp_path: Path) -> None:
    os_def, variant = find_os([BUNDLED_OS.parent], "corral-ext4")
    spec = InstanceSpec(name="nodisk", uuid="u2", os="corral-ext4")
    with pytest.raises(OsScriptError, match="instance nodisk has no disk"):
        await run_script(os_def, "create", build_env(os_def, variant, spec, []),
                         tmp_path / "log")
