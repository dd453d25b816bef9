"""Building an opcode checks what is inside its free-form parameters (disks, NICs,
modification lists, parameter families), naming the wrong value's path as the
caller calls it; Ganeti's accepted forms pass unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import ParameterError, UnknownParameterError
from corral.opcodes import op_from_dict, op_to_dict
from corral.opcodes.checks import REFERENCES

_RAPI = {"os_type": "os", "instance_name": "name"}


def _create(**params: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1", **params}


@pytest.mark.parametrize(("params", "expected"), [
    ({"disks": [{"size": "abc"}]}, "body: parameter 'disks[0].size': invalid size 'abc'"),
    ({"disks": [{"size": 1}, {"size": 2.5}]}, "'disks[1].size': invalid size 2.5"),
    ({"disks": [{"size": True}]}, "'disks[0].size'"),
    ({"disks": [{"size": 1, "mode": "rx"}]}, "'disks[0].mode': invalid value 'rx'; valid: rw, ro"),
    ({"disks": [{"size": 1, "colour": "red"}]}, "'disks[0].colour': unknown key 'colour'"),
    ({"disks": ["10G"]}, "'disks[0]': expected an object, got a string"),
    ({"nics": [{"ip": 10}]}, "'nics[0].ip': expected a string or null, got an integer"),
    ({"beparams": {"vcpus": "many"}}, "'beparams.vcpus': backend parameter 'vcpus': "
     "'many' is not an int"),
    ({"beparams": {"maxmem": "lots"}}, "'beparams.maxmem': backend parameter 'maxmem': "
     "invalid size 'lots'"),
    ({"hvparams": {"acpi": "perhaps"}}, "'hvparams.acpi': hypervisor parameter 'acpi': "
     "'perhaps' is not a boolean"),
    ({"os_type": 3}, "body: parameter 'os': expected a string or null, got an integer"),
    ({"start": "yes"}, "'start': expected true or false, got a string"),
])
def test_create_bodies_are_refused_naming_the_path(params: dict[str, Any],
                                                   expected: str) -> None:
    with pytest.raises(ParameterError) as caught:
        op_from_dict(_create(**params), where="body", names=_RAPI)
    assert expected in caught.value.message


def test_unknown_names_are_unknown_parameters() -> None:
    with pytest.raises(UnknownParameterError, match=r"'beparams\.cpus': unknown backend parameter"):
        op_from_dict(_create(beparams={"cpus": 1}))
    with pytest.raises(UnknownParameterError, match=r"'diskparams\.drbd': unknown disk "):
        op_from_dict({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "diskparams": {"drbd": {}}})


def test_ganeti_forms_pass_unchanged() -> None:
    data = _create(disks=[{"size": 1024}, {"size": "2048"}, {"size": "1G", "mode": "ro"}],
                   nics=[{"link": "br0", "bridge": None}],
                   beparams={"memory": 512, "vcpus": "2", "maxmem": "1G"},
                   hvparams={"acpi": "false", "kernel_path": None, "boot_order": "default"})
    op = op_to_dict(op_from_dict(data))
    assert op["disks"] == data["disks"] and op["beparams"] == data["beparams"]
    assert op["hvparams"] == data["hvparams"]


@pytest.mark.parametrize(("changes", "expected"), [
    ([["grow", 0, {}]], "'disks[0][0]': unknown action 'grow'; accepted: add, remove, modify"),
    ([["add", -1, {"size": "big"}]], "'disks[0][2].size': invalid size 'big'"),
    ([["add", -1, {"size": 1, "spindles": 2}]], "'disks[0][2].spindles': unknown key"),
    ([["modify", 1.5, {}]], "'disks[0][1]': expected an index"),
    ([["add"]], "'disks[0]': expected [action, index, parameters]"),
    ([[True, {}]], "'disks[0][0]': expected add, remove or an index"),
])
def test_modify_change_lists_are_checked(changes: list[Any], expected: str) -> None:
    with pytest.raises(ParameterError) as caught:
        op_from_dict({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "web1",
                      "disks": changes})
    assert expected in caught.value.message


def test_modify_accepts_both_list_forms() -> None:
    op_from_dict({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "web1",
                  "disks": [["add", -1, {"size": "1G", "dev_type": "file"}], [0, {"mode": "ro"}],
                            ["remove", {}]],
                  "nics": [["modify", "eth0", {"link": "br1"}]]})


def test_cluster_and_node_families() -> None:
    with pytest.raises(UnknownParameterError, match=r"'hvparams\.xen-pvm': unknown hypervisor"):
        op_from_dict({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hvparams": {"xen-pvm": {}}})
    with pytest.raises(ParameterError,
                       match=r"'nicparams\.link': NIC parameter 'link': 5 is not a string"):
        op_from_dict({"OP_ID": "OP_CLUSTER_SET_PARAMS", "nicparams": {"link": 5}})
    with pytest.raises(ParameterError, match=r"'ndparams\.ssh_port': node parameter "
                                             r"'ssh_port': 'ssh' is not an int"):
        op_from_dict({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "n1",
                      "ndparams": {"ssh_port": "ssh"}})
    op_from_dict({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hvparams": {"kvm": {"acpi": True}},
                  "beparams": {"vcpus": 2, "maxmem": None}, "ndparams": {"ssh_port": "22"}})


def test_references_name_real_parameters() -> None:
    from corral.opcodes import REGISTRY

    for op_id, params in REFERENCES.items():
        assert set(params) <= set(REGISTRY[op_id].__struct_fields__), op_id


@pytest.mark.parametrize(("params", "expected"), [
    ({"network": "compat-bogus"}, "'network': invalid IPv4 network 'compat-bogus'"),
    ({"network": "192.0.2.1/24"}, "has host bits set"),
    ({"network": "2001:db8::/64"}, "it is an IPv6 one"),
    ({"gateway": "192.0.2.300"}, "'gateway': invalid IPv4 address"),
    ({"network6": "2001:db8::1/64"}, "'network6': invalid IPv6 network"),
    ({"add_reserved_ips": ["192.0.2.9", "nine"]}, "'add_reserved_ips[1]': invalid IPv4"),
])
def test_network_addresses_are_checked_at_submission(params: dict[str, Any],
                                                     expected: str) -> None:
    with pytest.raises(ParameterError) as caught:
        op_from_dict({"OP_ID": "OP_NETWORK_ADD", "network_name": "n1",
                      "network": "192.0.2.0/24", **params})
    assert expected in caught.value.message


def test_network_modify_may_unset_with_none() -> None:
    op_from_dict({"OP_ID": "OP_NETWORK_SET_PARAMS", "network_name": "n1",
                  "gateway": "none", "network6": "", "gateway6": "None"})
    with pytest.raises(ParameterError, match=r"'gateway': invalid IPv4 address 'nowhere'"):
        op_from_dict({"OP_ID": "OP_NETWORK_SET_PARAMS", "network_name": "n1",
                      "gateway": "nowhere"})
