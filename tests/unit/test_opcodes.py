"""Opcodes: Ganeti's dict form both ways, validation naming the parameter, reason trails."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import ParameterError
from corral.opcodes import (
    REGISTRY,
    OpClusterSetParams,
    OpTestDelay,
    check_rapi_trail,
    check_submitted_trail,
    op_from_dict,
    op_summary,
    op_to_dict,
    opcode_source,
)
from corral.opcodes.reason import (
    client_entry,
    queue_entry,
    rapi_entries,
    user_entry,
    watcher_entry,
)


def test_registry_holds_exactly_the_implemented_opcodes() -> None:
    assert set(REGISTRY) == {
        "OP_TEST_DELAY", "OP_CLUSTER_QUERY", "OP_CLUSTER_SET_PARAMS", "OP_TAGS_GET",
        "OP_TAGS_SET", "OP_TAGS_DEL", "OP_TAGS_SEARCH", "OP_QUERY", "OP_QUERY_FIELDS",
        "OP_NODE_ADD", "OP_NODE_REMOVE", "OP_NODE_SET_PARAMS", "OP_GROUP_ADD",
        "OP_NETWORK_ADD", "OP_NETWORK_REMOVE", "OP_NETWORK_SET_PARAMS", "OP_NETWORK_CONNECT",
        "OP_NETWORK_DISCONNECT", "OP_NETWORK_QUERY",
        "OP_NODE_QUERY_STORAGE", "OP_NODE_MODIFY_STORAGE", "OP_REPAIR_NODE_STORAGE",
        "OP_NODE_QUERYVOLS", "OP_CLUSTER_VERIFY_DISKS", "OP_GROUP_VERIFY_DISKS",
        "OP_INSTANCE_RECREATE_DISKS", "OP_INSTANCE_REPLACE_DISKS", "OP_INSTANCE_DISK_STATUS",
        "OP_INSTANCE_REPAIR_DISKS", "OP_BACKUP_PREPARE", "OP_BACKUP_EXPORT", "OP_BACKUP_REMOVE",
        "OP_BACKUP_QUERY",
        "OP_GROUP_REMOVE", "OP_GROUP_RENAME", "OP_GROUP_ASSIGN_NODES", "OP_GROUP_SET_PARAMS",
        "OP_INSTANCE_CREATE", "OP_INSTANCE_REMOVE", "OP_INSTANCE_STARTUP",
        "OP_INSTANCE_SHUTDOWN", "OP_INSTANCE_REBOOT", "OP_INSTANCE_REINSTALL",
        "OP_INSTANCE_RENAME", "OP_INSTANCE_QUERY_DATA", "OP_INSTANCE_SET_PARAMS",
        "OP_INSTANCE_MIGRATE", "OP_INSTANCE_FAILOVER", "OP_INSTANCE_MOVE",
        "OP_INSTANCE_ACTIVATE_DISKS", "OP_INSTANCE_DEACTIVATE_DISKS", "OP_INSTANCE_GROW_DISK",
        "OP_INSTANCE_CONSOLE", "OP_OS_DIAGNOSE", "OP_CLUSTER_REDIST_CONF",
        "OP_TEST_ALLOCATOR", "OP_NODE_EVACUATE", "OP_NODE_MIGRATE", "OP_INSTANCE_CHANGE_GROUP",
        "OP_INSTANCE_MULTI_ALLOC",
        "OP_CLUSTER_RENEW_CRYPTO",
        "OP_CLUSTER_VERIFY", "OP_CLUSTER_VERIFY_CONFIG", "OP_CLUSTER_VERIFY_GROUP",
        "OP_EXT_STORAGE_DIAGNOSE",
        "OP_CLUSTER_ADD_AGGREGATE", "OP_CLUSTER_REMOVE_AGGREGATE",
    }
    for op_id, cls in REGISTRY.items():
        assert op_id == cls.OP_ID


def test_dict_form_round_trips_with_defaults_filled_in() -> None:
    op = op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 2, "repeat": 3})
    assert isinstance(op, OpTestDelay)
    data = op_to_dict(op)
    assert data["OP_ID"] == "OP_TEST_DELAY"
    assert data["duration"] == 2.0 and data["repeat"] == 3
    assert data["on_master"] is True and data["on_nodes"] == []
    assert data["priority"] == 0 and data["reason"] == [] and data["depends"] is None
    assert op_from_dict(data) == op


@given(
    duration=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    on_master=st.booleans(),
    nodes=st.lists(st.text(min_size=1, max_size=8), max_size=3),
    repeat=st.integers(min_value=0, max_value=100),
    priority=st.integers(min_value=-20, max_value=19),
    reason=st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5),
                              st.integers(min_value=0, max_value=2**62)), max_size=3),
)
def test_any_valid_test_delay_round_trips(duration: float, on_master: bool, nodes: list[str],
                                          repeat: int, priority: int,
                                          reason: list[tuple[str, str, int]]) -> None:
    op = OpTestDelay(duration=duration, on_master=on_master, on_nodes=nodes, repeat=repeat,
                     priority=priority, reason=reason)
    assert op_from_dict(op_to_dict(op)) == op


@pytest.mark.parametrize(("data", "expected"), [
    ({"OP_ID": "OP_TEST_DELAY", "duration": "1"},
     "parameter 'duration': expected a number, got a string"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": -1}, "parameter 'duration': expected float >= 0"),
    ({"OP_ID": "OP_TEST_DELAY"}, "parameter 'duration' is required"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": 1, "repeat": -2}, "parameter 'repeat'"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": 1, "on_nodes": [3]},
     "parameter 'on_nodes[0]': expected a string, got an integer"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": 1, "priority": 20},
     "parameter 'priority': expected int <= 19"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": 1, "depends": [[1, ["running"]]]},
     "parameter 'depends[0][1][0]'"),
    ({"OP_ID": "OP_TEST_DELAY", "duration": 1, "sleep": 1},
     "unknown parameter sleep; valid parameters: comment,"),
    ({"OP_ID": "OP_TAGS_SET", "kind": "networks", "tags": ["a"]}, "parameter 'kind'"),
    ({"OP_ID": "OP_NETWORK_ADD"}, "parameter 'network_name' is required"),
    ({"OP_ID": "OP_NETWORK_RENAME"}, "unknown opcode 'OP_NETWORK_RENAME'; implemented: "),
    ({"duration": 1}, "unknown opcode None"),
])
def test_bad_opcodes_are_refused_naming_the_parameter(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ParameterError) as info:
        op_from_dict(data)
    assert expected in str(info.value)


def test_summary_is_ganetis() -> None:
    assert op_summary(op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 10})) \
        == "TEST_DELAY(10.0)"
    assert op_summary(OpClusterSetParams()) == "CLUSTER_SET_PARAMS"
    assert op_summary(op_from_dict({"OP_ID": "OP_QUERY", "what": "job", "fields": ["id"]})) \
        == "QUERY(job)"


def test_reason_sources() -> None:
    assert opcode_source("OP_TEST_DELAY") == "gnt:opcode:test_delay"
    assert opcode_source("OpClusterSetParams") == "gnt:opcode:cluster_set_params"
    source, text, ts = queue_entry("OP_TAGS_SET", 12, 1)
    assert (source, text) == ("gnt:opcode:tags_set", "job=12;index=1")
    assert ts > 10**18  # nanoseconds
    assert client_entry("gnt-job", "cancel")[:2] == ("gnt:client:gnt-job", "cancel")
    assert [entry[:2] for entry in rapi_entries("jobs")] == [
        ("gnt:client:rapi:jobs", ""), ("gnt:library:rlib2:jobs", "")]
    assert watcher_entry("Restarting instance web1")[:2] == ("gnt:watcher",
                                                              "Restarting instance web1")
    assert user_entry("maintenance")[:2] == ("user", "maintenance")


def test_outside_trails_may_not_forge_internal_sources() -> None:
    ok = check_submitted_trail([["user", "why", 1], ["gnt:client:gnt-job", "list", 2]],
                               allowed_internal=("gnt:client:",))
    assert ok == [("user", "why", 1), ("gnt:client:gnt-job", "list", 2)]
    with pytest.raises(ParameterError, match="'gnt:opcode:x' is reserved"):
        check_submitted_trail([["gnt:opcode:x", "job=1;index=0", 3]],
                              allowed_internal=("gnt:client:",))
    with pytest.raises(ParameterError, match="reserved for corral"):
        check_submitted_trail([["gnt:client:rapi", "x", 3]])
    with pytest.raises(ParameterError, match=r"entry 0: expected \[source, reason"):
        check_submitted_trail([["user", "x"]])
    with pytest.raises(ParameterError, match="entry 1"):
        check_submitted_trail([["user", "x", 1], ["user", "x", True]])


def test_rapi_trails_refuse_every_internal_source_and_keep_every_entry() -> None:
    given = [["user", "why", 1], ["other-app:tool", "gui:stop", 2], ["gnt:client", "", 3]]
    assert check_rapi_trail(given) == [("user", "why", 1), ("other-app:tool", "gui:stop", 2),
                                       ("gnt:client:rapi-client", "", 3)]
    # The library marker twice (the library appends to the caller's list): both kept.
    assert len(check_rapi_trail([["gnt:client", "", 1], ["gnt:client", "", 2]])) == 2
    for source, text in (("gnt:client:gnt-job", "list"), ("gnt:opcode:x", ""),
                         ("gnt:client", "x"), ("gnt:client:rapi-client", "")):
        with pytest.raises(ParameterError,
                           match=rf"entry 1 \['{source}', '{text}', 9\]: source '{source}' "
                                 "is reserved"):
            check_rapi_trail([["user", "why", 1], [source, text, 9]])
    with pytest.raises(ParameterError, match=r"entry 0: expected \[source, reason"):
        check_rapi_trail([["gnt:client", ""]])
    with pytest.raises(ParameterError, match="reason: expected a list"):
        check_rapi_trail("user")


def test_a_bad_code_in_a_list_parameter_names_the_accepted_ones() -> None:
    with pytest.raises(ParameterError) as info:
        op_from_dict({"OP_ID": "OP_CLUSTER_VERIFY", "ignore_errors": ["ENODETIME", "BOGUS"]})
    message = str(info.value)
    assert message.startswith("OP_CLUSTER_VERIFY: parameter 'ignore_errors[1]': invalid enum "
                              "value 'BOGUS'; valid: ECLUSTERCERT, ECLUSTERCFG, ")
    assert "ENODEVERSION" in message
