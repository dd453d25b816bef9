"""gnt-instance and gnt-os against a fake master: the opcodes they submit (Ganeti's
dict form and field names) and what they print."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from corral.cli import (
    gnt_instance,
    gnt_instance_power,
    gnt_instance_query,
    gnt_os,
    jobs,
    prompt,
    tags,
)
from corral.errors import CorralError, OpPrereqError, to_wire
from corral.opcodes import op_from_dict


class FakeMaster:
    """A luxi client whose jobs succeed at once with a result per OP_ID (or fail)."""

    def __init__(self, results: dict[str, Any] | None = None,
                 errors: dict[str, CorralError] | None = None) -> None:
        self.results = results or {}
        self.errors = errors or {}
        self.jobs: list[list[dict[str, Any]]] = []
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.handlers: dict[str, Callable[..., Any]] = {}

    @property
    def ops(self) -> list[dict[str, Any]]:
        return [op for job in self.jobs for op in job]

    def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        if method == "SubmitJob":
            for op in args[0]:  # what the master would refuse, the tools must not send
                op_from_dict(op)
            self.jobs.append(args[0])
            return len(self.jobs)
        if method == "SubmitManyJobs":
            return [[True, self.call("SubmitJob", ops)] for ops in args[0]]
        if method == "Query" and method not in self.handlers and args[0] == "instance":
            # every instance named in the filter exists (see selection_query)
            named = [alt[1][2] for alt in args[2][1:]] if args[2] else []
            return {"fields": [], "data": [[[0, name], [0, []]] for name in named]}
        if method == "WaitForJobChange":
            return [["success"], []]
        if method == "QueryJobs":
            op = self.jobs[args[0][0] - 1][0]
            err = self.errors.get(op["OP_ID"])
            if err is not None:
                return [["error", ["error"], [to_wire(err)]]]
            return [["success", ["success"], [self.results.get(op["OP_ID"])]]]
        return self.handlers[method](*args)

    def __enter__(self) -> FakeMaster:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def master(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeMaster]]:
    def install(**kwargs: Any) -> FakeMaster:
        fake = FakeMaster(**kwargs)
        for module in (gnt_instance, gnt_instance_power, gnt_instance_query, gnt_os, jobs,
                       tags):
            monkeypatch.setattr(module, "get_client", lambda *a, **k: fake)
        monkeypatch.setattr(prompt, "open_tty", no_tty)
        return fake
    yield install


@contextmanager
def no_tty() -> Iterator[None]:
    """As in CI: no controlling terminal, so confirmations are answered "no"."""
    yield None


def run(group: click.Group, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(group, list(args), input=input, catch_exceptions=False)


def body(op: dict[str, Any]) -> dict[str, Any]:
    """The opcode without its reason trail (checked separately)."""
    return {k: v for k, v in op.items() if k != "reason"}


# -- gnt-instance add ---------------------------------------------------------------------


def test_add_builds_ganeti_create_opcode(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run(gnt_instance.cli, "add", "-t", "file", "-o", "corral-ext4+default",
                 "-n", "node1", "--disk", "0:size=1G,mode=rw,name=root",
                 "--disk", "1:size=512", "--net", "0:mac=aa:00:00:00:00:01,ip=10.0.0.5,"
                 "mode=routed,link=100,name=eth0", "-H", "kvm:acpi=false",
                 "-B", "vcpus=2,maxmem=1G,minmem=512M", "-O", "dhcp=yes",
                 "--no-start", "--no-name-check", "--no-ip-check", "--file-storage-dir",
                 "sub", "--file-driver", "loop", "--tags", "a,b", "--priority", "high",
                 "--reason", "demo", "inst1.example.com")
    assert result.exit_code == 0, result.output
    (op,) = fake.ops
    assert body(op) == {
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "inst1.example.com",
        "mode": "create", "disk_template": "file", "os_type": "corral-ext4+default",
        "pnode": "node1",
        "disks": [{"size": 1024, "mode": "rw", "name": "root"}, {"size": 512}],
        "nics": [{"mac": "aa:00:00:00:00:01", "ip": "10.0.0.5", "mode": "routed",
                  "link": "100", "name": "eth0"}],
        "hypervisor": "kvm", "hvparams": {"acpi": "false"},
        "beparams": {"vcpus": 2, "maxmem": 1024, "minmem": 512},
        "osparams": {"dhcp": "yes"}, "start": False, "name_check": False,
        "ip_check": False, "file_storage_dir": "sub", "file_driver": "loop",
        "tags": ["a", "b"], "priority": -10,
    }
    assert op["reason"][0][:2] == ["user", "demo"]
    assert op["reason"][1][:2] == ["gnt:client:gnt-instance", "add"]


def test_add_defaults_one_nic_and_single_disk_size(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run(gnt_instance.cli, "add", "-t", "file", "-o", "os1", "-s", "2G",
                 "--no-install", "--dry-run", "inst1")
    assert result.exit_code == 0, result.output
    (op,) = fake.ops
    assert op["disks"] == [{"size": 2048}] and op["nics"] == [{}]
    assert op["no_install"] is True and op["start"] is False and op["dry_run"] is True


def test_add_diskless_without_nics(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run(gnt_instance.cli, "add", "-t", "diskless", "--no-nics", "-o", "os1",
                 "--hypervisor", "fake", "inst1")
    assert result.exit_code == 0, result.output
    assert fake.ops[0]["disks"] == [] and fake.ops[0]["nics"] == []
    assert fake.ops[0]["hypervisor"] == "fake" and fake.ops[0]["hvparams"] == {}


@pytest.mark.parametrize(("args", "message"), [
    (["-t", "file"], "no disk given"),
    (["-t", "diskless", "-s", "1G"], "diskless instance takes no"),
    (["-t", "file", "-s", "1G", "--disk", "0:size=1G"], "either --disk or -s"),
    (["-t", "file", "--disk", "1:size=1G"], "no disk 0 given"),
    (["-t", "file", "--disk", "0:mode=rw"], "missing size"),
    (["-t", "file", "--disk", "x:size=1G"], "invalid disk index 'x'"),
    (["-t", "file", "--disk", "0:size=lots"], "invalid size for disk 0"),
    (["-t", "diskless", "--net", "0:ip=1.2.3.4", "--no-nics"], "either --net or --no-nics"),
    (["-t", "diskless", "--hypervisor", "kvm", "-H", "fake"], "different hypervisors"),
])
def test_add_refuses_bad_disk_and_nic_options(
    master: Callable[..., FakeMaster], args: list[str], message: str,
) -> None:
    fake = master()
    result = run(gnt_instance.cli, "add", *args, "inst1")
    assert result.exit_code != 0
    assert message in result.output
    assert fake.jobs == []


# -- life cycle ---------------------------------------------------------------------------


def test_remove_asks_unless_forced(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    declined = run(gnt_instance.cli, "remove", "inst1", input="n\n")
    assert declined.exit_code == 1 and fake.jobs == []
    result = run(gnt_instance.cli, "remove", "-f", "--ignore-failures",
                 "--shutdown-timeout", "30", "inst1")
    assert result.exit_code == 0, result.output
    assert body(fake.ops[0]) == {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": "inst1",
                                 "ignore_failures": True, "shutdown_timeout": 30}


def test_startup_shutdown_reboot(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    assert run(gnt_instance.cli, "startup", "--paused", "--no-remember", "-H",
               "kernel_args=ro", "-B", "maxmem=256", "inst1").exit_code == 0
    assert run(gnt_instance.cli, "shutdown", "--timeout", "5", "inst1").exit_code == 0
    assert run(gnt_instance.cli, "reboot", "-t", "full", "--shutdown-timeout", "7",
               "inst1").exit_code == 0
    assert run(gnt_instance.cli, "start", "inst1").exit_code == 0
    assert [body(op) for op in fake.ops] == [
        {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "inst1", "force": False,
         "ignore_offline_nodes": False, "no_remember": True, "startup_paused": True,
         "hvparams": {"kernel_args": "ro"}, "beparams": {"maxmem": 256}},
        {"OP_ID": "OP_INSTANCE_SHUTDOWN", "instance_name": "inst1", "force": False,
         "timeout": 5, "ignore_offline_nodes": False, "no_remember": False},
        {"OP_ID": "OP_INSTANCE_REBOOT", "instance_name": "inst1", "reboot_type": "full",
         "ignore_secondaries": False, "shutdown_timeout": 7},
        {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "inst1", "force": False,
         "ignore_offline_nodes": False, "no_remember": False, "startup_paused": False},
    ]


def test_many_instances_one_job_each_and_failures_counted(
    master: Callable[..., FakeMaster],
) -> None:
    fake = master(errors={})
    refused = run(gnt_instance.cli, "shutdown", "a", "b")
    assert refused.exit_code == 1 and fake.jobs == [] and refused.output == ""
    result = run(gnt_instance.cli, "shutdown", "--force-multiple", "a", "b")
    assert result.exit_code == 0, result.output
    assert [job[0]["instance_name"] for job in fake.jobs] == ["a", "b"]
    fake.errors["OP_INSTANCE_SHUTDOWN"] = OpPrereqError("instance is offline")
    failed = run(gnt_instance.cli, "shutdown", "--force-multiple", "c", "d")
    assert failed.exit_code == 1
    assert ("Job 3 for c has failed: Failure: prerequisites not met for this operation:\n"
            "error type: wrong_state, error details:\ninstance is offline") in failed.output


def test_job_error_is_reported_with_its_exit_code(master: Callable[..., FakeMaster]) -> None:
    master(errors={"OP_INSTANCE_STARTUP": OpPrereqError("node node2 is offline")})
    result = run(gnt_instance.cli, "startup", "inst1")
    assert result.exit_code == OpPrereqError("x").exit_code
    assert ("has failed: Failure: prerequisites not met for this operation:\n"
            "error type: wrong_state, error details:\nnode node2 is offline") in result.output


def test_submit_prints_job_id(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run(gnt_instance.cli, "reboot", "--submit", "--print-jobid", "inst1")
    assert result.exit_code == 0
    # Ganeti's "<job id>: <instance>" for each job; --print-jobid adds nothing
    assert result.output == "1: inst1\n"
    assert [c[0] for c in fake.calls] == ["Query", "SubmitManyJobs", "SubmitJob"]


def test_reinstall_rename(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_RENAME": "new.example.com"})
    assert run(gnt_instance.cli, "reinstall", "inst1", input="n\n").exit_code == 1
    assert run(gnt_instance.cli, "reinstall", "-f", "-o", "os2+min", "-O", "a=1",
               "--force-variant", "inst1").exit_code == 0
    result = run(gnt_instance.cli, "rename", "--no-ip-check", "inst1", "new.example.com")
    assert "Instance 'inst1' renamed to 'new.example.com'" in result.output
    assert [body(op) for op in fake.ops] == [
        {"OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": "inst1", "force_variant": True,
         "os_type": "os2+min", "osparams": {"a": "1"}},
        {"OP_ID": "OP_INSTANCE_RENAME", "instance_name": "inst1",
         "new_name": "new.example.com", "name_check": True, "ip_check": False},
    ]


def test_modify_parameters_disks_and_nics(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_SET_PARAMS": [["be/maxmem", 512], ["disk/1", "add"]]})
    result = run(gnt_instance.cli, "modify", "-B", "maxmem=512,-minmem", "-H",
                 "kernel_args=default", "-O", "a=1,-b", "--os-type", "os2",
                 "--disk", "add:size=1G,mode=ro", "--disk", "0:remove",
                 "--disk", "1:modify,mode=rw", "--net", "add:ip=10.0.0.9",
                 "--net", "eth1:remove", "--net", "0:link=br1", "inst1")
    assert result.exit_code == 0, result.output
    assert body(fake.ops[0]) == {
        "OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "inst1", "force": False,
        "beparams": {"maxmem": 512, "minmem": None},
        "hvparams": {"kernel_args": "default"}, "osparams": {"a": "1", "b": None},
        "os_name": "os2",
        "disks": [["add", -1, {"size": 1024, "mode": "ro"}], ["remove", 0, {}],
                  ["modify", 1, {"mode": "rw"}]],
        "nics": [["add", -1, {"ip": "10.0.0.9"}], ["remove", "eth1", {}],
                 ["modify", 0, {"link": "br1"}]],
    }
    assert "Modified instance inst1" in result.output
    assert " - be/maxmem -> 512" in result.output


@pytest.mark.parametrize(("args", "message"), [
    ([], "nothing to change"),
    (["--disk", "add:mode=rw"], "adding a disk needs size"),
    (["--disk", "0:remove,mode=rw"], "remove takes no parameters"),
    (["--net", "0:add,remove"], "only one of"),
    (["-B", "maxmem=lots"], "backend parameter 'maxmem'"),
    (["-B", "colour=red"], "colour"),
])
def test_modify_refusals(master: Callable[..., FakeMaster], args: list[str],
                         message: str) -> None:
    fake = master()
    result = run(gnt_instance.cli, "modify", *args, "inst1")
    assert result.exit_code != 0 and message in result.output
    assert fake.jobs == []


def test_migrate_failover_move(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    assert run(gnt_instance.cli, "migrate", "inst1", input="n\n").exit_code == 1
    assert run(gnt_instance.cli, "migrate", "-f", "-n", "node2", "--non-live",
               "--allow-failover", "inst1").exit_code == 0
    assert run(gnt_instance.cli, "migrate", "-f", "--cleanup", "inst1").exit_code == 0
    bad = run(gnt_instance.cli, "migrate", "-f", "--non-live", "--migration-mode", "live",
              "inst1")
    assert bad.exit_code != 0 and "only one of --non-live and --migration-mode" in bad.output
    assert run(gnt_instance.cli, "failover", "-f", "-n", "node3", "--shutdown-timeout", "9",
               "inst1").exit_code == 0
    assert run(gnt_instance.cli, "move", "-f", "-n", "node2", "inst1").exit_code == 0
    assert [body(op) for op in fake.ops] == [
        {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "inst1", "cleanup": False,
         "allow_failover": True, "mode": "non-live", "target_node": "node2"},
        {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "inst1", "cleanup": True,
         "allow_failover": False},
        {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "inst1",
         "ignore_consistency": False, "shutdown_timeout": 9, "target_node": "node3"},
        {"OP_ID": "OP_INSTANCE_MOVE", "instance_name": "inst1", "target_node": "node2",
         "shutdown_timeout": 120},
    ]


def test_disk_commands(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_ACTIVATE_DISKS": [["node1", "disk/0", "/srv/d0"]]})
    result = run(gnt_instance.cli, "activate-disks", "inst1")
    assert result.output.strip() == "node1:disk/0:/srv/d0"
    assert run(gnt_instance.cli, "deactivate-disks", "-f", "inst1").exit_code == 0
    assert run(gnt_instance.cli, "grow-disk", "--absolute", "inst1", "0", "2G").exit_code == 0
    bad = run(gnt_instance.cli, "grow-disk", "inst1", "zero", "2G")
    assert bad.exit_code != 0 and "invalid disk index 'zero'" in bad.output
    assert [body(op) for op in fake.ops] == [
        {"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS", "instance_name": "inst1"},
        {"OP_ID": "OP_INSTANCE_DEACTIVATE_DISKS", "instance_name": "inst1", "force": True},
        {"OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": "inst1", "disk": 0,
         "amount": 2048, "absolute": True},
    ]


# -- info, list, console, tags ------------------------------------------------------------

INFO = {
    "name": "inst1", "uuid": "u-1", "serial_no": 3, "ctime": 1700000000.0,
    "mtime": 1700000100.0, "config_state": "up", "run_state": "running",
    "pnode": "node1", "pnode_group_name": "default", "pnode_group_uuid": "g-1",
    "snodes": [], "snodes_group_names": [], "snodes_group_uuids": [], "os": "os1+v",
    "os_instance": {"a": "1"}, "os_actual": {"a": "1", "b": "2"}, "network_port": None,
    "hypervisor": "fake", "hv_instance": {}, "hv_actual": {"migration_mode": "live"},
    "be_instance": {"maxmem": 256}, "be_actual": {"maxmem": 256, "vcpus": 1},
    "nics": [["eth0", "n-1", "10.0.0.5", "aa:00:00:00:00:01", "bridged", "br0", "", None,
              None]],
    "disk_template": "file",
    "disks": [{"iv_name": "disk/0", "dev_type": "file", "size": 1024, "mode": "rw",
               "logical_id": ["loop", "/srv/x.disk0"], "pstatus": None, "name": None,
               "uuid": "d-1"}],
    "last_reason": [["user", "maintenance", 1700000200 * 10**9],
                    ["gnt:client:gnt-instance", "shutdown", 1700000200 * 10**9]],
}


def test_info_shows_ganeti_layout_and_last_reason(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_QUERY_DATA": {"inst1": INFO}})
    result = run(gnt_instance.cli, "info", "-s", "inst1")
    assert result.exit_code == 0, result.output
    assert body(fake.ops[0]) == {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": ["inst1"],
                                 "static": True, "use_locking": False}
    out = result.output
    assert out.startswith("- Instance name: inst1\n  UUID: u-1\n")
    assert "  State: configured to be up, actual state is running\n" in out
    assert "  Nodes: \n    - primary: node1\n      group: default (UUID g-1)\n" in out
    assert "    a: 1\n    b: default (2)\n" in out
    assert "  Allocated network port: None\n  Hypervisor: fake\n" in out
    assert "    maxmem: 256\n    vcpus: default (1)\n" in out
    assert "      MAC: aa:00:00:00:00:01\n" in out
    assert "    - disk/0: file, size 1.0G\n      access mode: rw\n" in out
    assert "  Last state change reason: \n    - user: maintenance (" in out
    assert "    - gnt:client:gnt-instance: shutdown (" in out


def test_info_needs_names_or_all(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_QUERY_DATA": {}})
    assert run(gnt_instance.cli, "info").exit_code == 1
    assert fake.jobs == []
    result = run(gnt_instance.cli, "info", "--all")
    assert result.exit_code == 1 and "No instances." in result.output
    assert fake.ops[0]["instances"] == [] and fake.ops[0]["use_locking"] is True


def test_list_uses_ganeti_default_fields(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    fields = [{"name": n, "title": t, "kind": k} for n, t, k in (
        ("name", "Instance", "text"), ("hypervisor", "Hypervisor", "text"),
        ("os", "OS", "text"), ("pnode", "Primary_node", "text"),
        ("status", "Status", "text"), ("oper_ram", "Memory", "unit"))]
    fake.handlers["Query"] = lambda *a: {"fields": fields, "data": [[
        [0, "inst1"], [0, "fake"], [0, "os1"], [0, "node1"], [0, "running"], [0, 128]]]}
    result = run(gnt_instance.cli, "list")
    assert result.exit_code == 0, result.output
    assert fake.calls[0] == ("Query", ("instance", list(gnt_instance.LIST_DEFAULT_FIELDS),
                                       None))
    assert result.output.splitlines() == [
        "Instance Hypervisor OS  Primary_node Status  Memory",
        "inst1    fake       os1 node1        running   128M",
    ]


def test_list_joins_list_fields(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    fake.handlers["Query"] = lambda *a: {
        "fields": [{"name": "nic.ips", "title": "IP_addresses", "kind": "other"}],
        "data": [[[0, ["10.0.0.1", "10.0.0.2"]]]]}
    result = run(gnt_instance.cli, "list", "-o", "nic.ips", "--no-headers", "inst1")
    assert result.output.strip() == "10.0.0.1,10.0.0.2"
    # Names only: the master finds each by name or UUID and refuses unknown ones.
    assert fake.calls[0][1][2] == ["|", ["==", "name", "inst1"]]


def test_console_message_and_ssh(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_INSTANCE_CONSOLE": {
        "instance": "inst1", "kind": "msg", "message": "Console not available"}})
    result = run(gnt_instance.cli, "console", "inst1")
    assert result.output.strip() == "Console not available"
    assert body(fake.ops[0]) == {"OP_ID": "OP_INSTANCE_CONSOLE", "instance_name": "inst1"}
    fake.results["OP_INSTANCE_CONSOLE"] = {
        "instance": "inst1", "kind": "ssh", "host": "node1", "port": 22, "user": "root",
        "command": ["xl", "console", "inst1"]}
    fake.handlers["QueryConfigValues"] = lambda fields: [
        {"cluster_name": "cluster1", "noded_port": 1811}[f] for f in fields]
    shown = run(gnt_instance.cli, "console", "--show-cmd", "inst1")
    # Ganeti's ssh options: no escape character, batch mode, the cluster's host key
    # alias, a forced terminal; then user@host and the quoted command.
    assert shown.output.strip() == (
        "ssh -oEscapeChar=none -oHashKnownHosts=no -oUserKnownHostsFile=/dev/null "
        "-oCheckHostIp=no -oConnectTimeout=10 -oHostKeyAlias=cluster1 -oPort=22 "
        "-oBatchMode=yes -oStrictHostKeyChecking=yes -t -t root@node1 'xl console inst1'")


def test_tags(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    fake.handlers["QueryTags"] = lambda kind, name: ["z", "a"]
    assert run(gnt_instance.cli, "add-tags", "inst1", "a", "z").exit_code == 0
    assert run(gnt_instance.cli, "remove-tags", "inst1", "z").exit_code == 0
    assert run(gnt_instance.cli, "list-tags", "inst1").output == "a\nz\n"
    assert [body(op) for op in fake.ops] == [
        {"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": "inst1", "tags": ["a", "z"]},
        {"OP_ID": "OP_TAGS_DEL", "kind": "instance", "name": "inst1", "tags": ["z"]},
    ]
    assert ("QueryTags", ("instance", "inst1")) in fake.calls


# -- gnt-os -------------------------------------------------------------------------------


def test_os_list_expands_variants(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_OS_DIAGNOSE": [["debian", ["buster", "bullseye"]],
                                              ["ext4", []]]})
    result = run(gnt_os.cli, "list")
    assert result.output.splitlines() == ["Name", "debian+buster", "debian+bullseye", "ext4"]
    assert body(fake.ops[0]) == {"OP_ID": "OP_OS_DIAGNOSE",
                                 "output_fields": ["name", "variants"], "names": []}
    fake.results["OP_OS_DIAGNOSE"] = [["hid", [], True]]
    result = run(gnt_os.cli, "list", "--hidden", "--no-headers")
    assert result.output.splitlines() == ["hid"]
    assert fake.ops[1]["output_fields"] == ["name", "variants", "hidden"]
    fake.results["OP_OS_DIAGNOSE"] = [["black", ["a", "b"], True]]
    result = run(gnt_os.cli, "list", "--blacklisted", "--no-headers")
    assert result.output.splitlines() == ["black+a", "black+b"]
    assert fake.ops[2]["output_fields"] == ["name", "variants", "blacklisted"]


def test_os_info(master: Callable[..., FakeMaster]) -> None:
    master(results={"OP_OS_DIAGNOSE": [
        ["debian", True, ["buster"], [["dhcp", "Use DHCP"]], [20, 15], False, False,
         {"debian": {"fake": {}}}, {"debian": {"dhcp": "yes"}}, True, "2024.1"],
        ["broken", False, [], [], [], False, True, {}, {}, True, None],
    ]})
    result = run(gnt_os.cli, "info")
    assert result.output == (
        "debian:\n  - valid: True\n  - hidden: False\n  - blacklisted: False\n"
        "  - API versions:\n    - 15\n    - 20\n  - OS version: 2024.1\n"
        "  - variants:\n    - buster\n"
        "  - parameters:\n    - dhcp: Use DHCP\n  - trusted: True\n\n"
        "broken:\n  - valid: False\n  - hidden: True\n  - blacklisted: False\n"
        "  - trusted: True\n\n")
    only = run(gnt_os.cli, "info", "broken", "gone")
    assert only.output.startswith("broken:\n")
    assert only.output.endswith("gone: \n\n")


def test_os_diagnose_reports_nodes_and_exit_code(master: Callable[..., FakeMaster]) -> None:
    ok = ["/srv/os/a", True, "", ["v1"], [["p", "doc"]], [20], True]
    master(results={"OP_OS_DIAGNOSE": [
        ["a", True, ["v1"], {"node1": [ok], "node2": [ok]}, False, False, "", "3"],
        ["b", False, [], {"node1": [["/srv/os/b", False, "no create script", [], [], [20],
                                     True]], "node2": []}, True, False, "invalid", None],
        ["c", False, [], {"node1": [ok]}, False, True, "os_version differs between nodes",
         None],
    ]})
    result = run(gnt_os.cli, "diagnose")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == "OS: a [global status: valid]"
    assert lines[1] == "  Variants: [v1]"
    assert lines[2] == "  OS version: 3"
    assert lines[3] == ("  Node: node1, status: valid (path: /srv/os/a) [API versions: 20] "
                        "[variants: v1] [parameters: p] [trusted]")
    assert "OS: b [global status: invalid] [hidden]" in lines
    assert ("  Node: node1, status: invalid - no create script (path: /srv/os/b) "
            "[API versions: 20] [no variants] [no parameters] [trusted]") in lines
    assert "  Node: node2, status: OS not found" in lines
    assert "OS: c [global status: invalid] [blacklisted]" in lines
    assert "  Problem: os_version differs between nodes" in lines


def test_os_modify_sends_cluster_set_params(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_CLUSTER_SET_PARAMS": {
        "changes": ["hidden_os:  -> debian"], "serial": 2, "dry_run": False}})
    result = run(gnt_os.cli, "modify", "-H", "fake:migration_mode=live", "-H", "-kvm",
                 "-O", "dhcp=no,-mirror", "--hidden", "yes", "--blacklisted", "no",
                 "debian+buster")
    assert result.exit_code == 0, result.output
    assert body(fake.ops[0]) == {
        "OP_ID": "OP_CLUSTER_SET_PARAMS",
        "os_hvp": {"debian+buster": {"fake": {"migration_mode": "live"}, "kvm": None}},
        "osparams": {"debian+buster": {"dhcp": "no", "mirror": None}},
        "hidden_os": [["add", "debian+buster"]],
        "blacklisted_os": [["remove", "debian+buster"]],
    }
    assert fake.ops[0]["reason"][-1][:2] == ["gnt:client:gnt-os", "modify"]
    assert "Changed hidden_os:  -> debian" in result.output


def test_os_modify_needs_something(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run(gnt_os.cli, "modify", "debian")
    assert result.exit_code == 1 and "nothing to change" in result.output
    assert fake.jobs == []
