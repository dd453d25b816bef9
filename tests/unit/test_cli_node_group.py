"""gnt-node and gnt-group against a scripted fake master: options become the right
opcodes, answers print the way Ganeti's tools print them, errors exit with codes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from corral.cli import gnt_group, gnt_node, jobs, tags
from corral.errors import OpPrereqError, to_wire


class FakeClient:
    """Records calls; answers each method from a handler, a queue or a value."""

    def __init__(self, handlers: dict[str, Any]) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        handler = self.handlers[method]
        if isinstance(handler, list):
            return handler.pop(0)
        if callable(handler):
            return handler(*args)
        return handler

    def args_of(self, method: str) -> tuple[Any, ...]:
        return next(args for m, args in self.calls if m == method)

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeClient]]:
    def install(**handlers: Any) -> FakeClient:
        client = FakeClient(handlers)
        for module in (gnt_node, gnt_group, jobs, tags):
            monkeypatch.setattr(module, "get_client", lambda *a, **k: client)
        return client

    yield install


def run(group: click.Group, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(group, list(args), input=input, catch_exceptions=False)


def _job(result: Any = None, status: str = "success", logs: list[Any] | None = None
         ) -> dict[str, Any]:
    return {
        "SubmitJob": 7,
        "WaitForJobChange": [[[status], logs or []]],
        "QueryJobs": [[[status, [status], [result]]]],
    }


def _op(client: FakeClient) -> dict[str, Any]:
    (op,) = client.args_of("SubmitJob")[0]
    assert isinstance(op, dict)
    return op


def _answer(fields: list[str], rows: list[list[Any]], kinds: dict[str, str] | None = None
            ) -> dict[str, Any]:
    titles = {"name": "Node", "pinst_cnt": "Pinst", "mfree": "MFree", "tags": "Tags"}
    return {"fields": [{"name": f, "title": titles.get(f, f), "kind": (kinds or {}).get(f, "text"),
                        "doc": ""} for f in fields],
            "data": [[[0, v] if not (isinstance(v, tuple)) else list(v) for v in row]
                     for row in rows]}


# -- gnt-node ------------------------------------------------------------------------------


def test_node_add_sends_token_ip_and_options(fake: Any) -> None:
    client = fake(**_job(logs=[[1, [1700000000, 0], "message", "Added node node2"]]))
    result = run(gnt_node.cli, "add", "node2", "--primary-ip", "127.0.1.2", "--token", "T0k",
                 "-g", "rack1", "--master-capable", "no", "--vm-capable", "yes",
                 "--node-parameters", "ssh_port=2222", "--no-ssh-key-check",
                 "--reason", "grow")
    assert result.exit_code == 0, result.output
    assert "Added node node2" in result.stdout
    op = _op(client)
    assert {k: op[k] for k in ("OP_ID", "node_name", "primary_ip", "token", "group",
                               "master_capable", "vm_capable", "ndparams", "readd")} == {
        "OP_ID": "OP_NODE_ADD", "node_name": "node2", "primary_ip": "127.0.1.2",
        "token": "T0k", "group": "rack1", "master_capable": False, "vm_capable": True,
        "ndparams": {"ssh_port": "2222"}, "readd": False}
    assert "secondary_ip" not in op
    assert op["reason"][0][:2] == ["user", "grow"]
    assert op["reason"][-1][:2] == ["gnt:client:gnt-node", "add"]


def test_node_add_rejects_a_bad_yes_no(fake: Any) -> None:
    fake()
    result = run(gnt_node.cli, "add", "n", "--master-capable", "maybe")
    assert result.exit_code == 2 and "is not yes or no" in result.stderr


def test_node_remove_failure_exits_with_the_error_code(fake: Any) -> None:
    error = to_wire(OpPrereqError("node node1 is the master node and cannot be removed"))
    client = fake(SubmitJob=7, WaitForJobChange=[[["error"], []]],
                  QueryJobs=[[["error", ["error"], [error]]]])
    result = run(gnt_node.cli, "remove", "node1", "--dry-run")
    assert result.exit_code == OpPrereqError.exit_code
    assert "is the master node" in result.stderr
    op = _op(client)
    assert (op["OP_ID"], op["node_name"], op["dry_run"]) == ("OP_NODE_REMOVE", "node1", True)


def test_node_list_defaults_and_uuid_aware_filter(fake: Any) -> None:
    client = fake(Query=_answer(list(gnt_node.DEFAULT_FIELDS),
                                [["node1", 2048, 1024, 4096, 512, (4, None), 1, 0]],
                                {"dtotal": "unit", "dfree": "unit", "mtotal": "unit",
                                 "mnode": "unit", "mfree": "unit", "pinst_cnt": "number",
                                 "sinst_cnt": "number"}))
    result = run(gnt_node.cli, "list", "node1")
    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == ["Node", "dtotal", "dfree", "mtotal", "mnode", "MFree", "Pinst",
                              "sinst_cnt"]
    assert row.split() == ["node1", "2.0G", "1.0G", "4.0G", "512M", "*", "1", "0"]
    resource, fields, qfilter = client.args_of("Query")
    assert resource == "node" and fields == list(gnt_node.DEFAULT_FIELDS)
    assert qfilter == ["|", ["==", "name", "node1"]]  # the master finds it by name or UUID


def test_node_list_filter_and_output_fields(fake: Any) -> None:
    client = fake(Query=_answer(["name", "tags"], [["node2", ["a", "b"]]], {"tags": "other"}))
    result = run(gnt_node.cli, "list", "-o", "name,tags", "--no-headers", "-F", "role == \"C\"")
    assert result.stdout == "node2 a,b\n"
    assert client.args_of("Query")[2] == ["==", "role", "C"]


def _info_row(name: str, **over: Any) -> list[Any]:
    row = {"name": name, "uuid": f"uuid-{name}", "pip": "127.0.1.2", "sip": "127.0.1.2",
           "pinst_list": ["web1"], "sinst_list": [], "master_candidate": True,
           "drained": False, "offline": False, "master_capable": True, "vm_capable": True,
           "ndparams": {"ssh_port": 2222, "spindle_count": 1},
           "custom_ndparams": {"ssh_port": 2222}, "group": "default", "role": "C",
           "aggregates": [], "traits": [], **over}
    return list(row.values())


def test_node_info_in_ganeti_layout(fake: Any) -> None:
    fields = ["name", "uuid", "pip", "sip", "pinst_list", "sinst_list", "master_candidate",
              "drained", "offline", "master_capable", "vm_capable", "ndparams",
              "custom_ndparams", "group", "role", "aggregates", "traits"]
    client = fake(Query=_answer(fields, [_info_row("node2")]))
    result = run(gnt_node.cli, "info", "uuid-node2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "- Node name: node2",
        "  primary ip: 127.0.1.2",
        "  secondary ip: 127.0.1.2",
        "  master candidate: True",
        "  drained: False",
        "  offline: False",
        "  master_capable: True",
        "  vm_capable: True",
        "  primary for instances: ",
        "    - web1",
        "  secondary for instances: ",
        "  node parameters: ",
        "    spindle_count: default (1)",
        "    ssh_port: 2222",
    ]
    assert client.args_of("Query")[2] == [
        "|", ["|", ["=", "name", "uuid-node2"], ["=", "uuid", "uuid-node2"]]]


def test_node_info_shows_placement_aggregates_and_traits_when_set(fake: Any) -> None:
    fields = ["name", "uuid", "pip", "sip", "pinst_list", "sinst_list", "master_candidate",
              "drained", "offline", "master_capable", "vm_capable", "ndparams",
              "custom_ndparams", "group", "role", "aggregates", "traits"]
    fake(Query=_answer(fields, [_info_row("node2", aggregates=["rack1", "ssd"],
                                          traits=["CUSTOM_GPU"])]))
    result = run(gnt_node.cli, "info", "node2")
    assert result.stdout.splitlines()[-2:] == ["  aggregates: rack1, ssd",
                                               "  traits: CUSTOM_GPU"]


def test_node_modify_aggregates_and_traits_specs(fake: Any) -> None:
    client = fake(**_job([["aggregates", "rack1"], ["traits", ""]]))
    result = run(gnt_node.cli, "modify", "--aggregates", "+rack1,-old", "--traits", "",
                 "node3")
    assert result.exit_code == 0, result.output
    op = _op(client)
    assert (op["aggregates"], op["traits"]) == (["+rack1", "-old"], [])
    client = fake(**_job([["traits", ""]]))
    result = run(gnt_node.cli, "modify", "--traits", "-CUSTOM_SSD", "node3")
    assert result.exit_code == 0, result.output
    assert _op(client)["traits"] == ["-CUSTOM_SSD"]


def test_node_info_unknown_name_fails(fake: Any) -> None:
    fake(Query=_answer(["name", "uuid"], []))
    result = run(gnt_node.cli, "info", "nosuch")
    assert result.exit_code == 1 and "node nosuch not found" in result.stderr


def test_node_modify_flags_and_output(fake: Any) -> None:
    client = fake(**_job([["master_candidate", "False"], ["offline", "True"]]))
    result = run(gnt_node.cli, "modify", "-O", "yes", "--auto-promote", "node3")
    assert result.stdout.splitlines() == [
        "Modified node node3", " - master_candidate -> False", " - offline -> True"]
    op = _op(client)
    assert (op["OP_ID"], op["offline"], op["auto_promote"], op["force"]) == (
        "OP_NODE_SET_PARAMS", True, True, False)
    assert "drained" not in op and "master_candidate" not in op


def test_node_modify_online_asks_unless_forced(fake: Any) -> None:
    client = fake(**_job([["offline", "False"]]))
    result = run(gnt_node.cli, "modify", "--offline", "no", "node3", input="n\n")
    assert result.exit_code == 1 and client.calls == []
    result = run(gnt_node.cli, "modify", "--offline", "no", "-f", "node3")
    assert result.exit_code == 0 and _op(client)["offline"] is False


def test_node_modify_needs_a_change(fake: Any) -> None:
    client = fake()
    result = run(gnt_node.cli, "modify", "node3")
    assert result.exit_code == 1 and "at least one of the parameters" in result.stderr
    assert client.calls == []


def test_node_tags(fake: Any, tmp_path: Path) -> None:
    client = fake(**_job())
    source = tmp_path / "tags"
    source.write_text("c\n\nd\n")
    assert run(gnt_node.cli, "add-tags", "node2", "a", "--from", str(source)).exit_code == 0
    op = _op(client)
    assert (op["OP_ID"], op["kind"], op["name"], op["tags"]) == (
        "OP_TAGS_SET", "node", "node2", ["a", "c", "d"])
    client = fake(**_job())
    assert run(gnt_node.cli, "remove-tags", "node2", "a").exit_code == 0
    assert _op(client)["OP_ID"] == "OP_TAGS_DEL"
    client = fake(QueryTags=[["z", "a"]])
    assert run(gnt_node.cli, "list-tags", "node2").stdout == "a\nz\n"
    assert client.args_of("QueryTags") == ("node", "node2")


def test_node_list_fields(fake: Any) -> None:
    client = fake(QueryFields={"fields": [
        {"name": "mfree", "title": "MFree", "kind": "unit", "doc": "Free memory"}]})
    result = run(gnt_node.cli, "list-fields", "mfree")
    assert result.stdout.splitlines()[1].split()[:3] == ["mfree", "Storage", "size"]
    assert client.args_of("QueryFields") == ("node", ["mfree"])


# -- gnt-group -----------------------------------------------------------------------------


def test_group_add_with_parameters(fake: Any) -> None:
    client = fake(**_job())
    result = run(gnt_group.cli, "add", "rack2", "--alloc-policy", "last_resort",
                 "--node-parameters", "ssh_port=2222", "-D", "plain:stripes=2")
    assert result.exit_code == 0, result.output
    op = _op(client)
    assert {k: op[k] for k in ("OP_ID", "group_name", "alloc_policy", "ndparams",
                               "diskparams")} == {
        "OP_ID": "OP_GROUP_ADD", "group_name": "rack2", "alloc_policy": "last_resort",
        "ndparams": {"ssh_port": "2222"}, "diskparams": {"plain": {"stripes": "2"}}}


def test_group_add_refuses_whole_template_removal(fake: Any) -> None:
    client = fake()
    result = run(gnt_group.cli, "add", "g", "-D", "-plain")
    assert result.exit_code == 1 and "reset single ones" in result.stderr
    assert client.calls == []


def test_group_rename_assign_remove(fake: Any) -> None:
    client = fake(**_job("rack3"))
    assert run(gnt_group.cli, "rename", "rack2", "rack3").exit_code == 0
    assert {k: _op(client)[k] for k in ("OP_ID", "group_name", "new_name")} == {
        "OP_ID": "OP_GROUP_RENAME", "group_name": "rack2", "new_name": "rack3"}
    client = fake(**_job())
    assert run(gnt_group.cli, "assign-nodes", "rack3", "node2", "node3").exit_code == 0
    op = _op(client)
    assert (op["OP_ID"], op["nodes"], op["force"]) == (
        "OP_GROUP_ASSIGN_NODES", ["node2", "node3"], False)
    client = fake(**_job())
    assert run(gnt_group.cli, "remove", "rack3").exit_code == 0
    assert _op(client)["OP_ID"] == "OP_GROUP_REMOVE"
    result = run(gnt_group.cli, "assign-nodes", "rack3")
    assert result.exit_code == 1
    assert result.stderr == "Error: Command assign-nodes expects at least 2 argument(s)\n"


def test_group_modify_prints_changes(fake: Any) -> None:
    client = fake(**_job([["alloc_policy", "unallocable"]]))
    result = run(gnt_group.cli, "modify", "--alloc-policy", "unallocable", "default")
    assert result.stdout.splitlines() == [
        "Modified node group default", " - alloc_policy -> unallocable"]
    assert _op(client)["alloc_policy"] == "unallocable"
    result = run(gnt_group.cli, "modify", "default")
    assert result.exit_code == 1


def test_group_list_defaults(fake: Any) -> None:
    client = fake(Query=_answer(list(gnt_group.DEFAULT_FIELDS),
                                [["default", 3, 1, "preferred", {"ssh_port": 22}]],
                                {"node_cnt": "number", "pinst_cnt": "number",
                                 "ndparams": "other"}))
    result = run(gnt_group.cli, "list")
    assert result.stdout.splitlines()[1].split() == ["default", "3", "1", "preferred",
                                                     "ssh_port=22"]
    assert client.args_of("Query") == ("group", list(gnt_group.DEFAULT_FIELDS), None)


def test_group_info(fake: Any) -> None:
    fields = ["name", "uuid", "ndparams", "custom_ndparams", "diskparams", "custom_diskparams",
              "ipolicy", "custom_ipolicy"]
    low = {"cpu-count": 1, "disk-count": 1, "disk-size": 512, "memory-size": 64,
           "nic-count": 0, "spindle-use": 1}
    high = {**low, "cpu-count": 4}
    effective = {"minmax": [{"min": low, "max": high}], "std": low, "disk-templates": ["file"],
                 "vcpu-ratio": 2.5, "spindle-ratio": 32}
    custom = {"minmax": [{"min": low, "max": high}], "vcpu-ratio": 2.5}
    fake(Query=_answer(fields, [["default", "u", {"ssh_port": 22}, {},
                                 {"plain": {"stripes": 2}}, {"plain": {"stripes": 2}},
                                 effective, custom]]))
    result = run(gnt_group.cli, "info", "default")
    # Ganeti's layout: own values plain, inherited ones "default (V)"
    assert result.stdout.splitlines() == [
        "- Node group: default",
        "  Node parameters: ",
        "    ssh_port: default (22)",
        "  Disk parameters: ",
        "    plain: ",
        "      stripes: 2",
        "  Instance policy: ",
        "    bounds specs: ",
        "      - min/0: ",
        "          cpu-count: 1",
        "          disk-count: 1",
        "          disk-size: 512",
        "          memory-size: 64",
        "          nic-count: 0",
        "          spindle-use: 1",
        "        max/0: ",
        "          cpu-count: 4",
        "          disk-count: 1",
        "          disk-size: 512",
        "          memory-size: 64",
        "          nic-count: 0",
        "          spindle-use: 1",
        "    allowed disk templates: default (file)",
        "    spindle-ratio: default (32)",
        "    vcpu-ratio: 2.5",
    ]


def test_group_tags(fake: Any) -> None:
    client = fake(**_job())
    assert run(gnt_group.cli, "add-tags", "default", "x").exit_code == 0
    op = _op(client)
    assert (op["kind"], op["name"], op["tags"]) == ("nodegroup", "default", ["x"])
    client = fake(QueryTags=[["x"]])
    assert run(gnt_group.cli, "list-tags", "default").stdout == "x\n"
    assert client.args_of("QueryTags") == ("nodegroup", "default")
